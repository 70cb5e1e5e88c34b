"""PrivateExpanderSketch (Bun, Nelson and Stemmer 2018): an eps-LDP audit of the client (the group and the
Hadamard column), a negative control, the Reed-Solomon code and the graph, the threshold's false-positive
control, recovery of the keys above the stated detection threshold, the wire format and bad inputs.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from kakeibo.audit import audit, value_event
from kakeibo.ldp import Reports
from kakeibo.ldp._hash import HashFamily
from kakeibo.ldp.expander_sketch import PrivateExpanderSketch, circulant_edges
from test_ldp_hashtogram import grouped_outcomes, grouped_view

TRIALS = 1_000_000
AUDIT_ALPHA = 1e-6


def tiny() -> PrivateExpanderSketch:
    """Four-bit keys in two 2-bit symbols (P = 5), four chunks on K4 (degree 3), one bucket: 40 items per
    group (64 Hadamard columns); the Hashtogram half has one repetition over two buckets (4 columns)."""
    return PrivateExpanderSketch(
        epsilon=1, bits=4, k=1, buckets=1, symbol_bits=2, count_buckets=2, repetitions=1
    )


def run_audit(sketch: PrivateExpanderSketch, trials: int, seed: int) -> Any:
    columns = sketch._oracle.columns
    return audit(
        grouped_view(sketch, columns),
        1,
        2,
        trials=trials,
        alpha=AUDIT_ALPHA,
        events=[value_event(code) for code in range(grouped_outcomes(sketch, columns))],
        rng=np.random.default_rng(seed),
    )


@pytest.mark.statistical
def test_a_report_is_epsilon_ldp_and_tight() -> None:
    """Keys 1 and 2 (different chunks in every group): every (group, column) outcome is an event; not
    refuted at epsilon = 1 (false failure <= 1e-6). A column on the client's side of the Hadamard split in a
    chunk group has ratio ``e`` (probabilities near 0.0029 and 0.0011 per report, about 2,900 and 1,100
    hits), so the estimate comes within 0.2 of 1."""
    result = run_audit(tiny(), TRIALS, 127)
    assert not result.refutes(1.0), str(result)
    assert max(e.epsilon_estimate for e in result.events) > 0.8, str(result)


def test_the_audit_refutes_a_revealing_chunk_report() -> None:
    """Broken: the chunk groups' Hadamard response keeps the client's side with probability 31/32."""
    sketch = tiny()
    sketch._oracle._p = Fraction(31, 32)
    assert run_audit(sketch, 300_000, 131).refutes(1.0)


# --- the code and the graph ---------------------------------------------------------------------------------


def test_any_d_coordinates_decode_the_key() -> None:
    """Reed-Solomon over GF(257): every 4 of the 8 coordinates interpolate back to the key's digits."""
    sketch = PrivateExpanderSketch(epsilon=1, bits=32, k=1)
    assert (sketch.data_symbols, sketch.chunks, sketch.prime) == (4, 8, 257)
    keys = np.random.default_rng(137).integers(0, 1 << 32, 20)
    words = sketch.codewords(keys)
    for key, word in zip(keys.tolist(), words, strict=True):
        digits = [(key >> (8 * i)) & 255 for i in range(4)]
        for chosen in itertools.combinations(range(8), 4):
            assert sketch._interpolate([(m + 1, int(word[m])) for m in chosen]) == digits


def test_the_circulant_is_four_regular_and_survives_losing_a_vertex() -> None:
    for m in range(5, 17):
        edges = circulant_edges(m)
        degrees = np.bincount(np.array(edges).ravel(), minlength=m)
        assert np.all(degrees == 4), (m, degrees)
        for lost in range(m):
            kept = [(a, b) for a, b in edges if lost not in (a, b)]
            reached, frontier = {(lost + 1) % m}, [(lost + 1) % m]
            while frontier:
                v = frontier.pop()
                for a, b in kept:
                    for x, y in ((a, b), (b, a)):
                        if x == v and y not in reached:
                            reached.add(y)
                            frontier.append(y)
            assert len(reached) == m - 1, (m, lost)


