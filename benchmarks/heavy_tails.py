"""Heavy-tailed user-level tables and the oracle truncation, for ``bench_bounds.py --suite heavy`` (issue 31).

Shapes (each a table ``sales(customer_id, region, category, amount)``; region is fixed per customer,
category drawn per row):

* ``sales``: ``../shared/data/gen_sales.py`` (200,000 orders, 20,000 customers of popularity 1/(rank + 5):
  2% of the customers hold half the orders; log-normal amounts);
* ``pareto``: 20,000 customers whose order counts are Zipf(1.8) (capped at 10,000) and whose amounts are
  Pareto with shape 1.3 (scale 10): the mass sits in a few customers *and* a few orders;
* ``whales``: 30,000 light customers with 1-4 orders each and five whales holding 3% of the rows each,
  amounts log-normal.

The oracle is the best per-person truncation chosen with knowledge of the data: for each statistic
(COUNT(*) or SUM(amount)) the threshold ``tau`` on each (person, group) total and the number ``L0`` of a
person's groups kept (in a random order, ``L0`` from 1 to the most groups of one person) that minimise the
expected total absolute error over the groups, ``sum_g E|b_g + Lap(L0 tau / epsilon_s)|``
(``= |b| + s exp(-|b| / s)`` for bias ``b`` and scale ``s``) at the statistic's share ``epsilon_s`` of
epsilon (the query's epsilon split evenly over its two statistics, nothing spent on choosing). Its error is
then measured like kakeibo's: releases with that noise, median relative error over the groups.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from kakeibo.sql.truncation import make_race

REGIONS = ["north", "south", "east", "west", "central", "islands", "mountain", "coast"]
CATEGORIES = [f"cat{i:02d}" for i in range(30)]
GEN_SALES = Path(__file__).resolve().parents[2] / "shared" / "data" / "gen_sales.py"


def sales(columns: tuple[str, ...] = ("customer_id", "region", "category", "amount")) -> pa.Table:
    """The table of ``gen_sales.py`` (these of its columns), generated into a temporary file by the script
    itself."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sales.duckdb"
        subprocess.run([sys.executable, str(GEN_SALES), str(out)], check=True, capture_output=True)
        con = duckdb.connect(str(out), read_only=True)
        table = con.sql(f"SELECT {', '.join(columns)} FROM sales").to_arrow_table()
        con.close()
    return table


def _table(customer: np.ndarray, amount: np.ndarray, rng: np.random.Generator) -> pa.Table:
    region_of = rng.choice(len(REGIONS), customer.max() + 1, p=np.array([30, 20, 15, 12, 10, 6, 4, 3]) / 100)
    weights = 1.0 / (np.arange(len(CATEGORIES)) + 2)
    category = rng.choice(len(CATEGORIES), len(customer), p=weights / weights.sum())
    return pa.table(
        {
            "customer_id": customer.astype(np.int64),
            "region": np.array(REGIONS)[region_of[customer]],
            "category": np.array(CATEGORIES)[category],
            "amount": np.round(amount, 2),
        }
    )


def pareto() -> pa.Table:
    rng = np.random.default_rng(5)
    orders = np.minimum(rng.zipf(1.8, 20_000), 10_000)
    customer = np.repeat(np.arange(20_000), orders)
    return _table(customer, 10 * (1 + rng.pareto(1.3, len(customer))), rng)


def whales() -> pa.Table:
    rng = np.random.default_rng(6)
    light = np.repeat(np.arange(30_000), rng.integers(1, 5, 30_000))
    whale_rows = int(0.03 * len(light) / (1 - 0.15))
    customer = np.concatenate([light, np.repeat(np.arange(30_000, 30_005), whale_rows)])
    return _table(customer, rng.lognormal(4.5, 1.0, len(customer)), rng)


SHAPES = {"sales": sales, "pareto": pareto, "whales": whales}


