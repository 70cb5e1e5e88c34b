"""PEARL: synthetic data from a private embedding of the data's characteristic function and a generator
trained against it (Liew, Takahashi and Ueno, "PEARL: Data Synthesis via Private Embeddings and Adversarial
Reconstruction Learning", ICLR 2022; seed 002, p. 84), charged to a ledger once per fit.

**Data.** As for :class:`~kakeibo.synth.MST`: ``codes``, one row per record, each value a whole number in
``[0, sizes[j])``. Each attribute is encoded in ``[0, 1]``: an *ordinal* one (a numeric column's public
bins) as ``code / (size - 1)``, a categorical one as a one-hot block. With ``label_column`` the fit is
class-conditional (PEARL, Sec. 4.3): that attribute is not embedded but indexes the embeddings.

**The release (the only step that reads the data).** ``m`` frequencies ``w_1 .. w_m`` are drawn (public
randomness, independent of the data). Each reads a *support*: in turn one attribute's coordinates (cycling
through the attributes), a random pair's, or all of them, so that the characteristic function is known on
every 1-way and on many 2-way marginals as well as on the whole row (PEARL's Gaussian frequencies are the
last kind only; on 30 attributes they left the 1-way marginals 0.48 away in total variation, against 0.30
with the supports, at epsilon 1 on WDBC). On its support a frequency is ``N(0, I / s^2)``, with ``s`` the
support's root mean squared distance between two rows drawn uniformly from the domain (public; a data-free
stand-in for the median heuristic of the paper's code, which reads the data without charging it),
halved ``i`` times for ``i < length_scales`` in turn: a mixture of kernel widths, none tuned on the data. Each
record ``x`` of class ``c`` contributes the vector ``e_c (x) [1, cos(w_1 . x), .., cos(w_m . x), sin(w_1 .
x), .., sin(w_m . x)] / [1, sqrt(m), .., sqrt(m)]``: a count and the empirical characteristic function at
the ``m`` frequencies (Eq. 2), in the block of its class. The sum over records is released once by kakeibo's
:class:`~kakeibo.mechanisms.Gaussian`, so the class counts come with the same noise.

**Neighbour relation**: add or remove one record (the estimator), or one person with at most ``k`` records
(:func:`release_embedding` with ``sensitivity=k``). **Sensitivity**: a record's vector has L2 norm exactly
``sqrt(1 + m (cos^2 + sin^2) / m) = sqrt(2)`` (all in its class's block), so ``k`` records move the sum by
at most ``k sqrt(2)``; the mechanism is calibrated to that, rounded up (its grid slack of ``2**-8`` covers
the float error of the trigonometric values and of the sums). **Loss**: the Gaussian mechanism's ``(epsilon,
delta)``, with its zCDP curve for rdp books; everything after the release is post-processing.

**The generator (post-processing).** A dense ReLU network maps a standard normal ``z`` (``latent``
dimensions) and the class's one-hot to a row: a sigmoid for each ordinal attribute, a softmax for each
categorical block. It is trained with Adam to minimise the characteristic-function distance (Eq. 4) between
each class's released mean embedding (the noisy sum over the noisy count) and the generator's, weighted by
the noisy class shares. **Adversarial reconstruction** (Sec. 4.2): a critic re-weights the released
frequencies by importance sampling, the proposal's precision on each coordinate ``d`` multiplied by
``exp(a_d)`` (weights: the ratio of the two mixtures' densities at ``w_j``, normalised over ``j``); it
learns ``a`` to maximise the distance, one step every ``critic_every`` generator steps. The frequencies
themselves never change, so this costs no privacy.

**Sampling** (free): class values allocated by the noisy shares, then ``z``, the network, an ordinal value
rounded to its nearest code and a categorical one the most likely value of its block.

**Timing.** The release's time grows with the number of records (treated as public, as for DP-SGD); the
training's with the public parameters only.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> a = rng.integers(0, 5, 3000)
>>> codes = np.column_stack([a, np.minimum(a + rng.integers(0, 2, 3000), 4), rng.integers(0, 2, 3000)])
>>> model = PEARL(4.0, 1e-6, ordinal=(True, True, False), steps=200, ledger=False, random_state=0)
>>> model.fit(codes, sizes=(5, 5, 2)).sample(4, random_state=1).shape
(4, 3)
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from ..accounting import Ledger
from ..errors import ArgumentError
from ..mechanisms import Gaussian
from ..mechanisms.base import check_positive
from ..ml import (
    RandomState,
    charged_run,
    check_count,
    check_ledger,
    noise_generator,
    require_deep,
)
from ..noise import RandomSource
from .base import Synthesizer, pack, unpack
from .mst import allocate, check_codes

__all__ = [
    "PEARL",
    "Embedding",
    "Encoding",
    "Generator",
    "embedding_mechanism",
    "make_encoding",
    "release_embedding",
]

IntMatrix = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Encoding:
    """How coded rows become points of ``[0, 1]^width`` (module docstring, Data): which attributes the
    generator draws (``features``; all but ``label``), which of them are ordinal, and their sizes."""

    sizes: tuple[int, ...]
    ordinal: tuple[bool, ...]
    label: int | None

    @property
    def features(self) -> tuple[int, ...]:
        return tuple(a for a in range(len(self.sizes)) if a != self.label)

    @property
    def classes(self) -> int:
        return 1 if self.label is None else self.sizes[self.label]

    @property
    def blocks(self) -> tuple[tuple[int, int, bool], ...]:
        """``(start, stop, ordinal)`` of each generated attribute's coordinates."""
        out, start = [], 0
        for a in self.features:
            width = 1 if self.ordinal[a] else self.sizes[a]
            out.append((start, start + width, self.ordinal[a]))
            start += width
        return tuple(out)

    @property
    def width(self) -> int:
        return self.blocks[-1][1] if self.blocks else 0

    def encode(self, codes: IntMatrix) -> FloatArray:
        """Each row as a point of ``[0, 1]^width``."""
        out = np.zeros((len(codes), self.width))
        for a, (start, _, ordinal) in zip(self.features, self.blocks, strict=True):
            if ordinal:
                out[:, start] = codes[:, a] / max(self.sizes[a] - 1, 1)
            else:
                out[np.arange(len(codes)), start + codes[:, a]] = 1.0
        return out

    def decode(
        self, points: FloatArray, labels: NDArray[np.int64], rng: np.random.Generator | None = None
    ) -> IntMatrix:
        """Generated points back to codes: an ordinal coordinate to its nearest code; a categorical block to
        its largest coordinate, or with ``rng`` to a value drawn in proportion to the block's coordinates
        clipped at 0 (uniform when none is positive: a decoder trained on squared error outputs each value's
        probability, whose largest would always win); ``labels`` fill the label attribute. Total: a NaN (a
        diverged network) reads as 0, so every code lies in its column's range whatever the network."""
        points = np.nan_to_num(points, nan=0.0)
        out = np.zeros((len(points), len(self.sizes)), dtype=np.int64)
        for a, (start, stop, ordinal) in zip(self.features, self.blocks, strict=True):
            if ordinal:
                scaled = np.clip(points[:, start], 0.0, 1.0) * (self.sizes[a] - 1)
                out[:, a] = np.rint(scaled).astype(np.int64)
            elif rng is None:
                out[:, a] = np.argmax(points[:, start:stop], axis=1)
            else:
                weights = np.clip(points[:, start:stop], 0.0, None)
                weights[weights.sum(axis=1) <= 0] = 1.0
                cumulative = np.cumsum(weights, axis=1)
                drawn = rng.random(len(points)) * cumulative[:, -1]
                out[:, a] = np.minimum((cumulative <= drawn[:, None]).sum(axis=1), stop - start - 1)
        if self.label is not None:
            out[:, self.label] = labels
        return out

    @property
    def owners(self) -> NDArray[np.int64]:
        """For each coordinate, the position (in :attr:`features`) of the attribute it encodes."""
        return np.repeat(np.arange(len(self.blocks)), [stop - start for start, stop, _ in self.blocks])

    def spreads(self) -> FloatArray:
        """Each generated attribute's mean squared distance between two of its values drawn uniformly and
        independently: ``(size + 1) / (6 (size - 1))`` for an ordinal one, ``2 (1 - 1 / size)`` for a
        categorical one (0 for a single value)."""
        out = []
        for a in self.features:
            size = self.sizes[a]
            if size == 1:
                out.append(0.0)
            else:
                out.append((size + 1) / (6 * (size - 1)) if self.ordinal[a] else 2 * (1 - 1 / size))
        return np.asarray(out, dtype=np.float64)

    def length_scale(self) -> float:
        """The root mean squared distance between two rows drawn uniformly and independently from the domain
        (1 for a domain of one row)."""
        total = float(self.spreads().sum())
        return math.sqrt(total) if total > 0 else 1.0


