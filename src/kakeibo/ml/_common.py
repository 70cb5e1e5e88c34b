"""Input checks and randomness shared by the estimators and transformers of :mod:`kakeibo.ml`.

scikit-learn's ``random_state`` convention maps onto kakeibo's randomness: an ``int`` seeds a
``np.random.Generator`` (reproducible, so not private against whoever knows the seed; for experiments and
tests), a ``Generator`` is used as it is, and ``None`` draws from the operating system's CSPRNG through
:class:`~kakeibo.noise.SecureSource` (the default, and the only choice for real releases).
"""

from __future__ import annotations

import importlib.util
import math
import numbers
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.utils.validation import check_is_fitted

from ..errors import ArgumentError, ArgumentTypeError, ConfigurationError, Error, UnaccountedRelease
from ..noise.source import RandomSource, resolve_source

if TYPE_CHECKING:
    from ..release import Released

__all__ = [
    "FloatMatrix",
    "FloatVector",
    "NotFittedError",
    "charged_ledger",
    "charged_run",
    "check_binary_labels",
    "check_count",
    "check_features",
    "check_fitted",
    "check_ledger",
    "clip_rows",
    "noise_generator",
    "random_source",
    "require_deep",
    "symmetric",
    "unit_rows",
]

FloatMatrix = NDArray[np.float64]
FloatVector = NDArray[np.float64]
T = TypeVar("T")
RandomState = int | np.random.Generator | RandomSource | None


class NotFittedError(Error, SklearnNotFittedError):  # type: ignore[misc]  # sklearn ships no types
    """An estimator or transformer of :mod:`kakeibo.ml` used before ``fit``. It is scikit-learn's
    ``NotFittedError`` too (so a ``ValueError`` and an ``AttributeError``): code that catches that one, and
    scikit-learn's own checks, keep working."""


def check_fitted(estimator: object) -> None:
    """Refuse an ``estimator`` that ``fit`` has not set up (scikit-learn's test: it has no attribute whose
    name ends in ``_``), with scikit-learn's message under :class:`NotFittedError`."""
    try:
        check_is_fitted(estimator)
    except SklearnNotFittedError as error:
        raise NotFittedError(str(error)) from None


def random_source(random_state: RandomState) -> RandomSource:
    """The randomness behind ``random_state`` (see the module docstring)."""
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return resolve_source(np.random.default_rng(int(random_state)))
    if random_state is None or isinstance(random_state, (np.random.Generator, RandomSource)):
        return resolve_source(random_state)
    raise ArgumentTypeError(f"random_state must be an int, a numpy Generator or None, got {random_state!r}.")


def noise_generator(source: RandomSource) -> np.random.Generator:
    """A numpy generator seeded with 256 bits of ``source``: the bridge from kakeibo's randomness to the
    floating-point noise of DP-ERM and DP-SGD (each module's docstring says what that noise guarantees)."""
    return np.random.default_rng([int(word) for word in source.words(4)])


def require_deep(name: str) -> None:
    """Refuse (free, before any charge) an estimator ``name`` that trains with JAX and optax on a machine
    without them: the training runs inside the release, so a missing import there would fail a paid
    release."""
    if importlib.util.find_spec("jax") is None or importlib.util.find_spec("optax") is None:
        raise ConfigurationError(f"{name} trains with JAX and optax: pip install 'kakeibo[deep]'.")


def check_ledger(ledger: object) -> None:
    """Refuse a ``ledger=`` that is not a :class:`~kakeibo.accounting.Ledger`, ``False`` or ``None``."""
    from ..accounting import Ledger  # here: the owner-side transformers need no ledger

    if ledger is not None and ledger is not False and not isinstance(ledger, Ledger):
        raise ArgumentTypeError(
            "ledger must be a kakeibo.accounting.Ledger, False (no charge, on purpose) or None, got "
            f"{type(ledger).__name__}."
        )


