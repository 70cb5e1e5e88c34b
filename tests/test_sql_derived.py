"""Expressions around aggregates (issue 17): post-processing of released aggregates, total, with intervals.

What is checked: each value is the expression evaluated on the released aggregates and costs what they cost
(a hidden aggregate is charged like a selected one, and released once when it is both); nothing after the
draw can fail (division by zero, logs of negatives, overflow give NULL); the interval arithmetic bounds the
expression on every point of the inputs' boxes; the stated 95% interval covers the exact value at least as
often as it says (seeded, repeated releases); and neighbouring databases give the same outcome, error text
and charge (the adversarial harness).
"""

from __future__ import annotations

import itertools
import math
import os
import tempfile
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import sqlglot
from scipy import stats

import kakeibo
from adversarial_harness import Worlds, assert_indistinguishable, duckdb_worlds
from kakeibo.backends import DuckDBBackend
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql.derived import Derived, check_expression, derived_bounds, derived_values
from kakeibo.sql.session import Session

CATALOG = Catalog.from_toml(
    """
[tables.census]
[tables.census.columns]
age = { type = "int", lower = 18, upper = 90 }
sex = { type = "str", public_values = ["1", "2"] }
income = { type = "float", lower = 0, upper = 100000 }
"""
)
ROWS = 2000


def _census(seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "age": rng.integers(18, 91, ROWS),
            "sex": rng.choice(["1", "2"], ROWS),
            "income": rng.uniform(0, 100000, ROWS),  # inside the declared bounds: bounded = exact
        }
    )


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    db = DuckDBBackend()
    db.load_table("census", _census())
    with kakeibo.connect(db, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=(10**6, 0.5)) as s:
        yield s


def _exact(session: Session, sql: str) -> list[tuple[object, ...]]:
    return [tuple(row.values()) for row in session.backend.execute(sql).to_pylist()]


# -- values and cost ---------------------------------------------------------------------------------------


def test_an_expression_is_its_aggregates_released_once(session: Session) -> None:
    rng = np.random.default_rng(1)
    both = session.sql(
        "SELECT sex, SUM(income) AS s, COUNT(*) AS n, SUM(income) / COUNT(*) AS r, "
        "ROUND(SUM(income), -3) AS k FROM census GROUP BY sex ORDER BY sex",
        epsilon=1,
        rng=rng,
    ).to_arrow()
    s, n, r, k = (np.asarray(both.column(c).to_pylist(), dtype=float) for c in ("s", "n", "r", "k"))
    np.testing.assert_array_equal(r, s / n)  # computed from the released values, not drawn again
    np.testing.assert_array_equal(k, np.sign(s) * np.floor(np.abs(s) / 1000 + 0.5) * 1000)
    assert both.column_names[:5] == ["sex", "s", "n", "r", "k"]


def test_a_hidden_aggregate_costs_what_selecting_it_costs(session: Session) -> None:
    hidden = session.sql("SELECT SUM(income) / COUNT(*) AS r FROM census", epsilon=1)
    shown = session.sql("SELECT SUM(income) AS s, COUNT(*) AS n FROM census", epsilon=1)
    assert hidden.privacy_loss == shown.privacy_loss
    assert hidden.ledger_entry is not None and hidden.ledger_entry.loss == shown.privacy_loss
    assert hidden.to_arrow().column_names == ["r", "r_ci_low", "r_ci_high"]  # the inputs are not shown
    plan = session.plan("SELECT SUM(income) / COUNT(*) AS r FROM census", epsilon=1)
    assert [s.name for s in plan.statistics] == [
        s.name
        for s in session.plan("SELECT SUM(income) AS s, COUNT(*) AS n FROM census", epsilon=1).statistics
    ]
    explained = session.explain("SELECT SUM(income) / COUNT(*) AS r FROM census", epsilon=1)
    assert "ORDER BY (noised and charged): __sum_income, __count" in explained