def make_encoding(sizes: Sequence[int], ordinal: Sequence[bool] | None, label: int | None) -> Encoding:
    """The :class:`Encoding` of a table with these ``sizes``: ``ordinal`` flags (``None``: every attribute
    categorical) and the ``label`` column or ``None`` (checked: free to refuse)."""
    domain = tuple(check_count(size, "each size") for size in sizes)
    if not domain:
        raise ArgumentError("a synthesis needs at least one column.")
    flags = (False,) * len(domain) if ordinal is None else tuple(ordinal)
    if len(flags) != len(domain) or not all(isinstance(flag, (bool, np.bool_)) for flag in flags):
        raise ArgumentError(f"ordinal must be {len(domain)} flags (True or False), one per column.")
    if label is not None:
        if isinstance(label, bool) or not isinstance(label, int) or not -len(domain) <= label < len(domain):
            raise ArgumentError(f"label_column must be a column index in [0, {len(domain)}), got {label!r}.")
        label %= len(domain)
        if len(domain) == 1:
            raise ArgumentError("a class-conditional fit needs a column besides the label.")
    return Encoding(domain, tuple(bool(flag) for flag in flags), label)


@dataclass(frozen=True, eq=False)
class Embedding:
    """What :func:`release_embedding` releases, and what it implies: ``frequencies`` (``m x width``, public),
    ``noisy`` (``classes x (1 + 2m)``, the released sums) and, derived from them, each class's share of the
    records and its mean embedding (``classes x 2m``: the cosines then the sines)."""

    frequencies: FloatArray
    noisy: FloatArray

    @property
    def counts(self) -> FloatArray:
        return np.asarray(self.noisy[:, 0], dtype=np.float64)

    @property
    def shares(self) -> FloatArray:
        """Each class's share of the records: its noisy count (at least 0) over their sum (uniform when none
        is positive)."""
        positive = np.clip(self.counts, 0.0, None)
        total = positive.sum()
        return positive / total if total > 0 else np.full(len(positive), 1 / len(positive))

    @property
    def means(self) -> FloatArray:
        """Each class's empirical characteristic function at the frequencies: its noisy sums times
        ``sqrt(m)`` over its noisy count (at least 1)."""
        m = self.frequencies.shape[0]
        return np.asarray(
            self.noisy[:, 1:] * math.sqrt(m) / np.maximum(self.counts, 1.0)[:, None], dtype=np.float64
        )


