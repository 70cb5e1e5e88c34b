"""Relational DP SQL over TPC-H (issue 18): joins along the catalog's references, the person found through
them, aggregates over expressions, and the R2T race.

The neighbour relation: remove one customer with every order that references them and every line item that
references one of those orders. The tests here check, on TPC-H at scale factor 0.01 (``tests/tpch_fixtures``):

* what the analyser accepts and refuses, before any data is read;
* that the bounded statement computes exactly what the raw query computes when the limits do not bind, on
  DuckDB, PostgreSQL and Spark (at epsilon 2^30 the noise is far below the tolerance);
* that removing the customer who contributes most moves each noised statistic by at most its sensitivity,
  and that an audit of the released value (10^6 releases per database, 95% Clopper-Pearson lower bound over
  the audit's default events) finds no epsilon above the claim, for a fixed limit and for every candidate
  of the R2T race together;
* that the race under-estimates the untruncated answer with probability at least 1 - beta, and that its
  interval covers it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any
from uuid import uuid4

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from scipy import stats

import kakeibo
import kakeibo.accounting
from kakeibo.audit import audit
from kakeibo.backends import DuckDBBackend
from kakeibo.data import tpch
from kakeibo.noise import resolve_source
from kakeibo.sql import Catalog, QueryRefused, analyze
from kakeibo.sql.plan import plan_query
from kakeibo.sql.rewrite import bounded_sql, race_name
from kakeibo.sql.truncation import make_race
from tpch_fixtures import postgres_database_with

CATALOG = Catalog.from_toml(tpch.catalog())


def _variant(**tables: dict[str, Any]) -> Catalog:
    """The TPC-H catalog with some tables' settings replaced."""
    data = CATALOG.to_dict()
    for name, settings in tables.items():
        data["tables"][name].update(settings)
    return Catalog.from_dict(data)


#: limits that never bind at scale factor 0.01 (a customer has at most about 30 orders and 200 line items)
LOOSE = _variant(
    orders={"max_partitions": 25, "max_rows_per_partition": 1000},
    lineitem={"max_partitions": 25, "max_rows_per_partition": 1000},
)
AUTO = _variant(
    orders={"max_rows_per_partition": "auto", "max_rows_bound": 10_000, "bound_selection": "race"},
    lineitem={"max_rows_per_partition": "auto", "max_rows_bound": 10_000, "bound_selection": "race"},
)

#: limits and money bounds chosen privately from histograms (kakeibo.sql.bounds)
CHOSEN = Catalog.from_dict(
    {
        "tables": {
            name: {
                **table,
                "columns": {
                    column: {**spec, "lower": "auto", "upper": "auto"}
                    if column in ("o_totalprice", "l_extendedprice", "c_acctbal")
                    else spec
                    for column, spec in table["columns"].items()
                },
            }
            | (
                {"max_rows_per_partition": "auto", "max_partitions": "auto"}
                if name in ("orders", "lineitem")
                else {}
            )
            for name, table in CATALOG.to_dict()["tables"].items()
        }
    }
)

REVENUE = "l_extendedprice * (1 - l_discount)"
QUERIES = tpch.QUERIES


# --- analysis: no data is read ---------------------------------------------------------------------------


def test_a_line_item_reaches_its_customer_through_its_order() -> None:
    query = analyze("SELECT COUNT(*) FROM lineitem", CATALOG)
    (join,) = query.joins
    assert (join.table.name, join.kind, join.qualifier) == ("orders", "person", "__person_1")
    assert (join.column, join.left_qualifier, join.left_column) == ("o_orderkey", "lineitem", "l_orderkey")
    assert query.unit == ("__person_1", "o_custkey")
    assert query.person is CATALOG.table("customer") and query.dataset == "customer"
    assert query.grain is CATALOG.table("lineitem") and query.max_partitions == 4
    assert query.where_box is None


def test_an_order_holds_its_customer_and_needs_no_join() -> None:
    query = analyze("SELECT COUNT(*) FROM orders WHERE o_totalprice > 1000", CATALOG)
    assert query.joins == () and query.unit == ("orders", "o_custkey") and query.dataset == "customer"
    assert query.max_rows_per_partition == 20


def test_a_comma_join_along_references_is_a_join_tree_rooted_at_the_first_table() -> None:
    query = analyze(QUERIES["Q3"], CATALOG)
    assert [(j.table.name, j.kind) for j in query.joins] == [
        ("orders", "reference"),
        ("lineitem", "reference"),
    ]
    assert query.unit == ("customer", "c_custkey") and query.grain.name == "lineitem"
    assert query.where is not None and '"customer"."c_custkey" = "orders"."o_custkey"' in query.where.sql()


def test_public_tables_join_after_the_sensitive_ones_and_extra_equalities_filter() -> None:
    query = analyze(QUERIES["Q5"], CATALOG)
    assert [(j.table.name, j.kind) for j in query.joins] == [
        ("orders", "reference"),
        ("lineitem", "reference"),
        ("supplier", "public"),
        ("nation", "public"),
        ("region", "public"),
    ]
    assert query.group_tables == ("nation",)


