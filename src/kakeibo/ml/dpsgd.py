"""DP-SGD (Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar and Zhang, CCS 2016) in JAX and optax, charged to
a ledger once per training run with its tight accountant (seed 002, p. 85: P3GM trains with DP-SGD).

**The algorithm.** ``steps`` times: draw a Poisson sample (each record independently with probability
``q``, the *sampling rate*); compute each sampled record's gradient of the loss (``jax.vmap`` of
``jax.grad``, float32), clip it to L2 norm ``clip_norm`` in float64 (``g * min(1, C / ||g||)``, over all
parameters at once; :func:`clipped_sum`);
sum the clipped gradients; add Gaussian noise of standard deviation ``noise_multiplier * C`` to every
coordinate; round the noisy sum to the lattice ``2**k`` (``2**k <= 2**-8 C / sqrt(d)``, a post-processing
step, see Noise); divide by the expected batch size ``q n``, a constant; hand the result to the optax
optimizer as the gradient.

**Neighbour relation**: add or remove one record, with ``q`` held fixed. **Sensitivity**: adding a record
to a Poisson sample adds at most ``C`` to the clipped sum in L2. Each step is therefore the Poisson
subsampled Gaussian mechanism (``remove``: the step's output with the record is ``(1 - q) N(s, (sigma
C)^2) + q N(s + g, (sigma C)^2)`` against ``N(s, (sigma C)^2)``; ``add`` the reverse pair), and the run is
``steps`` of them composed: :class:`~kakeibo.accounting.Composed` of
:class:`~kakeibo.accounting.SubsampledGaussian` (Mironov, Talwar and Zhang 2019 for its Renyi curve;
Koskela, Jalko and Honkela 2020 and Zhu, Dong and Wang 2022 for its PLD). The number of records ``n`` is
treated as public, as in kakeibo's DP-ERM and in every DP-SGD library: ``q = batch_size / n`` and the
number of steps ``ceil(epochs n / batch_size)`` are computed from it.

**Calibration.** :func:`calibrate` finds the least noise multiplier (to 4 significant digits, by
bisection) whose PLD epsilon at ``delta`` is at most the requested epsilon; the charge states that curve
and the PLD epsilon it reaches (:class:`~kakeibo.accounting.MechanismLoss`), so pld and rdp books compose
the run exactly and sequential books count ``(epsilon, delta)``.

**Noise.** The Gaussian noise is floating point, drawn by a numpy generator seeded with 256 bits of the
estimator's kakeibo random source (``random_state``; ``None`` = the OS CSPRNG), as for DP-ERM; the
guarantee is that of the real-valued mechanism. Rounding the noisy sum to the lattice ``2**k`` is
post-processing of that mechanism, and it keeps the low bits of the float sum (Mironov 2012) out of
everything released: the model is a function of the lattice values only. What remains is the sampler's
own float error, at most a few ulps of the noise, far below the lattice step.

>>> plan = calibrate(epsilon=2.0, delta=1e-5, sampling_rate=0.05, steps=100)
>>> float(plan.noise_multiplier), round(float(plan.loss.declared.epsilon), 4)
(1.345, 1.9987)
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, ClassifierMixin

from ..accounting import Composed, Curve, Ledger, MechanismLoss, SubsampledGaussian
from ..errors import ArgumentError
from ..mechanisms.base import check_positive
from ..noise import RandomSource, granularity_exponent
from ..privacy import Number, as_fraction
from ._common import (
    FloatMatrix,
    FloatVector,
    RandomState,
    charged_run,
    check_count,
    check_features,
    check_fitted,
    check_ledger,
    noise_generator,
    require_deep,
)

__all__ = [
    "DPMLPClassifier",
    "NetworkClassifier",
    "TrainingPlan",
    "calibrate",
    "clipped_sum",
    "epoch_plan",
    "four_digits",
    "glorot",
    "lattice_gaussian",
    "record_contributions",
    "record_gradients",
    "train",
    "unflatten",
]

#: The PLD grid of the search for the noise multiplier (coarser, so pessimistic) and of the final charge.
_SEARCH_INTERVAL, _CHARGE_INTERVAL = 1e-3, 1e-4
#: Records per jitted gradient call (a step's sample is cut into chunks of this size, the last padded).
CHUNK = 128

Loss = Callable[[Any, Any, Any], Any]  # (flat parameters, one record's features, its label) -> scalar
#: ``(parameters, CHUNK unit indices, padded with 0) -> one row per unit``, before clipping.
Contributions = Callable[[Any, NDArray[np.int64]], Any]


@dataclass(frozen=True)
class TrainingPlan:
    """What a DP-SGD run does and costs: its noise multiplier, sampling rate and steps, and the loss charged
    (the declared ``(epsilon, delta)`` with the run's curve)."""

    noise_multiplier: Fraction
    sampling_rate: Fraction
    steps: int
    loss: MechanismLoss


@functools.lru_cache(maxsize=64)
def calibrate(
    *,
    epsilon: Number,
    delta: Number,
    sampling_rate: Number,
    steps: int,
    fixed: tuple[tuple[Curve, int], ...] = (),
) -> TrainingPlan:
    """The least noise multiplier, to 4 significant digits, for which ``steps`` Poisson-subsampled
    Gaussians at ``sampling_rate``, composed with the ``fixed`` releases of the same fit (``(curve, count)``
    pairs, e.g. P3GM's PCA and EM), are ``(epsilon, delta)``-DP by their PLD; ArgumentError when none up to
    10,000 is. Cached: the search takes 1-16 s of PLD compositions, and refitting with the same public
    parameters is common (the plan is immutable).
    """
    target, dlt = as_fraction(epsilon, "epsilon"), as_fraction(delta, "delta")
    rate = as_fraction(sampling_rate, "sampling_rate")
    if target <= 0 or not 0 < dlt < 1:
        raise ArgumentError("DP-SGD needs epsilon > 0 and delta in (0, 1).")
    check_count(steps, "steps")

    def run(sigma: Fraction) -> Composed:
        return Composed([*fixed, (SubsampledGaussian(sigma, rate), steps)])

    def epsilon_at(sigma: Fraction, interval: float) -> float:
        remove, add = run(sigma).distributions(interval)
        return max(remove.epsilon(float(dlt)), add.epsilon(float(dlt)))

    low, high = Fraction(1, 100), Fraction(10_000)
    if epsilon_at(high, _SEARCH_INTERVAL) > target:
        raise ArgumentError(
            f"no noise multiplier up to {high} makes this run ({float(target)}, {float(dlt)})-DP."
        )
    while high / low > 1 + Fraction(1, 2000):  # geometric bisection
        mid = four_digits(Fraction(math.sqrt(low * high)))
        if mid in (low, high):
            break
        if epsilon_at(mid, _SEARCH_INTERVAL) <= target:
            high = mid
        else:
            low = mid
    sigma = four_digits(high, up=True)
    loss = MechanismLoss.of(run(sigma), dlt, interval=_CHARGE_INTERVAL)
    if loss.to_approx(dlt).epsilon > target:  # the search grid is the coarser one, so this does not happen
        raise AssertionError("DP-SGD calibration exceeded epsilon; this is a bug in kakeibo")
    return TrainingPlan(sigma, rate, steps, loss)


def epoch_plan(
    epsilon: Number,
    delta: Number,
    records: int,
    batch_size: int,
    epochs: Number,
    fixed: tuple[tuple[Curve, int], ...] = (),
) -> TrainingPlan:
    """:func:`calibrate` for ``epochs`` passes over ``records`` (public) at expected batch ``batch_size``:
    ``q = min(batch_size, records) / records`` and ``max(1, ceil(epochs / q))`` steps, composed with the
    ``fixed`` releases of the same fit."""
    passes = check_positive(epochs, "epochs")
    rate = Fraction(min(check_count(batch_size, "batch_size"), records), records)
    steps = max(1, math.ceil(passes / rate))
    return calibrate(epsilon=epsilon, delta=delta, sampling_rate=rate, steps=steps, fixed=fixed)


def four_digits(value: Fraction, *, up: bool = False) -> Fraction:
    """``value`` rounded to 4 significant digits (up, or to nearest): how public noise multipliers are
    stated."""
    exponent = math.floor(math.log10(value)) - 3
    scaled = value / Fraction(10) ** exponent
    digits = math.ceil(scaled) if up else round(scaled)
    return Fraction(digits) * Fraction(10) ** exponent


@functools.lru_cache(maxsize=32)
def record_gradients(loss: Loss) -> Callable[[Any, Any, Any], Any]:
    """A jitted ``(flat parameters, features, labels) -> one gradient per record`` (``jax.vmap`` of
    ``jax.grad``; each row depends on its record only)."""
    import jax

    return jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))


