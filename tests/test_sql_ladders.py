"""The ladders of ``bound_selection = "ladder"`` (:class:`kakeibo.sql.truncation.Ladder` and
:class:`~kakeibo.sql.truncation.Drop`): a threshold chosen privately for each person's group totals, and
the measured share it drops (issue 31).

Neighbour relation in both tests: remove the heaviest person (their pair's total is the largest), the
case the heavy tail makes hardest. Confidence: every event's ratio is checked with Clopper-Pearson bounds
at 99.9% each (a union over at most 40 events keeps the family above 96%)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import sqlglot

import kakeibo
from kakeibo.audit import audit, clopper_pearson_lower, clopper_pearson_upper
from kakeibo.backends import DuckDBBackend
from kakeibo.mechanisms import AccuracyWarning, UnresolvedBiasWarning
from kakeibo.sql import Catalog
from kakeibo.sql.aggregates import ROWS, SUM
from kakeibo.sql.analyze import analyze
from kakeibo.sql.bounds import GROUP_BINS, POWERS, ROW_BINS, bound_check
from kakeibo.sql.plan import plan_query
from kakeibo.sql.rewrite import ladder_sql
from kakeibo.sql.truncation import Drop, Ladder

REGIONS = ["north", "south", "east", "west", "central", "islands", "mountain", "coast"]

TAUS = tuple(float(2**k) for k in range(14))


def _heavy_totals(seed: int) -> np.ndarray:
    """Per-person totals with popularity 1/(rank + 5), as in ../shared/data/gen_sales.py."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / (np.arange(2_000) + 5)
    return np.bincount(rng.choice(2_000, 20_000, p=weights / weights.sum()), minlength=2_000).astype(float)


def _masses(totals: np.ndarray, taus: tuple[float, ...]) -> np.ndarray:
    """The masses of the totals between consecutive thresholds (from 0), as the ladder statement sums them."""
    lows = (0.0, *taus[:-1])
    return np.array(
        [
            (np.minimum(totals, high) - np.minimum(totals, low)).sum()
            for low, high in zip(lows, taus, strict=True)
        ]
    )


def test_the_ladders_choice_is_epsilon_dp_when_the_heaviest_person_leaves() -> None:
    totals = _heavy_totals(1)
    lighter = np.delete(totals, int(np.argmax(totals)))
    ladder = Ladder(TAUS, threshold=20.0, epsilon=1.0, max_partitions=1)
    rng = np.random.default_rng(2)
    trials = 3_000
    picks = [
        np.array([ladder.choose(_masses(data, TAUS), rng) for _ in range(trials)])
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
    at an end of the grid), and the 95% intervals of the dropped share and of the dropped mass (whose upper
    end bounds the bias the warning compares with the noise) cover the truth in at least 90% of 200 seeded
    runs."""
    totals = _heavy_totals(3)
    ladder = Ladder(TAUS, threshold=30.0, epsilon=2.0, max_partitions=1)
    rng = np.random.default_rng(4)
    masses = _masses(totals, TAUS)
    covered, covered_mass, chosen = 0, 0, []
    for _ in range(200):
        at = ladder.choose(masses, rng)
        chosen.append(at)
        marks = sorted({*range(at, len(TAUS), 2)[:3], len(TAUS) - 1})
        thresholds = (0.0, *(TAUS[j] for j in marks))
        drop = Drop(thresholds, epsilon=2.0, max_partitions=1)
        noisy = drop.release(_masses(totals, thresholds[1:]), rng)
        low, high, low_mass, high_mass = drop.shares(noisy, 0.05)
        kept = np.minimum(totals, TAUS[at]).sum()
        truth = 1 - kept / totals.sum()
        covered += low <= truth <= high
        covered_mass += low_mass <= totals.sum() - kept <= high_mass
    assert covered >= 180 and covered_mass >= 180, (covered, covered_mass)
    best = int(np.argmin(np.abs(masses[1:] / np.diff(TAUS) - 30.0)))
    assert abs(int(np.median(chosen)) - best) <= 2, (np.median(chosen), best)


class _Layers:
    """A sampler of a :class:`Drop`'s release on two neighbouring worlds' truncated totals, seen through
    the adversary's best linear statistic: each layer over its width (post-processing, so any event on it
    is an event on the release)."""

    def __init__(self, drop: Drop, worlds: list[np.ndarray]) -> None:
        self.drop, self.worlds = drop, worlds
        self.widths = np.diff(np.asarray(drop.taus))

    def __call__(self, index: int, n: int, rng: Any) -> np.ndarray:
        return np.array([self.drop.release(self.worlds[index], rng) @ (1 / self.widths) for _ in range(n)])


@pytest.mark.statistical
def test_an_audit_of_the_drop_measurement_does_not_refute_its_epsilon() -> None:
    """2,000 measurements per neighbour (seeded, after 400 to choose the events): the audit's 95% lower
    bound on epsilon stays below the Drop's 0.5 when the heaviest person leaves; the same layers with a
    sensitivity that forgets the number of layers (one person fills all of them) are refuted."""
    totals = _heavy_totals(5)
    lighter = np.delete(totals, int(np.argmax(totals)))
    thresholds = (0.0, 8.0, 32.0, 128.0, 4096.0)
    worlds = [_masses(data, thresholds[1:]) for data in (totals, lighter)]
    honest = Drop(thresholds, epsilon=0.5, max_partitions=1)
    options = {"trials": 2_000, "batch": 500, "selection_trials": 400}
    result = audit(_Layers(honest, worlds), 0, 1, rng=np.random.default_rng(6), **options)
    assert not result.refutes(0.5), result
    careless = Drop(thresholds, epsilon=0.5 * (len(thresholds) - 1), max_partitions=1)  # forgets m
    broken = audit(_Layers(careless, worlds), 0, 1, rng=np.random.default_rng(7), **options)
    assert broken.refutes(0.5), broken


def _sales_like(customers: int, orders: int, seed: int) -> pa.Table:
    """A table like ../shared/data/gen_sales.py's: popularity 1/(rank + 5), region fixed per customer."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / (np.arange(customers) + 5)
    customer = rng.choice(customers, orders, p=weights / weights.sum())
    region = rng.choice(len(REGIONS), customers)[customer]
    return pa.table(
        {
            "customer_id": customer.astype(np.int64),
            "region": np.array(REGIONS)[region],
            "amount": np.round(np.clip(rng.lognormal(4.5, 1.0, orders), 1, 5000), 2),
        }
    )


