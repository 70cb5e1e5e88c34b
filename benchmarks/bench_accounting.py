"""Tight accounting: kakeibo's Renyi and PLD accountants and the ledger's books, next to Google's
``dp-accounting`` (its RDP and PLD accountants) and kakeibo's own zCDP and sequential policies, in one run.

Run: ``.venv/bin/python benchmarks/bench_accounting.py [--part compositions|verify|opacus|all]
[--charges 100000]``

Part ``compositions`` (epsilon at delta = 1e-5, seconds per accounting):

* 1,000 Poisson-subsampled Gaussians (q = 0.01, noise multiplier 1.0) -- one DP-SGD run;
* the same with fixed-size sampling (replace-one neighbours; dp-accounting's RDP accountant only);
* 50 Laplace (b = 10) and 50 Gaussian (noise multiplier 5) releases, mixed.

Rows: dp-accounting PLD and RDP; kakeibo's PLD accountant (:meth:`Curve.distributions`, grid 1e-4) and
its Renyi curve converted once; the ledger's pld books (one charge for the whole sequence, and one charge
per release); its rdp books, a privacy filter (both ways); the zCDP policy (each Gaussian as rho = 1 /
(2 sigma^2) without amplification, each Laplace as its pure epsilon's epsilon^2 / 2); sequential
composition of each release's own epsilon at delta / k.

Part ``verify``: ``--charges`` charges on one SQLite ledger with rdp books (a cycle of pure-DP queries at
five epsilons, kakeibo Gaussian releases and a DP-SGD run every 1,000 charges), the time to charge them and
to re-verify the whole chain (hash chain and the books recomputed from it); and the same for pld books at
``--pld-charges`` (each pld check recomposes every distinct mechanism, so it is slower per charge).

Part ``opacus``: the three DP-SGD runs whose MNIST accuracy Opacus publishes (pytorch/opacus,
``examples/mnist_README.md``: sampling rate 0.004; noise multiplier and epochs as listed there) with the
epsilon it reports at delta 1e-5, next to kakeibo's and dp-accounting's PLD and RDP epsilons for the same
runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import dp_accounting as dpa
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from kakeibo.accounting import (
    Composed,
    Curve,
    GaussianNoise,
    LaplaceNoise,
    Ledger,
    MechanismLoss,
    SubsampledGaussian,
    composition,
)
from kakeibo.accounting.curves import curve_of
from kakeibo.mechanisms import Gaussian
from kakeibo.privacy import DEFAULT_ORDERS, ZCDP, ApproxDP, PrivacyLoss, PureDP, RDPCurve

DELTA = 1e-5


def timed(run: Callable[[], float]) -> tuple[float, float]:
    start = time.perf_counter()
    value = run()
    return value, time.perf_counter() - start


def reference(event: dpa.DpEvent, *, pld: bool, replace_one: bool = False) -> float:
    relation = (
        dpa.NeighboringRelation.REPLACE_ONE if replace_one else dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    )
    accountant = (
        pld_privacy_accountant.PLDAccountant()
        if pld
        else rdp_privacy_accountant.RdpAccountant(neighboring_relation=relation)
    )
    accountant.compose(event)
    return float(accountant.get_epsilon(DELTA))


def pld_once(curve: Curve) -> float:
    remove, add = curve.distributions(1e-4)
    return max(remove.epsilon(DELTA), add.epsilon(DELTA))


def rdp_once(curve: Curve) -> float:
    values = tuple(float(v) for v in curve.rdp(DEFAULT_ORDERS))
    return float(RDPCurve(DEFAULT_ORDERS, values).to_approx(DELTA).epsilon)


def cold() -> None:
    """Empty the books' caches, so that a timing pays for its own curves and PLDs."""
    for cache in (composition._distributions, composition._pld_epsilon, composition._rdp_weights, curve_of):
        cache.cache_clear()


def books(name: str, losses: list[PrivacyLoss]) -> float:
    """The books' epsilon for ``losses``, from cold caches (each row pays its own PLDs)."""
    cold()
    ledger = Ledger(":memory:", budget=(10**6, DELTA), composition=name)
    return float(ledger.composition.compose(losses, ApproxDP).epsilon)


def zcdp_policy(rho: Fraction) -> float:
    return float(ZCDP(rho).to_approx(DELTA).epsilon)


