"""A differential fuzzer over relational schemas: joins along references and to public tables, expressions
in aggregates, the R2T race and privately chosen bounds, with the analyst's ``bounds=`` (issue 29); and
since issue 33 the queries R2T's linear program answers: self-joins (orders of the same day, line items of
the same order), and every line item query under the catalog where suppliers are persons too
(``persons2``, :func:`kakeibo.data.tpch.two_person_catalog`), with ``bounds={"max_rows_bound": N}``.

``relational_query`` draws calls over TPC-H (SF 0.01): a FROM clause along the references (line items to
orders to customers) or to a public table (nation, part, supplier), one to three aggregates of columns or
of expressions over them (the revenue product, quotients, CASE, literals at the flush and overflow edges),
optionally grouped by a public column, most often about the target customer alone, with drawn ``bounds=``;
each call is run under the fixed catalog, the race (``AUTO``) and the chosen bounds (``CHOSEN``). The
neighbouring databases are TPC-H and TPC-H plus one customer whose order and line items hold 1e308,
-1e308, NaN, the infinities, 5e-324 and -0.0 (``test_sql_relational._with_target``). What an analyst sees
-- acceptance, error class and text, the charge, the released schema -- must be the same in both.

Draws are independent and seeded (``random.Random(seed)``): seeds 0 to 119 on DuckDB, 0 to 59 on
PostgreSQL, 0 to 14 on Spark.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from adversarial_harness import BOUND_PAIRS, BOUND_VALUES, QUOTIENT_CHAINS, VALUE_LITERALS
from kakeibo.data import tpch
from kakeibo.sql import Catalog
from test_sql_relational import AUTO, CATALOG, CHOSEN, TARGET, _engine, _observe, _with_target
from tpch_fixtures import postgres_database_with

pytestmark = pytest.mark.xdist_group("spark")

#: FROM clauses: along the references, and to public tables on their unique keys
SOURCES = (
    ("lineitem", ("lineitem",)),
    ("orders", ("orders",)),
    ("customer", ("customer",)),
    ("lineitem JOIN orders ON l_orderkey = o_orderkey", ("lineitem", "orders")),
    ("orders JOIN customer ON o_custkey = c_custkey", ("orders", "customer")),
    (
        "lineitem JOIN orders ON l_orderkey = o_orderkey JOIN customer ON o_custkey = c_custkey",
        ("lineitem", "orders", "customer"),
    ),
    ("customer JOIN nation ON c_nationkey = n_nationkey", ("customer", "nation")),
    ("lineitem JOIN part ON l_partkey = p_partkey", ("lineitem", "part")),
    ("lineitem, orders WHERE l_orderkey = o_orderkey", ("lineitem", "orders")),
    ("lineitem JOIN supplier ON l_suppkey = s_suppkey", ("lineitem", "supplier")),
    (
        "lineitem JOIN orders ON l_orderkey = o_orderkey JOIN supplier ON l_suppkey = s_suppkey "
        "JOIN nation ON s_nationkey = n_nationkey",
        ("lineitem", "orders", "supplier", "nation"),
    ),
    # self-joins (issue 33): each result references two customers, or one customer and two suppliers
    ("orders o1 JOIN orders o2 ON o1.o_orderdate = o2.o_orderdate", ("o1o2",)),
    ("lineitem l1 JOIN lineitem l2 ON l1.l_orderkey = l2.l_orderkey", ("l1l2",)),
)
#: bounded numeric columns per table
NUMBERS = {
    "lineitem": ("l_quantity", "l_extendedprice", "l_discount", "l_tax"),
    "orders": ("o_totalprice",),
    "customer": ("c_acctbal",),
    "nation": (),
    "part": ("p_retailprice", "p_size"),
    "supplier": ("s_acctbal",),
    "o1o2": ("o1.o_totalprice", "o2.o_totalprice"),
    "l1l2": ("l1.l_quantity", "l2.l_extendedprice", "l1.l_discount"),
}
#: public group keys per table
KEYS = {
    "lineitem": ("l_returnflag", "l_shipmode"),
    "orders": ("o_orderpriority",),
    "customer": ("c_mktsegment",),
    "nation": ("n_name",),
    "part": (),
    "supplier": (),
    "o1o2": ("o1.o_orderpriority",),
    "l1l2": ("l1.l_shipmode",),
}
#: the target customer's rows alone, per table that reaches them
ABOUT_TARGET = {
    "lineitem": f"l_orderkey = {TARGET}",
    "orders": f"o_custkey = {TARGET}",
    "customer": f"c_custkey = {TARGET}",
    "o1o2": f"o1.o_custkey = {TARGET}",
    "l1l2": f"l2.l_orderkey = {TARGET}",
}
EXPRESSIONS = (
    "{a} * (1 - {b})",
    "{a} * {b} / (1 + {b})",
    "{a} / ({q})",
    "{n} / (CASE WHEN {a} > 1 THEN {q} ELSE 1 END)",
    "CASE WHEN {a} < {n} THEN {a} * {n} ELSE {b} END",
    "{a} * {n} * {n}",
    "{a} - {b}",
)
AGGREGATES = ("COUNT(*)", "SUM({v})", "AVG({v})", "COUNT({v})", "MEDIAN({v})", "MAX({v})", "VARIANCE({v})")
CATALOGS = {
    "fixed": CATALOG,
    "race": AUTO,
    "chosen": CHOSEN,
    "persons2": Catalog.from_dict(tpch.two_person_catalog()),
}


def relational_query(rng: random.Random) -> tuple[str, str, dict[str, object] | None]:
    """One call: the query, the catalog's name in ``CATALOGS``, and ``bounds=`` (or ``None``)."""
    source, tables = rng.choice(SOURCES)
    catalog = rng.choice(sorted(CATALOGS))
    numbers = [c for t in tables for c in NUMBERS[t]]
    # R2T's program answers it: most draws then take the shape it answers (one COUNT or SUM, grouped or not)
    program = any(t in ("o1o2", "l1l2") for t in tables) or (catalog == "persons2" and "lineitem" in tables)
    shaped = program and rng.random() < 3 / 4

    def value() -> str:
        column = rng.choice(numbers)
        if rng.random() < 1 / 2:
            return column
        return rng.choice(EXPRESSIONS).format(
            a=column, b=rng.choice(numbers), n=rng.choice(VALUE_LITERALS), q=rng.choice(QUOTIENT_CHAINS)
        )

    aggregates = [
        rng.choice(AGGREGATES[:2] if shaped else AGGREGATES if numbers else AGGREGATES[:1]).format(v=value())
        for _ in range(1 if shaped else rng.randint(1, 3))
    ]
    keys = [k for t in tables for k in KEYS[t]]
    group = rng.choice(keys) if keys and rng.random() < 1 / 3 else None
    select = ([group] if group else []) + [f"{a} AS a{i}" for i, a in enumerate(aggregates)]
    sql = f"SELECT {', '.join(select)} FROM {source}"
    about = [ABOUT_TARGET[t] for t in tables if t in ABOUT_TARGET]
    if about and rng.random() < 1 / 2:
        sql += (" AND " if " WHERE " in sql else " WHERE ") + rng.choice(about)
    if group:
        sql += f" GROUP BY {group}"
    bounds: dict[str, object] | None = None
    if rng.random() < 1 / 2:
        bounds = {}
        for column in sorted(
            set(numbers) & set(" ".join(aggregates).replace("(", " ").replace(")", " ").split())
        ):
            kind = rng.randrange(4)
            if kind == 1:
                bounds[column] = tuple(sorted(rng.choice(BOUND_VALUES) for _ in range(2)))
            elif kind > 1:
                bounds[column] = rng.choice(BOUND_PAIRS)
        if rng.random() < 1 / 3:
            bounds["max_rows_per_partition"] = rng.choice((1, 2, 1000))
    if shaped or rng.random() < 1 / 4:  # what R2T's program takes: the join results one person reaches
        bounds = {"max_rows_bound": rng.choice((1, 100, 10**6))} if rng.random() < 1 / 2 else None
    return sql, catalog, bounds


