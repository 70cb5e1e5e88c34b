"""Seed 001, Sec. 6: the random networks, the bundled ego-Facebook graph and the ``kakeibo repro bdp`` run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kakeibo.cli import main
from kakeibo.correlated.repro import facebook_edges, random_network


@pytest.mark.parametrize(("n", "degree"), [(10, 3.0), (1000, 8.0), (100_000, 10.0)])
def test_random_network_has_the_requested_average_degree_and_no_repeats(n: int, degree: float) -> None:
    edges = random_network(n, degree, np.random.default_rng(1))
    assert edges.shape == (round(n * degree / 2), 2)
    assert np.all(edges[:, 0] < edges[:, 1]) and edges.min() >= 0 and edges.max() < n
    assert np.unique(edges[:, 0] * n + edges[:, 1]).size == edges.shape[0]
    assert 2 * edges.shape[0] / n == pytest.approx(degree, abs=1 / n)


@pytest.mark.statistical
def test_random_network_picks_pairs_uniformly() -> None:
    """n = 5 has 10 pairs; 4,000 networks of 3 edges each: every pair's count is Binomial(4000, 3/10), all
    within the two-sided 1e-6 binomial interval (Bonferroni over the 10 pairs: false-failure rate 1e-5)."""
    from scipy import stats

    rng = np.random.default_rng(7)
    counts = np.zeros(25, dtype=np.int64)
    for _ in range(4000):
        edges = random_network(5, 1.2, rng)
        np.add.at(counts, edges[:, 0] * 5 + edges[:, 1], 1)
    pairs = counts[[i * 5 + j for i in range(5) for j in range(i + 1, 5)]]
    low, high = stats.binom.ppf([5e-7, 1 - 5e-7], 4000, 0.3)
    assert np.all((low <= pairs) & (pairs <= high)), pairs


def test_random_network_refuses_impossible_requests() -> None:
    with pytest.raises(ValueError, match="at least 2 nodes"):
        random_network(1, 0.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="impossible"):
        random_network(4, 4.0, np.random.default_rng(0))


def test_bundled_facebook_graph_is_snap_ego_facebook() -> None:
    """The figures of the SNAP page and of the seed (Sec. 6.2): 4039 nodes, 88234 edges, max degree 1045."""
    edges = facebook_edges()
    assert edges.shape == (88234, 2)
    assert int(edges.max()) + 1 == 4039
    assert int(np.bincount(edges.ravel()).max()) == 1045


def test_repro_bdp_quick_writes_figures_and_checks_the_claims(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["repro", "bdp", "--quick", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert (tmp_path / "fig4_synthetic.png").stat().st_size > 10_000
    assert (tmp_path / "fig5_facebook.png").stat().st_size > 10_000
    claims = (tmp_path / "claims.txt").read_text().splitlines()
    assert claims and all(line in printed for line in claims)
    assert status == (0 if all(line.startswith("[ok]") for line in claims) else 1)
    assert any("max-degree node" in line for line in claims)
