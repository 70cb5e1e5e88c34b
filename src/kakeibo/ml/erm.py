"""Differentially private empirical risk minimisation: L2-regularised linear classifiers trained with
epsilon-DP by output or objective perturbation (Chaudhuri, Monteleoni and Sarwate 2011, "Differentially
Private Empirical Risk Minimization", JMLR 12; seed 000, chapter 9).

**The learning problem** (seed 000, ch. 9: statistical learning as regularised ERM). With ``n`` records
``(x_i, y_i)``, ``||x_i|| <= 1`` and ``y_i`` in ``{-1, +1}``, the classifier is

    f* = argmin_f  J(f, D),    J(f, D) = (1/n) sum_i l(y_i f.x_i) + (Lambda / 2) ||f||^2,

the paper's ``J`` with the 1-strongly convex regulariser ``N(f) = ||f||^2 / 2`` (``Lambda`` is
``regularization``; the seed's ``(lambda / n) Reg(w)`` with ``Reg(w) = ||w||^2 / 2`` is
``Lambda = lambda / n``). Two losses are offered:

* logistic, ``l(z) = log(1 + e^-z)``: ``|l'| <= 1`` and ``0 <= l'' <= c = 1/4`` (paper, section 3.4.1);
* Huber (the paper's SVM, section 3.4.2): ``l(z) = 0`` for ``z > 1 + h``, ``(1 + h - z)^2 / (4h)`` for
  ``|1 - z| <= h`` and ``1 - z`` for ``z < 1 - h``: ``|l'| <= 1`` and ``l'' <= c = 1/(2h)`` wherever
  ``l''`` exists (it jumps at ``z = 1 +- h``; the paper runs Algorithm 2 on this loss with that ``c``).

**Neighbour relation**: replace one record ``(x, y)`` by another (``n`` stays the same and is public).
Privacy is per record; a record is one row of ``X`` together with its label. Both mechanisms need: the
loss convex and differentiable with ``|l'| <= 1``, ``||x|| <= 1`` for every record, the regulariser
1-strongly convex; objective perturbation also needs ``l'' <= c``.

**Output perturbation** (Algorithm 1). ``f_priv = f* + b``. Replacing one record moves ``f*`` by at most
``2 / (n Lambda)`` in L2 norm (the sensitivity: the changed gradient term has norm at most ``2/n`` and
``J`` is ``Lambda``-strongly convex), so noise with density ``~ exp(-beta ||b||)``,
``beta = n Lambda epsilon / 2``, makes the release epsilon-DP (the density ratio at any output is at most
``exp(beta * 2 / (n Lambda))``).

**Objective perturbation** (Algorithm 2). ``f_priv = argmin J(f, D) + (Delta / 2) ||f||^2 + b.f / n``
with

    epsilon' = epsilon - log(1 + 2c / (n Lambda) + c^2 / (n Lambda)^2);
    if epsilon' > 0: Delta = 0, else: Delta = c / (n (e^(epsilon/4) - 1)) - Lambda and epsilon' = epsilon / 2;
    beta = epsilon' / 2.

The minimiser determines ``b`` (``b = -n grad J``); replacing a record changes that ``b`` by at most 2 in
norm (cost ``2 beta = epsilon'``) and changes the Jacobian of ``f -> b`` by a rank-2 term (cost
``2 log(1 + c / (n (Lambda + Delta)))``, which is the subtracted term when ``Delta = 0`` and ``epsilon/2``
otherwise). Total: epsilon per record.

**Noise.** ``b`` has density ``~ exp(-beta ||b||)`` on ``R^d``: its norm is Gamma(``d``, scale
``1 / beta``) and its direction uniform on the sphere (:func:`sample_noise`). This is floating-point
*continuous* noise -- kakeibo has no exact sampler for it -- drawn by a numpy generator seeded with 256
bits from the estimator's kakeibo random source (``random_state``; ``None`` = the OS CSPRNG). The
guarantee is that of the idealised real-valued mechanism with an exact minimiser; the floating-point
release is not hardened against low-bit attacks (Mironov 2012) the way kakeibo's discrete samplers are.
The minimiser is computed by L-BFGS with an analytic gradient, refined by Newton steps until every
coordinate of the gradient is below ``1e-10``; a run that does not get there raises.

**Labels are declared, not read from the data.** ``classes=(negative, positive)`` is a required
parameter; ``classes_`` is that pair, sorted, so the model never reports a value found in ``y`` (a label
such as ``"alice:HIV+"`` would otherwise come back verbatim). A record whose label equals the positive
class is ``+1``; every other record is ``-1``, including one whose label is not declared at all. That map
uses nothing but the record itself (like the row clipping below), so the fit stays epsilon-DP under the
same neighbour relation, and no label can make ``fit`` refuse, charge differently or fail: refusing an
undeclared label -- before the charge or after it -- would tell the analyst that some record carries one.

**Rows** are mapped to norm at most 1 record by record: ``x -> x / max(1, ||x|| / norm_bound) /
norm_bound`` (rows longer than ``norm_bound`` are shrunk onto that sphere, then everything is divided by
``norm_bound``). The map uses nothing but the record itself, so the mechanism composed with it is still
epsilon-DP under the same neighbour relation. With ``fit_intercept`` a constant feature is appended and
the augmented row divided by ``sqrt(2)``: ``z = [x', 1] / sqrt(2)``, ``||z|| <= 1``. The intercept is then
a coordinate of ``f`` and **is regularised** (and noised) like the other coefficients. The fitted model
maps back to the original units: ``decision_function(X) = clip(X) @ coef_.T + intercept_`` where ``clip``
shrinks rows longer than ``norm_bound`` onto that sphere, as in training (rows inside the bound are
untouched, so for them the model is exactly linear).

>>> from kakeibo.ml.datasets import load_wdbc
>>> data = load_wdbc()
>>> model = DPLogisticRegression(epsilon=1.0, norm_bound=5.5, classes=(-1, 1), ledger=False, random_state=0)
>>> model = model.fit(data.X, data.y)
>>> model.privacy_loss_, model.coef_.shape, model.classes_.tolist()
(PureDP(epsilon=Fraction(1, 1)), (1, 30), [-1, 1])
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize, special
from sklearn.base import BaseEstimator, ClassifierMixin
from threadpoolctl import ThreadpoolController

from ..accounting import Ledger
from ..errors import ArgumentError, ArgumentTypeError
from ..mechanisms.base import check_positive
from ..privacy import PureDP
from ._common import (
    FloatMatrix,
    RandomState,
    charged_run,
    check_features,
    check_fitted,
    check_ledger,
    clip_rows,
    noise_generator,
    unit_rows,
)

__all__ = [
    "Calibration",
    "DPHuberSVM",
    "DPLogisticRegression",
    "objective_perturbation_calibration",
    "output_perturbation_calibration",
    "sample_noise",
]

FloatVector = NDArray[np.float64]
Method = Literal["objective", "output"]
_METHODS = ("objective", "output")
#: The solver must bring every coordinate of the objective's gradient below this (strong convexity turns
#: it into a distance to the exact minimiser of at most ``sqrt(d) * tol / Lambda``).
_GRADIENT_TOLERANCE = 1e-10
_MAX_ITERATIONS = 20_000
_NEWTON_STEPS = 20
_Estimator = TypeVar("_Estimator", bound="_DPLinearClassifier")


# -- calibration ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """How a fit is calibrated: the noise density ``~ exp(-beta ||b||)``, the regularisation ``Delta``
    objective perturbation adds, and ``epsilon_prime``, the part of epsilon the noise itself pays for
    (Algorithm 2's ``epsilon'_p``; all of epsilon for output perturbation)."""

    beta: float
    extra_regularization: float
    epsilon_prime: float


def output_perturbation_calibration(epsilon: float, n_samples: int, regularization: float) -> Calibration:
    """Algorithm 1: sensitivity ``2 / (n Lambda)``, so ``beta = n Lambda epsilon / 2``.

    >>> output_perturbation_calibration(1.0, 100, 0.01).beta
    0.5
    """
    return Calibration(
        beta=n_samples * regularization * epsilon / 2, extra_regularization=0.0, epsilon_prime=epsilon
    )


def objective_perturbation_calibration(
    epsilon: float, n_samples: int, regularization: float, curvature: float
) -> Calibration:
    """Algorithm 2's ``epsilon'``, ``Delta`` and ``beta = epsilon' / 2`` for a loss with ``l'' <= curvature``.

    >>> cal = objective_perturbation_calibration(1.0, 10, 0.01, 0.25)  # epsilon' <= 0: Delta branch
    >>> cal.epsilon_prime, round(cal.extra_regularization, 6)
    (0.5, 0.07802)
    """
    ratio = curvature / (n_samples * regularization)
    epsilon_prime = epsilon - 2 * math.log1p(ratio)  # log(1 + 2r + r^2) = 2 log(1 + r)
    if epsilon_prime > 0:
        return Calibration(beta=epsilon_prime / 2, extra_regularization=0.0, epsilon_prime=epsilon_prime)
    extra = curvature / (n_samples * math.expm1(epsilon / 4)) - regularization
    return Calibration(beta=epsilon / 4, extra_regularization=extra, epsilon_prime=epsilon / 2)


def sample_noise(dimension: int, beta: float, size: int, rng: np.random.Generator) -> FloatMatrix:
    """``size`` independent vectors in ``R^dimension`` with density ``~ exp(-beta ||b||)``: norm
    Gamma(``dimension``, scale ``1/beta``) (the density of the norm is ``~ r^(d-1) e^(-beta r)``), direction
    uniform on the sphere (a normalised standard normal vector). Continuous floating-point noise."""
    radius = rng.gamma(shape=dimension, scale=1.0 / beta, size=size)
    direction = rng.standard_normal((size, dimension))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    return np.asarray(radius[:, None] * direction, dtype=np.float64)


# -- losses ----------------------------------------------------------------------------------------------


class MarginLoss(Protocol):
    """A loss of the margin ``z = y f.x`` with ``|l'| <= 1`` and ``l'' <= curvature``."""

    curvature: float

    def value(self, margins: FloatVector) -> FloatVector: ...

    def derivative(self, margins: FloatVector) -> FloatVector: ...

    def second_derivative(self, margins: FloatVector) -> FloatVector: ...


