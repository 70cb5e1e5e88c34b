"""The work of an answer is bounded before it starts (issue 29, R4 and R7).

R7: a join to a public table on a repeated key fanned one person's row out to millions of joined rows
before any per-person bound, so the answer's latency told whether the person was there (0.30 s against at
most 0.007 s on PostgreSQL, at epsilon 1e-3 a query). Every public join is now on a key the catalog declares
unique in the public table, checked against the engine before the draw: the fan-out join is refused, free,
with the same sentence whether or not the person is in the data, and a lookup join is still answered.

R4: a free answer over a view computed boxes x blocks x columns weights with no limit (15-36 s of a core at
8,192 boxes). A query over a view is now refused, free, when its work, counted from the query text and the
view's public structure alone, exceeds a budget; within it, each group's weights are one sum per column
instead of one product per box.
"""

from __future__ import annotations

from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from kakeibo.backends import DuckDBBackend, StatementTimeout
from kakeibo.mechanisms import Laplace
from kakeibo.privacy import PureDP
from kakeibo.sql import Catalog, QueryRefused, analyze
from kakeibo.sql import session as session_module
from kakeibo.sql import views as views_module
from kakeibo.sql.session import CatalogMismatch, Session
from kakeibo.sql.views import (
    VIEW_CONFIDENCE,
    WORK_BUDGET,
    Axis,
    StoredView,
    answer,
    answer_work,
    read_view_query,
)
from kakeibo.views.hdpview import CHERNOFF_POINTS, View

# -- R7: joins to public tables never fan out ------------------------------------------------------------

TARGET = 7
#: rows of the public table ``fan`` that share the target's rare key (the review used 4,000,000)
FAN_OUT = 20_000

JOIN_CATALOG = """
[tables.visits]
privacy_unit = "user_id"
max_partitions = 1
max_rows_per_partition = 3
[tables.visits.columns]
user_id = "int"
category = "str"
label = "str"

[tables.dim]
public = true
[tables.dim.columns]
category = {{ type = "str", unique = true }}
label = {{ type = "str", public_values = ["A", "B", "C", "R"] }}

[tables.fan]
public = true
[tables.fan.columns]
category = {{ type = "str", unique = {fan_unique} }}
note = "str"
"""
FAN_QUERY = (
    f"SELECT COUNT(*) AS n FROM visits JOIN fan ON visits.category = fan.category WHERE user_id = {TARGET}"
)


def _join_tables(with_target: bool) -> dict[str, pa.Table]:
    """100 persons with common categories; the target's one row has the key ``rare``, which ``fan`` repeats
    :data:`FAN_OUT` times."""
    users = list(range(100, 200))
    categories = [("a", "b", "c")[u % 3] for u in users]
    if with_target:
        users, categories = [*users, TARGET], [*categories, "rare"]
    visits = pa.table(
        {"user_id": pa.array(users, pa.int64()), "category": categories, "label": ["x"] * len(users)}
    )
    fan_keys = ["a", "b", "c"] + ["rare"] * FAN_OUT
    return {
        "visits": visits,
        "dim": pa.table({"category": ["a", "b", "c", "rare"], "label": ["A", "B", "C", "R"]}),
        "fan": pa.table({"category": fan_keys, "note": ["n"] * len(fan_keys)}),
    }


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.xdist_group("postgres"))])
def engine(request: pytest.FixtureRequest) -> Any:
    """A backend of either engine; the tests load each world's tables into it in turn."""
    if request.param == "duckdb":
        return DuckDBBackend()
    return request.getfixturevalue("postgres_backend")


def _join_session(engine: Any, tmp_path: Path, with_target: bool, fan_unique: bool) -> Session:
    for name, table in _join_tables(with_target).items():
        engine.load_table(name, table)
    catalog = Catalog.from_toml(JOIN_CATALOG.format(fan_unique=str(fan_unique).lower()))
    world = "with" if with_target else "without"
    return kakeibo.connect(
        engine, catalog=catalog, ledger=tmp_path / f"{world}-{fan_unique}.sqlite", budget=10
    )


@pytest.mark.parametrize(
    ("fan_unique", "error"),
    [(False, QueryRefused), (True, CatalogMismatch)],
    ids=["undeclared", "false-claim"],
)
def test_a_fan_out_join_is_refused_before_any_charge_alike_in_both_worlds(
    engine: Any, tmp_path: Path, fan_unique: bool, error: type[Exception]
) -> None:
    """The review's shape: the target's row joins :data:`FAN_OUT` public rows, at epsilon 1e-3. A key the
    catalog does not declare unique is refused by the analysis; one it falsely declares unique is refused by
    the engine check before the draw. Either way the sentence is the same with and without the target, and
    nothing is charged."""
    sentences = []
    for with_target in (False, True):
        session = _join_session(engine, tmp_path, with_target, fan_unique)
        with pytest.raises(error) as info:
            session.sql(FAN_QUERY, epsilon=1e-3)
        sentences.append(str(info.value))
        assert session.ledger.entries() == []
        session.ledger.close()
    assert sentences[0] == sentences[1]
    assert "fan" in sentences[0] and "unique" in sentences[0]


