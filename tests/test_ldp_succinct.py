"""Succinct histograms (Bassily and Smith 2015): an eps-LDP audit of the client (the half it reports in,
the sampled coordinate and its bit), a negative control, the Hamming (7,4) code, the coordinate sums against
their expectation, recovery of the keys above the stated threshold, the wire format and bad inputs.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from kakeibo import ldp
from kakeibo.audit import audit, value_event
from kakeibo.ldp._hash import HashFamily
from kakeibo.ldp.succinct import SuccinctHistogram, codeword_bits, hamming_decode, hamming_encode

TRIALS = 1_000_000
AUDIT_ALPHA = 1e-6
Z = 5.0


def view(protocol: SuccinctHistogram) -> Any:
    """``n`` reports of one key, each one integer: ``2 coordinate + bit`` for the sketching half, then the
    Hashtogram half's ``repetition * columns + column`` after all of those."""
    sketch_outcomes = 2 * protocol.coordinates
    columns = protocol.count_oracle.oracle.columns

    def sample(value: int, n: int, rng: np.random.Generator) -> np.ndarray:
        sketch, counted = protocol.randomize(np.full(n, value), rng=rng)
        first = 2 * sketch["coordinate"].astype(np.int64) + sketch["bit"]
        second = sketch_outcomes + counted["repetition"].astype(np.int64) * columns + counted["column"]
        return np.concatenate([first, second])

    return sample


def same_block_pair(protocol: SuccinctHistogram) -> tuple[int, int]:
    """Two 4-bit keys in the same block (so their codewords meet in one block and differ there)."""
    family = HashFamily(seed=0, count=1, buckets=2)
    blocks = [family.hash_one(0, v) for v in range(16)]
    first = 1
    return first, next(v for v in range(2, 16) if blocks[v] == blocks[first])


def run_audit(protocol: SuccinctHistogram, trials: int, seed: int) -> Any:
    first, other = same_block_pair(protocol)
    outcomes = 2 * protocol.coordinates + protocol.count_oracle.oracle.columns
    return audit(
        view(protocol),
        first,
        other,
        trials=trials,
        alpha=AUDIT_ALPHA,
        events=[value_event(code) for code in range(outcomes)],
        rng=np.random.default_rng(seed),
    )


@pytest.mark.statistical
def test_a_report_is_epsilon_ldp_and_tight() -> None:
    """Four-bit keys (one Hamming block, L = 7), two hash blocks: 28 sketch outcomes and 4 Hashtogram ones.
    Not refuted at epsilon = 1 (false failure <= 1e-6). A coordinate of the shared block where the two
    codewords differ has likelihood ratio ``p / (1 - p) = e`` (probabilities 0.026 and 0.0096 per report),
    so the estimate comes within 0.15 of 1."""
    protocol = SuccinctHistogram(epsilon=1, bits=4, k=1, blocks=2, count_buckets=2, repetitions=1)
    result = run_audit(protocol, TRIALS, 53)
    assert not result.refutes(1.0), str(result)
    assert max(e.epsilon_estimate for e in result.events) > 0.85, str(result)


def test_the_audit_refutes_a_client_that_keeps_its_bit_too_often() -> None:
    """Broken: the own-block bit is kept with probability 15/16 (ln 15 = 2.7, not 1)."""
    protocol = SuccinctHistogram(epsilon=1, bits=4, k=1, blocks=2, count_buckets=2, repetitions=1)
    protocol._p = Fraction(15, 16)
    assert run_audit(protocol, 200_000, 59).refutes(1.0)


def test_the_keep_probability_is_dyadic_and_at_most_e_eps_over_e_eps_plus_one() -> None:
    for epsilon in (0.5, 1.0, 4.0):
        protocol = SuccinctHistogram(epsilon=epsilon, bits=8, k=1)
        p = Fraction(protocol.p)
        assert p.denominator & (p.denominator - 1) == 0
        assert protocol.p <= math.exp(epsilon) / (math.exp(epsilon) + 1)
        assert protocol.p > math.exp(epsilon) / (math.exp(epsilon) + 1) - 1e-4


# --- the code -----------------------------------------------------------------------------------------------


def test_hamming_corrects_every_single_error_per_block() -> None:
    keys = np.arange(16)
    words = hamming_encode(keys, 4)
    assert np.array_equal(hamming_decode(words), keys)
    for position in range(7):
        broken = words.copy()
        broken[:, position] ^= 1
        assert np.array_equal(hamming_decode(broken), keys)
    # Distinct keys have codewords at Hamming distance >= 3 (the code's distance).
    distance = (words[:, None, :] != words[None, :, :]).sum(axis=2)
    assert distance[~np.eye(16, dtype=bool)].min() == 3
    rng = np.random.default_rng(61)
    wide = rng.integers(0, 1 << 30, 1000)
    coded = hamming_encode(wide, 30)
    assert coded.shape == (1000, 56) and np.array_equal(hamming_decode(coded), wide)
    flips = rng.integers(0, 7, (1000, 8)) + 7 * np.arange(8)  # one error in every block
    coded[np.arange(1000)[:, None], flips] ^= 1
    assert np.array_equal(hamming_decode(coded), wide)


# --- the sketch ---------------------------------------------------------------------------------------------