def _sales_catalog(**settings: object) -> Catalog:
    """The catalog of ``sales``: kappa "auto", L0 1, the amount's bounds "auto", with ``settings`` over it."""
    spec: dict[str, object] = {
        "privacy_unit": "customer_id",
        "max_rows_per_partition": "auto",
        "max_partitions": 1,
        "columns": {
            "customer_id": {"type": "int"},
            "region": {"type": "str", "public_values": REGIONS},
            "amount": {"type": "float", "lower": "auto", "upper": "auto"},
        },
    }
    return Catalog.from_dict({"tables": {"sales": spec | settings}})


def _sales_session(table: pa.Table, tmp_path: Path, **settings: object) -> kakeibo.Session:
    con = duckdb.connect()
    con.register("data", table)
    con.execute("CREATE TABLE sales AS SELECT * FROM data")
    catalog = _sales_catalog(**settings)
    return kakeibo.connect(DuckDBBackend(con), catalog=catalog, ledger=str(tmp_path / "l.sqlite"), budget=1e9)


REGION_QUERY = "SELECT region, COUNT(*) AS n, SUM(amount) AS t FROM sales GROUP BY region"


def _true_drops(table: pa.Table, kappa: int, tau: float | None, upper: float | None) -> tuple[float, float]:
    """The shares of the rows and of the amount's mass that kappa rows and a total truncated at tau (or
    kappa rows of values clamped to [0, upper]) drop, one group per customer."""
    con = duckdb.connect()
    con.register("t", table)
    sums = (
        f"LEAST(SUM(amount), {tau!r})"
        if tau is not None
        else f"SUM(LEAST(amount, {upper!r})) * LEAST(COUNT(*), {kappa}) / COUNT(*)"
    )
    kept_rows, rows, kept_mass, mass = con.execute(
        f"SELECT SUM(LEAST(n, {kappa})), SUM(n), SUM(k), SUM(s) FROM (SELECT COUNT(*) AS n, {sums} AS k, "
        "SUM(amount) AS s FROM t GROUP BY customer_id)"
    ).fetchone()
    return 1 - kept_rows / rows, 1 - kept_mass / mass


