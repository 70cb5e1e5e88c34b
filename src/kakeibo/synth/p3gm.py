"""P3GM: privacy-preserving phased generative model (Takagi, Takahashi, Cao and Yoshikawa, ICDE 2021; seed
002, p. 85), charged to a ledger once per fit.

A variational autoencoder whose hard parts are released first, so that DP-SGD trains less: (1) the encoder's
mean is a projection on principal components found by DP-PCA; (2) the prior is a Gaussian mixture fitted by
DP-EM to the projected records; (3) only the decoder and the encoder's variance are trained with DP-SGD, the
decoder first pre-trained for free on rows the released PCA and mixture imply. It shares
:class:`~kakeibo.synth.DPVAE`'s network (P3GM's: 1,000 hidden ReLU units, 10 latent dimensions) and data
encoding.

**Data.** Integer ``codes`` and ``sizes``, encoded as for :class:`~kakeibo.synth.PEARL`: points ``x`` of
``[0, 1]^w``.

**The releases** (neighbour relation: add or remove one record), all with Gaussian noise drawn as DP-SGD
draws it (:func:`kakeibo.ml.dpsgd.lattice_gaussian`: float noise rounded to a lattice far below the noise):

0. *The centre*: the sums ``[1, u]`` of ``u = (x - 1/2) / (sqrt(w) / 2)`` (``||u|| <= 1`` for every point
   of the cube), which one record moves by at most ``sqrt(2)``; noise ``sqrt(2) sigma_mean``. The centre
   ``m`` is the noisy mean of the points, clipped into the cube. Each record is then centred and shrunk into
   the unit ball, ``y = (x - m) / max(1, ||x - m||)``, as the authors' code clips its rows (their code
   centres on the data's exact mean, which it does not charge; here the mean is released first). Why
   centre: with the domain's middle as the centre, the mean's direction took most of the second moment and
   the variation was below the PCA's noise on german, wdbc and digits (``benchmarks/RESULTS.md``).
1. *DP-PCA* (Analyze Gauss, Dwork et al. 2014): the upper triangle of ``sum y y^T``; one record moves it by
   ``||y y^T||_F = ||y||^2 <= 1``; noise ``sigma_pca``. The components ``V`` are the top ``latent``
   eigenvectors of the noisy matrix; a record's projection ``z = y V`` has ``||z|| <= 1``.
2. *DP-EM* (Park, Foulds, Chaudhuri and Welling 2017) for a mixture of ``components`` diagonal Gaussians,
   ``em_iterations`` times: each record's responsibilities ``r`` under the current released mixture and the
   statistics ``[r_k, r_k z, r_k z^2]`` over ``k``, summed and released at once. One record moves them by at
   most ``sqrt(sum_k r_k^2 (1 + ||z||^2 + ||z^2||^2)) <= sqrt(3)`` (``sum_k r_k^2 <= 1``, ``||z|| <= 1``);
   noise ``sqrt(3) sigma_em``. The M-step is post-processing of the noisy sums. The default is one component
   and one iteration: one component is the default of the authors' code (``src/synthesize.py``,
   ``--gmm_n_comp 1``), and with one component every responsibility is 1, so each iteration would release
   the same sums again (one release at the whole EM share carries what ``T`` releases at ``1/T`` of it
   would). More components pay for themselves only when the mixture's released counts dwarf the noise:
   on wdbc (398 training rows, epsilon 1) three components and 20 iterations gave two components whose
   means were mostly noise (``benchmarks/RESULTS.md``, issue 35).
3. *DP-SGD* (:func:`kakeibo.ml.dpsgd.train`) on the per-record loss: squared reconstruction error of ``z ~
   q(z | x) = N(y V, diag(exp(log var(x))))`` plus the KL divergence from ``q`` to the mixture, approximated
   as P3GM does (its Eq. 9: ``-log sum_k pi_k exp(-KL(q || N_k))``).

**Accounting.** ``sigma_mean``, ``sigma_pca`` and ``sigma_em`` are set so that the centre, PCA and EM would
each cost ``shares`` of the zCDP ``rho`` the request converts to (:data:`SHARES` by default); DP-SGD's
noise multiplier is then the least whose PLD, composed with theirs, is within ``(epsilon, delta)``
(:func:`kakeibo.ml.dpsgd.calibrate` with ``fixed``). The charge is that composition's
:class:`~kakeibo.accounting.MechanismLoss`: one ledger entry per fit.

**Sampling** (free): a component of the released mixture (allocated by its weights), ``z`` from it, the
decoder, decoded to codes.

>>> import numpy as np
>>> codes = np.random.default_rng(0).integers(0, 3, (400, 3))
>>> model = P3GM(8.0, 1e-5, epochs=1, hidden=16, pretrain_steps=10, ledger=False, random_state=0)
>>> model.fit(codes, sizes=(3, 3, 3)).sample(5, random_state=1).shape
(5, 3)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..accounting import GaussianNoise, Ledger
from ..errors import ArgumentError
from ..mechanisms.base import check_positive
from ..ml import (
    RandomState,
    check_count,
    noise_generator,
    symmetric,
)
from ..ml.dpsgd import TrainingPlan, epoch_plan, four_digits, glorot, lattice_gaussian, unflatten
from ..noise import RandomSource
from .base import Synthesizer
from .dpvae import Decoder, check_network, decode, network_shapes, sgd
from .mst import allocate, check_codes, rho_for
from .pearl import Encoding, make_encoding

__all__ = ["P3GM", "Mixture"]

IntMatrix = NDArray[np.int64]
FloatArray = NDArray[np.float64]
#: the least variance of a mixture component on any latent dimension (a noisy M-step can go below 0)
VARIANCE_FLOOR = 1e-4
#: the sensitivities the centre, PCA and EM are noised for, relative to the analysis' sqrt(2), 1 and sqrt(3):
#: the margin covers the float error of ``||u|| <= 1``, of the shrink ``||y|| <= 1`` and of the
#: eigenvectors' orthonormality (about 1e-15)
MARGIN = 1 + 2**-20
#: the default shares of rho of the centre, the PCA and the EM (module docstring, Accounting)
SHARES = (0.05, 0.3, 0.1)


@dataclass(frozen=True, eq=False)
class Mixture:
    """A diagonal Gaussian mixture: ``weights`` (K), ``means`` and ``variances`` (K x latent)."""

    weights: FloatArray
    means: FloatArray
    variances: FloatArray

    def responsibilities(self, z: FloatArray) -> FloatArray:
        """Each row's posterior over the components (E-step)."""
        log = (
            np.log(np.maximum(self.weights, 1e-300))[None, :]
            - 0.5 * np.sum(np.log(2 * np.pi * self.variances), axis=1)[None, :]
            - 0.5 * np.sum((z[:, None, :] - self.means[None, :, :]) ** 2 / self.variances[None, :, :], axis=2)
        )
        log -= log.max(axis=1, keepdims=True)
        weights = np.exp(log)
        return np.asarray(weights / weights.sum(axis=1, keepdims=True), dtype=np.float64)

    def sample(self, n: int, rng: np.random.Generator) -> FloatArray:
        parts = allocate(self.weights[None, :], np.zeros(n, dtype=np.int64), rng)
        draws = rng.standard_normal((n, self.means.shape[1]))
        return np.asarray(self.means[parts] + np.sqrt(self.variances[parts]) * draws, dtype=np.float64)