def test_expression_bounds_come_from_interval_arithmetic_on_the_catalog() -> None:
    query = analyze(
        f"SELECT SUM({REVENUE} * (1 + l_tax)) AS c, SUM(l_extendedprice / l_quantity) AS p FROM lineitem",
        CATALOG,
    )
    charge, price = (query.value(agg.column).spec for agg in query.aggregates)
    assert (charge.lower, charge.upper) == (0.0, pytest.approx(104950 * 1.0 * 1.08))
    assert (price.lower, price.upper) == (0.0, 104950.0)  # a quantity is at least 1
    case = analyze(
        "SELECT SUM(CASE WHEN l_returnflag = 'R' THEN l_quantity ELSE -l_tax END) FROM lineitem", CATALOG
    )
    value = case.value(case.aggregates[0].column)
    assert (value.spec.lower, value.spec.upper) == (-0.08, 50.0) and value.text.startswith("CASE WHEN")


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        (
            "SELECT COUNT(*) FROM customer JOIN lineitem ON c_custkey = l_orderkey",
            "does not follow a declared reference",
        ),
        (
            "SELECT COUNT(*) FROM orders, lineitem WHERE o_custkey = l_orderkey",
            "does not follow a declared reference",
        ),
        (
            "SELECT COUNT(*) FROM orders o1 JOIN orders o2 ON o1.o_orderkey = o2.o_orderkey",
            "table orders appears twice (a join result could belong to two people)",
        ),
        (
            "SELECT COUNT(*) FROM orders, lineitem",
            "no equality along a declared reference joins the sensitive table",
        ),
        ("SELECT COUNT(*) FROM lineitem, part", "no equality in ON or WHERE joins table part"),
        ("SELECT COUNT(*) FROM lineitem JOIN part ON l_orderkey = p_partkey", "identifies a person's rows"),
        (
            "SELECT COUNT(*) FROM customer JOIN nation ON c_custkey = n_nationkey",
            "joining on the privacy unit",
        ),
        ("SELECT SUM(l_extendedprice / l_discount) FROM lineitem", "l_discount can be 0"),
        ("SELECT SUM(o_totalprice * o_custkey) FROM orders", "o_custkey identifies people's rows"),
        ("SELECT SUM(l_orderkey) FROM lineitem", "l_orderkey, which identifies people's rows"),
        (
            "SELECT o_custkey, COUNT(*) FROM orders GROUP BY o_custkey",
            "grouping by the privacy unit o_custkey",
        ),
        ("SELECT COUNT(DISTINCT l_orderkey) FROM lineitem", "only available for the privacy unit"),
    ],
)
def test_refused_before_any_data_is_read(sql: str, fragment: str) -> None:
    with pytest.raises(QueryRefused) as info:
        analyze(sql, CATALOG)
    assert fragment in str(info.value)


def test_the_race_refuses_what_it_cannot_truncate() -> None:
    for sql, fragment in [
        ("SELECT VARIANCE(l_quantity) FROM lineitem", "races counts, sums and averages"),
        ("SELECT SUM(l_quantity - 10) FROM lineitem", "can be as low as -9"),
    ]:
        with pytest.raises(QueryRefused) as info:
            plan_query(analyze(sql, AUTO), epsilon=1)
        assert fragment in str(info.value)


# --- the catalog's references ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"orders": {"references": {"o_custkey": "client.c_custkey"}}}, "names no table of the catalog"),
        (
            {"orders": {"references": {"o_custkey": "customer.c_name"}}},
            "neither the privacy unit of customer nor declared unique",
        ),
        ({"orders": {"references": {"o_custkey": "nation.n_nationkey"}}}, "leads to the public table nation"),
        ({"orders": {"references": {"o_custkey": "orders.o_orderkey"}}}, "form a cycle"),
        (
            {"orders": {"references": {"o_orderdate": "customer.c_custkey"}}},
            "compares a date column with a int one",
        ),
        (
            {"orders": {"references": {"o_custkey": "customer"}}},
            'must name a table and its column, as "customer.c_custkey"',
        ),
        ({"orders": {"privacy_unit": "o_custkey"}}, "names a privacy_unit and references another table"),
        (
            {"orders": {"references": {"o_custkey": "customer.c_custkey", "o_clerk": "customer.c_name"}}},
            "o_clerk -> customer.c_name of table 'orders' names a column that is neither the privacy unit",
        ),
        ({"customer": {"privacy_unit": None}}, "which names no privacy_unit"),
        ({"orders": {"max_rows_bound": 100}}, "bounds the choice of max_rows_per_partition"),
        (
            {"orders": {"max_rows_per_partition": "auto", "bound_selection": "race", "truncation_base": 1}},
            "truncation_base of table 'orders'",
        ),
    ],
)
def test_catalog_references_are_checked_when_it_loads(change: dict[str, Any], fragment: str) -> None:
    data = CATALOG.to_dict()
    for name, settings in change.items():
        for key, value in settings.items():
            if value is None:
                data["tables"][name].pop(key)
            else:
                data["tables"][name][key] = value
        if name == "customer":
            data["tables"][name].pop("max_partitions")
            data["tables"][name].pop("max_rows_per_partition")
    with pytest.raises((ValueError, TypeError)) as info:
        Catalog.from_dict(data)
    assert fragment in str(info.value)


def test_the_catalog_round_trips_its_references_and_race() -> None:
    assert Catalog.from_dict(AUTO.to_dict()) == AUTO
    assert [str(r) for r in CATALOG.chain("lineitem")] == [
        "l_orderkey -> orders.o_orderkey",
        "o_custkey -> customer.c_custkey",
    ]