def test_chunks_of_one_key_agree_on_their_shared_edge_hashes() -> None:
    """For every edge {m, m'} the hash bit chunk m carries for m' equals the one chunk m' carries for m."""
    sketch = PrivateExpanderSketch(epsilon=1, bits=32, k=1)
    keys = np.random.default_rng(139).integers(0, 1 << 32, 50)
    links = {m: sketch.chunk_items(keys, m) % (1 << (sketch._link_bits * 4)) for m in range(sketch.chunks)}
    for a, b in circulant_edges(sketch.chunks):
        for key_index in range(keys.size):
            one = sketch._link(int(links[a][key_index]), a, b)
            other = sketch._link(int(links[b][key_index]), b, a)
            assert one == other


# --- the server ---------------------------------------------------------------------------------------------


@pytest.mark.statistical
def test_keys_nobody_holds_are_never_candidates() -> None:
    """20 seeded runs of 50,000 clients holding uniformly random 24-bit keys (none held by more than a
    handful): each run keeps a spurious chunk with probability at most 5% (the threshold's union bound),
    so at most 6 runs keep any (the binomial(20, 0.05) tail at 7 is 3.4e-5); a decoded candidate needs 3
    chunks that agree on their code and edge hashes, so none appears."""
    sketch = PrivateExpanderSketch(epsilon=2, bits=24, k=5, buckets=16)
    rng = np.random.default_rng(149)
    runs_with_chunks = 0
    for _ in range(20):
        batches = sketch.randomize(rng.integers(0, 1 << 24, 50_000), rng=rng)
        groups = sketch._collect(batches)
        runs_with_chunks += any(sketch._kept(groups[m])[0].size for m in range(sketch.chunks))
        assert sketch.candidates(batches).size == 0
    assert runs_with_chunks <= 6


def test_the_keys_above_the_detection_threshold_are_found() -> None:
    """4 x 10^5 clients of 24-bit keys, epsilon 4, 32 buckets: three heavy keys in distinct buckets, with
    counts above the detection threshold at beta = 0.01, are found with counts within the Hashtogram
    bound; a key far below it is not required."""
    rng = np.random.default_rng(151)
    n = 400_000
    sketch = PrivateExpanderSketch(epsilon=4, bits=24, k=4, buckets=32)
    family = HashFamily(seed=0, count=1, buckets=32)
    pool = rng.permutation(1 << 24)[:1000]
    heavy = np.array([next(int(v) for v in pool if family.hash_one(0, int(v)) == b) for b in range(4)])
    counts = (np.array([0.3, 0.2, 0.15, 0.001]) * n).astype(np.int64)
    values = np.concatenate([np.repeat(heavy, counts), rng.integers(0, 1 << 24, n - counts.sum())])
    threshold = sketch.detection_threshold(n, 0.01)
    assert (counts[:3] > threshold).all() and counts[3] < threshold, (counts, threshold)
    found = sketch.estimate(sketch.randomize(rng.permutation(values), rng=rng))
    assert set(heavy[:3].tolist()) <= set(found.values.tolist()), (found.values, heavy)
    for key, count in zip(heavy[:3], counts[:3], strict=True):
        assert abs(found.counts[found.values.tolist().index(key)] - count) < found.bound
    assert found.n == n and found.privacy_loss == sketch.privacy_loss


# --- wire format and bad inputs -----------------------------------------------------------------------------


def test_the_server_refuses_what_no_client_sends() -> None:
    sketch = PrivateExpanderSketch(epsilon=1, bits=16, k=1, buckets=4)
    batches = sketch.randomize(np.arange(500) % 97, rng=np.random.default_rng(0))
    assert Reports.from_bytes(batches[0].to_bytes()) == batches[0]
    forged = Reports(
        sketch.protocol, batches[0].params, {"column": batches[0]["column"].astype(np.int64) + (1 << 40)}
    )
    with pytest.raises(ValueError, match="outside"):
        sketch.estimate([forged, *batches[1:]])
    with pytest.raises(ValueError, match=r"have no reports"):
        sketch.estimate(batches[:-1])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"symbol_bits": 1}, r"symbol_bits must lie in 2\.\.16"),
        ({"chunks": 300}, r"chunks must lie in 4\.\.256"),
        ({"chunks": 3}, r"chunks must lie in 4\.\.256"),
        ({"buckets": 1 << 12}, "items per group exceed"),
        ({"link_bits": 0}, r"link_bits must lie in 1\.\.8"),
        ({"false_positive_rate": 0}, "false_positive_rate"),
    ],
)
def test_bad_parameters_are_refused(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"epsilon": 1, "bits": 32, "k": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        PrivateExpanderSketch(**arguments)
