"""One-time RAPPOR (Erlingsson, Pihur and Korolova 2014, Sec. 2; seed 003) and the removal relation of both
RAPPOR variants: privacy audits, calibration of ``p*``, ``q*`` and the losses, the memoised client, the
bit-count estimator against its stated variance, decoding, and what the server refuses.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy.special import ndtri

from kakeibo import ldp
from kakeibo.audit import audit
from kakeibo.audit._events import value_event
from kakeibo.ldp.rappor import RAPPOR, OneTimeRAPPOR, RapporClient
from kakeibo.noise import resolve_source
from kakeibo.privacy import PureDP
from test_ldp_rappor import (
    AUDIT_ALPHA,
    TRIALS,
    Z_BONFERRONI,
    audit_pair,
    bloom_positions,
    view,
    zipf_strings,
)


def one_time_sampler(rappor: OneTimeRAPPOR, positions: np.ndarray) -> Any:
    """``n`` one-time reports of one value in cohort 0, reduced to the relevant bits."""

    def sample(value: int, n: int, rng: np.random.Generator) -> np.ndarray:
        reports = rappor.randomize(np.full(n, value), rng=rng, cohorts=np.zeros(n, dtype=np.int64))
        return view(reports["bits"], positions)

    return sample


# --- privacy audits -----------------------------------------------------------------------------------------


@pytest.mark.statistical
def test_one_time_report_is_epsilon_infinity_ldp_and_tight() -> None:
    """A one-time report is ``B'`` itself: not refuted at ``epsilon_infinity = 4 ln 3`` (false failure <=
    1e-6), and the outcome "the first value's two bits set, the other's clear" has likelihood ratio exactly
    ``3^4``, probabilities 0.32 and 1/256 (about 3,900 hits), so its estimate lies within 0.1 of the claim."""
    rappor = OneTimeRAPPOR()
    result = audit_pair(rappor, one_time_sampler, 20261127)
    assert not result.refutes(rappor.epsilon), str(result)
    assert rappor.epsilon == rappor.epsilon_infinity
    best = max(e.epsilon_estimate for e in result.events)
    assert best > rappor.epsilon - 0.1, str(result)


class ThinOneTimeRAPPOR(OneTimeRAPPOR):
    """Broken: flips each bit with probability 1/8, not the f/2 = 1/4 its loss is computed from (4 ln 7 =
    7.8, not 4 ln 3 = 4.4)."""

    def __init__(self) -> None:
        super().__init__()
        self._half_f = Fraction(1, 8)


def test_audit_refutes_a_one_time_report_with_thin_flips() -> None:
    broken = ThinOneTimeRAPPOR()
    result = audit_pair(broken, one_time_sampler, 29)
    assert result.refutes(broken.epsilon), str(result)


def removal_sampler(rappor: RAPPOR | OneTimeRAPPOR, positions: np.ndarray) -> Any:
    """``n`` reports in cohort 0 of the value ``value`` or, for ``value = None``, of a client holding no
    value (the empty Bloom filter), reduced to the value's ``h`` bits."""

    def sample(value: int | None, n: int, rng: np.random.Generator) -> np.ndarray:
        source = resolve_source(rng)
        if value is None:
            bloom = np.zeros((n, rappor._words_per_row), dtype=np.uint64)
        else:
            bloom = rappor._bloom_words(np.full(n, value, dtype=np.uint64), np.zeros(n, dtype=np.int64))
        words = rappor._report_words(rappor._permanent(bloom, source), source)
        return view(rappor._pack(words), positions)

    return sample


@pytest.mark.statistical
@pytest.mark.parametrize("protocol", [OneTimeRAPPOR, RAPPOR])
def test_removal_loss_holds_and_is_tight(protocol: type[RAPPOR | OneTimeRAPPOR]) -> None:
    """A value against no value: only its ``h = 2`` bits differ. Not refuted at ``removal_loss`` (false
    failure <= 1e-6), and within 0.1 of it: the tight outcome has probability at least 1/16 under one input
    (both bits at their likelier setting), so about 60,000 hits, a standard error near 0.02."""
    rappor = protocol()
    value = next(v for v in range(1000) if bloom_positions(rappor, v, 0).size == rappor.h)
    positions = bloom_positions(rappor, value, 0)
    result = audit(
        removal_sampler(rappor, positions),
        value,
        None,
        trials=TRIALS,
        alpha=AUDIT_ALPHA,
        events=[value_event(code) for code in range(1 << positions.size)],
        rng=np.random.default_rng(31),
    )
    removal = float(rappor.removal_loss.epsilon)
    assert not result.refutes(removal), str(result)
    assert max(e.epsilon_estimate for e in result.events) > removal - 0.1, str(result)
    assert removal < rappor.epsilon