def em_statistics(z: FloatArray, mixture: Mixture) -> FloatArray:
    """The summed statistics ``[r_k, r_k z, r_k z^2]`` (K x (1 + 2 latent)) of the records ``z`` under
    ``mixture``; one record's row has L2 norm at most ``sqrt(3)`` when ``||z|| <= 1`` (module docstring)."""
    r = mixture.responsibilities(z)
    return np.concatenate([r.sum(axis=0)[:, None], r.T @ z, r.T @ z**2], axis=1)


def m_step(noisy: FloatArray, latent: int) -> Mixture:
    """The mixture the noisy statistics imply (post-processing): counts at least 1e-3, means the weighted
    sums over them, variances at least :data:`VARIANCE_FLOOR`."""
    counts = np.maximum(noisy[:, 0], 1e-3)
    means = noisy[:, 1 : 1 + latent] / counts[:, None]
    variances = np.clip(noisy[:, 1 + latent :] / counts[:, None] - means**2, VARIANCE_FLOOR, 1.0)
    positive = np.clip(noisy[:, 0], 0.0, None)
    weights = positive / positive.sum() if positive.sum() > 0 else np.full(len(counts), 1 / len(counts))
    return Mixture(weights, np.clip(means, -1.0, 1.0), variances)


@functools.lru_cache(maxsize=16)
def _record_gradients(shapes: tuple[tuple[int, int], ...]) -> Any:
    """A jitted ``(flat parameters, points, standard normals, V, centre, mixture arrays) -> one gradient per
    record`` of the DP-SGD loss (module docstring, 3): each row depends on its record and draw only. The
    encoder's mean layer of the shared network is not used (its gradient is 0)."""
    import jax
    import jax.numpy as jnp

    def loss(flat: Any, x: Any, e: Any, v: Any, centre: Any, weights: Any, means: Any, variances: Any) -> Any:
        (w1, b1), _, (wv, bv), decoder_in, decoder_out = unflatten(flat, shapes)
        y = x - centre
        mean = (y / jnp.maximum(1.0, jnp.linalg.norm(y))) @ v
        log_var = jnp.clip(jax.nn.relu(x @ w1 + b1) @ wv + bv, -30.0, 30.0)
        z = mean + jnp.exp(log_var / 2) * e
        reconstruction = decode((decoder_in, decoder_out), z, jnp)
        var = jnp.exp(log_var)
        kls = 0.5 * jnp.sum(
            jnp.log(variances)
            - log_var[None, :]
            - 1
            + (var[None, :] + (mean[None, :] - means) ** 2) / variances,
            axis=1,
        )
        prior = -jax.nn.logsumexp(jnp.log(jnp.maximum(weights, 1e-30)) - kls)
        return jnp.sum((reconstruction - x) ** 2) + prior

    in_axes = (None, 0, 0, None, None, None, None, None)
    return jax.jit(jax.vmap(jax.grad(loss), in_axes=in_axes))


