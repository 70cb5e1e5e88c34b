"""Views in a session (``kakeibo.sql.views``): built once and charged once, answered at no cost, stored in the
ledger, binned alike on every engine, refused with a reason where they cannot answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.privacy import PureDP
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql.views import Axis, cell_counts_sql, parse_view_definition

CATALOG = Catalog.from_dict(
    {
        "tables": {
            "adult": {
                "privacy_unit": "uid",
                "max_partitions": 1,
                "max_rows_per_partition": 1,
                "columns": {
                    "uid": "int",
                    "age": {"type": "int", "lower": 17, "upper": 90, "bins": 74},
                    "hours": {"type": "float", "lower": 0, "upper": 100},
                    "workclass": {"type": "str", "public_values": ["private", "gov", "self"]},
                    "note": "str",
                },
            },
            "regions": {"public": True, "columns": {"name": {"type": "str", "unique": True}}},
        }
    }
)
DEFINITION = "SELECT age, workclass, hours FROM adult"


def _adult(rows: int, seed: int, users: int | None = None) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "uid": rng.integers(0, users, rows) if users else np.arange(rows),
            "age": rng.integers(17, 91, rows),
            "hours": np.clip(rng.normal(40, 12, rows), 1, 99),
            "workclass": rng.choice(np.array(["private", "gov", "self"]), rows, p=[0.7, 0.2, 0.1]),
            "note": np.full(rows, "x"),
        }
    )


def _session(table: pa.Table, ledger: Path, *, budget: float = 10.0) -> kakeibo.sql.Session:
    backend = DuckDBBackend()
    backend.load_table("adult", table)
    backend.load_table("regions", pa.table({"name": ["north", "south"]}))
    return kakeibo.connect(backend, catalog=CATALOG, ledger=ledger, budget=budget, source="adult-test")


@pytest.fixture(scope="module")
def people() -> pa.Table:
    return _adult(40_000, seed=1)


def test_a_view_is_charged_once_and_answers_at_no_cost(people: pa.Table, tmp_path: Path) -> None:
    session = _session(people, tmp_path / "ledger.sqlite")
    built = session.create_view("v", DEFINITION, epsilon=1, rng=np.random.default_rng(2))
    assert built.privacy_loss == PureDP(1) and built.ledger_entry is not None
    assert built.ledger_entry.label == f"CREATE VIEW v AS {DEFINITION}"
    spent = session.ledger.spent()
    queries = [
        "SELECT COUNT(*) AS n FROM v WHERE age BETWEEN 30 AND 40 AND hours > 45",
        "SELECT workclass, COUNT(*) AS n FROM v GROUP BY workclass",
        "SELECT COUNT(*) FROM v WHERE workclass IN ('gov', 'self') AND age < 25",
    ]
    for query in queries * 20:
        result = session.sql(query)
        assert result.privacy_loss == PureDP(0) and result.ledger_entry is None
    assert session.ledger.spent() == spent and len(session.ledger.entries()) == 1
    ages = session.sql("SELECT age, COUNT(*) AS n FROM v GROUP BY age").to_arrow()
    assert ages.column("age").to_pylist() == list(range(17, 91))  # one-year bins, keyed by their value
    hours = session.sql("SELECT hours, COUNT(*) AS n FROM v WHERE age < 30 GROUP BY hours").to_arrow()
    assert hours.column("hours").to_pylist() == [3.125 * i for i in range(32)]  # keyed by their least value
    assert session.explain(queries[0]).startswith("from view v, no charge\nview v over adult: age (74 bins)")


def test_answers_are_close_to_the_truth(people: pa.Table, tmp_path: Path) -> None:
    """One row per person, epsilon 1, 40,000 rows. Ranges of age (single-year bins) are within 5% of the
    truth. A value of workclass and a two-column range are within 25%: blocks that span several values
    spread their counts evenly over them (gov and self, 20% and 10% of the rows, shared such blocks, and
    over 10 builds gov came out 13% low in the median, its noise-free answer from the same blocks as
    low), which is HDPView's own error, not its noise. The groups of workclass add up to the rows."""
    session = _session(people, tmp_path / "ledger.sqlite")
    session.create_view("v", DEFINITION, epsilon=1, rng=np.random.default_rng(3))
    age, hours = people.column("age").to_numpy(), people.column("hours").to_numpy()
    work = np.array(people.column("workclass").to_pylist())
    cases = [
        ("age BETWEEN 30 AND 39", (age >= 30) & (age <= 39), 0.05),
        ("age >= 60", age >= 60, 0.05),
        ("workclass = 'gov'", work == "gov", 0.25),
        ("hours >= 50 AND age < 40", (hours >= 50) & (age < 40), 0.25),
    ]
    for condition, mask, tolerance in cases:
        row = session.sql(f"SELECT COUNT(*) AS n FROM v WHERE {condition}").to_arrow().to_pylist()[0]
        truth = int(mask.sum())
        assert abs(row["n"] - truth) < tolerance * truth, (condition, row, truth)
        assert row["n_ci_low"] < row["n"] < row["n_ci_high"]
    groups = session.sql("SELECT workclass, COUNT(*) AS n FROM v GROUP BY workclass").to_arrow().to_pylist()
    assert [g["workclass"] for g in groups] == ["private", "gov", "self"]
    assert abs(sum(g["n"] for g in groups) - people.num_rows) < 0.02 * people.num_rows