# --- answers -----------------------------------------------------------------------------------------------


def _session(database: Any, catalog: Catalog, tmp_path: Path) -> Any:
    return kakeibo.connect(
        database, catalog=catalog, ledger=str(tmp_path / "ledger.db"), budget=(2.0**40, 0.5)
    )


def _raw(con: duckdb.DuckDBPyConnection, sql: str) -> dict[tuple[Any, ...], dict[str, float]]:
    rows = con.sql(sql).to_arrow_table().to_pylist()
    return {_key(row): {k: float(v) for k, v in row.items() if _is_value(k, v)} for row in rows}


def _is_value(name: str, value: Any) -> bool:
    return not isinstance(value, str) and name != "c_nationkey"


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(v for k, v in row.items() if not _is_value(k, v))


#: at epsilon 2^30 the noise is the noise grid's rounding: its step is 64 for these sums, and an error of
#: 5,000 (78 steps at a noise scale of one step) has probability below e^-70
NOISE = 5e3


def _check_exact(released: pa.Table, expected: dict[tuple[Any, ...], dict[str, float]]) -> None:
    """Every group of the raw answer is released with the raw value up to the noise (an average: up to 1%);
    a public key without rows is released near 0."""
    got = {_key(row): row for row in released.to_pylist()}
    expected_names = {name for values in expected.values() for name in values}
    for key, values in expected.items():
        assert key in got, f"group {key} was not released"
        for name, value in values.items():
            tolerance = 1e-2 * abs(value) if name.startswith("avg") else NOISE + 1e-9 * abs(value)
            assert abs(got[key][name] - value) <= tolerance, (key, name, value, got[key][name])
    for key in set(got) - set(expected):
        names = [n for n in expected_names if not n.startswith("avg")]
        assert all(abs(got[key][n] or 0) < NOISE for n in names), key


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_duckdb_answers_what_the_raw_query_computes_when_the_limits_do_not_bind(
    name: str, tpch_duckdb: Path, tmp_path: Path
) -> None:
    with duckdb.connect(str(tpch_duckdb), read_only=True) as con:
        expected = _raw(con, QUERIES[name])
    with _session(str(tpch_duckdb), LOOSE, tmp_path) as session:
        released = session.sql(QUERIES[name], epsilon=2**30, delta=1e-9)
    _check_exact(released.table, expected)


@pytest.mark.xdist_group("postgres")
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_postgres_answers_the_same(name: str, tpch_duckdb: Path, tpch_postgres: Any, tmp_path: Path) -> None:
    with duckdb.connect(str(tpch_duckdb), read_only=True) as con:
        expected = _raw(con, QUERIES[name])
    session = _session(tpch_postgres, LOOSE, tmp_path)
    _check_exact(session.sql(QUERIES[name], epsilon=2**30, delta=1e-9).table, expected)
    session.ledger.close()


@pytest.mark.xdist_group("spark")
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_spark_answers_the_same(name: str, tpch_duckdb: Path, tpch_spark: Any, tmp_path: Path) -> None:
    with duckdb.connect(str(tpch_duckdb), read_only=True) as con:
        expected = _raw(con, QUERIES[name])
    session = kakeibo.connect(tpch_spark, catalog=LOOSE, ledger=str(tmp_path / "l.db"), budget=(2.0**40, 0.5))
    _check_exact(session.sql(QUERIES[name], epsilon=2**30, delta=1e-9).table, expected)
    session.ledger.close()


def test_one_ledger_dataset_for_every_table_of_the_same_people(tpch_duckdb: Path, tmp_path: Path) -> None:
    with _session(str(tpch_duckdb), CATALOG, tmp_path) as session:
        for sql in (
            "SELECT COUNT(*) FROM customer",
            "SELECT COUNT(*) FROM orders",
            "SELECT COUNT(*) FROM lineitem",
        ):
            session.sql(sql, epsilon=0.5)
        assert {entry.dataset for entry in session.ledger.entries()} == {"customer"}


def test_explain_shows_the_join_path_the_bounds_and_the_race(tpch_duckdb: Path, tmp_path: Path) -> None:
    with _session(str(tpch_duckdb), AUTO, tmp_path) as session:
        text = session.explain(f"SELECT SUM({REVENUE}) AS r FROM lineitem", epsilon=0.8)
    assert "user-level on customer.c_custkey, each person's group total truncated by the R2T race" in text
    assert (
        "join orders AS __person_1 ON __person_1.o_orderkey = lineitem.l_orderkey (to reach the person)"
        in text
    )
    assert "privacy unit of each joined row: __person_1.o_custkey" in text
    assert f"expr1 = {REVENUE}: bounds [0, 104950]" in text
    assert "R2T race over 5 thresholds tau = 1.05e+05, 1.05e+06, 1.05e+07, 1.05e+08, 1.05e+09;" in text


# --- privacy: one customer and all their rows -------------------------------------------------------------


