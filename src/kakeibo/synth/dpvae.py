"""A variational autoencoder trained end to end with DP-SGD: the naive DP-SGD baseline of private synthesis
(seed 002, p. 85: end-to-end DP-SGD "degrades" at practical budgets, which P3GM and PEARL address), with
P3GM's network (Takagi, Takahashi, Cao and Yoshikawa, ICDE 2021, Sec. V: one hidden layer of 1,000 ReLU
units in the encoder and in the decoder, a 10-dimensional latent space), charged to a ledger once per fit.

**Data.** As for :class:`~kakeibo.synth.MST`: integer ``codes`` and their ``sizes``, encoded as for
:class:`~kakeibo.synth.PEARL` (:class:`~kakeibo.synth.pearl.Encoding`: an ordinal attribute one coordinate
in ``[0, 1]``, a categorical one a one-hot block). The class, when there is one, is an attribute like the
others: the VAE models the joint distribution (as P3GM's code appends the one-hot label to each record).

**The model** (Kingma and Welling 2014): the encoder maps ``x`` to ``(mu, log var)`` of ``q(z | x)``
through its hidden layer; the decoder maps ``z`` to a reconstruction through its own. The per-record loss is
the squared reconstruction error of ``z = mu + exp(log var / 2) e`` (``e`` standard normal, drawn fresh at
every step) plus ``KL(q(z | x) || N(0, I))``: P3GM's Eq. (6) with its prior replaced by the standard normal.

**Training** is :func:`kakeibo.ml.dpsgd.train` (module docstring there: Poisson sampling, per-record
gradients clipped to ``clip_norm``, Gaussian noise, the noise multiplier calibrated by its PLD to the
requested ``(epsilon, delta)`` over ``epochs`` passes), with Adam as P3GM trains. **Neighbour relation**: add
or remove one record; **sensitivity** of each step's clipped sum: ``clip_norm``. The loss charged is the
run's (:class:`~kakeibo.accounting.MechanismLoss` of the composed subsampled Gaussians).

**Sampling** (free): ``z`` standard normal, the decoder, decoded to codes (nearest ordinal code; a value of
each categorical block drawn in proportion to its outputs, which estimate the value's probability given
``z``).

>>> import numpy as np
>>> codes = np.random.default_rng(0).integers(0, 3, (400, 2))
>>> model = DPVAE(4.0, 1e-5, epochs=1, hidden=16, ledger=False, random_state=0).fit(codes, sizes=(3, 3))
>>> model.sample(5, random_state=1).shape
(5, 2)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..accounting import Ledger
from ..mechanisms.base import check_positive
from ..ml import (
    RandomState,
    check_count,
    check_ledger,
    noise_generator,
    require_deep,
)
from ..ml.dpsgd import Contributions, TrainingPlan, epoch_plan, glorot, train, unflatten
from ..noise import RandomSource
from .base import Synthesizer
from .mst import check_codes
from .pearl import Encoding, make_encoding

__all__ = ["DPVAE", "Decoder", "Prior", "check_network", "decode", "network_shapes", "sgd"]

IntMatrix = NDArray[np.int64]
FloatArray = NDArray[np.float64]


class Prior(Protocol):
    """A latent distribution a :class:`Decoder` samples from (P3GM's released mixture)."""

    def sample(self, n: int, rng: np.random.Generator) -> FloatArray: ...


@dataclass(frozen=True, eq=False)
class Decoder:
    """A trained decoder: the encoding, the two dense layers ``z -> hidden (ReLU) -> point``, the latent
    dimension, and the prior ``z`` is drawn from (``None``: the standard normal)."""

    encoding: Encoding
    layers: tuple[tuple[FloatArray, FloatArray], tuple[FloatArray, FloatArray]]
    latent: int
    prior: Prior | None = None

    def sample(self, n: int, rng: np.random.Generator) -> IntMatrix:
        z = rng.standard_normal((n, self.latent)) if self.prior is None else self.prior.sample(n, rng)
        return self.encoding.decode(decode(self.layers, z, np), np.zeros(n, dtype=np.int64), rng)


def decode(layers: Any, z: Any, xp: Any) -> Any:
    """The decoder's output for latent rows ``z``: ``relu(z W1 + b1) W2 + b2`` (``xp``: numpy or
    jax.numpy)."""
    (w1, b1), (w2, b2) = layers
    return xp.maximum(z @ w1 + b1, 0.0) @ w2 + b2


def network_shapes(width: int, hidden: int, latent: int) -> tuple[tuple[int, int], ...]:
    """The dense layers' (inputs, outputs): encoder hidden, mean, log variance; decoder hidden, output."""
    return ((width, hidden), (hidden, latent), (hidden, latent), (latent, hidden), (hidden, width))


def check_network(estimator: Any) -> tuple[int, int]:
    """``(hidden, latent)`` of a DP-SGD-trained VAE (DPVAE, P3GM), after refusing (free) a machine without
    JAX, a bad ledger and a learning rate or clip norm that is not positive."""
    require_deep(type(estimator).__name__)
    check_ledger(estimator.ledger)
    check_positive(estimator.learning_rate, "learning_rate")
    check_positive(estimator.clip_norm, "clip_norm")
    return check_count(estimator.hidden, "hidden"), check_count(estimator.latent, "latent")


def sgd(
    estimator: Any,
    contributions: Contributions,
    start: FloatArray,
    records: int,
    plan: TrainingPlan,
    source: RandomSource,
) -> FloatArray:
    """DP-SGD (:func:`kakeibo.ml.dpsgd.train`) of a network from the flat parameters ``start`` over
    ``records`` records (every one counted) with the ``estimator``'s ``clip_norm`` and Adam at its
    ``learning_rate``: how DPVAE and P3GM train."""
    import optax

    flat = train(
        contributions,
        start,
        np.ones(records),
        plan=plan,
        clip_norm=float(estimator.clip_norm),
        normaliser=float(plan.sampling_rate) * records,
        optimizer=optax.adam(float(estimator.learning_rate)),
        source=source,
    )
    return np.asarray(flat, dtype=np.float64)


@functools.lru_cache(maxsize=16)
def _record_gradients(shapes: tuple[tuple[int, int], ...]) -> Any:
    """A jitted ``(flat parameters, points, standard normals) -> one gradient per record`` of the module
    docstring's loss (``jax.vmap`` of ``jax.grad``: each row depends on its record and its own draw)."""
    import jax
    import jax.numpy as jnp

    def loss(flat: Any, x: Any, e: Any) -> Any:
        (w1, b1), (wm, bm), (wv, bv), *decoder = unflatten(flat, shapes)
        h = jax.nn.relu(x @ w1 + b1)
        mean, log_var = h @ wm + bm, jnp.clip(h @ wv + bv, -30.0, 30.0)
        z = mean + jnp.exp(log_var / 2) * e
        reconstruction = decode(decoder, z, jnp)
        kl = -0.5 * jnp.sum(1 + log_var - mean**2 - jnp.exp(log_var))
        return jnp.sum((reconstruction - x) ** 2) + kl

    return jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))