class LogisticLoss:
    """``l(z) = log(1 + e^-z)``, ``l'(z) = -1 / (1 + e^z)``, ``l'' <= 1/4`` (paper, section 3.4.1)."""

    curvature = 0.25

    def value(self, margins: FloatVector) -> FloatVector:
        return np.asarray(np.logaddexp(0.0, -margins), dtype=np.float64)

    def derivative(self, margins: FloatVector) -> FloatVector:
        return np.asarray(-special.expit(-margins), dtype=np.float64)

    def second_derivative(self, margins: FloatVector) -> FloatVector:
        return np.asarray(special.expit(margins) * special.expit(-margins), dtype=np.float64)


class HuberLoss:
    """The Huber loss of the paper's SVM (section 3.4.2), ``l'' <= 1/(2h)``. With
    ``u = clip((1 + h - z) / (2h), 0, 1)``: ``l' = -u``, and ``l = h u^2`` except ``l = 1 - z`` for
    ``z < 1 - h``."""

    def __init__(self, h: float) -> None:
        self.h = h
        self.curvature = 1.0 / (2.0 * h)

    def _slope(self, margins: FloatVector) -> FloatVector:
        return np.asarray(np.clip((1.0 + self.h - margins) / (2.0 * self.h), 0.0, 1.0), dtype=np.float64)

    def value(self, margins: FloatVector) -> FloatVector:
        return np.where(margins < 1.0 - self.h, 1.0 - margins, self.h * self._slope(margins) ** 2)

    def derivative(self, margins: FloatVector) -> FloatVector:
        return -self._slope(margins)

    def second_derivative(self, margins: FloatVector) -> FloatVector:
        """``1/(2h)`` on ``|1 - z| <= h``, else 0 (one-sided at the two kinks)."""
        return np.where(np.abs(1.0 - margins) <= self.h, self.curvature, 0.0)


# -- solving -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PerturbedObjective:
    """``J(f) = (1/n) sum l(y_i f.z_i) + (regularization / 2) ||f||^2 + noise.f / n`` with its gradient and
    Hessian (``Z`` rows of norm at most 1, ``signs`` = ``y`` in -1/+1)."""

    loss: MarginLoss
    Z: FloatMatrix
    signs: FloatVector
    regularization: float
    noise: FloatVector

    def value_and_gradient(self, f: FloatVector) -> tuple[float, FloatVector]:
        margins = self.signs * (self.Z @ f)
        value = (
            self.loss.value(margins).mean()
            + 0.5 * self.regularization * (f @ f)
            + self.noise @ f / len(margins)
        )
        return float(value), self.gradient(f)

    def gradient(self, f: FloatVector) -> FloatVector:
        margins = self.signs * (self.Z @ f)
        data_term = self.Z.T @ (self.signs * self.loss.derivative(margins)) / len(margins)
        return np.asarray(data_term + self.regularization * f + self.noise / len(margins), dtype=np.float64)

    def hessian(self, f: FloatVector) -> FloatMatrix:
        weights = self.loss.second_derivative(self.signs * (self.Z @ f)) / self.Z.shape[0]
        return np.asarray((self.Z.T * weights) @ self.Z + self.regularization * np.eye(self.Z.shape[1]))