# --- calibration --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("h", "f"), [(2, Fraction(1, 2)), (1, Fraction(1, 4)), (4, Fraction(3, 4))])
def test_one_time_constants_and_losses(h: int, f: Fraction) -> None:
    """``p* = f/2``, ``q* = 1 - f/2``; one report costs ``2h ln((1 - f/2)/(f/2))``, the removal relation half
    of it; the parameters carry no IRR coins."""
    rappor = OneTimeRAPPOR(h=h, f=f)
    assert (Fraction(rappor.p_star), Fraction(rappor.q_star)) == (f / 2, 1 - f / 2)
    loss = 2 * h * math.log((1 - f / 2) / (f / 2))
    assert abs(rappor.epsilon - loss) < 1e-12 and rappor.epsilon >= loss - 1e-15
    assert isinstance(rappor.privacy_loss, PureDP)
    assert rappor.privacy_loss == rappor.longitudinal_loss
    assert abs(float(rappor.removal_loss.epsilon) - loss / 2) < 1e-12
    assert set(rappor.params) == {"k", "h", "m", "f", "hash_seed"} and rappor.params["f"] == str(f)


def test_removal_loss_of_rappor_is_h_ln_of_the_larger_bit_ratio() -> None:
    """Paper parameters: ``p* = 9/16``, ``q* = 11/16``; ratios ``q*/p* = 11/9`` and ``(1 - p*)/(1 - q*) =
    7/5``, so the removal loss is ``2 ln(7/5) = 0.673``, above half of ``epsilon_one = 1.07``."""
    rappor = RAPPOR()
    assert (Fraction(rappor.p_star), Fraction(rappor.q_star)) == (Fraction(9, 16), Fraction(11, 16))
    removal = float(rappor.removal_loss.epsilon)
    assert abs(removal - 2 * math.log(Fraction(7, 5))) < 1e-12
    assert rappor.epsilon / 2 < removal < rappor.epsilon


def test_f_too_close_to_one_is_refused() -> None:
    for protocol in (RAPPOR, OneTimeRAPPOR):
        with pytest.raises(ValueError, match="too close to 1"):
            protocol(f=1 - Fraction(1, 2**40))
    with pytest.raises(ValueError, match="above the largest supported 64"):
        OneTimeRAPPOR(h=64, f=2**-20)


# --- the memoised client ------------------------------------------------------------------------------------


def test_one_time_client_sends_its_memoised_filter_every_time() -> None:
    """The same value gives byte-identical reports (so repeating it reveals nothing new), equal to the
    client's permanent response; another value gives another filter."""
    rappor = OneTimeRAPPOR(k=32, m=4)
    client = RapporClient(rappor, bytes(range(32)))
    first = client.report(["apple", "pear", "apple"], rng=np.random.default_rng(1))
    again = client.report(["apple"], rng=np.random.default_rng(2))
    assert first.protocol == "RAPPOR-1" and first["cohort"].tolist() == [client.cohort] * 3
    assert np.array_equal(first["bits"][0], first["bits"][2])
    assert np.array_equal(first["bits"][0], again["bits"][0])
    assert np.array_equal(first["bits"][:1], client.permanent_response(["apple"]))
    assert not np.array_equal(first["bits"][0], first["bits"][1])


# --- the estimator and decoding -----------------------------------------------------------------------------


def test_one_time_bit_variance_does_not_depend_on_the_counts() -> None:
    """``(t q*(1 - q*) + (N - t) p*(1 - p*)) / (q* - p*)^2`` with ``p* = f/2 = 1/4``, ``q* = 3/4``:
    ``N (1/4)(3/4) / (1/2)^2`` for every bit count ``t`` (test_ldp_rappor's unbiasedness test runs both
    variants)."""
    rappor = OneTimeRAPPOR(k=32, h=2, m=4)
    sizes = np.array([1000, 900, 1100, 1000])
    counts = np.outer(sizes, np.linspace(0, 1, 32)).round()
    assert np.allclose(
        rappor.bit_count_variance(sizes, counts), (sizes * (1 / 4) * (3 / 4) / (1 / 2) ** 2)[:, None]
    )