def embedding_mechanism(epsilon: float, delta: float, sensitivity: int) -> Gaussian:
    """The Gaussian mechanism of the release, calibrated to ``sensitivity sqrt(2)`` rounded up (module
    docstring, Sensitivity) for neighbours differing in ``sensitivity`` records."""
    bound = math.nextafter(math.sqrt(2.0) * sensitivity, math.inf)
    return Gaussian(sensitivity=bound, epsilon=epsilon, delta=delta)


def record_vectors(points: FloatArray, frequencies: FloatArray) -> FloatArray:
    """Each row's unclassed contribution ``[1, cos(W x) / sqrt(m), sin(W x) / sqrt(m)]`` (norm sqrt(2))."""
    m = frequencies.shape[0]
    phases = points @ frequencies.T
    scale = 1 / math.sqrt(m)
    return np.hstack([np.ones((len(points), 1)), np.cos(phases) * scale, np.sin(phases) * scale])


def release_embedding(
    codes: IntMatrix,
    counts: NDArray[np.int64],
    encoding: Encoding,
    frequencies: FloatArray,
    mechanism: Gaussian,
    source: RandomSource,
) -> Embedding:
    """Release the class-blocked sum of the record vectors of ``counts[i]`` records equal to ``codes[i]``
    with ``mechanism`` (module docstring, The release); part of a release's draw."""
    vectors = record_vectors(encoding.encode(codes), frequencies) * counts[:, None]
    labels = codes[:, encoding.label] if encoding.label is not None else np.zeros(len(codes), np.int64)
    sums = np.zeros((encoding.classes, vectors.shape[1]))
    np.add.at(sums, labels, vectors)
    noisy = np.asarray(mechanism.release(sums.ravel(), rng=source), dtype=np.float64)
    return Embedding(frequencies, noisy.reshape(sums.shape))