@functools.lru_cache(maxsize=16)
def _pretrain_step(shapes: tuple[tuple[int, int], ...], learning_rate: float) -> tuple[Any, Any]:
    """``(optimizer, jitted step)``: Adam on the decoder's squared error from ``z`` to given points (the
    free pre-training on rows the released PCA and mixture imply)."""
    import jax
    import jax.numpy as jnp
    import optax

    optimizer = optax.adam(learning_rate)

    def error(layers: Any, z: Any, x: Any) -> Any:
        return jnp.mean(jnp.sum((decode(layers, z, jnp) - x) ** 2, axis=1))

    @jax.jit
    def step(layers: Any, state: Any, z: Any, x: Any) -> Any:
        updates, state = optimizer.update(jax.grad(error)(layers, z, x), state, layers)
        return optax.apply_updates(layers, updates), state

    return optimizer, step


class P3GM(Synthesizer):
    """P3GM synthetic data (module docstring): ``fit(codes, sizes=)`` charges the ledger once (centre, PCA, EM
    and DP-SGD composed) and keeps the decoder and the mixture (``model_``); ``sample(n)`` is free.

    ``ordinal`` as for :class:`~kakeibo.synth.DPVAE`; ``latent`` (PCA components), ``components`` and
    ``em_iterations`` (the mixture), ``shares`` (of rho for the centre, PCA and EM), ``hidden``, ``epochs``,
    ``batch_size``, ``learning_rate``, ``clip_norm`` (DP-SGD; 5 epochs of expected batches of 200, the
    paper's setting for adult), ``pretrain_steps`` (free pre-training)."""

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        *,
        ordinal: Sequence[bool] | None = None,
        latent: int = 10,
        components: int = 1,
        em_iterations: int = 1,
        shares: tuple[float, float, float] = SHARES,
        hidden: int = 1000,
        epochs: float = 5,
        batch_size: int = 200,
        learning_rate: float = 1e-3,
        clip_norm: float = 1.0,
        pretrain_steps: int = 1000,
        ledger: Ledger | Literal[False] | None = None,
        dataset: str | None = None,
        label: str | None = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.ordinal = ordinal
        self.latent = latent
        self.components = components
        self.em_iterations = em_iterations
        self.shares = shares
        self.hidden = hidden
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.clip_norm = clip_norm
        self.pretrain_steps = pretrain_steps
        self.ledger = ledger
        self.dataset = dataset
        self.label = label
        self.random_state = random_state

    def plan(self, records: int) -> tuple[tuple[Fraction, Fraction, Fraction], TrainingPlan]:
        """``((sigma_mean, sigma_pca, sigma_em), the DP-SGD plan)`` for ``records`` (public; module docstring,
        Accounting); every refusal here is free."""
        if len(self.shares) != 3:
            raise ArgumentError(
                f"shares must be three: the centre's, the PCA's and the EM's, got {self.shares!r}."
            )
        shares = [check_positive(share, "each share") for share in self.shares]
        if sum(shares) >= 1:
            raise ArgumentError(f"shares must leave DP-SGD part of the budget, got {self.shares!r}.")
        iterations = check_count(self.em_iterations, "em_iterations")
        rho = float(rho_for(self.epsilon, self.delta))
        releases = (1, 1, iterations)
        sigma_mean, sigma_pca, sigma_em = (
            four_digits(Fraction(math.sqrt(count / (2 * rho * share))), up=True)
            for count, share in zip(releases, shares, strict=True)
        )
        sigmas = (sigma_mean, sigma_pca, sigma_em)
        fixed = tuple((GaussianNoise(sigma), count) for sigma, count in zip(sigmas, releases, strict=True))
        plan = epoch_plan(self.epsilon, self.delta, records, self.batch_size, self.epochs, fixed)
        return sigmas, plan

    def fit(self, codes: ArrayLike, sizes: Sequence[int]) -> P3GM:
        """The centre, PCA, EM, pre-training and DP-SGD as one :func:`kakeibo.release.run` (checks and
        calibration first, free; then the budget check, the releases, the charge)."""
        encoding = make_encoding(sizes, self.ordinal, None)
        data, _ = check_codes(codes, encoding.sizes)
        hidden, latent = check_network(self)
        latent = min(latent, encoding.width)
        components = check_count(self.components, "components")
        check_count(self.pretrain_steps, "pretrain_steps")
        (sigma_mean, sigma_pca, sigma_em), plan = self.plan(len(data))
        shapes = network_shapes(encoding.width, hidden, latent)
        points = encoding.encode(data)

        def draw(source: RandomSource) -> Decoder:
            rng = noise_generator(source)
            centre = _centre(points, float(sigma_mean), rng)
            y = centred(points, centre)
            v = _pca(y, latent, float(sigma_pca), rng)
            mixture = _em(y @ v, components, self.em_iterations, float(sigma_em), rng)
            return self._train(encoding, points, centre, v, mixture, shapes, plan, rng, source)

        self._charged_fit(plan.loss, "P3GM.fit (centre, PCA, EM, DP-SGD)", draw)
        self.encoding_, self.plan_ = encoding, plan
        return self

    def _train(
        self,
        encoding: Encoding,
        points: FloatArray,
        centre: FloatArray,
        v: FloatArray,
        mixture: Mixture,
        shapes: tuple[tuple[int, int], ...],
        plan: TrainingPlan,
        rng: np.random.Generator,
        source: RandomSource,
    ) -> Decoder:
        """Pre-train the decoder on rows the released ``v`` and ``mixture`` imply (free), then DP-SGD."""
        import jax.numpy as jnp

        layers = unflatten(glorot(shapes, rng), shapes)
        optimizer, step = _pretrain_step(shapes, float(self.learning_rate))
        decoder = [(jnp.asarray(w, jnp.float32), jnp.asarray(b, jnp.float32)) for w, b in layers[3:]]
        state = optimizer.init(decoder)
        for _ in range(self.pretrain_steps):
            z = mixture.sample(256, rng)
            implied = np.clip(centre + z @ v.T, 0.0, 1.0)
            decoder, state = step(
                decoder, state, jnp.asarray(z, jnp.float32), jnp.asarray(implied, jnp.float32)
            )
        layers[3:] = [(np.asarray(w, np.float64), np.asarray(b, np.float64)) for w, b in decoder]
        start = np.concatenate([part.ravel() for layer in layers for part in layer])
        gradients = _record_gradients(shapes)
        fixed = tuple(
            jnp.asarray(a, jnp.float32)
            for a in (v, centre, mixture.weights, mixture.means, mixture.variances)
        )
        narrow = points.astype(np.float32)

        def contributions(params: Any, index: NDArray[np.int64]) -> Any:
            return gradients(params, narrow[index], rng.standard_normal((len(index), v.shape[1])), *fixed)

        trained = unflatten(sgd(self, contributions, start, len(points), plan, source), shapes)
        return Decoder(encoding, (trained[3], trained[4]), v.shape[1], mixture)