def test_having_or_order_by_an_aggregate_not_selected_releases_it_hidden(session: Session) -> None:
    """``HAVING COUNT(*) > 7`` filters on a noisy count, charged like a selected one, and not shown."""
    filtered = session.sql(
        "SELECT sex, AVG(age) AS a FROM census GROUP BY sex HAVING COUNT(*) > 1e9 ORDER BY SUM(income)",
        epsilon=1,
    )
    selected = session.plan(
        "SELECT sex, AVG(age) AS a, COUNT(*) AS n, SUM(income) AS s FROM census GROUP BY sex", epsilon=1
    )
    assert filtered.privacy_loss == selected.privacy_loss
    assert filtered.to_arrow().num_rows == 0  # no noisy count is near 1e9
    assert filtered.to_arrow().column_names == ["sex", "a", "a_ci_low", "a_ci_high"]
    kept = session.sql("SELECT sex, AVG(age) AS a FROM census GROUP BY sex HAVING COUNT(*) > 7", epsilon=1)
    assert kept.to_arrow().num_rows == 2


def test_text_results_and_filters_on_expressions(session: Session) -> None:
    many = session.sql(
        "SELECT sex, CASE WHEN COUNT(*) > 10 THEN 'many' ELSE 'few' END AS size FROM census GROUP BY sex"
        " HAVING size = 'many'",
        epsilon=1,
    ).to_arrow()
    assert many.schema.field("size").type == pa.string() and set(many.column("size").to_pylist()) == {"many"}
    assert many.column("size_ci_low").null_count == many.num_rows  # a CASE has no interval


@pytest.mark.parametrize(
    "expression",
    [
        "SUM(income) / (COUNT(*) - COUNT(*))",  # division by zero
        "LN(0 - COUNT(*))",  # log of a negative number
        "SQRT(0 - COUNT(*))",
        "POWER(COUNT(*), 64) * POWER(COUNT(*), 64)",  # overflow
        "EXP(COUNT(*))",
        "CASE WHEN COUNT(*) < 0 THEN 1 END",  # no branch taken, no ELSE
    ],
)
def test_nothing_after_the_draw_fails_it_is_null(session: Session, expression: str) -> None:
    released = session.sql(f"SELECT {expression} AS v FROM census", epsilon=1).to_arrow()
    assert released.column("v").to_pylist() == [None]


# -- intervals ---------------------------------------------------------------------------------------------

EXPRESSIONS = [
    "a + b",
    "a - b",
    "a * b",
    "a / b",
    "-a * 3 + b",
    "ROUND(a, 1)",
    "ABS(a)",
    "POWER(a, 2)",
    "POWER(a, 3)",
    "POWER(a, -1)",
    "SQRT(a)",
    "LN(a)",
    "EXP(a)",
    "CEIL(a) - FLOOR(b)",
    "SIGN(a)",
    "GREATEST(a, b)",
    "LEAST(a, b, 0)",
    "(a + b) / (a - b)",
]


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_interval_arithmetic_bounds_every_point_of_the_box(text: str) -> None:
    """For random boxes (some across 0), the expression at every grid point of the box lies within the
    bounds, wherever bounds are given."""
    node = sqlglot.parse_one(f"SELECT {text}", read="duckdb").expressions[0]
    assert check_expression(node, text, frozenset({"a", "b"})) is False
    derived = Derived("v", node, ("a", "b"))
    rng = np.random.default_rng(7)
    rows = 300
    centres = rng.normal(0, 3, (2, rows))
    widths = rng.exponential(1, (2, rows))
    lows = {"a": centres[0] - widths[0], "b": centres[1] - widths[1]}
    highs = {"a": centres[0] + widths[0], "b": centres[1] + widths[1]}
    low, high = derived_bounds(derived, lows, highs, rows)
    given = ~np.isnan(low)
    assert given.any()
    for t, u in itertools.product(np.linspace(0, 1, 7), repeat=2):
        point = {k: lows[k] + (highs[k] - lows[k]) * w for k, w in zip("ab", (t, u), strict=True)}
        value = np.asarray(derived_values(derived, point, rows), dtype=float)
        inside = ~np.isnan(value) & given
        assert np.all(value[inside] >= low[inside] - 1e-9 * (1 + np.abs(low[inside])))
        assert np.all(value[inside] <= high[inside] + 1e-9 * (1 + np.abs(high[inside])))