@dataclass(frozen=True, eq=False)
class Generator:
    """A trained generator (module docstring): the encoding, the dense layers, the latent dimension, the
    class shares it samples with and ``total``, the record count the noisy counts estimate (their sum, at
    least 0). Everything in it is post-processing of the release."""

    encoding: Encoding
    layers: tuple[tuple[FloatArray, FloatArray], ...]
    latent: int
    shares: FloatArray
    total: float

    def to_bytes(self) -> bytes:
        """A JSON header line (encoding, latent, total), then the shares and layers as a NumPy archive."""
        header = {
            "sizes": list(self.encoding.sizes),
            "ordinal": list(self.encoding.ordinal),
            "label": self.encoding.label,
            "latent": self.latent,
            "total": self.total,
            "layers": len(self.layers),
        }
        arrays: dict[str, Any] = {"shares": self.shares}
        for i, (weights, bias) in enumerate(self.layers):
            arrays[f"weights_{i}"], arrays[f"bias_{i}"] = weights, bias
        return pack(header, arrays)

    @classmethod
    def from_bytes(cls, payload: bytes) -> Generator:
        header, arrays = unpack(payload)
        label = header["label"]
        encoding = Encoding(
            tuple(int(size) for size in header["sizes"]),
            tuple(bool(flag) for flag in header["ordinal"]),
            None if label is None else int(label),
        )
        layers = tuple((arrays[f"weights_{i}"], arrays[f"bias_{i}"]) for i in range(int(header["layers"])))
        return cls(encoding, layers, int(header["latent"]), arrays["shares"], float(header["total"]))

    def sample(self, n: int, rng: np.random.Generator) -> IntMatrix:
        labels = allocate(self.shares[None, :], np.zeros(n, dtype=np.int64), rng)
        z = rng.standard_normal((n, self.latent))
        activation = np.hstack([z, np.eye(len(self.shares))[labels]])
        for i, (weights, bias) in enumerate(self.layers):
            activation = activation @ weights + bias
            if i < len(self.layers) - 1:
                activation = np.maximum(activation, 0.0)
        return self.encoding.decode(_outputs(activation, self.encoding, np, special.expit), labels)


def _outputs(logits: Any, encoding: Encoding, xp: Any, sigmoid: Any) -> Any:
    """The network's last layer to a point: ``sigmoid`` per ordinal coordinate, a softmax per block
    (``xp``: numpy or jax.numpy; the sigmoid a stable one of the same library, whose gradient is finite)."""
    parts = []
    for start, stop, ordinal in encoding.blocks:
        block = logits[:, start:stop]
        if ordinal:
            parts.append(sigmoid(block))
        else:
            shifted = xp.exp(block - xp.max(block, axis=1, keepdims=True))
            parts.append(shifted / xp.sum(shifted, axis=1, keepdims=True))
    return xp.concatenate(parts, axis=1)