def test_a_view_outlives_its_session_and_is_replayed_not_rebuilt(people: pa.Table, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    query = "SELECT COUNT(*) AS n FROM v WHERE age > 50"
    first = _session(people, ledger)
    first.create_view("v", DEFINITION, epsilon=1, rng=np.random.default_rng(4))
    before = first.sql(query).to_arrow()
    first.close()
    second = _session(people, ledger)
    assert list(second.views()) == ["v"]
    assert second.sql(query).to_arrow().equals(before)
    again = second.create_view("v", DEFINITION, epsilon=1)
    assert (
        len(second.ledger.entries()) == 1
        and again.view.view.totals.tolist() == second.views()["v"].view.totals.tolist()
    )
    with pytest.raises(QueryRefused, match="a view named v exists already, with another definition"):
        second.create_view("v", DEFINITION, epsilon=2)
    other_data = kakeibo.connect(
        DuckDBBackend(), catalog=CATALOG, ledger=second.ledger, source="another database"
    )
    assert other_data.views() == {}


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        ("SELECT AVG(hours) FROM v", "COUNT(*) and its own columns, not AVG(hours)"),
        ("SELECT COUNT(*) FROM v WHERE uid = 3", "view v has no column uid"),
        ("SELECT COUNT(*) FROM v WHERE age < 30 OR age > 60", "joins comparisons of its columns"),
        ("SELECT COUNT(*) FROM v WHERE hours = 40", "float column: ask for a range"),
        ("SELECT COUNT(*) FROM v WHERE workclass = 'army'", "'army' is not among the public values"),
        ("SELECT COUNT(*) FROM v WHERE workclass > 'a'", "compare it with = or IN"),
        ("SELECT COUNT(*) FROM v WHERE age < hours", "compares its columns with literals only"),
        ("SELECT COUNT(*) FROM v ORDER BY 1", "not ORDER"),
        ("SELECT age, COUNT(*) FROM v", "with the GROUP BY columns selected beside it"),
        ("SELECT COUNT(*), COUNT(*) FROM v", "one COUNT(*) per query"),
    ],
)
def test_what_a_view_cannot_answer_is_refused_with_the_reason_and_no_charge(
    people: pa.Table, tmp_path: Path, query: str, fragment: str
) -> None:
    session = _session(people, tmp_path / "ledger.sqlite")
    session.create_view("v", DEFINITION, epsilon=1, rng=np.random.default_rng(5))
    with pytest.raises(QueryRefused, match='outside_view="charge" runs it on table adult') as refused:
        session.sql(query, epsilon=1)
    assert fragment in str(refused.value)
    assert len(session.ledger.entries()) == 1


def test_outside_view_charge_runs_the_query_on_the_table(people: pa.Table, tmp_path: Path) -> None:
    session = _session(people, tmp_path / "ledger.sqlite")
    session.create_view("v", DEFINITION, epsilon=1, rng=np.random.default_rng(6))
    query = "SELECT AVG(hours) AS h FROM v"
    explained = session.explain(query, epsilon=0.5, outside_view="charge")
    assert explained.startswith("view v cannot answer this (") and "charged on table adult:" in explained
    result = session.sql(query, epsilon=0.5, outside_view="charge", rng=np.random.default_rng(7))
    assert result.privacy_loss == PureDP(0.5) and len(session.ledger.entries()) == 2
    assert abs(result.to_arrow().column("h")[0].as_py() - 40) < 1
    with pytest.raises(QueryRefused, match='outside_view is "refuse" or "charge"'):
        session.sql(query, epsilon=0.5, outside_view="maybe")