@functools.cache
def _blas_threads() -> ThreadpoolController:
    """The BLAS thread pools, limited to one thread while L-BFGS runs: its problems are small (one
    coefficient per attribute), and on a busy machine OpenBLAS's threads made a 2-coefficient solve take
    30 ms instead of 0.7 ms."""
    return ThreadpoolController()


def _perturbed_minimiser(
    loss: MarginLoss, Z: FloatMatrix, signs: FloatVector, regularization: float, noise: FloatVector
) -> FloatVector:
    """``argmin_f (1/n) sum l(y_i f.z_i) + (regularization / 2) ||f||^2 + noise.f / n``. With ``noise = 0``
    this is the non-private ``f*`` of Algorithm 1; Algorithm 2 passes ``Lambda + Delta`` and its ``b``.
    Tests call it directly: it is the seam through which the noise can be switched off and the solver run
    many times.

    L-BFGS (scipy, analytic gradient) goes as far as the objective's floating-point values let it (about
    ``1e-8`` in the gradient); Newton steps with the analytic Hessian then drive the gradient below
    ``_GRADIENT_TOLERANCE`` per coordinate (they need no function values, so rounding does not stall them).
    Strong convexity puts the result within ``sqrt(d) * tolerance / regularization`` of the exact minimiser.
    """
    objective = _PerturbedObjective(loss, Z, signs, regularization, noise)
    with _blas_threads().limit(limits=1, user_api="blas"):
        result = optimize.minimize(
            objective.value_and_gradient,
            np.zeros(Z.shape[1]),
            jac=True,
            method="L-BFGS-B",
            options={"gtol": _GRADIENT_TOLERANCE, "ftol": 0.0, "maxiter": _MAX_ITERATIONS},
        )
    solution = np.asarray(result.x, dtype=np.float64)
    for _ in range(_NEWTON_STEPS + 1):
        gradient = objective.gradient(solution)
        if np.max(np.abs(gradient)) <= _GRADIENT_TOLERANCE:
            return solution
        solution = solution - np.linalg.solve(objective.hessian(solution), gradient)
    raise RuntimeError(
        f"the optimiser did not reach the minimiser (gradient {np.max(np.abs(gradient)):.3g} > "
        f"{_GRADIENT_TOLERANCE} after L-BFGS ({result.message}) and {_NEWTON_STEPS} Newton steps)."
    )