def compositions() -> None:
    q, sigma, steps = 0.01, 1.0, 1000
    run = Composed([(SubsampledGaussian(sigma, q), steps)])
    step = MechanismLoss(
        ApproxDP(1, DELTA), SubsampledGaussian(sigma, q)
    )  # declared loss unused by the books
    mixed = Composed([(LaplaceNoise(10), 50), (GaussianNoise(5), 50)])
    laplace = MechanismLoss(PureDP(Fraction(1, 10)), LaplaceNoise(10))
    gaussian = MechanismLoss(ApproxDP(1, DELTA), GaussianNoise(5))
    cases: list[tuple[str, list[tuple[str, Callable[[], float]]]]] = [
        (
            f"{steps:,} Poisson-subsampled Gaussians, q = {q}, noise multiplier {sigma}",
            [
                ("dp-accounting PLD", lambda: reference(_poisson(q, sigma, steps), pld=True)),
                ("dp-accounting RDP", lambda: reference(_poisson(q, sigma, steps), pld=False)),
                ("kakeibo PLD accountant", lambda: pld_once(run)),
                ("kakeibo Renyi curve, converted once", lambda: rdp_once(run)),
                (
                    "kakeibo pld books, one charge",
                    lambda: books("pld", [MechanismLoss(ApproxDP(2, DELTA), run)]),
                ),
                ("kakeibo pld books, one charge per step", lambda: books("pld", [step] * steps)),
                (
                    "kakeibo rdp books (filter), one charge",
                    lambda: books("rdp", [MechanismLoss(ApproxDP(2, DELTA), run)]),
                ),
                ("kakeibo rdp books (filter), one charge per step", lambda: books("rdp", [step] * steps)),
                (
                    "kakeibo zCDP policy (no amplification)",
                    lambda: zcdp_policy(steps / (2 * Fraction(sigma) ** 2)),
                ),
            ],
        ),
        (
            f"{steps:,} fixed-size-subsampled Gaussians, q = {q}, noise multiplier {sigma} (replace-one)",
            [
                (
                    "dp-accounting RDP",
                    lambda: reference(
                        dpa.SelfComposedDpEvent(
                            dpa.SampledWithoutReplacementDpEvent(10_000, 100, dpa.GaussianDpEvent(sigma)),
                            steps,
                        ),
                        pld=False,
                        replace_one=True,
                    ),
                ),
                (
                    "kakeibo Renyi curve, converted once",
                    lambda: rdp_once(Composed([(SubsampledGaussian(sigma, q, "fixed"), steps)])),
                ),
            ],
        ),
        (
            "50 Laplace (b = 10) and 50 Gaussian (noise multiplier 5) releases",
            [
                ("dp-accounting PLD", lambda: reference(_mixed(), pld=True)),
                ("dp-accounting RDP", lambda: reference(_mixed(), pld=False)),
                ("kakeibo PLD accountant", lambda: pld_once(mixed)),
                ("kakeibo Renyi curve, converted once", lambda: rdp_once(mixed)),
                ("kakeibo pld books, one charge per release", lambda: books("pld", [laplace, gaussian] * 50)),
                (
                    "kakeibo rdp books (filter), one charge per release",
                    lambda: books("rdp", [laplace, gaussian] * 50),
                ),
                (
                    "kakeibo zCDP policy",
                    lambda: zcdp_policy(50 * Fraction(1, 10) ** 2 / 2 + 50 / (2 * Fraction(5) ** 2)),
                ),
                (
                    "sequential, each release's epsilon at delta / 100",
                    lambda: (
                        50 * 0.1
                        + 50 * float(MechanismLoss.of(GaussianNoise(5), DELTA / 100).declared.epsilon)
                    ),
                ),
            ],
        ),
    ]
    for title, rows in cases:
        print(f"\n# {title}: epsilon at delta = {DELTA:g}")
        print(f"| {'accountant':<52} | {'epsilon':>9} | {'vs dp-acc.':>10} | {'seconds':>8} |")
        print(f"|{'-' * 54}|{'-' * 11}|{'-' * 12}|{'-' * 10}|")
        baseline: dict[str, float] = {}
        for name, run_it in rows:
            value, seconds = timed(run_it)
            if name.startswith("dp-accounting"):
                baseline[name.split()[-1]] = value
            kind = "PLD" if "PLD" in name or "pld" in name else "RDP"
            ratio = f"{value / baseline[kind]:.4f}" if kind in baseline and not name.startswith("dp-") else ""
            print(f"| {name:<52} | {value:>9.5f} | {ratio:>10} | {seconds:>8.3f} |")