@pytest.mark.parametrize(
    ("name", "definition", "bins", "fragment"),
    [
        ("v", "SELECT age FROM adult WHERE age > 30", None, "no other clause"),
        ("v", "SELECT COUNT(*) FROM adult", None, "plain columns of one table"),
        ("v", "SELECT age FROM adult JOIN regions ON note = name", None, "plain columns of one table"),
        ("v", "SELECT uid FROM adult", None, "adult.uid is not a column a view can hold"),
        ("v", "SELECT note FROM adult", None, "declare its public_values, or numeric lower and upper bounds"),
        ("v", "SELECT age, age FROM adult", None, "each column once"),
        ("v", "SELECT name FROM regions", None, "'regions' is public"),
        ("adult", "SELECT age FROM adult", None, "cannot take the name of the catalog's table"),
        ("1v", "SELECT age FROM adult", None, "must be an identifier"),
        ("v", "SELECT age FROM adult", {"hours": 8}, "bins= names columns a view does not have: hours"),
        ("v", "SELECT age FROM (", None, "this is not SQL kakeibo reads"),
    ],
)
def test_bad_view_definitions_are_refused_before_any_charge(
    people: pa.Table, tmp_path: Path, name: str, definition: str, bins: Any, fragment: str
) -> None:
    session = _session(people, tmp_path / "ledger.sqlite")
    with pytest.raises(QueryRefused, match=fragment):
        session.create_view(name, definition, epsilon=1, bins=bins)
    with pytest.raises(QueryRefused, match="rows_per_person must be a whole number"):
        session.create_view("v", DEFINITION, epsilon=1, rows_per_person=0)
    with pytest.raises(QueryRefused, match="a view needs a positive epsilon"):
        session.create_view("v", DEFINITION, epsilon=0)
    assert session.ledger.entries() == []


def test_the_catalog_declares_bins() -> None:
    assert Catalog.from_dict(CATALOG.to_dict()).table("adult").columns["age"].bins == 74
    for bad, fragment in ((0, "from 1 to 65536"), (True, "from 1 to 65536")):
        with pytest.raises(ValueError, match=fragment):
            Catalog.from_dict(
                {"tables": {"t": {"columns": {"x": {"type": "int", "lower": 0, "upper": 9, "bins": bad}}}}}
            )
    with pytest.raises(ValueError, match="takes bins only with numeric lower and upper bounds"):
        Catalog.from_dict({"tables": {"t": {"columns": {"x": {"type": "int", "bins": 4}}}}})


# --- the user-level bound and the calibration ------------------------------------------------------------