def clipped_sum(rows: ArrayLike, weights: FloatVector, clip_norm: float) -> FloatVector:
    """``sum_i weights_i r_i min(1, C' / ||r_i||)`` in float64, ``C' = clip_norm (1 - 2**-30)``: JAX computes
    in float32, so the norms and the clipping are done here, with a margin far above float64's error in a
    norm or a sum of a few hundred rows, so that one unit moves the sum by at most ``clip_norm``.

    Total for every input: a row holding NaN or an infinity (a record of extreme values overflows float32)
    counts as the zero row, and norms are taken of the row divided by its largest entry, so none overflows.
    Otherwise one such record would turn the whole model into NaN, a deterministic answer about it.

    >>> clipped_sum(np.array([[3.0, 4.0], [0.3, 0.4], [np.nan, 1.0]]), np.ones(3), 1.0).round(6).tolist()
    [0.9, 1.2]
    """
    values = np.asarray(rows, dtype=np.float64)
    values = np.where(np.all(np.isfinite(values), axis=1, keepdims=True), values, 0.0)
    peaks = np.max(np.abs(values), axis=1, initial=0.0)
    scaled = values / np.where(peaks > 0, peaks, 1.0)[:, None]
    lengths = np.sqrt(np.sum(scaled * scaled, axis=1))  # ||r|| / peak, in [1, sqrt(d)] for a nonzero row
    bound = clip_norm * (1 - 2.0**-30)
    room = np.divide(bound, peaks, out=np.full_like(peaks, np.inf), where=peaks > 0)  # may be inf: no clip
    factors = np.minimum(1.0, np.divide(room, lengths, out=np.ones_like(lengths), where=lengths > 0))
    return np.asarray((factors * weights) @ values, dtype=np.float64)