def _poisson(q: float, sigma: float, steps: int) -> dpa.DpEvent:
    return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps)


def _mixed() -> dpa.DpEvent:
    return dpa.ComposedDpEvent(
        [
            dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(10.0), 50),
            dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(5.0), 50),
        ]
    )


def workload(n: int) -> list[PrivacyLoss]:
    """``n`` charges as a service might see them: pure-DP queries at five epsilons, Gaussian releases, and a
    DP-SGD run every 1,000 charges."""
    pure = [PureDP(Fraction(e, 1000)) for e in (1, 2, 5, 10, 20)]
    gaussian = Gaussian(sensitivity=1, epsilon=Fraction(1, 10), delta=Fraction(1, 10**9)).ledger_loss
    run = MechanismLoss(
        ApproxDP(Fraction(1, 100), Fraction(1, 10**9)), Composed([(SubsampledGaussian(8, 0.001), 100)])
    )
    out: list[PrivacyLoss] = []
    for i in range(n):
        out.append(run if i % 1000 == 999 else gaussian if i % 7 == 3 else pure[i % 5])
    return out


def verify(n: int, books_name: str) -> None:
    charges = workload(n)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.sqlite"
        ledger = Ledger(path, budget=(10**6, 1e-5), composition=books_name)
        start = time.perf_counter()
        for i, loss in enumerate(charges):
            ledger.charge(loss, label=f"q{i}")
        charging = time.perf_counter() - start
        spent = ledger.spent()
        ledger.close()
        cold()
        start = time.perf_counter()
        reopened = Ledger(path)  # a restart: the books are recomputed from the stored rows
        verification = reopened.verify()
        checked = time.perf_counter() - start
        assert verification.ok and verification.entries == n, verification.problems
        assert reopened.spent() == spent
    rate, epsilon = n / charging, float(spent.epsilon)
    print(f"| {books_name} books | {n:>9,} | {rate:>13,.0f} | {checked:>15.2f} | {epsilon:>10.4f} |")


#: Opacus's published MNIST runs: (epsilon it reports, epochs, noise multiplier); sampling rate 0.004.
OPACUS_RUNS = ((Fraction(710, 100), 45, Fraction(7, 10)), (Fraction(301, 100), 60, Fraction(11, 10)),
               (Fraction(119, 100), 15, Fraction(13, 10)))  # fmt: skip


def opacus() -> None:
    print("\n# Opacus's published MNIST runs (q = 0.004), epsilon at delta = 1e-5")
    header = ("sigma", "steps", "Opacus", "kakeibo PLD", "dp-acc. PLD", "kakeibo RDP", "dp-acc. RDP")
    print("| " + " | ".join(f"{h:>11}" for h in header) + " |")
    print("|" + "|".join("-" * 13 for _ in header) + "|")
    for published, epochs, sigma in OPACUS_RUNS:
        steps = round(epochs / Fraction(4, 1000))
        run = Composed([(SubsampledGaussian(sigma, Fraction(4, 1000)), steps)])
        event = _poisson(0.004, float(sigma), steps)
        cells = (
            float(sigma), steps, float(published), pld_once(run), reference(event, pld=True),
            rdp_once(run), reference(event, pld=False),
        )  # fmt: skip
        print("| " + " | ".join(f"{c:>11.4g}" if isinstance(c, float) else f"{c:>11,}" for c in cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("compositions", "verify", "opacus", "all"), default="all")
    parser.add_argument("--charges", type=int, default=100_000)
    parser.add_argument("--pld-charges", type=int, default=1_000)
    args = parser.parse_args()
    if args.part in ("compositions", "all"):
        compositions()
    if args.part in ("verify", "all"):
        print("\n# One ledger, many charges: charging, then re-opening and re-verifying the chain")
        header = ("books", "charges", "charges per s", "verify seconds", "epsilon")
        print(f"| {header[0]:<9} | {header[1]:>9} | {header[2]:>13} | {header[3]:>15} | {header[4]:>10} |")
        print(f"|{'-' * 11}|{'-' * 11}|{'-' * 15}|{'-' * 17}|{'-' * 12}|")
        verify(args.charges, "rdp")
        verify(args.pld_charges, "pld")
    if args.part in ("opacus", "all"):
        opacus()


if __name__ == "__main__":
    main()