class PEARL(Synthesizer):
    """PEARL synthetic data (module docstring): ``fit(codes, sizes=)`` charges the ledger once (the
    embedding's release) and trains the generator (``model_``); ``sample(n)`` is free.

    ``ordinal``: one flag per attribute (``None``: every attribute categorical); ``label_column``: the class
    attribute for a class-conditional fit, or ``None``; ``frequencies``: ``m``; ``length_scale``: ``s``
    (``None``: :meth:`Encoding.length_scale`); ``steps``, ``batch_size``, ``learning_rate``, ``latent``,
    ``hidden``: the generator's training; ``critic_every``: generator steps per critic step (0: no critic).
    ``ledger``, ``dataset``, ``label`` and ``random_state`` as in :mod:`kakeibo.ml`."""

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        *,
        ordinal: Sequence[bool] | None = None,
        label_column: int | None = None,
        frequencies: int = 500,
        length_scale: float | None = None,
        length_scales: int = 4,
        steps: int = 2000,
        batch_size: int = 1000,
        learning_rate: float = 0.01,
        latent: int = 10,
        hidden: Sequence[int] | None = None,
        critic_every: int = 10,
        ledger: Ledger | Literal[False] | None = None,
        dataset: str | None = None,
        label: str | None = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.ordinal = ordinal
        self.label_column = label_column
        self.frequencies = frequencies
        self.length_scale = length_scale
        self.length_scales = length_scales
        self.steps = steps
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.latent = latent
        self.hidden = hidden
        self.critic_every = critic_every
        self.ledger = ledger
        self.dataset = dataset
        self.label = label
        self.random_state = random_state

    def encoding(self, sizes: Sequence[int]) -> Encoding:
        """The :class:`Encoding` of a table with these ``sizes`` under this estimator's parameters
        (:func:`make_encoding`)."""
        return make_encoding(sizes, self.ordinal, self.label_column)

    def check(self) -> None:
        """Refuse (free, before any charge) parameters out of range and a machine without JAX and optax,
        which the training needs after the release."""
        require_deep("PEARL")
        check_ledger(self.ledger)
        for name in ("frequencies", "length_scales", "steps", "batch_size", "latent"):
            check_count(getattr(self, name), name)
        check_positive(self.learning_rate, "learning_rate")
        if self.length_scale is not None:
            check_positive(self.length_scale, "length_scale")
        every = self.critic_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ArgumentError(f"critic_every must be a whole number >= 0, got {every!r}.")
        for width in self.hidden or ():
            check_count(width, "each hidden width")

    def fit(self, codes: ArrayLike, sizes: Sequence[int]) -> PEARL:
        """Release the embedding as one :func:`kakeibo.release.run` (checks first, free; then the budget
        check, the release, the charge), then train the generator on it (post-processing)."""
        encoding = self.encoding(sizes)
        data, _ = check_codes(codes, encoding.sizes)
        self.check()
        mechanism = self.mechanism(encoding, 1)
        ones = np.ones(len(data), dtype=np.int64)
        draw = functools.partial(self.fit_cells, data, ones, encoding, mechanism)
        released = charged_run(self, mechanism.ledger_loss, "PEARL", draw)
        self.encoding_ = encoding
        self.embedding_, self.model_ = released.value
        self.privacy_loss_ = mechanism.ledger_loss
        self.ledger_entry_ = released.ledger_entry
        return self

    def mechanism(self, encoding: Encoding, sensitivity: int) -> Gaussian:
        """The release's mechanism for neighbours differing in ``sensitivity`` records, refused (free, before
        any charge) where its exact sampler cannot draw a release of this many values."""
        mechanism = embedding_mechanism(self.epsilon, self.delta, sensitivity)
        mechanism.grid(encoding.classes * (1 + 2 * self.frequencies))
        return mechanism

    def fit_cells(
        self,
        cells: IntMatrix,
        counts: NDArray[np.int64],
        encoding: Encoding,
        mechanism: Gaussian,
        source: RandomSource,
    ) -> tuple[Embedding, Generator]:
        """The draw of a fit on ``counts[i]`` records equal to ``cells[i]``: the frequencies, the one release
        (:func:`release_embedding` with ``mechanism``), then the generator trained on it."""
        frequencies = self.draw_frequencies(encoding, source)
        embedding = release_embedding(cells, counts, encoding, frequencies, mechanism, source)
        return embedding, self.train(encoding, embedding, noise_generator(source))

    def supports(self, encoding: Encoding, source: RandomSource) -> NDArray[np.bool_]:
        """Which coordinates each frequency reads (module docstring, The release): in turn one attribute
        (cycling through them), a pair drawn at random, and every coordinate; the scale levels cycle
        fastest."""
        attributes, owners = len(encoding.blocks), encoding.owners
        rng = noise_generator(source)
        out = np.zeros((self.frequencies, encoding.width), dtype=bool)
        for j in range(self.frequencies):
            kind, turn = divmod(j // self.length_scales, 3)[1], j // (3 * self.length_scales)
            if kind == 0 or attributes == 1:
                out[j] = owners == turn % attributes
            elif kind == 1:
                out[j] = np.isin(owners, rng.choice(attributes, 2, replace=False))
            else:
                out[j] = True
        return out

    def scales(self, encoding: Encoding, supports: NDArray[np.bool_]) -> FloatArray:
        """Each frequency's length scale at each level: ``(m, length_scales)``, the top level ``s`` scaled to
        the frequency's support (the root mean squared distance of its attributes, times ``length_scale``
        over the whole row's when that is set), halved at each level."""
        spreads = encoding.spreads()
        read = np.zeros(
            (len(supports), len(spreads))
        )  # an attribute counts when any coordinate of it is read
        np.maximum.at(read, (np.nonzero(supports)[0], encoding.owners[np.nonzero(supports)[1]]), 1.0)
        tops = np.sqrt(read @ spreads)
        tops = np.where(tops > 0, tops, 1.0)
        if self.length_scale is not None:
            tops = tops * float(self.length_scale) / encoding.length_scale()
        return np.asarray(tops[:, None] / 2.0 ** np.arange(self.length_scales)[None, :], dtype=np.float64)

    def draw_frequencies(self, encoding: Encoding, source: RandomSource) -> FloatArray:
        """``m`` frequencies, the ``j``-th from ``N(0, I / s_j^2)`` on its support, 0 elsewhere (public
        randomness)."""
        supports = self.supports(encoding, source)
        levels = self.scales(encoding, supports)[
            np.arange(self.frequencies), np.arange(self.frequencies) % self.length_scales
        ]
        gaussian = noise_generator(source).standard_normal((self.frequencies, encoding.width))
        return np.asarray(np.where(supports, gaussian, 0.0) / levels[:, None], dtype=np.float64)

    def train(self, encoding: Encoding, embedding: Embedding, rng: np.random.Generator) -> Generator:
        """Train the generator against ``embedding`` (module docstring; post-processing), its initial
        weights, batch classes and latent draws seeded from ``rng``."""
        import jax
        import jax.numpy as jnp

        classes, width = encoding.classes, encoding.width
        hidden = tuple(self.hidden) if self.hidden else (min(4 * width, 512), min(2 * width, 256))
        sizes = (self.latent + classes, *hidden, width)
        key = jax.random.PRNGKey(int(rng.integers(2**31)))
        params = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            key, sub = jax.random.split(key)
            bound = math.sqrt(6 / (fan_in + fan_out))
            params.append(
                (jax.random.uniform(sub, (fan_in, fan_out), minval=-bound, maxval=bound), jnp.zeros(fan_out))
            )
        batch_labels = allocate(embedding.shares[None, :], np.zeros(self.batch_size, np.int64), rng)
        onehot = np.eye(classes)[batch_labels]
        supports = embedding.frequencies != 0
        levels = self.scales(encoding, supports)  # (m, K)
        # the proposal mixture's log density of w_j at level k, up to a constant: |S_j| log s_jk - squares
        data = tuple(
            jnp.asarray(array, dtype=jnp.float32)
            for array in (
                onehot,
                np.maximum(onehot.sum(axis=0), 1.0),
                embedding.frequencies,
                embedding.means,
                embedding.shares,
                supports.sum(axis=1)[:, None] * np.log(levels),
                (embedding.frequencies[:, None, :] * levels[:, :, None]) ** 2 / 2,
                supports,
            )
        )
        optimizer, generator_step, critic_step = _steps(encoding, self.latent, float(self.learning_rate))
        log_t2 = jnp.zeros(width, dtype=jnp.float32)
        g_state, c_state = optimizer.init(params), optimizer.init(log_t2)
        for step in range(self.steps):
            key, sub = jax.random.split(key)
            params, g_state = generator_step(params, g_state, log_t2, sub, data)
            if self.critic_every and step % self.critic_every == 0:
                key, sub = jax.random.split(key)
                log_t2, c_state = critic_step(params, c_state, log_t2, sub, data)
        layers = tuple((np.asarray(w, np.float64), np.asarray(b, np.float64)) for w, b in params)
        total = float(np.clip(embedding.counts, 0.0, None).sum())
        return Generator(encoding, layers, int(self.latent), embedding.shares, total)


@functools.lru_cache(maxsize=16)
def _steps(encoding: Encoding, latent: int, learning_rate: float) -> tuple[Any, Any, Any]:
    """``(optimizer, generator step, critic step)``: Adam at ``learning_rate`` and the two jitted steps of
    the training (module docstring), cached so that fits of the same shapes compile once. The steps take
    ``(params, optimizer state, log_t2, key, data)``, ``data`` the arrays of one fit: the batch's class
    one-hots, their counts, the frequencies, the target mean embeddings, the class shares, and the proposal
    mixture's ``logs``, ``squares`` and support ``mask`` (:meth:`PEARL.train`)."""
    import jax
    import jax.numpy as jnp
    import optax

    optimizer = optax.adam(learning_rate)

    def weights(a: Any, logs: Any, squares: Any, mask: Any) -> Any:
        """The importance weights of the frequencies (Sec. 4.2): the proposal mixture with each coordinate's
        precision multiplied by ``exp(a_d)``, over the proposal, normalised (log densities up to a
        constant)."""

        def log_mixture(a: Any) -> Any:
            return jax.nn.logsumexp(logs + (mask @ a)[:, None] / 2 - squares @ jnp.exp(a), axis=1)

        return jax.nn.softmax(log_mixture(a) - log_mixture(jnp.zeros_like(a)))

    def distance(params: Any, key: Any, log_t2: Any, data: Any) -> Any:
        """The weighted characteristic-function distance (Eq. 4) of a generated batch."""
        onehot, per_class, frequencies, target, shares, logs, squares, mask = data
        m = frequencies.shape[0]
        activation = jnp.concatenate([jax.random.normal(key, (onehot.shape[0], latent)), onehot], axis=1)
        for i, (w, b) in enumerate(params):
            activation = activation @ w + b
            if i < len(params) - 1:
                activation = jax.nn.relu(activation)
        phases = _outputs(activation, encoding, jnp, jax.nn.sigmoid) @ frequencies.T
        means = jnp.concatenate([onehot.T @ jnp.cos(phases), onehot.T @ jnp.sin(phases)], axis=1)
        gaps = (target - means / per_class[:, None]) ** 2
        share = weights(log_t2, logs, squares, mask)
        return m * jnp.sum(shares[:, None] * (gaps[:, :m] + gaps[:, m:]) * share[None, :])

    @jax.jit
    def generator_step(params: Any, state: Any, log_t2: Any, key: Any, data: Any) -> Any:
        updates, state = optimizer.update(jax.grad(distance)(params, key, log_t2, data), state, params)
        return optax.apply_updates(params, updates), state

    @jax.jit
    def critic_step(params: Any, state: Any, log_t2: Any, key: Any, data: Any) -> Any:
        ascent = -jax.grad(distance, argnums=2)(params, key, log_t2, data)  # the critic maximises
        updates, state = optimizer.update(ascent, state, log_t2)
        return optax.apply_updates(log_t2, updates), state

    return optimizer, generator_step, critic_step