def _without_customer(tables: dict[str, pa.Table], customer: int) -> dict[str, pa.Table]:
    """The neighbouring database: ``customer`` removed with their orders and those orders' line items."""
    orders = tables["orders"]
    theirs = pc.equal(orders["o_custkey"], customer)
    gone = orders.filter(theirs)["o_orderkey"]
    out = dict(tables)
    out["customer"] = tables["customer"].filter(pc.not_equal(tables["customer"]["c_custkey"], customer))
    out["orders"] = orders.filter(pc.invert(theirs))
    out["lineitem"] = tables["lineitem"].filter(pc.invert(pc.is_in(tables["lineitem"]["l_orderkey"], gone)))
    return out


def _engine(tables: dict[str, pa.Table]) -> DuckDBBackend:
    backend = DuckDBBackend()
    for name, table in tables.items():
        backend.load_table(name, table)
    return backend


@pytest.fixture(scope="module")
def neighbours(tpch_tables: dict[str, pa.Table]) -> tuple[DuckDBBackend, DuckDBBackend, int]:
    """TPC-H SF 0.01 and its neighbour without the customer with the most revenue in line items."""
    con = duckdb.connect()
    for name, table in tpch_tables.items():
        con.register(name, table)
    (customer,) = con.sql(
        f"SELECT o_custkey FROM orders JOIN lineitem ON l_orderkey = o_orderkey GROUP BY o_custkey "
        f"ORDER BY SUM({REVENUE}) DESC LIMIT 1"
    ).fetchall()[0]
    return _engine(tpch_tables), _engine(_without_customer(tpch_tables, customer)), customer


def _statistics(plan: Any, backend: DuckDBBackend) -> dict[str, Any]:
    return backend.execute(bounded_sql(plan)).to_pylist()[0]


@pytest.mark.statistical
def test_a_fixed_limit_over_a_join_keeps_its_sensitivity_and_its_epsilon(neighbours: Any) -> None:
    """The revenue of customers' line items with the catalog's limits (100 line items per group): removing
    the biggest customer moves the bounded sum by at most its sensitivity (kappa x the expression's upper
    bound), and the audit of its release at epsilon 1 finds no more than 1 (false-failure rate <= 5%)."""
    base, neighbour, _ = neighbours
    sql = (
        f"SELECT SUM({REVENUE}) AS r FROM customer, orders, lineitem WHERE c_custkey = o_custkey "
        "AND l_orderkey = o_orderkey"
    )
    plan = plan_query(analyze(sql, CATALOG), epsilon=1)
    (statistic,) = plan.statistics
    d, d_prime = (_statistics(plan, b)[statistic.name] for b in (base, neighbour))
    assert 0 < d - d_prime <= statistic.per_group_sensitivity == 100 * 104950.0
    result = audit(statistic.mechanism, d, d_prime, trials=1_000_000, rng=np.random.default_rng(18))
    assert result.seeded and not result.refutes(1.0), str(result)


@pytest.mark.statistical
@pytest.mark.parametrize(
    "sql", ["SELECT SUM(l_extendedprice * (1 - l_discount)) AS r FROM lineitem", QUERIES["Q18"]]
)
def test_the_race_keeps_its_epsilon_over_every_candidate(neighbours: Any, sql: str) -> None:
    """Each candidate of the race moves by at most its threshold when the biggest customer leaves; the audit
    of the released value (the largest shifted candidate, 10^6 releases per database, seed 19) finds no
    epsilon above the statistic's share (false-failure rate <= 5%)."""
    base, neighbour, _ = neighbours
    plan = plan_query(analyze(sql, AUTO), epsilon=0.8)
    (statistic,) = plan.statistics
    race = statistic.race
    assert race is not None
    rows = [_statistics(plan, b) for b in (base, neighbour)]
    candidates = [
        np.array([row[race_name(statistic.name, j)] for j in range(race.candidates)]) for row in rows
    ]
    moved = candidates[0] - candidates[1]
    assert np.all(moved >= 0) and np.all(moved <= np.array(race.taus) + 1e-6)
    assert moved[-1] > moved[0]  # the customer's total exceeds the lowest threshold: truncation binds there

    def sample(which: int, n: int, rng: Any) -> Any:
        return race.release(np.tile(candidates[which], (n, 1)), resolve_source(rng))[0]

    result = audit(sample, 0, 1, trials=1_000_000, rng=np.random.default_rng(19))
    assert result.seeded and not result.refutes(0.8), str(result)


@pytest.mark.statistical
def test_the_race_under_estimates_and_its_interval_covers_the_untruncated_answer() -> None:
    """10,000 seeded races over the contributions of 2,000 people (lognormal, heavy-tailed): the released
    value exceeds the untruncated sum at most beta = 5% of the time, and the interval misses it at most 5%
    (one-sided exact binomial tests at level 1e-3 each)."""
    rng = np.random.default_rng(20)
    contributions = np.minimum(rng.lognormal(3, 1.5, 2000), 5000)
    race = make_race(
        row_bound=1.0, integer=False, max_rows=5000, base=5.5, epsilon=1, max_partitions=1, beta=0.05
    )
    truncated = np.array([np.minimum(contributions, tau).sum() for tau in race.taus])
    truth = contributions.sum()
    released, shifted = race.release(np.tile(truncated, (10_000, 1)), resolve_source(rng))
    low, high = race.interval(shifted, 0.05)
    above = int(np.sum(released > truth))
    missed = int(np.sum((low > truth) | (high < truth)))
    for count in (above, missed):
        assert stats.binomtest(count, 10_000, 0.05, alternative="greater").pvalue > 1e-3


