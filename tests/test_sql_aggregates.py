"""The registry of aggregates (:data:`kakeibo.sql.aggregates.AGGREGATES`) is the one source of what an
aggregate is: every spelling the parser accepts reads as one of its entries, the analyser names no function
outside it, and an aggregate registered there alone is accepted, planned and released end to end."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pytest
from sqlglot import exp

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.sql import Catalog, QueryRefused, Session, analyze, plan_query
from kakeibo.sql import aggregates as aggregates_module
from kakeibo.sql.aggregates import (
    AGGREGATES,
    SUM,
    AggregateSpec,
    Call,
    CallKey,
    Estimate,
    Needs,
    NoisyStatistics,
)
from kakeibo.sql.execute import never_negative
from kakeibo.sql.shape import Aggregate

CATALOG = Catalog.from_dict(
    {
        "tables": {
            "t": {
                "privacy_unit": "user_id",
                "max_partitions": 1,
                "max_rows_per_partition": 2,
                "columns": {
                    "user_id": {"type": "int"},
                    "g": {"type": "str", "public_values": ["a", "b"]},
                    "amount": {"type": "float", "lower": 0, "upper": 100},
                },
            },
            "rows": {"columns": {"g": {"type": "str"}}},  # row-level: each row a person
        }
    }
)

#: the spellings whose arguments the parser reads as grammar of its own (COUNT's forms, quantiles with q)
GRAMMAR = {
    "COUNT(*)": "count",
    "COUNT(amount)": "count",
    "COUNT_BIG(*)": "count",
    "COUNT(DISTINCT user_id)": "count_distinct_unit",
    "QUANTILE(amount, 0.25)": "quantile",
    "APPROX_QUANTILE(amount, 0.25)": "quantile",
    "APPROX_PERCENTILE(amount, 0.25)": "quantile",
    "PERCENTILE_APPROX(amount, 0.25)": "quantile",
    "QUANTILE_CONT(amount, 0.25)": "quantile",
    "PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY amount)": "quantile",
}


def _one_column_spellings() -> Iterator[tuple[str, str, Call]]:
    """Every one-column spelling in the registry as SQL text, with its entry's name and its call."""
    for name, spec in AGGREGATES.items():
        for key, call in spec.calls.items():
            column = exp.column("amount")
            text = f"{key.upper()}(amount)" if isinstance(key, str) else key(this=column).sql("duckdb")
            yield text, name, call


def _aggregate(call_sql: str) -> Aggregate:
    (agg,) = analyze(f"SELECT {call_sql} FROM t", CATALOG).aggregates
    return agg


@pytest.mark.parametrize(("text", "name", "call"), list(_one_column_spellings()))
def test_every_one_column_spelling_reads_as_its_entry(text: str, name: str, call: Call) -> None:
    agg = _aggregate(text)
    quantile = None if call.quantile is None else float(call.quantile)
    assert (agg.function, agg.column, agg.quantile, agg.sample) == (name, "amount", quantile, call.sample)
    assert agg.alias == f"{call.prefix}_amount"


def test_the_analysers_function_names_are_the_registrys_keys() -> None:
    named = {_aggregate(text).function for text, _, _ in _one_column_spellings()}
    for text, name in GRAMMAR.items():
        assert _aggregate(text).function == name
        named.add(name)
    (distinct,) = analyze("SELECT COUNT(DISTINCT g) FROM rows", CATALOG).aggregates  # a row-level table's
    named.add(distinct.function)
    assert distinct.function == "count_distinct" and named == set(AGGREGATES)


def test_aggregates_does_not_import_the_planner() -> None:
    tree = ast.parse(Path(str(aggregates_module.__file__)).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "plan" not in imported and "kakeibo.sql.plan" not in imported


class _Total(AggregateSpec):
    """SQLite's TOTAL(c): the sum of a column, released from the same statistic as SUM(c)."""

    calls: ClassVar[Mapping[CallKey, Call]] = {"total": Call("total", "TOTAL")}

    def needs(self, column: str | None, centred: bool) -> Needs:
        return ((SUM, column),)

    def estimate(self, noisy: NoisyStatistics, agg: Aggregate, beta: float) -> Estimate:
        return noisy.interval(SUM.statistic(agg.column), beta)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    rng = np.random.default_rng(0)
    db = DuckDBBackend()
    db.load_table(
        "t",
        pa.table(
            {
                "user_id": np.arange(1000),  # one row each: bounding keeps every row
                "g": rng.choice(["a", "b"], 1000),
                "amount": rng.uniform(0, 100, 1000),
            }
        ),
    )
    with kakeibo.connect(db, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=(10**6, 0.5)) as s:
        yield s


def test_an_aggregate_registered_alone_is_accepted_planned_and_released(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    query = "SELECT g, TOTAL(amount) AS v FROM t GROUP BY g HAVING TOTAL(amount) > 0.5 ORDER BY g"
    with pytest.raises(QueryRefused, match="TOTAL is not supported"):
        analyze(query, CATALOG)
    monkeypatch.setitem(AGGREGATES, "total", _Total())
    analyzed = analyze(query, CATALOG)
    assert [(a.function, a.column) for a in analyzed.aggregates] == [("total", "amount")]
    plan = plan_query(analyzed, epsilon=1)
    assert [s.name for s in plan.statistics] == ["s_amount"]
    assert never_negative(plan) == ["v"]  # amount is bounded below by 0
    with pytest.raises(QueryRefused, match="aggregates are not allowed in WHERE"):
        analyze("SELECT COUNT(*) FROM t WHERE TOTAL(amount) > 0", CATALOG)
    total = session.sql(query, epsilon=1, rng=np.random.default_rng(7)).to_arrow()
    same = session.sql(query.replace("TOTAL", "SUM"), epsilon=1, rng=np.random.default_rng(7)).to_arrow()
    assert total.num_rows > 0
    assert total.equals(same)  # the same statistic and noise as SUM(amount)