def test_on_a_sales_table_the_ladder_states_a_drop_interval_that_covers(tmp_path: Path) -> None:
    """gen_sales.py's shape (2% of the customers hold half the orders): 20 seeded releases at epsilon 1
    with bound_selection = "ladder"; the stated 95% intervals of the dropped shares of rows and of the
    amount's mass cover the true shares in at least 90% of them, no description states a bare share, and
    an AccuracyWarning fires in every release whose true bias per group (rows or mass dropped over the 8
    regions) exceeds its statistic's 95% noise half-width."""
    table = _sales_like(5_000, 50_000, seed=8)
    exact_rows, exact_mass = table.num_rows, float(np.sum(table["amount"].to_numpy()))
    session = _sales_session(table, tmp_path, bound_selection="ladder")
    covered, biased, runs = 0, 0, 20
    for i in range(runs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = session.sql(REGION_QUERY, epsilon=1, rng=np.random.default_rng(100 + i))
        bounds = result.bounds
        assert bounds is not None and "amount" in bounds.totals
        true_rows, true_mass = _true_drops(
            table, bounds.max_rows_per_partition or 0, bounds.totals["amount"], None
        )
        (rows_low, rows_high, _), (mass_low, mass_high, _) = (
            bounds.dropped_intervals["rows"],
            bounds.dropped_intervals["amount"],
        )
        covered += rows_low <= true_rows <= rows_high and mass_low <= true_mass <= mass_high
        assert "(measured, 95%" in bounds.describe() and "about 0.0%" not in bounds.describe()
        released = result.table.to_pydict()
        half = {c: np.mean(np.subtract(released[f"{c}_ci_high"], released[f"{c}_ci_low"])) / 2 for c in "nt"}
        if true_rows * exact_rows / 8 > half["n"] or true_mass * exact_mass / 8 > half["t"]:
            biased += 1
            assert any(issubclass(w.category, AccuracyWarning) for w in caught), (i, half)
    assert covered >= 0.9 * runs, covered
    assert biased >= runs / 2, biased  # the shape is heavy enough that the warning is needed


def test_hand_set_limits_that_drop_half_the_rows_warn_with_check_bounds(tmp_path: Path) -> None:
    """Declared limits (3 rows, amount in [0, 500]) on the sales shape drop more than half the rows:
    check_bounds=True measures it at a tenth of epsilon, states an interval that covers the truth, warns,
    and charges the query's epsilon once; without check_bounds nothing is measured."""
    table = _sales_like(5_000, 50_000, seed=9)
    amount = {"type": "float", "lower": 0, "upper": 500}
    session = _sales_session(
        table,
        tmp_path,
        max_rows_per_partition=3,
        columns={
            "customer_id": {"type": "int"},
            "region": {"type": "str", "public_values": REGIONS},
            "amount": amount,
        },
    )
    true_rows, true_mass = _true_drops(table, 3, None, 500.0)
    assert true_rows > 0.5
    with pytest.warns(AccuracyWarning, match="bias these statistics toward zero by more than their noise"):
        result = session.sql(REGION_QUERY, epsilon=1, check_bounds=True, rng=np.random.default_rng(10))
    bounds = result.bounds
    assert bounds is not None and bounds.max_rows_per_partition is None and not bounds.totals
    rows_low, rows_high, _ = bounds.dropped_intervals["rows"]
    mass_low, mass_high, _ = bounds.dropped_intervals["amount"]
    assert rows_low <= true_rows <= rows_high and rows_low > 0.25
    assert mass_low <= true_mass <= mass_high
    assert bounds.describe().startswith("measured at epsilon 0.1: the declared limits drop ")
    assert f"{rows_low:.1%}" in bounds.describe() and "(measured, 95%" in bounds.describe()
    (entry,) = session.ledger.entries()
    assert entry.loss == result.privacy_loss and float(result.privacy_loss.epsilon) == 1
    plain = session.sql(REGION_QUERY, epsilon=1, request_id="plain")
    assert plain.bounds is None


def test_a_declared_largest_contribution_at_the_chosen_limit_silences_the_unresolved_warning(
    tmp_path: Path,
) -> None:
    """One order per customer, declared (max_rows_bound = 1), in one region each (declared user_constant,
    so no group past max_partitions goes unmeasured): the ladder of rows has nothing above its threshold
    to measure, so the most bias it allows is 0 and no warning fires. The same table without the
    declaration gets UnresolvedBiasWarning, since nothing rules out a customer with many orders."""
    rng = np.random.default_rng(12)
    table = pa.table(
        {
            "customer_id": np.arange(4_000, dtype=np.int64),
            "region": np.array(REGIONS)[rng.integers(0, len(REGIONS), 4_000)],
            "amount": rng.uniform(0, 100, 4_000),
        }
    )
    columns = {
        "customer_id": {"type": "int"},
        "region": {"type": "str", "public_values": REGIONS, "user_constant": True},
        "amount": {"type": "float", "lower": 0, "upper": 100},
    }
    query = "SELECT region, COUNT(*) AS n FROM sales GROUP BY region"
    for name in ("declared", "undeclared"):
        (tmp_path / name).mkdir()
    declared = _sales_session(table, tmp_path / "declared", columns=columns, max_rows_bound=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = declared.sql(query, epsilon=1, rng=np.random.default_rng(13))
    assert result.bounds is not None and result.bounds.bias_ceiling == {"rows": 0.0}
    undeclared = _sales_session(table, tmp_path / "undeclared", columns=columns)
    with pytest.warns(UnresolvedBiasWarning, match="may exceed their noise"):
        undeclared.sql(query, epsilon=1, rng=np.random.default_rng(13))


# --- the ladder's statement on every engine ---------------------------------------------------------------

EXTREMES = [1e308, 1e308, float("nan"), float("inf"), float("-inf"), 5e-324, 0.0, -5.0, 1.0, 2.0, 3.0, 1e100]


def _extreme_table() -> pa.Table:
    """Persons with the fuzzer's extreme amounts (each its own row), one with three ordinary rows, a row
    without a person; each person in one region, so that L0 = 1 keeps every row (the kept group of a person
    with several is random, and differs between engines)."""
    customer = [0, 0, 1, 2, 3, 4, 5, 6, 7, 7, 7, 8, None]
    amount = [*EXTREMES, 4.0]
    return pa.table(
        {
            "customer_id": pa.array(customer, pa.int64()),
            "region": ["north" if c is None or c % 2 == 0 else "south" for c in customer],  # one per person
            "amount": pa.array(amount, pa.float64()),
        }
    )


def _ladder_statement() -> tuple[str, int]:
    """The statement of truncated totals a checked query sends (rows and the amount's totals at every
    threshold up to the grid's top), and its number of columns."""
    columns = {
        "customer_id": {"type": "int"},
        "region": {"type": "str", "public_values": REGIONS},
        "amount": {"type": "float", "lower": 0, "upper": 1e100},
    }
    catalog = _sales_catalog(max_rows_per_partition=2, columns=columns)
    query = analyze("SELECT region, COUNT(*) AS n, SUM(amount) AS s FROM sales GROUP BY region", catalog)
    choice = bound_check(query, plan_query(query, epsilon=1))
    declared = choice.decide(np.zeros((ROW_BINS, GROUP_BINS)), np.zeros((0, 2 * len(POWERS) + 3)))
    top = choice._measured_taus("amount")[-1]
    grid = choice._grid_plan(declared, {"amount": top})
    taus = (0.5, 1.0, 4.0, 1e6, top)
    return ladder_sql(grid, [(ROWS, None, (1.0, 2.0, 3.0)), (SUM, "amount", taus)]), 3 + len(taus)


def _ladder_values(backend: Any) -> list[float]:
    statement, columns = _ladder_statement()
    table = backend.execute(sqlglot.transpile(statement, read="duckdb", write=backend.dialect)[0])
    row = table.to_pylist()[0]
    values = [float(v) for v in row.values()]
    assert len(values) == columns and all(np.isfinite(values)), row
    return values


def test_the_ladder_statement_is_total_on_duckdb_with_extreme_values() -> None:
    """1e308 twice, NaN, the infinities, 5e-324: every mass is finite (values clamped to [0, top] before
    summing, totals truncated), and the rows' masses add up to the persons' rows truncated at each
    threshold."""
    backend = DuckDBBackend()
    backend.load_table("sales", _extreme_table())
    values = _ladder_values(backend)
    rows_per_person = np.array([2, 1, 1, 1, 1, 1, 1, 3, 1])
    # the rows' masses up to 1 row, from 1 to 2, from 2 to 3: their running sums are the truncated counts
    assert np.cumsum(values[:3]).tolist() == [float(np.minimum(rows_per_person, k).sum()) for k in (1, 2, 3)]


@pytest.mark.xdist_group("postgres")
def test_the_ladder_statement_on_postgres_equals_duckdbs(postgres_server: str) -> None:
    from kakeibo.backends.postgres import PostgresBackend
    from tpch_fixtures import postgres_database_with

    duck = DuckDBBackend()
    duck.load_table("sales", _extreme_table())
    backend = PostgresBackend(postgres_database_with(postgres_server, {"sales": _extreme_table()}))
    try:
        assert np.allclose(_ladder_values(backend), _ladder_values(duck), rtol=1e-12)
    finally:
        backend.close()


@pytest.mark.xdist_group("spark")
def test_the_ladder_statement_on_spark_equals_duckdbs(spark_backend: Any) -> None:
    from kakeibo.backends.spark import SparkBackend

    duck = DuckDBBackend()
    duck.load_table("sales", _extreme_table())
    backend = SparkBackend(session=spark_backend.session)
    backend.load_table("sales", _extreme_table())
    try:
        assert np.allclose(_ladder_values(backend), _ladder_values(duck), rtol=1e-12)
    finally:
        backend.close()


def test_a_column_with_negative_values_truncates_its_parts_apart(tmp_path: Path) -> None:
    """Refunds: a fifth of the amounts negative. The ladder truncates each person's positive and negative
    totals apart at one tau (bounds [-tau, tau]), and the released SUMs' 95% intervals cover the exact
    answer truncated the same way (at least 6 of the 8 regions: below that has probability under 0.6%)."""
    table = _sales_like(3_000, 30_000, seed=11)
    rng = np.random.default_rng(12)
    amount = table.column("amount").to_numpy() * np.where(rng.random(table.num_rows) < 0.2, -1, 1)
    table = table.set_column(2, "amount", pa.array(amount))
    session = _sales_session(table, tmp_path, max_rows_per_partition=10)
    query = "SELECT region, SUM(amount) AS total FROM sales GROUP BY region"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        result = session.sql(query, epsilon=1, rng=np.random.default_rng(13))
    bounds = result.bounds
    assert bounds is not None and "amount" in bounds.totals
    tau = bounds.totals["amount"]
    assert bounds.columns["amount"] == (-tau, tau)
    assert "positive and negative totals of amount" in bounds.describe()
    con = duckdb.connect()
    con.register("t", table)
    exact = dict(
        con.execute(
            f"SELECT region, SUM(LEAST(p, {tau!r}) - LEAST(m, {tau!r})) FROM (SELECT customer_id, region, "
            "SUM(GREATEST(amount, 0)) AS p, SUM(GREATEST(-amount, 0)) AS m FROM t GROUP BY 1, 2) GROUP BY 1"
        ).fetchall()
    )
    rows = result.to_arrow().to_pylist()
    covered = sum(row["total_ci_low"] <= exact[row["region"]] <= row["total_ci_high"] for row in rows)
    assert len(rows) == 8 and covered >= 6, (rows, tau)


def test_a_column_declared_never_negative_is_truncated_as_one_total(tmp_path: Path) -> None:
    """``lower = 0, upper = "auto"``: the column's totals are truncated whole (bounds [0, tau]), the catalog
    writes the declaration back as it read it, and half-automatic bounds of another shape are refused."""
    table = _sales_like(3_000, 30_000, seed=14)
    amount = {"type": "float", "lower": 0, "upper": "auto"}
    columns = {"customer_id": {"type": "int"}, "region": {"type": "str", "public_values": REGIONS}}
    session = _sales_session(table, tmp_path, columns={**columns, "amount": amount})
    spec = session.catalog.table("sales").columns["amount"]
    assert spec.auto_bounds and not spec.auto_lower and spec.to_dict()["lower"] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        result = session.sql("SELECT region, SUM(amount) AS total FROM sales GROUP BY region", epsilon=1)
    bounds = result.bounds
    assert bounds is not None and bounds.columns["amount"] == (0.0, bounds.totals["amount"])
    assert "each person's total of amount" in bounds.describe()
    for low, high in ((5, "auto"), ("auto", 5), (-1, "auto")):
        with pytest.raises(kakeibo.Error, match="lower = 0 with upper"):
            Catalog.from_dict(
                {"tables": {"t": {"columns": {"a": {"type": "float", "lower": low, "upper": high}}}}}
            )