@pytest.mark.statistical
def test_the_audit_of_the_race_has_power_against_an_unsplit_epsilon() -> None:
    """Worst-case neighbours for every candidate at once (one person adds exactly tau_j to candidate j): the
    race at epsilon 1 passes its audit, and a race that gave every candidate the whole epsilon (no
    composition over the k candidates) is refuted by the same audit (10^6 releases per input, seed 21)."""
    taus = make_race(
        row_bound=1.0, integer=False, max_rows=1000, base=5.5, epsilon=1, max_partitions=1, beta=0.05
    )
    d = np.array(taus.taus) * 3
    d_prime = d + np.array(taus.taus)

    def sampler(race: Any) -> Any:
        def sample(which: int, n: int, rng: Any) -> Any:
            return race.release(np.tile((d, d_prime)[which], (n, 1)), resolve_source(rng))[0]

        return sample

    honest = audit(sampler(taus), 0, 1, trials=1_000_000, rng=np.random.default_rng(21))
    assert not honest.refutes(1.0), str(honest)
    unsplit = make_race(
        row_bound=1.0,
        integer=False,
        max_rows=1000,
        base=5.5,
        epsilon=taus.candidates,
        max_partitions=1,
        beta=0.05,
    )
    broken = audit(sampler(unsplit), 0, 1, trials=1_000_000, rng=np.random.default_rng(21))
    assert broken.refutes(1.0), str(broken)


# --- a chain of references two joins long, and values beyond the bounds ------------------------------------

CHAIN = Catalog.from_dict(
    {
        "tables": {
            "people": {
                "privacy_unit": "pid",
                "max_partitions": 1,
                "max_rows_per_partition": 1,
                "columns": {"pid": {"type": "int", "unique": True}},
            },
            "accounts": {
                "references": {"owner": "people.pid"},
                "max_partitions": 1,
                "max_rows_per_partition": 1,
                "columns": {"aid": {"type": "int", "unique": True}, "owner": "int"},
            },
            "payments": {
                "references": {"account": "accounts.aid"},
                "max_partitions": 1,
                "max_rows_per_partition": 1,
                "columns": {"payid": {"type": "int", "unique": True}, "account": "int"},
            },
            "items": {
                "references": {"payment": "payments.payid"},
                "max_partitions": 1,
                "max_rows_per_partition": 3,
                "columns": {
                    "payment": "int",
                    "price": {"type": "float", "lower": 0, "upper": 10},
                    "share": {"type": "float", "lower": 0.5, "upper": 1},
                },
            },
        }
    }
)


def _chain_engine(extreme: bool) -> DuckDBBackend:
    """Two people with one account, one payment and 5 items each; with ``extreme``, a third person whose 4
    items hold values far beyond the catalog's bounds (and a NULL)."""
    people, accounts, payments = [1, 2], [(10, 1), (20, 2)], [(100, 10), (200, 20)]
    items = [(100, 2.0, 0.9)] * 5 + [(200, 4.0, 0.5)] * 5
    if extreme:
        people.append(3)
        accounts.append((30, 3))
        payments.append((300, 30))
        items += [(300, 1e300, 1e-300), (300, -1e300, 1e300), (300, None, 0.7), (300, 5.0, -3.0)]
    backend = DuckDBBackend()
    backend.load_table("people", pa.table({"pid": people}))
    backend.load_table(
        "accounts", pa.table({"aid": [a for a, _ in accounts], "owner": [o for _, o in accounts]})
    )
    backend.load_table(
        "payments", pa.table({"payid": [p for p, _ in payments], "account": [a for _, a in payments]})
    )
    backend.load_table(
        "items",
        pa.table(
            {
                "payment": [i[0] for i in items],
                "price": pa.array([i[1] for i in items], pa.float64()),
                "share": [i[2] for i in items],
            }
        ),
    )
    return backend


def test_an_item_reaches_its_person_two_joins_away_and_is_bounded_like_any_row() -> None:
    """items -> payments -> accounts -> people: kakeibo joins payments and accounts itself, and the bounded
    statement keeps 3 items per person (kappa), each value clamped into the expression's derived bounds."""
    query = analyze("SELECT SUM(price * share) AS s, COUNT(*) AS n FROM items", CHAIN)
    assert [(j.table.name, j.qualifier) for j in query.joins] == [
        ("payments", "__person_1"),
        ("accounts", "__person_2"),
    ]
    assert query.unit == ("__person_2", "owner") and query.dataset == "people"
    plan = plan_query(query, epsilon=1)
    base = _statistics(plan, _chain_engine(False))
    assert base["rows"] == 6 and base["s_expr1"] == pytest.approx(3 * 2.0 * 0.9 + 3 * 4.0 * 0.5)


def test_values_beyond_the_bounds_move_a_statistic_by_at_most_its_sensitivity() -> None:
    """The neighbour adds a person whose items are far beyond the bounds (1e300, -1e300, NULL, a negative
    share): every statistic moves by at most its per-group sensitivity, and the statement does not fail."""
    plan = plan_query(
        analyze("SELECT SUM(price * share) AS s, SUM(price / share) AS q, COUNT(*) FROM items", CHAIN),
        epsilon=1,
    )
    base, extreme = (_statistics(plan, _chain_engine(flag)) for flag in (False, True))
    for statistic in plan.statistics:
        moved = extreme[statistic.name] - base[statistic.name]
        assert 0 <= moved <= statistic.per_group_sensitivity, statistic.name
    bounds = {v.spec.name: (v.spec.lower, v.spec.upper) for v in plan.query.values}
    assert bounds == {"expr1": (0.0, 10.0), "expr2": (0.0, 20.0)}
    assert plan.statistic("s_expr2").per_group_sensitivity == 3 * 20.0


def test_a_referenced_key_that_repeats_in_the_engine_is_refused_before_the_draw(tmp_path: Path) -> None:
    backend = _chain_engine(False)
    backend.execute("INSERT INTO payments VALUES (100, 20)")  # payment 100 now leads to two people
    session = kakeibo.connect(backend, catalog=CHAIN, ledger=str(tmp_path / "l.db"), budget=1)
    with pytest.raises(kakeibo.sql.session.CatalogMismatch, match=r"payments\.payid unique"):
        session.sql("SELECT COUNT(*) FROM items", epsilon=0.5)
    assert session.ledger.entries() == []


TINY_VALUES = Catalog.from_dict(
    {
        "tables": {
            "t": {
                "columns": {
                    "a": {"type": "float", "lower": 0, "upper": 10},
                    "b": {"type": "float", "lower": 0, "upper": 1},
                    "c": {"type": "float", "lower": 1, "upper": 2},
                }
            }
        }
    }
)


@pytest.mark.xdist_group("postgres")
def test_products_that_would_underflow_cannot_fail_on_postgres(postgres_backend: Any, tmp_path: Path) -> None:
    """PostgreSQL raises an error when a product of non-zero doubles underflows (DuckDB and Spark round to
    0): a row with a = b = 1e-200 would make SUM(a * b) fail for that row only. kakeibo flushes every
    operand and result below 1e-100 to 0, so the same statement answers."""
    import psycopg

    above = float(np.nextafter(1e-100, 1))  # differences of values at 1e-100 are about 1.6e-116 in size
    table = pa.table({"a": [1e-200, 3.0, above], "b": [1e-200, 0.5, 1e-100], "c": [1.0, 2.0, 1.5]})
    postgres_backend.load_table("t", table)
    for raw in ('SUM("a" * "b")', 'SUM(("a" - "b") * ("a" - "b") * ("a" - "b"))'):
        with pytest.raises(psycopg.errors.NumericValueOutOfRange):
            postgres_backend.execute(f'SELECT {raw} FROM "t"')
    ledger = str(tmp_path / "l.db")
    session = kakeibo.connect(postgres_backend, catalog=TINY_VALUES, ledger=ledger, budget=2**20)
    sql = (
        "SELECT SUM(a * b) AS p, SUM((a - b) * (a - b) * (a - b)) AS d, SUM(a / c * (b - 1e-60)) AS q FROM t"
    )
    released = session.sql(sql, epsilon=2**19)
    assert released.table["p"][0].as_py() == pytest.approx(1.5, abs=1e-3)
    assert released.table["d"][0].as_py() == pytest.approx(2.5**3, abs=0.05)
    with pytest.raises(QueryRefused, match="more than 4 times"):
        session.sql("SELECT SUM(a * a * a * a * a * a) FROM t", epsilon=1)
    session.ledger.close()


@pytest.mark.parametrize("name", ["Q1", "Q3", "Q12", "Q14"])
def test_the_race_answers_what_the_raw_query_computes_at_a_large_epsilon(
    name: str, tpch_duckdb: Path, tmp_path: Path
) -> None:
    """Under the race (averages as raced sum over raced count) at epsilon 2^36 the winning candidate
    truncates nothing: the released values are the raw ones up to the noise."""
    with duckdb.connect(str(tpch_duckdb), read_only=True) as con:
        expected = _raw(con, QUERIES[name])
    with _session(str(tpch_duckdb), AUTO, tmp_path) as session:
        released = session.sql(QUERIES[name], epsilon=2**36, delta=1e-9)
    _check_exact(released.table, expected)
    rows = released.table.to_pylist()
    assert all(
        r[f"{c}_ci_low"] <= r[c] for r in rows for c in released.table.column_names if f"{c}_ci_low" in r
    )


# --- channels: what an analyst sees must not tell two neighbouring databases apart ------------------------

TARGET = 9_999_999  # a customer key no generated customer has
#: the target customer's line items: values far outside the catalog's bounds, NaN, infinities, the smallest
#: double (whose product with a price underflows in PostgreSQL), -0.0, NULLs, and text no public list holds
TARGET_ITEMS = [
    (1e308, 5e-324, -1e308, float("nan"), "A", "F", "MAIL"),
    (float("inf"), -0.0, 1e-300, float("-inf"), "R", "O", "SHIP"),
    (1e-300, 5e-324, 50.0, 0.0, "N", "O", "AIR"),  # price x discount rounds to 0: PostgreSQL's underflow
    (float("nan"), 5e-324, 5e-324, 5e-324, "Z\\\\", "%_", "no such mode"),
    (None, None, None, None, None, None, None),
]


def _with_target(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The neighbouring database with one more customer, ``TARGET``, one order and the line items above."""
    customer = tables["customer"].slice(0, 1).to_pylist()[0] | {
        "c_custkey": TARGET,
        "c_acctbal": float("nan"),
    }
    order = tables["orders"].slice(0, 1).to_pylist()[0] | {
        "o_orderkey": TARGET,
        "o_custkey": TARGET,
        "o_totalprice": 1e308,
        "o_orderpriority": "1-URGENT\\\\",
    }
    template = tables["lineitem"].slice(0, 1).to_pylist()[0]
    items = [
        template
        | {
            "l_orderkey": TARGET,
            "l_linenumber": n + 1,
            "l_extendedprice": price,
            "l_discount": discount,
            "l_quantity": quantity,
            "l_tax": tax,
            "l_returnflag": flag,
            "l_linestatus": status,
            "l_shipmode": mode,
        }
        for n, (price, discount, quantity, tax, flag, status, mode) in enumerate(TARGET_ITEMS)
    ]
    out = dict(tables)
    for name, rows in (("customer", [customer]), ("orders", [order]), ("lineitem", items)):
        out[name] = pa.concat_tables([tables[name], pa.Table.from_pylist(rows, schema=tables[name].schema)])
    return out


CHANNEL_QUERIES = [
    *QUERIES.values(),
    "SELECT SUM(l_extendedprice * l_discount / (1 + l_tax)) AS r FROM lineitem WHERE l_quantity > 10",
    "SELECT l_returnflag, AVG(l_extendedprice * (1 - l_discount)) AS a FROM lineitem GROUP BY l_returnflag",
    "SELECT COUNT(DISTINCT o_custkey) AS people, SUM(o_totalprice) AS t FROM orders, lineitem "
    "WHERE o_orderkey = l_orderkey AND l_shipmode LIKE 'MA%'",
    "SELECT o_orderpriority, COUNT(*) FROM orders JOIN lineitem ON l_orderkey = o_orderkey GROUP BY 1",
    "SELECT SUM(l_extendedprice / l_discount) FROM lineitem",  # refused: a divisor that can be 0
    "SELECT COUNT(*) FROM customer JOIN lineitem ON c_custkey = l_orderkey",  # refused: not a reference
]


def _observe(
    backend: Any, catalog: Catalog, sql: str, directory: Path, bounds: dict[str, object] | None = None
) -> tuple[object, ...]:
    """What an analyst sees of one call (with the analyst's ``bounds=``, if any), but the noisy values and
    row count: acceptance, the error's class and text, the charge, the released schema."""
    ledger = kakeibo.accounting.Ledger(directory / f"{uuid4().hex}.sqlite", budget=(100.0, 0.5))
    session = kakeibo.connect(backend, catalog=catalog, ledger=ledger)
    try:
        table = session.sql(
            sql, epsilon=1, delta=1e-6, bounds=bounds, rng=np.random.default_rng(0)
        ).to_arrow()
        seen: tuple[object, ...] = ("answered", tuple((f.name, str(f.type)) for f in table.schema))
    except Exception as error:  # every failure is an observation
        seen = ("failed", type(error).__qualname__, str(error))
    spent = (repr(ledger.spent()), len(ledger.entries()))
    ledger.close()
    return (*seen, spent)


def _assert_indistinguishable(backends: list[Any], catalogs: tuple[Catalog, ...], directory: Path) -> None:
    """Every channel query, under every catalog, is observed alike on the two neighbouring ``backends``."""
    for catalog in catalogs:
        for sql in CHANNEL_QUERIES:
            base, target = (_observe(backend, catalog, sql, directory) for backend in backends)
            assert base == target, sql


@pytest.mark.parametrize("catalog", [CATALOG, AUTO, CHOSEN], ids=["fixed", "race", "chosen"])
def test_duckdb_cannot_tell_the_target_customer_apart(
    catalog: Catalog, tpch_tables: dict[str, pa.Table], tmp_path: Path
) -> None:
    worlds = [_engine(tpch_tables), _engine(_with_target(tpch_tables))]
    _assert_indistinguishable(worlds, (catalog,), tmp_path)
    assert {_observe(worlds[0], catalog, sql, tmp_path)[0] for sql in CHANNEL_QUERIES} == {
        "answered",
        "failed",
    }


@pytest.mark.xdist_group("postgres")
def test_postgres_cannot_tell_the_target_customer_apart(
    postgres_server: str, tpch_tables: dict[str, pa.Table], tmp_path: Path
) -> None:
    from kakeibo.backends.postgres import PostgresBackend

    worlds = (tpch_tables, _with_target(tpch_tables))
    backends = [PostgresBackend(postgres_database_with(postgres_server, tables)) for tables in worlds]
    try:
        _assert_indistinguishable(backends, (CATALOG, AUTO, CHOSEN), tmp_path)
    finally:
        for backend in backends:
            backend.close()


def test_grouping_by_a_column_constant_per_person_needs_one_group_per_person() -> None:
    """c_nationkey is declared constant per customer, so Q10 groups each customer into one nation: L0 = 1,
    not lineitem's 4. The statement keeps one group per person even where the declaration is false."""
    assert plan_query(analyze(QUERIES["Q10"], CATALOG), epsilon=1).max_partitions == 1
    assert plan_query(analyze(QUERIES["Q12"], CATALOG), epsilon=1).max_partitions == 4
    catalog = Catalog.from_dict(
        {
            "tables": {
                "t": {
                    "privacy_unit": "u",
                    "max_partitions": 3,
                    "max_rows_per_partition": 10,
                    "columns": {
                        "u": "int",
                        "g": {"type": "int", "public_values": [1, 2, 3], "user_constant": True},
                    },
                }
            }
        }
    )
    plan = plan_query(analyze("SELECT g, COUNT(*) FROM t GROUP BY g", catalog), epsilon=1)
    backend = DuckDBBackend()
    backend.load_table("t", pa.table({"u": [7, 7, 7], "g": [1, 2, 3]}))  # the declaration is false for 7
    rows = backend.execute(bounded_sql(plan)).to_pylist()
    assert plan.max_partitions == 1 and sum(row["rows"] for row in rows) == 1


def test_every_column_that_holds_the_customer_key_counts_distinct_people() -> None:
    for column in ("c_custkey", "o_custkey"):
        query = analyze(
            f"SELECT COUNT(DISTINCT {column}) AS people FROM customer JOIN orders ON o_custkey = c_custkey",
            CATALOG,
        )
        assert query.aggregates[0].function == "count_distinct_unit"


@pytest.mark.xdist_group("spark")
def test_spark_cannot_tell_the_target_customer_apart(
    spark_backend: Any, tpch_tables: dict[str, pa.Table], tmp_path: Path
) -> None:
    from kakeibo.backends.spark import SparkBackend

    backends = []
    for tables in (tpch_tables, _with_target(tpch_tables)):
        backend = SparkBackend(session=spark_backend.session)  # a session of its own: its own views
        for table, data in tables.items():
            backend.load_table(table, data)
        backends.append(backend)
    try:
        _assert_indistinguishable(backends, (AUTO, CHOSEN), tmp_path)
    finally:
        for backend in backends:
            backend.close()


def test_the_race_is_calibrated_to_each_threshold() -> None:
    """Each of the k candidates gets epsilon / k with Laplace noise of sensitivity L0 tau_j (geometric for
    counts, on whole thresholds), the top threshold covers the declared bound, and each shift is the
    candidate's error bound at beta / k."""
    race = make_race(
        row_bound=50.0, integer=False, max_rows=10_000, base=10, epsilon=0.8, max_partitions=4, beta=0.05
    )
    assert race.taus == (50.0, 500.0, 5_000.0, 50_000.0, 500_000.0) and race.taus[-1] >= 50.0 * 10_000
    for tau, mechanism in zip(race.taus, race.mechanisms, strict=True):
        assert mechanism.sensitivity == pytest.approx(4 * tau) and mechanism.epsilon == pytest.approx(0.8 / 5)
    assert list(race.shifts(0.05)) == [m.error_bound(0.01) for m in race.mechanisms]
    counts = make_race(
        row_bound=1.0, integer=True, max_rows=100, base=5.5, epsilon=1, max_partitions=1, beta=0.05
    )
    # the grid hangs from GS = 100: 100 / 5.5^2 = 3.3, 100 / 5.5 = 18.2, rounded for a count
    assert counts.taus == (3.0, 18.0, 100.0)
    assert [m.scale for m in counts.mechanisms] == pytest.approx([3 * t for t in counts.taus])


@pytest.mark.parametrize("base", [2.0, math.e, 5.5, 10.0, 16.0])
@pytest.mark.parametrize("max_rows", [1, 2, 9, 10, 99, 1024, 10**6, 10**6 + 1])
def test_the_grid_hangs_from_the_declared_bound(base: float, max_rows: int) -> None:
    """The top threshold is M GS itself (truncation there removes nothing, and a threshold above it would
    add noise only); each is base times the one below; the smallest lies in [M, M base); so there are
    floor(log_base GS) + 1 candidates, never more than a grid climbing from M to the first power >= GS."""
    race = make_race(
        row_bound=2.5, integer=False, max_rows=max_rows, base=base, epsilon=1, max_partitions=1, beta=0.05
    )
    taus = np.array(race.taus)
    assert taus[-1] == 2.5 * max_rows and 2.5 <= taus[0] < 2.5 * base * (1 + 1e-12)
    assert np.allclose(taus[1:] / taus[:-1], base, rtol=1e-12)
    climbing = math.ceil(math.log(max_rows) / math.log(base) - 1e-12) + 1 if max_rows > 1 else 1
    assert race.candidates <= climbing
    counts = make_race(
        row_bound=1, integer=True, max_rows=max_rows, base=base, epsilon=1, max_partitions=1, beta=0.05
    )
    assert counts.taus[-1] == max_rows and all(t == round(t) >= 1 for t in counts.taus)


def test_a_correlated_person_table_is_queried_alone() -> None:
    """The Bayesian calibration of a correlated table covers that table's own rows: joining it along
    references, or querying a table that reaches it, is refused before any data is read."""
    data = CATALOG.to_dict()
    data["tables"]["customer"]["correlation"] = {"edges": [[1, 2, 1.0], [2, 3, 1.0]], "tau": 1.0}
    correlated = Catalog.from_dict(data)
    assert analyze("SELECT COUNT(*) FROM customer", correlated).person is not None
    for sql in (
        "SELECT COUNT(*) FROM customer JOIN orders ON o_custkey = c_custkey",
        "SELECT COUNT(*) FROM orders",
    ):
        with pytest.raises(QueryRefused, match="correlated, and queries that join it along references"):
            analyze(sql, correlated)