SEEDS = {"duckdb": 120, "postgres": 60, "spark": 15}


@pytest.fixture(scope="module", params=sorted(SEEDS))
def worlds(
    request: pytest.FixtureRequest, tpch_tables: dict[str, pa.Table]
) -> Iterator[tuple[str, list[Any]]]:
    """The two neighbouring TPC-H databases of one engine."""
    engine = request.param
    data = [tpch_tables, _with_target(tpch_tables)]
    if engine == "duckdb":
        backends: list[Any] = [_engine(tables) for tables in data]
    elif engine == "postgres":
        from kakeibo.backends.postgres import PostgresBackend

        server = request.getfixturevalue("postgres_server")
        backends = [PostgresBackend(postgres_database_with(server, tables)) for tables in data]
    else:
        from kakeibo.backends.spark import SparkBackend

        root = request.getfixturevalue("spark_backend").session
        backends = []
        for tables in data:
            backend = SparkBackend(session=root.newSession())
            for name, table in tables.items():
                backend.load_table(name, table)
            backends.append(backend)
    try:
        yield engine, backends
    finally:
        for backend in backends:
            backend.close()


def test_relational_fuzz(worlds: tuple[str, list[Any]]) -> None:
    engine, backends = worlds
    differ = []
    with tempfile.TemporaryDirectory() as directory:
        for seed in range(SEEDS[engine]):
            sql, name, bounds = relational_query(random.Random(seed))
            base, target = (_observe(b, CATALOGS[name], sql, Path(directory), bounds) for b in backends)
            if base != target:
                differ.append(
                    f"seed {seed} ({name}, bounds={bounds}): {sql}\n  base:   {base}\n  target: {target}"
                )
    assert not differ, f"{len(differ)} draws differ between the worlds:\n" + "\n".join(differ[:3])
