"""Reproduction of the experiments of seed 001 (Yang, Sato and Nakagawa, "Bayesian Differential Privacy on
Correlated Data", Sec. 6): the maximum leakage coefficient of random networks against their degree
(Fig. 4), and per-node leakage against degree on the SNAP ego-Facebook graph (Fig. 5).

Both use the Gaussian correlation model with prior ``tau I`` (Sec. 5.5): ``L^ = D - W + tau I``. Run it as
``kakeibo repro bdp [--out DIR] [--quick]``; it writes ``fig4_synthetic.png``, ``fig5_facebook.png`` and
``claims.txt`` (the checks of the paper's statements, each with the numbers behind it).
"""

from __future__ import annotations

import gzip
import itertools
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..errors import ArgumentError
from .gaussian import GaussianCorrelationModel

__all__ = ["FacebookResult", "SyntheticResult", "facebook_edges", "random_network", "reproduce"]

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: The paper's priors for the figures.
TAUS = (0.01, 0.1, 1.0, 10.0)
#: Priors of the tau -> 0 check (Sec. 6.1: the noise factor 1 + max l approaches n).
LIMIT_TAUS = (1e-2, 1e-4, 1e-6)


def random_network(n: int, degree: float, rng: np.random.Generator) -> IntArray:
    """Sec. 6.1's random network: ``n d / 2`` distinct entries of the strict upper triangle of ``W`` chosen
    uniformly at random (set to 1 with their mirror images), so the average degree is ``d``. Returns the
    edges as an ``(n d / 2, 2)`` array of ``(i, j)``, ``i < j``.

    Drawn by rejection (pairs drawn in bulk, duplicates and loops dropped) so that it scales to 10^6 nodes
    without the ``n^2 / 2`` triangle; every ``nd/2``-subset is equally likely.
    """
    if n < 2:
        raise ArgumentError(f"a network needs at least 2 nodes, got {n}.")
    wanted = round(n * degree / 2)
    if not 0 <= wanted <= n * (n - 1) // 2:
        raise ArgumentError(f"average degree {degree} is impossible with {n} nodes.")
    codes = np.zeros(0, dtype=np.int64)
    while codes.size < wanted:
        i = rng.integers(0, n, size=2 * (wanted - codes.size) + 16)
        j = rng.integers(0, n, size=i.size)
        low, high = np.minimum(i, j), np.maximum(i, j)
        fresh = low[low != high] * n + high[low != high]
        codes = np.concatenate([codes, fresh])
        # Keep the first occurrence of each pair, in draw order: a uniform random ordered sample.
        _, first = np.unique(codes, return_index=True)
        codes = codes[np.sort(first)]
    codes = codes[:wanted]
    return np.stack([codes // n, codes % n], axis=1)


def facebook_edges() -> IntArray:
    """The SNAP ego-Facebook graph bundled with kakeibo (4039 nodes, 88234 undirected edges, "u v" per line;
    Leskovec and Krevl, SNAP datasets), as an ``(88234, 2)`` array."""
    with resources.files("kakeibo.data").joinpath("facebook_combined.txt.gz").open("rb") as raw:
        text = gzip.decompress(raw.read()).decode("ascii")
    return np.asarray(np.array(text.split(), dtype=np.int64).reshape(-1, 2))


@dataclass(frozen=True)
class SyntheticResult:
    """Fig. 4: ``max_leakage[(n, tau)]`` over ``degrees`` (one random network per point), and
    ``limit[n]``: the noise factor ``1 + max l`` of the densest network for each of :data:`LIMIT_TAUS`."""

    degrees: tuple[float, ...]
    max_leakage: dict[tuple[int, float], FloatArray] = field(default_factory=dict)
    limit: dict[int, FloatArray] = field(default_factory=dict)


@dataclass(frozen=True)
class FacebookResult:
    """Fig. 5: node degrees and each node's leakage coefficient per ``tau``."""

    degrees: IntArray
    leakage: dict[float, FloatArray]


def synthetic(
    sizes: tuple[int, ...], degrees: tuple[float, ...], taus: tuple[float, ...], seed: int
) -> SyntheticResult:
    rng = np.random.default_rng(seed)
    result = SyntheticResult(degrees=degrees)
    for n in sizes:
        networks = [random_network(n, d, rng) for d in degrees]
        for tau in taus:
            values = [GaussianCorrelationModel.from_edges(e, n=n, tau=tau).max_leakage() for e in networks]
            result.max_leakage[(n, tau)] = np.array(values, dtype=np.float64)
        densest = networks[-1]
        factors = [
            1 + GaussianCorrelationModel.from_edges(densest, n=n, tau=t).max_leakage() for t in LIMIT_TAUS
        ]
        result.limit[n] = np.array(factors, dtype=np.float64)
    return result


def facebook(taus: tuple[float, ...]) -> FacebookResult:
    edges = facebook_edges()
    n = int(edges.max()) + 1
    degrees = np.bincount(edges.ravel(), minlength=n).astype(np.int64)
    leakage = {tau: GaussianCorrelationModel.from_edges(edges, n=n, tau=tau).leakage() for tau in taus}
    return FacebookResult(degrees=degrees, leakage=leakage)


def claims(syn: SyntheticResult, fb: FacebookResult) -> list[str]:
    """The paper's statements (Sec. 6), each checked on these results and reported with its numbers."""
    lines = []
    top = int(np.argmax(fb.degrees))
    for tau, values in fb.leakage.items():
        argmax = int(np.argmax(values))
        lines.append(
            f"[{'ok' if argmax == top else 'NO'}] Facebook, tau={tau:g}: the max-degree node ({top}, degree "
            f"{fb.degrees[top]}) has the max leakage (max at node {argmax}, l = {values[argmax]:.6g})"
        )
    taus = sorted(fb.leakage)
    falling = all(np.all(fb.leakage[a] >= fb.leakage[b]) for a, b in itertools.pairwise(taus))
    lines.append(f"[{'ok' if falling else 'NO'}] Facebook: every node's leakage falls as tau grows {taus}")
    for (n, tau), values in sorted(syn.max_leakage.items()):
        rising = bool(np.all(np.diff(values) >= 0))
        lines.append(
            f"[{'ok' if rising else 'NO'}] n={n}, tau={tau:g}: max leakage rises with the degree "
            f"({', '.join(f'{v:.4g}' for v in values)} at degrees {', '.join(f'{d:g}' for d in syn.degrees)})"
        )
    for n, factors in sorted(syn.limit.items()):
        approaching = bool(np.all(np.diff(factors) > 0)) and factors[-1] > 0.99 * n
        shown = ", ".join(f"{f:.6g} at tau={t:g}" for f, t in zip(factors, LIMIT_TAUS, strict=True))
        lines.append(
            f"[{'ok' if approaching else 'NO'}] n={n}, degree {syn.degrees[-1]:g}: as tau -> 0 the noise "
            f"factor 1 + max l approaches n ({shown})"
        )
    return lines


def plot(syn: SyntheticResult, fb: FacebookResult, out: Path) -> list[Path]:
    """Fig. 4 and Fig. 5 as PNG files in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    sizes = sorted({n for n, _ in syn.max_leakage})
    taus = sorted({tau for _, tau in syn.max_leakage})
    for (n, tau), values in sorted(syn.max_leakage.items()):
        ax.plot(
            syn.degrees,
            values,
            color=f"C{taus.index(tau)}",
            linestyle=("-", "--", ":", "-.")[sizes.index(n) % 4],
            marker="os^D"[sizes.index(n) % 4],
            label=f"n={n}, tau={tau:g}",
        )
    ax.set(xlabel="average degree d", ylabel="max leakage coefficient", yscale="log")
    ax.set_title("Fig. 4: random networks (Sec. 6.1)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig4 = out / "fig4_synthetic.png"
    fig.savefig(fig4, dpi=120)
    plt.close(fig)

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    degree, count = np.unique(fb.degrees, return_counts=True)
    left.loglog(degree, count, ".", markersize=3)
    left.set(xlabel="degree", ylabel="nodes", title="(a) degree distribution")
    for tau, values in sorted(fb.leakage.items()):
        right.loglog(fb.degrees, values, ".", markersize=2, label=f"tau={tau:g}")
    right.set(xlabel="degree", ylabel="leakage coefficient", title="(b) leakage vs degree")
    right.legend(fontsize=7, markerscale=4)
    fig.suptitle("Fig. 5: ego-Facebook (Sec. 6.2)")
    fig.tight_layout()
    fig5 = out / "fig5_facebook.png"
    fig.savefig(fig5, dpi=120)
    plt.close(fig)
    return [fig4, fig5]


def reproduce(out: Path, *, quick: bool = False, seed: int = 2015) -> list[str]:
    """Run both experiments, write the figures and ``claims.txt`` to ``out``; returns the claim lines.

    ``quick`` uses smaller networks (n in {100, 500}) for a smoke run; the full run uses n in
    {100, 1000, 10000} with average degrees 2..64.
    """
    out.mkdir(parents=True, exist_ok=True)
    sizes = (100, 500) if quick else (100, 1000, 10000)
    degrees = (2.0, 4.0, 8.0, 16.0) if quick else tuple(float(2**k) for k in range(1, 7))
    syn = synthetic(sizes, degrees, TAUS, seed)
    fb = facebook(TAUS)
    plot(syn, fb, out)
    lines = claims(syn, fb)
    (out / "claims.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines
