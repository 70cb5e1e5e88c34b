"""The tight accountants (kakeibo.accounting.curves, .pld) and the ledger's rdp and pld books.

Neighbour relation: add/remove one record (one person's records when the caller bounds a person's
contribution), except fixed-size subsampling, which is replace-one. Sensitivities are the curves' own:
each noise multiplier is relative to the L2 (Gaussian) or L1 (Laplace) sensitivity.

What must hold: Renyi and PLD composition of Gaussians equal their closed forms; a PLD never reports a
smaller epsilon (or delta) than the exact one where the exact one is known (Gaussians, Laplace, randomized
response); every Renyi value is an upper bound on the divergence computed by quadrature; the subsampled
Gaussian matches Google's ``dp-accounting`` to 1% and never goes below it; the books persist, verify and
refuse what they cannot compose, with a sentence.
"""

from __future__ import annotations

import math
import sqlite3
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

from kakeibo import private
from kakeibo.accounting import BudgetExceeded, Ledger
from kakeibo.accounting.composition import PLDComposition, RDPComposition, resolve_policy
from kakeibo.accounting.curves import (
    Composed,
    Concentrated,
    EpsilonDelta,
    GaussianNoise,
    LaplaceNoise,
    MechanismLoss,
    SubsampledGaussian,
    curve_from_json,
)
from kakeibo.mechanisms import Gaussian
from kakeibo.privacy import DEFAULT_ORDERS, ZCDP, ApproxDP, PureDP, RDPCurve

INTERVAL = 1e-4


def gaussian_delta(mu: float, epsilon: float) -> float:
    """The exact delta(epsilon) of a Gaussian pair at distance mu (Balle and Wang 2018, Thm. 8)."""
    return float(
        stats.norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2)
    )


def converted(curve: object, delta: float) -> float:
    """The curve's Renyi divergences on the usual grid, converted once (no filter)."""
    values = tuple(float(v) for v in curve.rdp(DEFAULT_ORDERS))  # type: ignore[attr-defined]
    return float(RDPCurve(DEFAULT_ORDERS, values).to_approx(delta).epsilon)


def pld_epsilon(curve: object, delta: float) -> float:
    remove, add = curve.distributions(INTERVAL)  # type: ignore[attr-defined]
    return max(remove.epsilon(delta), add.epsilon(delta))


# -- closed forms ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sigma", "k"), [(1, 1), (2, 10), (Fraction(1, 2), 3), (7, 1000)])
def test_renyi_composition_of_gaussians_is_the_closed_form_exactly(sigma: Fraction, k: int) -> None:
    curve = Composed([(GaussianNoise(sigma), k)])
    assert curve.rdp(DEFAULT_ORDERS) == tuple(
        k * Fraction(a) / (2 * Fraction(sigma) ** 2) for a in DEFAULT_ORDERS
    )


@pytest.mark.parametrize(
    ("sigma", "k", "delta"), [(1, 1, 1e-5), (2, 16, 1e-6), (5, 100, 1e-5), (0.8, 3, 1e-3)]
)
def test_pld_composition_of_gaussians_is_the_closed_form_from_above(
    sigma: float, k: int, delta: float
) -> None:
    """k Gaussians of multiplier sigma are one of multiplier sigma / sqrt(k): the PLD's epsilon is never below
    the exact one, and within the grid's resolution above it."""
    mu = math.sqrt(k) / sigma
    low, high = 0.0, 100.0
    for _ in range(200):  # the exact epsilon by bisection on the closed form
        mid = (low + high) / 2
        low, high = (low, mid) if gaussian_delta(mu, mid) <= delta else (mid, high)
    exact = high
    found = pld_epsilon(Composed([(GaussianNoise(sigma), k)]), delta)
    assert exact <= found <= exact * (1 + 1e-4) + 1e-6