def _centre(points: FloatArray, sigma: float, rng: np.random.Generator) -> FloatArray:
    """Release 0 (module docstring): the points' noisy mean, clipped into the cube."""
    width = points.shape[1]
    u = (points - 0.5) / (math.sqrt(width) / 2)
    bound = math.sqrt(2) * MARGIN
    sums = np.concatenate([[len(points)], u.sum(axis=0)])
    noisy = lattice_gaussian(sums, sigma * bound, bound, rng)
    return np.asarray(np.clip(0.5 + math.sqrt(width) / 2 * noisy[1:] / max(noisy[0], 1.0), 0.0, 1.0))


def centred(points: FloatArray, centre: FloatArray) -> FloatArray:
    """Each point less ``centre``, shrunk into the unit ball: ``y = (x - m) / max(1, ||x - m||)``."""
    y = points - centre
    return np.asarray(y / np.maximum(1.0, np.linalg.norm(y, axis=1, keepdims=True)), dtype=np.float64)


def _pca(y: FloatArray, latent: int, sigma: float, rng: np.random.Generator) -> FloatArray:
    """Release 1 (module docstring): the top ``latent`` eigenvectors (columns) of the noisy second moment of
    the centred points ``y``."""
    width = y.shape[1]
    upper = np.triu_indices(width)
    noisy = lattice_gaussian((y.T @ y)[upper], sigma * MARGIN, MARGIN, rng)
    values, vectors = np.linalg.eigh(symmetric(noisy, width))
    return np.asarray(vectors[:, np.argsort(values)[::-1][:latent]], dtype=np.float64)


def _em(
    z: FloatArray,
    components: int,
    iterations: int,
    sigma: float,
    rng: np.random.Generator,
) -> Mixture:
    """Release 2 (module docstring): ``iterations`` noisy EM steps from a public start (means drawn from
    ``N(0, 0.3^2)``, unit-scale variances, equal weights)."""
    latent = z.shape[1]
    mixture = Mixture(
        np.full(components, 1 / components),
        rng.normal(0, 0.3, (components, latent)),
        np.full((components, latent), 1 / latent),
    )
    for _ in range(iterations):
        bound = math.sqrt(3) * MARGIN
        noisy = lattice_gaussian(em_statistics(z, mixture).ravel(), sigma * bound, bound, rng)
        mixture = m_step(noisy.reshape(components, 1 + 2 * latent), latent)
    return mixture