def record_contributions(loss: Loss, features: FloatMatrix, labels: NDArray[Any]) -> Contributions:
    """DP-SGD's units are records: the contribution of each is its gradient of ``loss``. The features are cast
    to JAX's float32 once; a value beyond its range becomes an infinity, and that record's gradient a row
    :func:`clipped_sum` counts as zero."""
    gradients = record_gradients(loss)
    with np.errstate(over="ignore"):
        narrow = features.astype(np.float32)
    return lambda params, index: gradients(params, narrow[index], labels[index])


def lattice_gaussian(
    total: FloatVector, scale: float, sensitivity: float, noise: np.random.Generator
) -> FloatVector:
    """``total`` plus Gaussian noise of standard deviation ``scale`` on every coordinate, rounded to the
    lattice ``2**k``, ``2**k <= 2**-8 sensitivity / sqrt(d)`` (module docstring, Noise: the rounding is
    post-processing that keeps the float sum's low bits out of the release)."""
    k = granularity_exponent(sensitivity * 2.0**-8 / math.sqrt(total.size))
    return np.ldexp(np.rint(np.ldexp(total + scale * noise.standard_normal(total.size), -k)), k)


def train(
    contributions: Contributions,
    flat: FloatVector,
    weights: FloatVector,
    *,
    plan: TrainingPlan,
    clip_norm: float,
    normaliser: float,
    optimizer: Any,
    source: RandomSource,
    chunk: int = CHUNK,
) -> FloatVector:
    """Run ``plan`` from the flat parameters ``flat`` (module docstring); returns the trained parameters.

    The units sampled are records (DP-SGD: :func:`record_contributions`) or clients (DP-FedAvg:
    :mod:`kakeibo.ml.fedavg`); ``weights`` (one per unit, 0 or 1) silence units that must not count;
    ``normaliser`` (the expected sample size ``q n``, from the public ``n``) divides each noisy sum;
    ``source`` draws the Poisson samples and seeds the noise; ``chunk`` units go to each call of
    ``contributions`` (the last call of a step padded), so a step's time depends on the sample's size only."""
    import jax.numpy as jnp

    units, dimension = weights.size, flat.size
    noise = noise_generator(source)
    threshold = min(2**64 - 1, math.floor(plan.sampling_rate * 2**64))  # Bernoulli(q') with q' <= q
    scale = float(plan.noise_multiplier) * clip_norm
    params = jnp.asarray(flat)
    state = optimizer.init(params)
    everyone = np.arange(units)
    for _ in range(plan.steps):
        if plan.sampling_rate < 1:
            chosen = np.flatnonzero(source.words(units) < np.uint64(threshold))
        else:
            chosen = everyone
        total = np.zeros(dimension)
        for start in range(0, chosen.size, chunk):
            index = chosen[start : start + chunk]
            mask = np.zeros(chunk)
            mask[: index.size] = weights[index]
            padded = np.zeros(chunk, dtype=np.int64)
            padded[: index.size] = index
            total += clipped_sum(contributions(params, padded), mask, clip_norm)
        noisy = lattice_gaussian(total, scale, clip_norm, noise)
        updates, state = optimizer.update(jnp.asarray(noisy / normaliser), state, params)
        params = params + updates
    return np.asarray(params, dtype=np.float64)