@pytest.mark.parametrize("b", [0.5, 1.0, 4.0])
def test_the_laplace_pld_bounds_the_exact_delta_from_above(b: float) -> None:
    """Laplace's exact curve is delta(eps) = 1 - e^((eps - 1/b) / 2) for 0 <= eps <= 1/b."""
    remove, add = LaplaceNoise(b).distributions(INTERVAL)
    for epsilon in np.linspace(0, 1 / b, 23)[:-1]:
        exact = -math.expm1((epsilon - 1 / b) / 2)
        for table in (remove, add):
            assert exact <= table.delta(float(epsilon)) <= exact + 1e-4


@pytest.mark.parametrize(("epsilon", "k"), [(0.1, 50), (0.5, 20), (1.0, 7)])
def test_randomized_response_composed_is_never_below_its_exact_curve(epsilon: float, k: int) -> None:
    """k pure epsilon-DP charges: the exact curve is that of k randomized responses (Kairouz, Oh and
    Viswanath 2015): delta(e') = sum over l of C(k, l) p^(k-l) (1-p)^l (1 - e^(e' - (k - 2l) eps))_+."""
    remove, _ = Composed([(EpsilonDelta(epsilon), k)]).distributions(INTERVAL)
    p = 1 / (1 + math.exp(-epsilon))
    for target in np.linspace(0, k * epsilon, 31)[:-1]:
        exact = sum(
            math.comb(k, j)
            * p ** (k - j)
            * (1 - p) ** j
            * max(0.0, -math.expm1(target - (k - 2 * j) * epsilon))
            for j in range(k + 1)
        )
        assert exact <= remove.delta(float(target)) <= exact + 1e-3


# -- every Renyi value bounds the divergence computed by quadrature ---------------------------------------


def renyi_by_quadrature(log_p: object, log_q: object, alpha: float, low: float, high: float) -> float:
    """D_alpha(P || Q) = ln(int p^alpha q^(1 - alpha)) / (alpha - 1), integrated numerically from the log
    densities (the integrand in log space, so that no tail underflows to 0 * inf)."""

    def integrand(x: float) -> float:
        return math.exp(alpha * log_p(x) + (1 - alpha) * log_q(x))  # type: ignore[operator]

    value, _ = integrate.quad(integrand, low, high, limit=1000, points=sorted({0.0, 1.0, alpha}), epsabs=0)
    return math.log(value) / (alpha - 1)


@pytest.mark.parametrize("alpha", [1.5, 2.0, 3.0, 8.0, 20.0])
@pytest.mark.parametrize(("q", "sigma"), [(0.01, 1.0), (0.1, 2.0), (0.5, 0.8)])
def test_the_subsampled_gaussian_curve_bounds_both_directions(alpha: float, q: float, sigma: float) -> None:
    normal, shifted = stats.norm(0, sigma).logpdf, stats.norm(1, sigma).logpdf

    def mixture(x: float) -> float:
        return float(np.logaddexp(math.log1p(-q) + normal(x), math.log(q) + shifted(x)))

    stated = float(SubsampledGaussian(sigma, q).rdp([alpha])[0])
    low, high = -15 * sigma - alpha, alpha + 15 * sigma  # the integrand peaks near x = alpha
    for p, other in ((mixture, normal), (normal, mixture)):
        assert renyi_by_quadrature(p, other, alpha, low, high) <= stated * (1 + 1e-9)
    if float(alpha).is_integer():  # the integer orders are the exact divergence (MTZ 2019)
        assert stated == pytest.approx(renyi_by_quadrature(mixture, normal, alpha, low, high), rel=1e-7)


@pytest.mark.parametrize("alpha", [1.25, 2.0, 6.0, 64.0])
@pytest.mark.parametrize("b", [0.3, 1.0, 5.0])
def test_the_laplace_curve_is_the_divergence(alpha: float, b: float) -> None:
    stated = float(LaplaceNoise(b).rdp([alpha])[0])
    true = renyi_by_quadrature(stats.laplace(0, b).logpdf, stats.laplace(1, b).logpdf, alpha, -60 * b, 60 * b)
    assert true <= stated <= true * (1 + 1e-6) + 1e-12