def test_stated_intervals_cover_the_exact_value_at_their_level() -> None:
    """200 seeded releases of a ratio and a rounded mean per group: the exact value (the data lie inside
    their bounds) falls in the 95% interval at least 90% of the time; with true coverage >= 95% the chance
    of fewer than 180 hits out of 200 is below 0.2% (binomial tail, computed below)."""
    trials = 200
    assert stats.binom.cdf(179, trials, 0.95) < 0.002
    db = DuckDBBackend()
    db.load_table("census", _census(3))
    with tempfile.TemporaryDirectory() as folder:
        session = kakeibo.connect(
            db, catalog=CATALOG, ledger=os.path.join(folder, "l.sqlite"), budget=(10**6, 0.5)
        )
        query = (
            "SELECT sex, SUM(income) / COUNT(*) AS r, ROUND(AVG(age), 0) AS m, POWER(COUNT(*), 2) AS q"
            " FROM census GROUP BY sex ORDER BY sex"
        )
        exact = _exact(
            session,
            "SELECT sex, SUM(income) / COUNT(*), ROUND(AVG(age), 0), POWER(COUNT(*), 2) FROM census "
            "GROUP BY sex ORDER BY sex",
        )
        hits = {name: 0 for name in ("r", "m", "q")}
        for seed in range(trials):
            released = session.sql(query, epsilon=0.05, rng=np.random.default_rng(seed)).to_arrow()
            for i, row in enumerate(released.to_pylist()):
                for j, name in enumerate(("r", "m", "q"), start=1):
                    hits[name] += row[f"{name}_ci_low"] <= exact[i][j] <= row[f"{name}_ci_high"]
        session.close()
    for name, count in hits.items():
        assert count >= 0.9 * 2 * trials, (name, count)


# -- neighbours --------------------------------------------------------------------------------------------

NEIGHBOUR_QUERIES = [
    "SELECT DISTINCT name FROM visits",
    "SELECT building AS b FROM visits GROUP BY building ORDER BY b LIMIT 3",
    "SELECT 7 AS seven, PI() AS p, 'x' AS t, COUNT(*) AS n FROM visits",
    "SELECT SUM(amount) / COUNT(*) AS r FROM visits",
    "SELECT category, ROUND(AVG(amount), 1) AS m, COUNT(*) * 2 AS n2 FROM visits GROUP BY category",
    "SELECT building, SUM(amount) / COUNT(*) AS r FROM visits GROUP BY building HAVING r > 10",
    "SELECT LN(SUM(amount) - 1e308) AS l, SQRT(0 - COUNT(*)) AS s FROM visits",
    "SELECT CASE WHEN COUNT(*) > 400 THEN 'many' ELSE 'few' END AS c FROM visits",
    "SELECT SUM(amount) / (COUNT(*) - COUNT(*)) AS z FROM visits",
    "SELECT MEDIAN(amount) / COUNT(*) AS mq FROM visits",
]


@pytest.fixture(scope="module")
def worlds() -> Iterator[Worlds]:
    built = duckdb_worlds()
    try:
        yield built
    finally:
        built.close()


@pytest.mark.parametrize("query", NEIGHBOUR_QUERIES)
def test_neighbours_see_the_same_outcome(worlds: Worlds, query: str) -> None:
    assert_indistinguishable(worlds, query)


# -- constants and the keys of a GROUP BY ------------------------------------------------------------------


def test_constants_are_outputs_and_randomness_is_refused(session: Session) -> None:
    released = session.sql(
        "SELECT sex, 3 AS three, 2 * PI() AS tau, 'EUR' AS currency, COUNT(*) AS n FROM census GROUP BY sex",
        epsilon=1,
    ).to_arrow()
    assert released.column("three").to_pylist() == [3.0, 3.0]
    assert released.column("tau").to_pylist() == [2 * math.pi] * 2
    assert released.column("currency").to_pylist() == ["EUR", "EUR"]
    assert released.schema.field("currency").type == pa.string()
    for query, reason in [
        ("SELECT RANDOM() AS r, COUNT(*) AS n FROM census", "is non-deterministic"),
        ("SELECT 3 AS three FROM census", "the query computes no aggregate"),
        ("SELECT 'a' || 'b' AS x, COUNT(*) AS n FROM census", "uses DPIPE, which kakeibo does not evaluate"),
    ]:
        with pytest.raises(QueryRefused, match=reason):
            session.sql(query, epsilon=1)