@dataclass(frozen=True)
class Pairs:
    """A statistic's (person, group) totals: the group of each pair, its total, its person's number of
    groups, and the exact per-group answer."""

    group: np.ndarray
    total: np.ndarray
    person: np.ndarray
    exact: np.ndarray

    @classmethod
    def of(cls, table: pa.Table, key: str | None, value: str | None, groups: list[str]) -> Pairs:
        con = duckdb.connect()
        con.register("t", table)
        g = "'all'" if key is None else key
        expr = "COUNT(*)" if value is None else f"SUM({value})"
        rows = con.execute(f"SELECT customer_id, {g}, {expr} FROM t GROUP BY 1, 2").fetchall()
        index = {name: i for i, name in enumerate(groups)}
        person = np.array([r[0] for r in rows])
        group = np.array([index[r[1]] for r in rows])
        total = np.array([float(r[2]) for r in rows])
        return cls(group, total, person, np.bincount(group, total, len(groups)))


def oracle_limits(pairs: Pairs, epsilon: float, rng: np.random.Generator) -> tuple[float, int]:
    """The oracle's (tau, L0): the least expected total absolute error (module docstring)."""
    groups = len(pairs.exact)
    _, spans = np.unique(pairs.person, return_inverse=True)
    per_person = np.bincount(spans)[spans]  # groups of the pair's person
    rank = _random_ranks(pairs.person, rng)
    best = (np.inf, 1.0, 1)
    taus = 2.0 ** np.arange(-2, 40, 0.25)
    for l0 in sorted({1, 2, 4, 8, 16, int(per_person.max())}):
        kept = rank < l0
        for tau in taus[taus <= max(pairs.total.max(), 1) * 2]:
            bias = pairs.exact - np.bincount(pairs.group[kept], np.minimum(pairs.total[kept], tau), groups)
            scale = l0 * tau / epsilon
            error = float((np.abs(bias) + scale * np.exp(-np.abs(bias) / scale)).sum())
            if error < best[0]:
                best = (error, tau, l0)
    return best[1], best[2]


def oracle_error(pairs: Pairs, epsilon: float, runs: int, rng: np.random.Generator) -> float:
    """The median over ``runs`` releases of the median relative error over the groups, at the oracle's
    (tau, L0)."""
    tau, l0 = oracle_limits(pairs, epsilon, rng)
    errors = []
    for _ in range(runs):
        kept = _random_ranks(pairs.person, rng) < l0
        bounded = np.bincount(pairs.group[kept], np.minimum(pairs.total[kept], tau), len(pairs.exact))
        released = bounded + rng.laplace(0, l0 * tau / epsilon, len(pairs.exact))
        errors.append(np.median(np.abs(released - pairs.exact) / np.abs(pairs.exact)))
    return float(np.median(errors))


def race_error(pairs: Pairs, epsilon: float, runs: int, rng: np.random.Generator, integer: bool) -> float:
    """R2T's race over per-person group totals (:func:`kakeibo.sql.truncation.make_race`: thresholds 10^j
    from 1 to 10^6 rows, kakeibo's default ``max_rows_bound``, or to 10^12 of a sum; each at epsilon over
    their number, shifted down at beta = 0.05), run on the exact totals with kakeibo's own mechanisms, at
    the oracle's L0 (which favours the race: kakeibo's race takes a declared L0). The same error measure as
    :func:`oracle_error`."""
    _, l0 = oracle_limits(pairs, epsilon, rng)
    race = make_race(
        row_bound=1.0,
        integer=False,  # Laplace for counts too: geometric noise of scale above 2^24 has no exact sampler
        max_rows=10**6 if integer else 10**12,
        base=10.0,
        epsilon=epsilon,
        max_partitions=l0,
        beta=0.05,
    )
    errors = []
    for _ in range(runs):
        kept = _random_ranks(pairs.person, rng) < l0
        truncated = np.stack(
            [
                np.bincount(pairs.group[kept], np.minimum(pairs.total[kept], tau), len(pairs.exact))
                for tau in race.taus
            ],
            axis=1,
        )
        released, _ = race.release(truncated, rng)
        errors.append(np.median(np.abs(released - pairs.exact) / np.abs(pairs.exact)))
    return float(np.median(errors))


def _random_ranks(person: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each pair's rank among its person's pairs in a random order (0-based)."""
    order = np.lexsort((rng.random(len(person)), person))
    ranks = np.empty(len(person), dtype=np.int64)
    starts = np.r_[0, np.flatnonzero(np.diff(person[order])) + 1]
    counts = np.diff(np.r_[starts, len(person)])
    ranks[order] = np.arange(len(person)) - np.repeat(starts, counts)
    return ranks