class DPVAE(Synthesizer):
    """The DP-SGD-trained VAE (module docstring): ``fit(codes, sizes=)`` charges the ledger once (the whole
    training run) and keeps the decoder (``model_``); ``sample(n)`` is free.

    ``ordinal``: one flag per attribute (``None``: every attribute categorical); ``hidden``, ``latent``: the
    network (P3GM's 1,000 and 10); ``epochs``, ``batch_size`` (expected, Poisson), ``learning_rate`` (Adam),
    ``clip_norm``: DP-SGD's (P3GM's defaults: 5 epochs of 200, its setting for adult). ``ledger``,
    ``dataset``, ``label`` and ``random_state`` as in :mod:`kakeibo.ml`."""

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        *,
        ordinal: Sequence[bool] | None = None,
        hidden: int = 1000,
        latent: int = 10,
        epochs: float = 5,
        batch_size: int = 200,
        learning_rate: float = 1e-3,
        clip_norm: float = 1.0,
        ledger: Ledger | Literal[False] | None = None,
        dataset: str | None = None,
        label: str | None = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.ordinal = ordinal
        self.hidden = hidden
        self.latent = latent
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.clip_norm = clip_norm
        self.ledger = ledger
        self.dataset = dataset
        self.label = label
        self.random_state = random_state

    def fit(self, codes: ArrayLike, sizes: Sequence[int]) -> DPVAE:
        """Train as one :func:`kakeibo.release.run` (checks and the noise calibration first, free; then the
        budget check, the training, the charge)."""
        encoding = make_encoding(sizes, self.ordinal, None)
        data, _ = check_codes(codes, encoding.sizes)
        hidden, latent = check_network(self)
        plan = epoch_plan(self.epsilon, self.delta, len(data), self.batch_size, self.epochs)
        shapes = network_shapes(encoding.width, hidden, latent)
        points = encoding.encode(data).astype(np.float32)

        def draw(source: RandomSource) -> Decoder:
            rng = noise_generator(source)
            gradients = _record_gradients(shapes)

            def contributions(params: Any, index: NDArray[np.int64]) -> Any:
                return gradients(params, points[index], rng.standard_normal((len(index), latent)))

            layers = unflatten(sgd(self, contributions, glorot(shapes, rng), len(data), plan, source), shapes)
            return Decoder(encoding, (layers[3], layers[4]), latent)

        self._charged_fit(plan.loss, "DPVAE.fit (DP-SGD)", draw)
        self.encoding_, self.plan_ = encoding, plan
        return self