@pytest.mark.parametrize("epsilon", [0.01, 0.5, 2.0])
def test_pure_dp_is_accounted_as_randomized_response(epsilon: float) -> None:
    """Randomized response's divergence, below both epsilon and the zCDP bound alpha eps^2 / 2."""
    log_p, log_q = -math.log1p(math.exp(-epsilon)), -math.log1p(math.exp(epsilon))
    for alpha, value in zip(DEFAULT_ORDERS, EpsilonDelta(epsilon).rdp(DEFAULT_ORDERS), strict=True):
        terms = [alpha * log_p + (1 - alpha) * log_q, alpha * log_q + (1 - alpha) * log_p]
        exact = float(np.logaddexp(*terms)) / (alpha - 1)
        assert exact <= float(value) <= exact + 1e-12 + 1e-9 * exact
        assert value <= Fraction(epsilon) and float(value) <= alpha * epsilon**2 / 2 * (1 + 1e-9)


# -- against dp-accounting ------------------------------------------------------------------------------

dp_accounting = pytest.importorskip("dp_accounting")


def reference(event: object, *, pld: bool, replace_one: bool = False) -> float:
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    relation = dp_accounting.NeighboringRelation
    if pld:
        accountant = pld_privacy_accountant.PLDAccountant()
    else:
        accountant = rdp_privacy_accountant.RdpAccountant(
            neighboring_relation=relation.REPLACE_ONE if replace_one else relation.ADD_OR_REMOVE_ONE
        )
    accountant.compose(event)
    return float(accountant.get_epsilon(1e-5))


@pytest.mark.parametrize(("q", "sigma", "steps"), [(0.01, 1.0, 1000), (0.004, 1.1, 2500), (0.1, 2.0, 100)])
def test_the_subsampled_gaussian_matches_dp_accounting_to_one_percent(
    q: float, sigma: float, steps: int
) -> None:
    run = Composed([(SubsampledGaussian(sigma, q), steps)])
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    )
    for ours, theirs in (
        (pld_epsilon(run, 1e-5), reference(event, pld=True)),
        (converted(run, 1e-5), reference(event, pld=False)),
    ):
        assert theirs <= ours <= theirs * 1.01


def test_fixed_size_sampling_is_never_below_dp_accounting() -> None:
    run = Composed([(SubsampledGaussian(1, 0.01, "fixed"), 1000)])
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(10_000, 100, dp_accounting.GaussianDpEvent(1.0)), 1000
    )
    theirs = reference(event, pld=False, replace_one=True)
    assert theirs <= converted(run, 1e-5) <= theirs * 1.05


def test_a_mixed_laplace_and_gaussian_sequence_matches_dp_accounting() -> None:
    mix = Composed([(LaplaceNoise(10), 50), (GaussianNoise(5), 50)])
    event = dp_accounting.ComposedDpEvent(
        [
            dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(10.0), 50),
            dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(5.0), 50),
        ]
    )
    theirs_pld, theirs_rdp = reference(event, pld=True), reference(event, pld=False)
    assert theirs_pld <= pld_epsilon(mix, 1e-5) <= theirs_pld * 1.01
    assert theirs_rdp <= converted(mix, 1e-5) <= theirs_rdp * 1.01


# -- the books in the ledger ---------------------------------------------------------------------------

RUN = Composed([(SubsampledGaussian(1, 0.01), 1000)])