def test_a_lookup_join_is_answered(engine: Any, tmp_path: Path) -> None:
    """The control: the same join to a public table whose key is unique is answered and charged once (the
    refusal above is about the repeated key, not about joins)."""
    session = _join_session(engine, tmp_path, True, False)
    query = "SELECT dim.label, COUNT(*) AS n FROM visits JOIN dim USING (category) GROUP BY dim.label"
    result = session.sql(query, epsilon=1)
    assert sorted(result.table.column("label").to_pylist()) == ["A", "B", "C", "R"]
    assert len(session.ledger.entries()) == 1
    session.ledger.close()


def test_the_unique_key_is_chosen_whatever_the_order_of_the_equalities() -> None:
    """With two equalities to one public table, the join is on the declared-unique key and the other one
    stays a condition, also when the query states the other one first."""
    catalog = Catalog.from_toml(JOIN_CATALOG.format(fan_unique="false"))
    query = analyze(
        "SELECT COUNT(*) AS n FROM visits, dim WHERE visits.label = dim.label "
        "AND visits.category = dim.category",
        catalog,
    )
    assert [(j.table.name, j.column) for j in query.joins] == [("dim", "category")]
    assert query.where is not None and "label" in query.where.sql("duckdb")


# -- R4: a free answer over a view has a work budget, a build a time limit --------------------------------

#: the review's query shape: IN lists of 16, 16 and 32 values on three columns, 8,192 boxes
EVERY_OTHER = {n: ", ".join(str(2 * i) for i in range(n)) for n in (16, 32)}
BOXES_QUERY = (
    f"SELECT COUNT(*) AS n FROM v WHERE c0 IN ({EVERY_OTHER[16]}) AND c1 IN ({EVERY_OTHER[16]}) "
    f"AND c2 IN ({EVERY_OTHER[32]})"
)


def _synthetic_view(blocks: int, seed: int, totals_seed: int | None = None) -> StoredView:
    """A stored view over four int columns of 64 bins with ``blocks`` random blocks (up to 4 bins wide per
    column): what a query's work depends on is the axes and the blocks, not whether they partition the
    domain. ``totals_seed`` draws other totals over the same blocks (another view of the same structure)."""
    rng = np.random.default_rng(seed)
    axes = tuple(Axis(f"c{i}", "int", origin=-0.5, width=1.0, bins=64) for i in range(4))
    lows = rng.integers(0, 64, (blocks, 4))
    highs = np.minimum(lows + rng.integers(0, 4, (blocks, 4)), 63)
    totals = np.random.default_rng(seed if totals_seed is None else totals_seed).normal(50, 20, blocks)
    view = View(
        sizes=tuple(a.size for a in axes),
        lows=lows,
        highs=highs,
        totals=totals,
        noise=Laplace(sensitivity=1, epsilon=0.1, coordinates=1),
        epsilon=1.0,
    )
    return StoredView("v", "t", "SELECT c0, c1, c2, c3 FROM t", axes, 1.0, 1, "source", view)


def test_the_reviews_8192_boxes_weigh_as_their_sum() -> None:
    """Each column's intervals are summed once per block, not each box's product: the count and its interval
    equal the sum over the 8,192 boxes of :meth:`View.weights` (what the answer computed before, at 8,192
    x blocks x 4 overlaps), to rounding."""
    stored = _synthetic_view(1_000, seed=3)
    read = read_view_query(BOXES_QUERY, stored)
    columns = [read.intervals[f"c{i}"] for i in range(3)] + [[(0.0, 65.0)]]
    boxes = np.array(list(product(*columns))).reshape(-1, 4, 2)
    assert len(boxes) == 16 * 16 * 32
    weights = sum(
        stored.view.weights(chunk[..., 0], chunk[..., 1]).sum(axis=0) for chunk in np.array_split(boxes, 32)
    )
    table = answer(read)
    count = table.column("n")[0].as_py()
    assert count == pytest.approx(float(weights @ stored.view.totals), rel=1e-9)
    half_width = count - table.column("n_ci_low")[0].as_py()
    assert half_width == pytest.approx(stored.view.bound_of(weights, 1 - VIEW_CONFIDENCE), rel=1e-9)


def test_an_answer_beyond_the_work_budget_is_refused_from_the_query_and_the_view_alone() -> None:
    """The review's 8,192 boxes on a view of 150,000 blocks: at least one overlap per block for each of the
    64 intervals plus the noise bound's points over every block, more than :data:`WORK_BUDGET`: refused before
    anything is computed, by the same sentence for another view of the same structure with other totals. The
    same query on a view of 1,000 blocks is within the budget."""
    blocks = 150_000
    assert blocks * (16 + 16 + 32) + CHERNOFF_POINTS * blocks > WORK_BUDGET  # what answer_work counts
    sentences = []
    for totals_seed in (4, 5):
        with pytest.raises(QueryRefused) as info:
            read_view_query(BOXES_QUERY, _synthetic_view(blocks, seed=4, totals_seed=totals_seed))
        sentences.append(str(info.value))
    assert sentences[0] == sentences[1] and f"more than the {WORK_BUDGET}" in sentences[0]
    small = read_view_query(BOXES_QUERY, _synthetic_view(1_000, seed=4))
    assert answer_work(small) <= WORK_BUDGET