def charged_run(estimator: Any, loss: Any, label: str, draw: Callable[[RandomSource], T]) -> Released[T]:
    """One :func:`kakeibo.release.run` of ``draw`` that charges ``loss`` to the estimator's ledger (see
    :func:`charged_ledger`) under its ``label`` (or ``label``) and ``dataset``, drawing from its
    ``random_state``: how every private ``fit`` of :mod:`kakeibo.ml` pays."""
    from .. import release

    charge = release.Charge(loss, label=estimator.label or label, dataset=estimator.dataset)
    return release.run(
        charged_ledger(estimator, estimator.ledger), charge, draw, rng=random_source(estimator.random_state)
    )


def symmetric(upper: FloatVector, dimension: int) -> FloatMatrix:
    """The symmetric ``dimension x dimension`` matrix whose upper triangle (``np.triu_indices`` order) is
    ``upper``: how DP-PCA and DP linear regression release a second moment (each entry noised once)."""
    out = np.zeros((dimension, dimension))
    out[np.triu_indices(dimension)] = upper
    return np.asarray(out + np.triu(out, 1).T, dtype=np.float64)


def charged_ledger(estimator: object, ledger: Any) -> Any:
    """The ledger an estimator's ``fit`` charges, or ``None``: ``ledger=False`` charges nothing on purpose;
    ``None`` charges nothing and warns :class:`~kakeibo.UnaccountedRelease` (silence never means "not
    charged")."""
    if ledger is None:
        warnings.warn(
            f"{type(estimator).__name__}.fit released a model without charging a ledger; pass ledger= to "
            "charge one, or ledger=False if no ledger is meant.",
            UnaccountedRelease,
            stacklevel=4,
        )
    return ledger if ledger is not None and ledger is not False else None


def clip_rows(X: FloatMatrix, norm_bound: float) -> FloatMatrix:
    """Each row divided by ``max(1, ||x|| / norm_bound)``: rows longer than ``norm_bound`` shrink onto it."""
    shrink = np.maximum(1.0, np.linalg.norm(X, axis=1) / norm_bound)
    return np.asarray(X / shrink[:, None], dtype=np.float64)


def unit_rows(X: FloatMatrix, norm_bound: float, fit_intercept: bool) -> FloatMatrix:
    """The rows a mechanism sees, of norm at most 1, record by record: ``clip_rows(X) / norm_bound``, and
    ``[x', 1] / sqrt(2)`` with ``fit_intercept`` (DP-ERM, DP-PCA and DP linear regression share this map)."""
    unit = clip_rows(X, norm_bound) / norm_bound
    if not fit_intercept:
        return unit
    return np.asarray(np.hstack([unit, np.ones((unit.shape[0], 1))]) / math.sqrt(2.0), dtype=np.float64)


def check_count(value: object, name: str) -> int:
    """``value`` as a positive whole number, or ArgumentError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"{name} must be a positive whole number, got {value!r}.")
    return value


def check_features(X: ArrayLike, n_features: int | None = None) -> FloatMatrix:
    """``X`` as a finite 2-d float array with at least one row (and ``n_features`` columns when given)."""
    arr = np.asarray(X)
    if arr.dtype.kind not in "biuf":
        raise ArgumentTypeError(f"X must hold numbers, got dtype {arr.dtype}.")
    arr = arr.astype(np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ArgumentError(f"X must be a non-empty 2-d array (records x attributes), got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ArgumentError("X contains NaN or infinite values.")
    if n_features is not None and arr.shape[1] != n_features:
        raise ArgumentError(f"X has {arr.shape[1]} attributes, but this was fitted with {n_features}.")
    return arr


def check_binary_labels(y: ArrayLike, n_samples: int) -> tuple[NDArray[np.int64], NDArray[np.generic]]:
    """``(signs, classes)``: labels of exactly two classes as -1 / +1 (the larger class label is +1) and
    the two labels in sorted order."""
    labels = np.asarray(y)
    if labels.ndim != 1 or labels.shape[0] != n_samples:
        raise ArgumentError(f"y must be a 1-d array of {n_samples} labels, got shape {labels.shape}.")
    classes = np.unique(labels)
    if classes.size != 2:
        raise ArgumentError(f"y must have exactly two classes, got {classes.size}.")
    return np.where(labels == classes[1], 1, -1).astype(np.int64), classes