@pytest.mark.parametrize("random_order", [False, True])
def test_a_person_adds_at_most_rows_per_person_rows_and_the_view_is_built_at_epsilon_over_them(
    tmp_path: Path, random_order: bool
) -> None:
    """The group-privacy argument's two halves: one person, however many rows they hold, moves the count
    tensor by at most ``rows_per_person`` in L1 (kept in cell order, as a view keeps them, or in random
    order, as a synthesis does); the view is then built at ``epsilon / rows_per_person``."""
    base = _adult(5_000, seed=8, users=1_000)
    if random_order:  # every other person within the bound, so that only the heavy one's rows are drawn
        base = base.set_column(0, "uid", pa.array(np.arange(5_000) // 3))
    heavy = _adult(500, seed=9)
    heavy = heavy.set_column(0, "uid", pa.array(np.full(500, 10**6)))
    definition = parse_view_definition("v", DEFINITION, CATALOG)
    tensors = []
    for table in (base, pa.concat_tables([base, heavy])):
        backend = DuckDBBackend()
        backend.load_table("adult", table)
        counts = backend.execute(
            cell_counts_sql(definition.table, definition.axes, 3, random_order=random_order)
        )
        keys = zip(*(counts.column(f"__c{i}").to_pylist() for i in range(3)), strict=True)
        tensors.append(dict(zip(keys, counts.column("__n").to_pylist(), strict=True)))
    moved = sum(
        abs(tensors[1].get(k, 0) - tensors[0].get(k, 0)) for k in tensors[0].keys() | tensors[1].keys()
    )
    assert moved == 3
    session = _session(base, tmp_path / "ledger.sqlite")
    built = session.create_view("v", DEFINITION, epsilon=1.5, rows_per_person=3, rng=np.random.default_rng(1))
    assert built.view.view.epsilon == pytest.approx(0.5) and built.privacy_loss == PureDP(1.5)
    assert built.view.view.noise.epsilon == pytest.approx(0.5 * 0.1)


# --- binning, alike on every engine ----------------------------------------------------------------------

EDGES = pa.table(
    {
        "uid": np.arange(12),
        "age": pa.array([17, 90, 16, -5, 10**12, 53, None, 18, 89, 40, 41, 17], pa.int64()),
        "hours": pa.array(
            [
                0.0,
                100.0,
                -1e300,
                1e300,
                float("nan"),
                float("inf"),
                float("-inf"),
                None,
                3.125,
                3.1249999,
                -0.0,
                5e-324,
            ],
            pa.float64(),
        ),
        "workclass": pa.array(
            ["private", "gov", "self", "army", None, "Private", "", "gov", "self", "x", "private", "gov"]
        ),
        "note": pa.array(["x"] * 12),
    }
)


def _expected_bins() -> list[tuple[int, int, int]]:
    """The bins every engine must give EDGES' rows, computed in Python from the axes."""
    definition = parse_view_definition("v", DEFINITION, CATALOG)
    age, work, hours = definition.axes

    def numeric(axis: Axis, value: Any) -> int:
        if value is None:
            return axis.bins
        if value != value:  # NaN: above every number, as the engines order it
            return axis.bins - 1
        return int(min(axis.bins - 1, max(0, np.floor((value - axis.origin) / axis.width))))

    def public(axis: Axis, value: Any) -> int:
        return axis.values.index(value) if axis.values is not None and value in axis.values else axis.bins

    rows = EDGES.to_pylist()
    return sorted(
        (numeric(age, r["age"]), public(work, r["workclass"]), numeric(hours, r["hours"])) for r in rows
    )


def _engine_bins(backend: Any, random_order: bool) -> list[tuple[int, int, int]]:
    """The engine's cells of EDGES' rows by the statement of a view (``random_order=False``) or of a
    synthesis (each person's one row kept in random order: the same cells)."""
    definition = parse_view_definition("v", DEFINITION, CATALOG)
    statement = cell_counts_sql(definition.table, definition.axes, 1, random_order=random_order)
    import sqlglot

    counts = backend.execute(sqlglot.transpile(statement, read="duckdb", write=backend.dialect)[0])
    cells = []
    for row in counts.to_pylist():
        cells += [(row["__c0"], row["__c1"], row["__c2"])] * row["__n"]
    return sorted(cells)


@pytest.mark.parametrize("random_order", [False, True])
def test_duckdb_bins_every_value_as_the_axes_say(random_order: bool) -> None:
    backend = DuckDBBackend()
    backend.load_table("adult", EDGES)
    assert _engine_bins(backend, random_order) == _expected_bins()


@pytest.mark.xdist_group("postgres")
@pytest.mark.parametrize("random_order", [False, True])
def test_postgres_bins_every_value_as_duckdb_does(postgres_server: str, random_order: bool) -> None:
    from kakeibo.backends.postgres import PostgresBackend
    from tpch_fixtures import postgres_database_with

    backend = PostgresBackend(postgres_database_with(postgres_server, {"adult": EDGES}))
    try:
        assert _engine_bins(backend, random_order) == _expected_bins()
    finally:
        backend.close()


@pytest.mark.xdist_group("spark")
@pytest.mark.parametrize("random_order", [False, True])
def test_spark_bins_every_value_as_duckdb_does(spark_backend: Any, random_order: bool) -> None:
    from kakeibo.backends.spark import SparkBackend

    backend = SparkBackend(session=spark_backend.session)
    backend.load_table("adult", EDGES)
    try:
        assert _engine_bins(backend, random_order) == _expected_bins()
    finally:
        backend.close()


# --- privacy of the whole path: binning, the person bound, the build --------------------------------------

SMALL = Catalog.from_dict(
    {
        "tables": {
            "adult": {
                "privacy_unit": "uid",
                "columns": {
                    "uid": "int",
                    "age": {"type": "int", "lower": 0, "upper": 3},
                    "workclass": {"type": "str", "public_values": ["private", "gov"]},
                },
            }
        }
    }
)


def _person_worlds() -> tuple[Any, list[pa.Table]]:
    """80 persons with 1-3 rows each over a 4 x 3 grid (with the other bin), and the same plus one person
    with 5 rows, all in the densest cell: the engine's count tensors of both (each person's rows bounded
    to 5)."""
    rng = np.random.default_rng(14)
    per = rng.integers(1, 4, 80)
    base = pa.table(
        {
            "uid": np.repeat(np.arange(80), per),
            "age": rng.integers(0, 4, per.sum()),
            "workclass": rng.choice(np.array(["private", "gov"]), per.sum()),
        }
    )
    target = pa.table({"uid": np.full(5, 10**6), "age": np.full(5, 1), "workclass": ["private"] * 5})
    definition = parse_view_definition("v", "SELECT age, workclass FROM adult", SMALL)
    tensors = []
    for table in (base, pa.concat_tables([base, target])):
        backend = DuckDBBackend()
        backend.load_table("adult", table)
        tensors.append(backend.execute(cell_counts_sql(definition.table, definition.axes, 5)))
    return definition, tensors


def _view_sampler(rows_per_person: int) -> Any:
    """Views built from each world's tensor (``rows_per_person`` as the build is told, while the target
    holds 5 rows), each released as the auditor's best statistic: the noisy total of the block holding
    the target's cell minus what that block holds in the world without the target (the auditor knows
    it; the blocks are public). 90% of epsilon goes to the totals (``ratio = 0.1``), so what one person's
    rows move is plain to see."""
    from kakeibo.sql.views import build_view
    from kakeibo.views.hdpview import HDPViewParameters

    definition, tensors = _person_worlds()
    cells = np.column_stack([tensors[0].column(f"__c{i}").to_numpy() for i in range(2)])
    counts = tensors[0].column("__n").to_numpy()
    target = np.array([1, 0])  # age 1, workclass private

    def sample(index: int, n: int, rng: Any) -> np.ndarray:
        out = np.empty(n)
        for i in range(n):
            view = build_view(
                definition,
                tensors[index],
                epsilon=1.0,
                rows_per_person=rows_per_person,
                source="audit",
                parameters=HDPViewParameters(ratio=0.1),
                rng=rng,
            ).view
            block = int(np.flatnonzero(((view.lows <= target) & (view.highs >= target)).all(axis=1))[0])
            inside = ((cells >= view.lows[block]) & (cells <= view.highs[block])).all(axis=1)
            out[i] = view.totals[block] - counts[inside].sum()
        return out

    return sample


@pytest.mark.statistical
def test_an_audit_of_a_view_does_not_refute_its_epsilon_for_a_person_with_many_rows() -> None:
    """A person with 5 rows, the view bounded to 5 rows per person and built at epsilon / 5: 1,000 views
    per neighbour (after 200 to choose the events) do not refute epsilon 1 at 95%. Told 1 row per person
    (so built at the full epsilon, as if the person were one row), 400 views refute it: the group-privacy
    scaling is what keeps the promise, and the audit sees its absence."""
    from kakeibo.audit import audit

    honest = audit(
        _view_sampler(5), 0, 1, trials=1_000, batch=500, selection_trials=200, rng=np.random.default_rng(15)
    )
    assert not honest.refutes(1.0), honest
    unscaled = audit(
        _view_sampler(1), 0, 1, trials=400, batch=400, selection_trials=100, rng=np.random.default_rng(15)
    )
    assert unscaled.refutes(1.0), unscaled


def test_a_query_too_large_for_a_view_is_refused_and_in_lists_merge(people: pa.Table, tmp_path: Path) -> None:
    """An analyst cannot make one answer fill memory: over 4,096 groups is refused from the query and the
    view alone (the work of an answer: tests/test_sql_work_bounds.py); IN over neighbouring public values is
    one interval, and answers as the sum."""
    session = _session(people, tmp_path / "ledger.sqlite")
    session.create_view("v", DEFINITION, epsilon=1, rng=np.random.default_rng(16))
    with pytest.raises(QueryRefused, match="at most 4096 groups per query and this one asks for 7104"):
        session.sql("SELECT age, hours, workclass, COUNT(*) AS n FROM v GROUP BY age, hours, workclass")
    both = session.sql("SELECT COUNT(*) AS n FROM v WHERE workclass IN ('gov', 'private')").to_arrow()
    each = session.sql("SELECT workclass, COUNT(*) AS n FROM v GROUP BY workclass").to_arrow().to_pylist()
    assert both.column("n")[0].as_py() == pytest.approx(each[0]["n"] + each[1]["n"])