@pytest.mark.statistical
def test_coordinate_sums_have_the_expected_mean() -> None:
    """300 runs over 6,000 clients of 8-bit keys in 4 blocks: the mean over runs of each coordinate's sum
    of ``2y - 1`` is within 5 standard errors of ``(1/2) (1 / KL) (2p - 1) sum over the block's clients of
    (2 c_l - 1)`` (half the clients sketch; Bonferroni over 56 coordinates: false failure 3e-5)."""
    protocol = SuccinctHistogram(epsilon=1, bits=8, k=2, blocks=4, count_buckets=16, repetitions=2)
    rng = np.random.default_rng(67)
    values = rng.choice([3, 200, 77, 145], size=6000, p=[0.4, 0.3, 0.2, 0.1])
    coordinates, length = protocol.coordinates, protocol.code_length
    blocks = HashFamily(seed=0, count=1, buckets=4).hash(
        np.zeros(6000, dtype=np.int64), values.astype(np.uint64)
    )
    signed = 2 * hamming_encode(values, 8).astype(np.float64) - 1
    expected = np.zeros(coordinates)
    for b in range(4):
        expected[b * length : (b + 1) * length] = signed[blocks == b].sum(axis=0)
    expected *= 0.5 * (2 * protocol.p - 1) / coordinates
    sums = []
    for _ in range(300):
        sketch = protocol.randomize(values, rng=rng)[0]
        signs = 2 * sketch["bit"].astype(np.float64) - 1
        sums.append(np.bincount(sketch["coordinate"].astype(np.intp), weights=signs, minlength=coordinates))
    runs = np.array(sums)
    error = (runs.mean(axis=0) - expected) / (runs.std(axis=0, ddof=1) / math.sqrt(300))
    assert np.all(np.abs(error) < Z), error


def test_the_keys_above_the_threshold_are_found() -> None:
    """3 x 10^5 clients of 16-bit keys in 4 blocks, epsilon 4: three heavy keys, each alone (among the heavy
    keys) in its block, with counts above the bit threshold at beta = 0.01, are found, each count within
    the Hashtogram bound; a light key in the fourth block is not required."""
    rng = np.random.default_rng(71)
    n = 300_000
    family = HashFamily(seed=0, count=1, buckets=4)
    pool = rng.permutation(1 << 16)
    heavy = np.array([next(int(v) for v in pool if family.hash_one(0, int(v)) == b) for b in range(4)])
    counts = (np.array([0.3, 0.2, 0.15, 0.001]) * n).astype(np.int64)
    values = np.concatenate([np.repeat(heavy, counts), rng.integers(0, 1 << 16, n - counts.sum())])
    protocol = SuccinctHistogram(epsilon=4, bits=16, k=4, blocks=4)
    found = protocol.estimate(protocol.randomize(rng.permutation(values), rng=rng))
    strong = heavy[counts > protocol.bit_threshold(n, 0.01)]
    assert strong.tolist() == heavy[:3].tolist(), (counts, protocol.bit_threshold(n, 0.01))
    assert set(strong.tolist()) <= set(found.values.tolist()), (found.values, strong)
    for key, count in zip(heavy[:3], counts[:3], strict=True):
        index = found.values.tolist().index(key)
        assert abs(found.counts[index] - count) < found.bound
    assert found.privacy_loss == protocol.privacy_loss and found.n == n


# --- wire format and bad inputs -----------------------------------------------------------------------------


def test_the_server_refuses_what_no_client_sends() -> None:
    protocol = SuccinctHistogram(epsilon=1, bits=8, k=1, blocks=2)
    sketch, counted = protocol.randomize(np.arange(300) % 256, rng=np.random.default_rng(0))
    assert ldp.Reports.from_bytes(sketch.to_bytes()) == sketch
    assert protocol.report_bits == (protocol.coordinates - 1).bit_length() + 1
    for arrays, message in (
        ({"coordinate": sketch["coordinate"] + protocol.coordinates, "bit": sketch["bit"]}, "outside 0..27"),
        ({"coordinate": sketch["coordinate"], "bit": sketch["bit"] + 2}, r"outside 0\.\.1"),
    ):
        forged = ldp.Reports("SuccinctHistogram", sketch.params, arrays)
        with pytest.raises(ValueError, match=message):
            protocol.estimate([forged, counted])
    with pytest.raises(ValueError, match=r"groups \[1\] have no reports"):
        protocol.estimate([sketch])
    with pytest.raises(ValueError, match="other parameters"):
        SuccinctHistogram(epsilon=2, bits=8, k=1, blocks=2).estimate([sketch, counted])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bits": 0}, r"bits must lie in 1\.\.40"),
        ({"k": 0}, "k must lie"),
        ({"blocks": 0}, "blocks must lie"),
        ({"count_buckets": 3}, "power of two"),
    ],
)
def test_bad_parameters_are_refused(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"epsilon": 1, "bits": 8, "k": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        SuccinctHistogram(**arguments)


def test_a_client_computes_the_same_bit_as_the_whole_codeword() -> None:
    rng = np.random.default_rng(181)
    keys = rng.integers(0, 1 << 30, 2000)
    positions = rng.integers(0, 56, 2000)
    assert np.array_equal(
        codeword_bits(keys, positions), hamming_encode(keys, 30)[np.arange(2000), positions]
    )