_Network = TypeVar("_Network", bound="NetworkClassifier")


class NetworkClassifier(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """What kakeibo's network classifiers share: a dense network (tanh hidden layers, a softmax output, the
    cross-entropy loss; ``hidden_layer_sizes=()`` is multinomial logistic regression) over declared
    ``classes``, trained by :func:`train` as one :func:`kakeibo.release.run` charged the run's curve.
    Subclasses say what a unit is (:class:`DPMLPClassifier`: a record; DP-FedAvg: a client)."""

    epsilon: float
    delta: float
    hidden_layer_sizes: Sequence[int]
    learning_rate: float
    momentum: float
    clip_norm: float
    classes: Any
    ledger: Ledger | Literal[False] | None
    dataset: str | None
    label: str | None
    random_state: RandomState

    def _shapes(self, n_features: int) -> tuple[tuple[int, int], ...]:
        """The (inputs, outputs) of each dense layer."""
        sizes = [n_features, *[int(h) for h in self.hidden_layer_sizes], self._classes().size]
        if any(size < 1 for size in sizes):
            raise ArgumentError("hidden_layer_sizes must be positive whole numbers.")
        return tuple(itertools.pairwise(sizes))

    def _check_common(self) -> None:
        """Check the parameters every network classifier has (all public: free to refuse), and that JAX is
        installed."""
        require_deep(type(self).__name__)
        check_positive(self.epsilon, "epsilon")
        delta = as_fraction(self.delta, "delta")
        if not 0 < delta < 1:
            raise ArgumentError(f"delta must lie in (0, 1), got {float(delta)}.")
        check_positive(self.learning_rate, "learning_rate")
        check_positive(self.clip_norm, "clip_norm")
        momentum = self.momentum
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 <= momentum < 1:
            raise ArgumentError(f"momentum must be a number in [0, 1), got {momentum!r}.")
        check_ledger(self.ledger)
        self._classes()

    def _optimizer(self) -> Any:
        """optax's SGD at ``learning_rate``, with heavy-ball ``momentum`` when it is not 0."""
        import optax

        return optax.sgd(float(self.learning_rate), momentum=float(self.momentum) or None)

    def _classes(self) -> NDArray[Any]:
        if self.classes is None:
            raise ArgumentError(
                "classes must be declared (e.g. classes=(0, 1, 2)): reading them from the data would release "
                "them without noise."
            )
        classes = np.asarray(list(self.classes))
        if classes.ndim != 1 or classes.size < 2 or np.unique(classes).size != classes.size:
            raise ArgumentError("classes must be at least two distinct labels.")
        return np.sort(classes)

    def _labels(self, y: ArrayLike, n_records: int) -> tuple[NDArray[np.int32], FloatVector]:
        """``(class index of each label, 1.0 where the label is declared)``; an undeclared label gets index
        0 and weight 0 (record by record: no label can make ``fit`` refuse)."""
        labels = np.asarray(y)
        if labels.ndim != 1 or labels.shape[0] != n_records:
            raise ArgumentError(f"y must be a 1-d array of {n_records} labels, got shape {labels.shape}.")
        targets = _targets(labels, self._classes())
        return np.maximum(targets, 0), (targets >= 0).astype(np.float64)

    def _fit_run(
        self: _Network,
        n_features: int,
        plan: TrainingPlan,
        run: Callable[[Loss, FloatVector, RandomSource], FloatVector],
        method: str,
    ) -> _Network:
        """Charge ``plan`` for ``run(loss, initial parameters, source)`` in one :func:`kakeibo.release.run`
        and keep the trained network."""
        shapes = self._shapes(n_features)

        def draw(source: RandomSource) -> FloatVector:
            return run(_network_loss(shapes), glorot(shapes, noise_generator(source)), source)

        out = charged_run(self, plan.loss, f"{type(self).__name__}.fit ({method})", draw)
        self.classes_ = self._classes()
        self.n_features_in_ = n_features
        self.coefs_ = unflatten(out.value, shapes)
        self.plan_ = plan
        self.privacy_loss_ = plan.loss
        self.ledger_entry_ = out.ledger_entry
        return self

    def decision_function(self, X: ArrayLike) -> FloatMatrix:
        """The network's output for each row (logits)."""
        check_fitted(self)
        return _forward(self.coefs_, check_features(X, self.n_features_in_))

    def predict(self, X: ArrayLike) -> NDArray[Any]:
        """The most probable declared class of each row."""
        return np.asarray(self.classes_[np.argmax(self.decision_function(X), axis=1)])

    def predict_proba(self, X: ArrayLike) -> FloatMatrix:
        """Softmax of :meth:`decision_function`."""
        scores = self.decision_function(X)
        scores = scores - scores.max(axis=1, keepdims=True)
        exp = np.exp(scores)
        return np.asarray(exp / exp.sum(axis=1, keepdims=True), dtype=np.float64)


class DPMLPClassifier(NetworkClassifier):
    """A :class:`NetworkClassifier` trained with DP-SGD (module docstring), scikit-learn style; with
    ``hidden_layer_sizes=()`` it is multinomial logistic regression (:class:`~kakeibo.ml.DPLogisticRegression`
    trains a binary one by objective perturbation).

    >>> from sklearn.datasets import load_digits
    >>> digits = load_digits()
    >>> model = DPMLPClassifier(8.0, hidden_layer_sizes=(16,), epochs=2, classes=range(10), ledger=False,
    ...                         random_state=0).fit(digits.data / 16, digits.target)
    >>> model.predict(digits.data[:3] / 16).shape, model.plan_.steps
    ((3,), 15)
    """

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        *,
        hidden_layer_sizes: Sequence[int] = (64,),
        epochs: float = 20,
        batch_size: int = 256,
        learning_rate: float = 0.05,
        momentum: float = 0.0,
        clip_norm: float = 1.0,
        classes: Any = None,
        ledger: Ledger | Literal[False] | None = None,
        dataset: str | None = None,
        label: str | None = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.hidden_layer_sizes = hidden_layer_sizes
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.clip_norm = clip_norm
        self.classes = classes
        self.ledger = ledger
        self.dataset = dataset
        self.label = label
        self.random_state = random_state

    def fit(self, X: ArrayLike, y: ArrayLike) -> DPMLPClassifier:
        """Train with DP-SGD as one run of :func:`kakeibo.release.run` (module docstring): every check and
        the noise calibration first (free), then the budget check, then the training (the draw), then the
        charge. Labels outside ``classes`` are kept in the sample but contribute no gradient."""
        features = check_features(X)
        targets, known = self._labels(y, features.shape[0])
        self._check_common()
        plan = epoch_plan(self.epsilon, self.delta, features.shape[0], self.batch_size, self.epochs)

        def run(loss: Loss, start: FloatVector, source: RandomSource) -> FloatVector:
            return train(
                record_contributions(loss, features, targets),
                start,
                known,
                plan=plan,
                clip_norm=float(self.clip_norm),
                normaliser=float(plan.sampling_rate) * features.shape[0],
                optimizer=self._optimizer(),
                source=source,
            )

        return self._fit_run(features.shape[1], plan, run, "DP-SGD")


def _targets(labels: NDArray[Any], classes: NDArray[Any]) -> NDArray[np.int32]:
    """Each label's index in ``classes``, or -1 for a label not declared (record by record, so that no label
    can make ``fit`` refuse or fail: that would tell the analyst that some record carries it)."""
    lookup = {value: i for i, value in enumerate(classes.tolist())}
    out = np.full(labels.shape[0], -1, dtype=np.int32)
    for i, value in enumerate(labels.tolist()):
        try:
            out[i] = lookup.get(value, -1)
        except TypeError:  # an unhashable label is not a declared one
            continue
    return out


@functools.lru_cache(maxsize=32)
def _network_loss(shapes: tuple[tuple[int, int], ...]) -> Loss:
    """The softmax cross-entropy of one record for a dense network with ``shapes`` on a flat parameter
    vector."""
    import jax
    import jax.numpy as jnp

    def loss(flat: Any, x: Any, target: Any) -> Any:
        activation, offset = x, 0
        for layer, (fan_in, fan_out) in enumerate(shapes):
            weights = flat[offset : offset + fan_in * fan_out].reshape(fan_in, fan_out)
            offset += fan_in * fan_out
            activation = activation @ weights + flat[offset : offset + fan_out]
            offset += fan_out
            if layer < len(shapes) - 1:
                activation = jnp.tanh(activation)
        return -jax.nn.log_softmax(activation)[target]

    return loss


def glorot(shapes: tuple[tuple[int, int], ...], rng: np.random.Generator) -> FloatVector:
    """Glorot-uniform weights and zero biases of dense layers of ``shapes`` (inputs, outputs), flattened
    layer by layer."""
    parts: list[FloatVector] = []
    for fan_in, fan_out in shapes:
        bound = math.sqrt(6 / (fan_in + fan_out))
        parts.append(rng.uniform(-bound, bound, fan_in * fan_out))
        parts.append(np.zeros(fan_out))
    return np.concatenate(parts)


def unflatten(flat: Any, shapes: tuple[tuple[int, int], ...]) -> list[tuple[Any, Any]]:
    """The ``(weights, bias)`` of each dense layer of ``shapes`` in a flat parameter vector (numpy or JAX)."""
    out, offset = [], 0
    for fan_in, fan_out in shapes:
        weights = flat[offset : offset + fan_in * fan_out].reshape(fan_in, fan_out)
        offset += fan_in * fan_out
        out.append((weights, flat[offset : offset + fan_out]))
        offset += fan_out
    return out


def _forward(layers: list[tuple[FloatMatrix, FloatVector]], X: FloatMatrix) -> FloatMatrix:
    activation = X
    for i, (weights, bias) in enumerate(layers):
        activation = activation @ weights + bias
        if i < len(layers) - 1:
            activation = np.tanh(activation)
    return np.asarray(activation, dtype=np.float64)