def test_a_training_run_is_one_entry_charged_its_accountant_loss(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.sqlite", budget=(4, 1e-5), composition="pld")
    loss = MechanismLoss.of(RUN, 1e-5)
    entry = ledger.charge(loss, label="dp-sgd")
    assert entry.loss == loss and ledger.entries()[0].loss == loss
    assert ledger.spent().epsilon == pytest.approx(float(loss.declared.epsilon), rel=1e-9)
    assert ledger.spent().epsilon >= loss.declared.epsilon  # the books round up too


@pytest.mark.parametrize("books", ["rdp", "pld"])
def test_a_restart_recomputes_the_same_total_from_the_chain(tmp_path: Path, books: str) -> None:
    path = tmp_path / "l.sqlite"
    ledger = Ledger(path, budget=(20, 1e-6), composition=books)
    charges = [
        MechanismLoss.of(RUN, 1e-6),
        PureDP(0.5),
        MechanismLoss.of(GaussianNoise(3), 1e-6),
        PureDP(0.25),
    ]
    for i, loss in enumerate(charges):
        ledger.charge(loss, label=f"q{i}", dataset="d" if i % 2 else None)
    spent, by_dataset = ledger.spent(), ledger.spent(dataset="d")
    ledger.close()
    reopened = Ledger(path)
    assert reopened.composition.config() == resolve_policy(reopened.composition.config()).config()
    assert (reopened.spent(), reopened.spent(dataset="d")) == (spent, by_dataset)
    assert [entry.loss for entry in reopened.entries()] == charges
    verification = reopened.verify()
    assert verification.ok, verification.problems
    assert Ledger(path, composition=books).spent() == spent  # naming the books again is fine


def test_the_mechanism_is_in_the_hash_chain(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    ledger = Ledger(path, budget=(20, 1e-6), composition="rdp")
    ledger.charge(MechanismLoss.of(GaussianNoise(3), 1e-6), label="q")
    ledger.close()
    with sqlite3.connect(path) as conn:  # a weaker mechanism, same declared loss: cheaper in the books
        conn.execute("""UPDATE entries SET mechanism = '{"name":"gaussian","noise_multiplier":"30/1"}'""")
    verification = Ledger(path).verify()
    assert not verification.ok and "entry 1 does not match its hash" in verification.problems[0]


def test_a_ledger_from_before_the_mechanism_column_opens_and_verifies(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    ledger = Ledger(path, budget=(3, 1e-5))
    ledger.charge(ApproxDP(1, 1e-6), label="q")
    ledger.close()
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE entries DROP COLUMN mechanism")
    reopened = Ledger(path)
    assert reopened.verify().ok
    reopened.charge(MechanismLoss(ApproxDP(1, 1e-6), GaussianNoise(5)), label="after")
    assert reopened.verify().ok and len(reopened.entries()) == 2


def test_sequential_books_count_a_mechanism_by_its_declared_loss() -> None:
    ledger = Ledger(":memory:", budget=(3, 1e-5))
    ledger.charge(MechanismLoss(ApproxDP(1, 1e-6), GaussianNoise(5)), label="q")
    assert ledger.spent() == ApproxDP(1, 1e-6)
    pure = Ledger(":memory:", budget=3)
    with pytest.raises(TypeError, match="cannot be counted against a pure epsilon-DP budget"):
        pure.charge(MechanismLoss(ApproxDP(1, 1e-6), GaussianNoise(5)), label="q")


def test_the_books_refuse_what_they_cannot_compose_with_a_sentence() -> None:
    rdp = Ledger(":memory:", budget=(3, 1e-5), composition="rdp")
    with pytest.raises(TypeError, match=r"has no Renyi curve .* account it with pld or sequential books"):
        rdp.charge(ApproxDP(1, 1e-7), label="q")
    pld = Ledger(":memory:", budget=(3, 1e-5), composition="pld")
    with pytest.raises(TypeError, match="has no privacy-loss distribution; account it with rdp books"):
        pld.charge(ZCDP(0.01), label="q")
    fixed = MechanismLoss(ApproxDP(1, 1e-7), SubsampledGaussian(1, 0.01, "fixed"))  # no PLD: its declared
    assert pld.composition.weights(fixed, ApproxDP) == pld.composition.weights(ApproxDP(1, 1e-7), ApproxDP)
    assert rdp.entries() == [] and pld.entries() == []
    rdp.charge(ZCDP(0.01), label="zcdp is a Renyi curve")
    pld.charge(ApproxDP(1, 1e-7), label="an (epsilon, delta) charge has a PLD")
    for books in ("rdp", "pld"):
        with pytest.raises(ValueError, match=r"need an \(epsilon, delta\) budget with delta > 0"):
            Ledger(":memory:", budget=3, composition=books)
    with pytest.raises(ValueError, match=r"has delta 1e-05 .*not 1e-06"):
        rdp.set_budget(ApproxDP(1, 1e-6), analyst="alice")


def test_rdp_books_are_a_filter_that_stops_at_the_budget() -> None:
    ledger = Ledger(":memory:", budget=(2, 1e-5), composition="rdp")
    step = MechanismLoss.of(GaussianNoise(10), 1e-5)
    admitted = 0
    with pytest.raises(BudgetExceeded, match="would exceed the global budget"):
        for _ in range(10_000):
            ledger.charge(step, label="step")
            admitted += 1
    filter_epsilon = float(ledger.spent().epsilon)
    assert filter_epsilon <= 2
    # the filter pays ln(n) / (alpha - 1) for adaptivity: it stops before a fixed plan converted once would
    once = converted(Composed([(GaussianNoise(10), admitted)]), 1e-5)
    assert once < filter_epsilon
    assert converted(Composed([(GaussianNoise(10), admitted + 1)]), 1e-5) > 0  # the refused one was real
    assert ledger.verify().ok


def test_pld_books_are_tighter_than_rdp_books_and_than_sequential() -> None:
    losses = [MechanismLoss.of(RUN, 1e-5)] * 2 + [PureDP(0.1)] * 10
    spent = {
        books: float(
            Ledger(":memory:", budget=(100, 1e-5), composition=books)
            .composition.compose(losses, ApproxDP)
            .epsilon
        )
        for books in ("rdp", "pld")
    }
    sequential = sum(float(loss.to_approx(1e-5).epsilon) for loss in losses)
    assert spent["pld"] < spent["rdp"] < sequential


def test_a_gaussian_release_charges_its_zcdp_curve_to_rdp_books() -> None:
    """kakeibo's Gaussian states rho = (sensitivity (1 + 2**-8))^2 / (2 sigma^2) next to its (epsilon, delta):
    rdp books compose that; sequential books count the (epsilon, delta)."""
    mechanism = Gaussian(sensitivity=2, epsilon=0.5, delta=1e-6)
    rho = Fraction(2 * (1 + 2**-8)) ** 2 / (2 * Fraction(mechanism.sigma) ** 2)
    books = Ledger(":memory:", budget=(10, 1e-6), composition="rdp")
    sequential = Ledger(":memory:", budget=(10, 1e-5))
    for ledger in (books, sequential):
        query = private(mechanism=mechanism, ledger=ledger)(lambda: 3.0)
        for _ in range(8):
            query(rng=np.random.default_rng(0))
    assert books.entries()[0].loss == MechanismLoss(ApproxDP(0.5, 1e-6), Concentrated(rho))
    assert books.spent() == books.composition.compose([ZCDP(8 * rho)], ApproxDP)
    assert sequential.spent() == ApproxDP(4, 8e-6)
    assert books.spent().epsilon < 4  # eight Gaussians compose below eight times epsilon


def test_curves_read_back_from_their_json() -> None:
    for curve in (
        RUN,
        EpsilonDelta(0.3, 1e-9),
        Concentrated(Fraction(1, 7)),
        GaussianNoise(Fraction(3, 2)),
        LaplaceNoise(2),
        SubsampledGaussian(1.1, 0.004, "fixed"),
    ):
        assert curve_from_json(curve.to_json()) == curve
    with pytest.raises(ValueError, match="unknown mechanism description"):
        curve_from_json({"name": "mystery"})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: GaussianNoise(0), "noise_multiplier must be positive"),
        (lambda: SubsampledGaussian(1, 1.5), "sampling_rate must lie in"),
        (lambda: SubsampledGaussian(1, 0.1, "shuffle"), 'sampling must be "poisson" or "fixed"'),
        (lambda: Composed([(GaussianNoise(1), 0)]), "positive whole number of times"),
        (lambda: PLDComposition(None, 1), "interval must lie in"),
        (lambda: RDPComposition(Fraction(1, 10)).compose([ApproxDP(1, 1e-3)], ApproxDP), "no Renyi curve"),
    ],
)
def test_bad_parameters_are_refused_with_a_sentence(make: object, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        make()  # type: ignore[operator]