def _check_classes(classes: Any) -> NDArray[np.generic]:
    """The declared label pair, sorted (``classes_[1]`` is the positive class): two distinct labels."""
    if classes is None:
        raise ArgumentError(
            "declare the two labels with classes=(negative, positive): the label set is public and is not "
            "read from y."
        )
    if isinstance(classes, (str, bytes)) or not hasattr(classes, "__len__") or len(classes) != 2:
        raise ArgumentError(f"classes must be a pair of two labels, got {classes!r}.")
    pair = list(classes)
    if any(label is None for label in pair) or pair[0] == pair[1]:
        raise ArgumentError(f"classes must be two distinct labels, got {classes!r}.")
    try:
        ordered = sorted(pair)
    except TypeError as error:
        raise ArgumentTypeError(
            f"classes must be two labels of one comparable type, got {classes!r}."
        ) from error
    out = np.asarray(ordered)
    if out.shape != (2,):
        raise ArgumentError(f"classes must be a pair of two scalar labels, got {classes!r}.")
    return out


def _label_signs(y: ArrayLike, n_samples: int, classes: NDArray[np.generic]) -> NDArray[np.int64]:
    """``+1`` where the label is ``classes[1]``, ``-1`` everywhere else (undeclared labels included; module
    docstring). Only the length of ``y`` is checked, and ``n`` is public."""
    labels = np.asarray(y)
    if labels.ndim != 1 or labels.shape[0] != n_samples:
        raise ArgumentError(f"y must be a 1-d array of {n_samples} labels, got shape {labels.shape}.")
    try:
        with np.errstate(all="ignore"):
            positive = np.asarray(labels == classes[1], dtype=bool)
    except Exception:  # an object label whose comparison fails: compare one by one
        positive = np.array([_equals(label, classes[1]) for label in labels.tolist()], dtype=bool)
    if positive.shape != labels.shape:  # numpy gave up comparing the types: no label equals the class
        positive = np.zeros(labels.shape, dtype=bool)
    return np.where(positive, 1, -1).astype(np.int64)


def _equals(label: Any, positive: Any) -> bool:
    """``label == positive`` as a bool, False when the comparison itself fails (a label is data: it must
    not be able to make ``fit`` raise)."""
    try:
        return bool(label == positive)
    except Exception:
        return False


# -- estimators ------------------------------------------------------------------------------------------