@pytest.mark.statistical
def test_one_time_decoding_finds_the_heavy_candidates_and_no_decoy() -> None:
    """2 x 10^5 clients, default parameters: no decoy is detected (Bonferroni, family-wise 1e-3), the five
    largest candidates are, and each detected count is within 5 standard errors of the truth."""
    rappor, n = OneTimeRAPPOR(), 200_000
    names, counts, values = zipf_strings(n, seed=8)
    decoys = [f"decoy-{i}.example" for i in range(20)]
    result = rappor.estimate(
        rappor.randomize(values, rng=np.random.default_rng(9)), names + decoys, beta=1e-3
    )
    assert not result.detected[100:].any()
    held = result.detected[:100]
    assert held[:5].all(), np.flatnonzero(held)
    error = (result.counts[:100] - counts)[held] / result.std_errors[:100][held]
    assert np.all(np.abs(error) < Z_BONFERRONI), error
    assert result.privacy_loss == rappor.privacy_loss and float(ndtri(result.threshold)) < 0


def test_the_two_variants_refuse_each_others_reports() -> None:
    one_time, two_step = OneTimeRAPPOR(k=16, m=2), RAPPOR(k=16, m=2)
    with pytest.raises(ValueError, match="made by RAPPOR-1, not RAPPOR"):
        two_step.estimate(one_time.randomize([1, 2], rng=np.random.default_rng(0)))
    with pytest.raises(ValueError, match="made by RAPPOR, not RAPPOR-1"):
        one_time.estimate(two_step.randomize([1, 2], rng=np.random.default_rng(0)), [1, 2])
    reports = one_time.randomize([1, 2, 3], rng=np.random.default_rng(0))
    assert ldp.Reports.from_bytes(reports.to_bytes()) == reports
    bad = ldp.Reports(
        "RAPPOR-1", one_time.params, {"bits": reports["bits"] | 0, "cohort": reports["cohort"] + 2}
    )
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        one_time.estimate(bad)
    assert repr(one_time) == "OneTimeRAPPOR(k=16, h=2, m=2, f=0.5, hash_seed=0)"


# --- the removal relation for unary encodings ---------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_unary_encodings_lose_less_under_removal(epsilon: float) -> None:
    """SUE: ``eps/2``; OUE: ``ln((e^eps + 1)/2)``; both below the replacement loss, computed from the exact
    coins (within 1e-3 of the ideal values, which the coins' rounding moves)."""
    sue, oue = ldp.SUE(epsilon=epsilon, domain_size=8), ldp.OUE(epsilon=epsilon, domain_size=8)
    assert abs(float(sue.removal_loss.epsilon) - epsilon / 2) < 1e-3
    assert abs(float(oue.removal_loss.epsilon) - math.log((math.exp(epsilon) + 1) / 2)) < 1e-3
    for oracle in (sue, oue):
        p, q = Fraction(oracle.p_star), Fraction(oracle.q_star)
        exact = math.log(max(p / q, (1 - q) / (1 - p)))
        assert abs(float(oracle.removal_loss.epsilon) - exact) < 1e-12  # a rational bound within 1e-39 of it
        assert oracle.removal_loss.epsilon < oracle.privacy_loss.epsilon


@pytest.mark.statistical
def test_oue_removal_loss_holds_and_is_tight() -> None:
    """The bit of value 0 in OUE reports of 0 (Bernoulli(p)) and of 1 (Bernoulli(q): exactly its law when the
    client holds no value): not refuted at the removal loss (false failure <= 1e-6), and within 0.05 of it
    (the tight outcome, the bit set, has probabilities 1/2 and 0.27 at epsilon 1)."""
    oue = ldp.OUE(epsilon=1, domain_size=4)

    def sample(value: int, n: int, rng: np.random.Generator) -> np.ndarray:
        bits = oue.randomize(np.full(n, value), rng=rng)["bits"]
        return np.asarray(bits[:, 0] & 1, dtype=np.int64)

    result = audit(
        sample,
        0,
        1,
        trials=TRIALS,
        alpha=AUDIT_ALPHA,
        events=[value_event(0), value_event(1)],
        rng=np.random.default_rng(37),
    )
    removal = float(oue.removal_loss.epsilon)
    assert not result.refutes(removal), str(result)
    assert max(e.epsilon_estimate for e in result.events) > removal - 0.05, str(result)