def test_long_in_lists_intersect_as_sets() -> None:
    """Two IN lists on one column keep the values both hold (a linear sweep over sorted intervals: it used to
    pair every interval of one with every one of the other), and touching values merge."""
    stored = _synthetic_view(10, seed=6)
    read = read_view_query(
        "SELECT COUNT(*) AS n FROM v WHERE c0 IN (1, 2, 3, 10, 20, 40) AND c0 IN (3, 4, 5, 20, 41) "
        "AND c1 IN (7, 5, 6)",
        stored,
    )
    position = stored.axis("c0").position  # type: ignore[union-attr]
    assert read.intervals["c0"] == [(position(2.5), position(3.5)), (position(19.5), position(20.5))]
    assert read.intervals["c1"] == [(stored.axes[1].position(4.5), stored.axes[1].position(7.5))]


@pytest.fixture(scope="module")
def adults() -> pa.Table:
    """40,000 persons of the views tests' kind: age (74 one-year bins), workclass (3 values), hours (32
    bins)."""
    rng = np.random.default_rng(1)
    rows = 40_000
    return pa.table(
        {
            "uid": np.arange(rows),
            "age": rng.integers(17, 91, rows),
            "hours": np.clip(rng.normal(40, 12, rows), 1, 99),
            "workclass": rng.choice(np.array(["private", "gov", "self"]), rows, p=[0.7, 0.2, 0.1]),
        }
    )


VIEW_CATALOG = {
    "tables": {
        "adult": {
            "privacy_unit": "uid",
            "columns": {
                "uid": "int",
                "age": {"type": "int", "lower": 17, "upper": 90, "bins": 74},
                "hours": {"type": "float", "lower": 0, "upper": 100},
                "workclass": {"type": "str", "public_values": ["private", "gov", "self"]},
            },
        }
    }
}
VIEW_DEFINITION = "SELECT age, workclass, hours FROM adult"


def _view_session(adults: pa.Table, ledger: Path) -> Session:
    backend = DuckDBBackend()
    backend.load_table("adult", adults)
    return kakeibo.connect(backend, catalog=Catalog.from_dict(VIEW_CATALOG), ledger=ledger, budget=10)


def test_a_session_refuses_an_oversized_view_query_free_and_answers_one_within_the_budget(
    adults: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GROUP BY age, hours asks for 74 x 32 = 2,368 groups, each weighing every block along two columns: over
    the budget on this view, so ``sql`` and ``explain`` refuse it without computing a weight (``answer`` is
    never called) and without a charge; GROUP BY age, workclass is answered, free."""
    session = _view_session(adults, tmp_path / "l.sqlite")
    stored = session.create_view("v", VIEW_DEFINITION, epsilon=4, rng=np.random.default_rng(2)).view
    spent, entries = session.ledger.spent(), len(session.ledger.entries())
    assert 74 * 32 * stored.view.blocks * 2 > WORK_BUDGET  # the overlaps alone exceed it
    oversized = "SELECT age, hours, COUNT(*) AS n FROM v GROUP BY age, hours"
    within = "SELECT age, workclass, COUNT(*) AS n FROM v GROUP BY age, workclass"
    answered = session.sql(within)
    assert answered.privacy_loss == PureDP(0) and answered.table.num_rows == 74 * 3

    def computed(query: Any) -> Any:
        raise AssertionError("an answer was computed")

    monkeypatch.setattr(session_module, "answer", computed)
    for ask in (session.sql, session.explain):
        with pytest.raises(QueryRefused, match=f"more than the {WORK_BUDGET} block evaluations"):
            ask(oversized)
    assert session.ledger.spent() == spent and len(session.ledger.entries()) == entries


def test_a_build_past_its_time_limit_is_stopped_and_charged(
    adults: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a clock that advances one second per reading, the build passes the backend's statement timeout
    (60 s) after 60 blocks and stops with StatementTimeout; the data was read, so the view's epsilon is
    charged. With the real clock the same build finishes."""
    clock = iter(range(10**9))
    monkeypatch.setattr(views_module, "monotonic", lambda: float(next(clock)))
    session = _view_session(adults, tmp_path / "l.sqlite")
    assert session.backend.statement_timeout == 60
    with pytest.raises(StatementTimeout, match="60 s limit"):
        session.create_view("v", VIEW_DEFINITION, epsilon=1, rng=np.random.default_rng(2))
    assert session.ledger.spent().epsilon == 1 and len(session.ledger.entries()) == 1
    monkeypatch.undo()
    built = _view_session(adults, tmp_path / "again.sqlite").create_view("v", VIEW_DEFINITION, epsilon=1)
    assert built.view.view.blocks > 60