class _DPLinearClassifier(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """What both classifiers share: parameters, checks, the ledger charge, the fit and the predictions."""

    def __init__(
        self,
        epsilon: float = 1.0,
        *,
        regularization: float = 0.01,
        method: Method = "objective",
        norm_bound: float = 1.0,
        fit_intercept: bool = True,
        ledger: Ledger | Literal[False] | None = None,
        dataset: str | None = None,
        label: str | None = None,
        classes: Any = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = epsilon
        self.regularization = regularization
        self.method = method
        self.norm_bound = norm_bound
        self.fit_intercept = fit_intercept
        self.ledger = ledger
        self.dataset = dataset
        self.label = label
        self.classes = classes
        self.random_state = random_state

    def _loss(self) -> MarginLoss:
        raise NotImplementedError

    def __sklearn_tags__(self) -> Any:
        """Binary classification only (scikit-learn's estimator checks then use two-class data)."""
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _check_params(self) -> tuple[float, float, float]:
        """``(epsilon, regularization, norm_bound)`` as floats, after checking every parameter."""
        epsilon = check_positive(self.epsilon, "epsilon")
        regularization = check_positive(self.regularization, "regularization")
        norm_bound = check_positive(self.norm_bound, "norm_bound")
        if self.method not in _METHODS:
            raise ArgumentError(f"method must be 'objective' or 'output', got {self.method!r}.")
        if not isinstance(self.fit_intercept, (bool, np.bool_)):
            raise ArgumentTypeError(f"fit_intercept must be True or False, got {self.fit_intercept!r}.")
        check_ledger(self.ledger)
        for name in ("dataset", "label"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise ArgumentTypeError(
                    f"{name} must be a string or None, got {type(getattr(self, name)).__name__}."
                )
        return epsilon, regularization, norm_bound

    def _calibrate(
        self, epsilon: float, n_samples: int, regularization: float, loss: MarginLoss
    ) -> Calibration:
        if self.method == "output":
            return output_perturbation_calibration(epsilon, n_samples, regularization)
        return objective_perturbation_calibration(epsilon, n_samples, regularization, loss.curvature)

    def _private_weights(
        self,
        loss: MarginLoss,
        Z: FloatMatrix,
        signs: FloatVector,
        regularization: float,
        calibration: Calibration,
        rng: np.random.Generator,
    ) -> FloatVector:
        """Algorithm 2 (objective) or Algorithm 1 (output) on the prepared rows."""
        noise: FloatVector = sample_noise(Z.shape[1], calibration.beta, 1, rng)[0]
        if self.method == "objective":
            return _perturbed_minimiser(
                loss, Z, signs, regularization + calibration.extra_regularization, noise
            )
        return _perturbed_minimiser(loss, Z, signs, regularization, np.zeros(Z.shape[1])) + noise

    def fit(self: _Estimator, X: ArrayLike, y: ArrayLike) -> _Estimator:
        """Train on ``(X, y)`` with ``epsilon``-DP per record (module docstring), as one run of
        :func:`kakeibo.release.run`: every check, then the budget check, then the noise and the solver (the
        draw), then the ledger charge, then the fitted attributes. A refused charge raises before any noise
        is drawn and leaves the estimator as it was; a failed optimisation is charged and raises
        :class:`~kakeibo.errors.ReleaseFailed` (whether the solver fails depends on the data). ``classes``
        must be declared; labels in ``y`` outside it count as the negative class."""
        epsilon, regularization, norm_bound = self._check_params()
        classes = _check_classes(self.classes)
        loss = self._loss()
        features = check_features(X)
        signs = _label_signs(y, features.shape[0], classes).astype(np.float64)
        calibration = self._calibrate(epsilon, features.shape[0], regularization, loss)
        Z = unit_rows(features, norm_bound, bool(self.fit_intercept))
        loss_charged = PureDP(self.epsilon)
        out = charged_run(
            self,
            loss_charged,
            f"{type(self).__name__}.fit ({self.method} perturbation)",
            lambda source: self._private_weights(
                loss, Z, signs, regularization, calibration, noise_generator(source)
            ),
        )
        weights = out.value
        scale = math.sqrt(2.0) if self.fit_intercept else 1.0
        n_features = features.shape[1]
        self.classes_ = classes
        self.n_features_in_ = n_features
        self.coef_ = (weights[:n_features] / (scale * norm_bound)).reshape(1, -1)
        self.intercept_ = np.array([weights[n_features] / scale if self.fit_intercept else 0.0])
        self.calibration_ = calibration
        self.privacy_loss_ = loss_charged
        self.ledger_entry_ = out.ledger_entry
        return self

    def decision_function(self, X: ArrayLike) -> FloatVector:
        """``clip(X) @ coef_.T + intercept_`` (rows longer than ``norm_bound`` shrunk onto it, as in fit);
        positive means ``classes_[1]``."""
        check_fitted(self)
        features = clip_rows(check_features(X, self.n_features_in_), float(self.norm_bound))
        return np.asarray(features @ self.coef_[0] + self.intercept_[0], dtype=np.float64)

    def predict(self, X: ArrayLike) -> NDArray[np.generic]:
        """The class of each row: ``classes_[1]`` where the decision function is positive."""
        positive = self.decision_function(X) > 0
        return np.asarray(self.classes_[positive.astype(np.int64)])


class DPLogisticRegression(_DPLinearClassifier):
    """epsilon-DP L2-regularised logistic regression (Chaudhuri et al. 2011, section 3.4.1; module
    docstring for the privacy argument).

    ``epsilon``: privacy loss per record (replace-one neighbours). ``regularization``: ``Lambda``.
    ``method``: ``"objective"`` (Algorithm 2, the default; ``c = 1/4``) or ``"output"`` (Algorithm 1).
    ``norm_bound``: the row norm treated as 1 (longer rows are shrunk). ``fit_intercept``: append a
    constant feature (the intercept is regularised). ``ledger`` / ``dataset`` / ``label``: where and under
    which names ``fit`` pays ``PureDP(epsilon)`` (``ledger=False``: nowhere, on purpose; omitted: nowhere,
    with an :class:`~kakeibo.UnaccountedRelease` warning). ``classes``: the two labels, declared (required;
    the larger one is the positive class; any other label in ``y`` counts as the negative one, see the module
    docstring). ``random_state``: int (reproducible; tests only), numpy Generator or None (the OS CSPRNG).

    Fitted: ``classes_`` (the declared pair, sorted), ``coef_`` (1, n_features), ``intercept_`` (1,),
    ``calibration_``, ``privacy_loss_``, ``ledger_entry_`` (``None`` when no ledger was charged).

    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.8, 0.1], [-1.0, 0.2], [-0.7, -0.1]])
    >>> model = DPLogisticRegression(epsilon=1e9, regularization=0.1, classes=("a", "b"), ledger=False,
    ...                              random_state=0)
    >>> model = model.fit(X, ["a", "a", "b", "b"])
    >>> model.predict(X).tolist(), model.predict_proba(X).shape
    (['a', 'a', 'b', 'b'], (4, 2))
    """

    def _loss(self) -> MarginLoss:
        return LogisticLoss()

    def predict_proba(self, X: ArrayLike) -> FloatMatrix:
        """``[P(classes_[0]), P(classes_[1])]`` per row, from the logistic model."""
        positive = special.expit(self.decision_function(X))
        return np.column_stack([1.0 - positive, positive])


class DPHuberSVM(_DPLinearClassifier):
    """epsilon-DP linear SVM with the Huber loss (Chaudhuri et al. 2011, section 3.4.2): ``h`` is the width
    of the smoothed hinge, ``c = 1/(2h)``. Other parameters and fitted attributes as
    :class:`DPLogisticRegression` (no ``predict_proba``: the Huber SVM is not a probability model).

    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.8, 0.1], [-1.0, 0.2], [-0.7, -0.1]])
    >>> svm = DPHuberSVM(epsilon=1e9, classes=(0, 1), ledger=False, random_state=0)
    >>> svm.fit(X, [1, 1, 0, 0]).predict(X).tolist()
    [1, 1, 0, 0]
    """

    def __init__(
        self,
        epsilon: float = 1.0,
        *,
        h: float = 0.5,
        regularization: float = 0.01,
        method: Method = "objective",
        norm_bound: float = 1.0,
        fit_intercept: bool = True,
        ledger: Ledger | Literal[False] | None = None,
        dataset: str | None = None,
        label: str | None = None,
        classes: Any = None,
        random_state: RandomState = None,
    ) -> None:
        super().__init__(
            epsilon,
            regularization=regularization,
            method=method,
            norm_bound=norm_bound,
            fit_intercept=fit_intercept,
            ledger=ledger,
            dataset=dataset,
            label=label,
            classes=classes,
            random_state=random_state,
        )
        self.h = h

    def _loss(self) -> MarginLoss:
        return HuberLoss(check_positive(self.h, "h"))
