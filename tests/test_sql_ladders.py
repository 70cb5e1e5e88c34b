"""The ladders of ``bound_selection = "ladder"`` (:class:`kakeibo.sql.truncation.Ladder` and
:class:`~kakeibo.sql.truncation.Drop`): a threshold chosen privately for each person's group totals, and
the measured share it drops (issue 31).

Neighbour relation in both tests: remove the heaviest person (their pair's total is the largest), the
case the heavy tail makes hardest. Confidence: every event's ratio is checked with Clopper-Pearson bounds
at 99.9% each (a union over at most 40 events keeps the family above 96%)."""

from __future__ import annotations

import numpy as np

from kakeibo.audit import clopper_pearson_lower, clopper_pearson_upper
from kakeibo.sql.truncation import Drop, Ladder

TAUS = tuple(float(2**k) for k in range(14))


def _heavy_totals(seed: int) -> np.ndarray:
    """Per-person totals with popularity 1/(rank + 5), as in ../shared/data/gen_sales.py."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / (np.arange(2_000) + 5)
    return np.bincount(rng.choice(2_000, 20_000, p=weights / weights.sum()), minlength=2_000).astype(float)


def _truncated(totals: np.ndarray, taus: tuple[float, ...]) -> np.ndarray:
    return np.array([np.minimum(totals, tau).sum() for tau in taus])


def test_the_ladders_choice_is_epsilon_dp_when_the_heaviest_person_leaves() -> None:
    totals = _heavy_totals(1)
    lighter = np.delete(totals, int(np.argmax(totals)))
    ladder = Ladder(TAUS, threshold=20.0, epsilon=1.0, max_partitions=1)
    rng = np.random.default_rng(2)
    trials = 3_000
    picks = [
        np.array([ladder.choose(_truncated(data, TAUS), rng) for _ in range(trials)])
        for data in (totals, lighter)
    ]
    for first, second in (picks, picks[::-1]):
        for k in range(len(TAUS)):  # the events "the index is at most k"
            a, b = int((first <= k).sum()), int((second <= k).sum())
            if a == 0:
                continue
            low = clopper_pearson_lower(a, trials, 0.001)
            high = clopper_pearson_upper(b, trials, 0.001)
            assert low <= np.e * high, (k, a, b)


def test_the_ladder_stops_near_the_optimum_and_the_drop_interval_covers() -> None:
    """Calibration: the chosen threshold sits where the count of heavier persons meets the threshold (not
    at an end of the grid), and the 95% interval of the dropped share covers the true share in at least
    90% of 200 seeded runs."""
    totals = _heavy_totals(3)
    ladder = Ladder(TAUS, threshold=30.0, epsilon=2.0, max_partitions=1)
    rng = np.random.default_rng(4)
    truncated = _truncated(totals, TAUS)
    covered, chosen = 0, []
    for _ in range(200):
        at = ladder.choose(truncated, rng)
        chosen.append(at)
        marks = sorted({*range(at, len(TAUS), 2)[:3], len(TAUS) - 1})
        drop = Drop((0.0, *(TAUS[j] for j in marks)), epsilon=2.0, max_partitions=1)
        noisy = drop.release(np.array([0.0, *truncated[marks]]), rng)
        _, low, high, _ = drop.shares(noisy, 0.05)
        kept = np.minimum(totals, TAUS[at]).sum()
        truth = 1 - kept / totals.sum()
        covered += low <= truth <= high
    assert covered >= 180, covered
    best = int(np.argmin(np.abs((np.diff(truncated) / np.diff(TAUS)) - 30.0)))
    assert abs(int(np.median(chosen)) - best) <= 2, (np.median(chosen), best)