KEYS = Catalog.from_toml(
    """
[tables.devices]
privacy_unit = "person"
max_partitions = 2
max_rows_per_partition = 5
[tables.devices.columns]
person = "int"
model = "str"
os = { type = "str", public_values = ["android", "ios"] }
"""
)


def _devices() -> pa.Table:
    """40 people on each of three common models, and one person alone on a rare one."""
    people = np.arange(121)
    models = np.where(people == 120, "rare", np.array(["a", "b", "c"])[people % 3])
    return pa.table({"person": people, "model": models, "os": np.where(people % 2, "ios", "android")})


def test_group_by_without_an_aggregate_releases_the_keys_by_partition_selection(tmp_path: Path) -> None:
    """The keys alone, charged the selection's (epsilon, delta); a key one person holds is released with
    probability <= delta / L0 per query (here 1e-9 / 2): in 100 seeded releases, never."""
    db = DuckDBBackend()
    db.load_table("devices", _devices())
    with kakeibo.connect(db, catalog=KEYS, ledger=tmp_path / "l.sqlite", budget=(10**6, 0.5)) as session:
        grouped = session.sql("SELECT model FROM devices GROUP BY model", epsilon=1, delta=1e-9)
        assert grouped.privacy_loss.epsilon == 1 and grouped.privacy_loss.delta == Fraction(1, 10**9)
        seen: set[str] = set()
        for seed in range(100):
            for query in ("SELECT DISTINCT model FROM devices", "SELECT model AS m FROM devices GROUP BY 1"):
                table = session.sql(query, epsilon=5, delta=1e-9, rng=np.random.default_rng(seed)).to_arrow()
                assert table.num_columns == 1
                seen.update(table.column(0).to_pylist())
        assert seen == {"a", "b", "c"}  # 40 people each: released; the one person on "rare": never
        with pytest.raises(QueryRefused, match="every GROUP BY key of this query is public"):
            session.sql("SELECT DISTINCT os FROM devices", epsilon=1, delta=1e-9)
        with pytest.raises(QueryRefused, match="SELECT DISTINCT is supported over plain columns only"):
            session.sql("SELECT DISTINCT model, COUNT(*) FROM devices", epsilon=1, delta=1e-9)


# -- consistency: never-negative aggregates clamped at 0 on request ----------------------------------------


def test_nonnegative_clamps_what_cannot_be_negative_at_no_cost(session: Session) -> None:
    """A sum near 0 at a tiny epsilon is often released negative; ``nonnegative=True`` answers from the
    same stored release with the value and its interval clamped at 0 (free: a replay), and the clamped
    interval still holds the exact value whenever the released one did."""
    query = (
        "SELECT sex, SUM(income) AS s, COUNT(*) AS n FROM census WHERE income < 1 GROUP BY sex ORDER BY sex"
    )
    exact = dict(_exact(session, "SELECT sex, SUM(income) FROM census WHERE income < 1 GROUP BY sex"))
    negative = 0
    for seed in range(40):
        request = f"r{seed}"
        raw = session.sql(
            query, epsilon=0.001, rng=np.random.default_rng(seed), request_id=request
        ).to_arrow()
        spent = session.ledger.spent()
        clamped = session.sql(query, epsilon=0.001, request_id=request, nonnegative=True)
        assert session.ledger.spent() == spent  # the stored release, post-processed: no new charge
        rows = clamped.to_arrow().to_pylist()
        for before, after in zip(raw.to_pylist(), rows, strict=True):
            negative += before["s"] < 0
            for column in ("s", "s_ci_low", "s_ci_high", "n", "n_ci_low", "n_ci_high"):
                assert after[column] == max(before[column], 0)
            if before["s_ci_low"] <= exact.get(after["sex"], 0) <= before["s_ci_high"]:
                assert after["s_ci_low"] <= exact.get(after["sex"], 0) <= after["s_ci_high"]
    assert negative > 0  # the case the option exists for did occur
    explained = session.explain(query, epsilon=0.001, nonnegative=True)
    assert "clamped at 0 with their intervals (nonnegative=True, no cost): s, n" in explained
    bounded = session.explain(
        "SELECT AVG(age) AS a, MEDIAN(age) AS m FROM census", epsilon=1, nonnegative=True
    )
    assert "(nonnegative=True, no cost): a, m" in bounded  # age >= 18 by its bounds
