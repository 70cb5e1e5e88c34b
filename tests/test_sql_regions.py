"""WHERE regions and whose point they are (issue 29, R2).

Parallel composition charges queries over disjoint WHERE regions once (``kakeibo.accounting.overlap``),
which is sound only when each person sits at one point of the region's columns. The review charged 50
queries over disjoint ``o_totalprice`` slices of TPC-H ``orders`` epsilon 1 in all: ``orders`` names no
``privacy_unit`` of its own, so its regions were taken for record-level ones, while one customer's orders
fall in many slices. These tests check, before any data is read and then through sessions on DuckDB and
PostgreSQL (the check statement on Spark too), that:

* a region is record-level only on a row-level table, where disjoint slices still compose in parallel;
* a table whose rows reach a person (its own unit, a chain of references, or a query that joins sensitive
  tables) gets a region only over the person's key (``o_custkey`` and ``c_custkey`` are one coordinate) and
  columns declared ``user_constant``; slices of any other column are charged their sum;
* a ``user_constant`` declaration a region relies on is checked against the engine before the draw, per
  person (through the references), and a false one is refused as the data owner's error with nothing
  charged;
* box coordinates of different tables never pass for one.

Every expected charge here is exact arithmetic on the epsilons the queries ask for (no noise is read).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
import sqlglot

import kakeibo
from kakeibo.accounting.overlap import Box, Interval
from kakeibo.backends import Backend, DuckDBBackend
from kakeibo.data import tpch
from kakeibo.sql import Catalog, analyze
from kakeibo.sql.region import constant_check_sql
from kakeibo.sql.session import CatalogMismatch, Session
from tpch_fixtures import postgres_database_with

TPCH = Catalog.from_toml(tpch.catalog())
#: an epsilon that is exact in binary, so that sums of charges are exact
EPS = Fraction(1, 8)


def _session(database: Any, catalog: Catalog, ledger: Path) -> Session:
    return kakeibo.connect(database, catalog=catalog, ledger=str(ledger), budget=(2.0**40, 0.5))


def _spent(session: Session) -> Fraction:
    return Fraction(session.ledger.spent().epsilon)


def _user(**bounds: Any) -> Box:
    return Box(bounds, unit="user")


def _open(lo: Any, hi: Any) -> Interval:
    return Interval(lo, hi, lo_closed=False, hi_closed=False)


# --- analysis: the region of each query shape, no data read ---------------------------------------------

TPCH_BOXES: list[tuple[str, Box | None]] = [
    # the review's column: one customer's orders take many prices
    ("SELECT COUNT(*) FROM orders WHERE o_totalprice >= 0 AND o_totalprice < 50000", None),
    ("SELECT COUNT(*) FROM orders WHERE o_custkey = 7 AND o_totalprice < 50000", None),
    ("SELECT COUNT(*) FROM lineitem WHERE l_quantity BETWEEN 1 AND 10", None),
    # a reference that does not hold the person's key: one customer has many orders
    ("SELECT COUNT(*) FROM lineitem WHERE l_orderkey < 100", None),
    # the person's key, whichever column holds it, is one coordinate named by the person table's unit
    ("SELECT COUNT(*) FROM orders WHERE o_custkey BETWEEN 1 AND 100", _user(c_custkey=(1, 100))),
    ("SELECT COUNT(*) FROM customer WHERE c_custkey < 10", _user(c_custkey=_open(None, 10))),
    (
        "SELECT COUNT(*) FROM lineitem JOIN orders ON l_orderkey = o_orderkey WHERE o_custkey > 5",
        _user(c_custkey=_open(5, None)),
    ),
    (
        "SELECT COUNT(*) FROM orders JOIN customer ON o_custkey = c_custkey "
        "WHERE o_custkey > 5 AND c_custkey < 100 AND c_nationkey = 3",
        _user(c_custkey=_open(5, 100), c_nationkey=(3, 3)),
    ),
    # declared constant per person (the catalog says so of c_nationkey; the session checks it)
    ("SELECT COUNT(*) FROM customer WHERE c_nationkey = 3", _user(c_nationkey=(3, 3))),
    # not declared, though customer has one row per person: a declaration the engine checks is needed
    ("SELECT COUNT(*) FROM customer WHERE c_acctbal > 0", None),
    # a column of the joined rows that varies within a person
    ("SELECT COUNT(*) FROM orders JOIN customer ON o_custkey = c_custkey WHERE o_totalprice > 5", None),
    # a public table's column: one person's line items join many suppliers
    (
        "SELECT COUNT(*) FROM lineitem JOIN supplier ON l_suppkey = s_suppkey WHERE s_acctbal > 0",
        None,
    ),
]


@pytest.mark.parametrize(("sql", "box"), TPCH_BOXES)
def test_a_region_on_rows_of_a_person_constrains_only_columns_constant_per_person(
    sql: str, box: Box | None
) -> None:
    assert analyze(sql, TPCH).where_box == box


#: a person table, a table that references it and one two references away, each with a column declared
#: constant per person under the same name, and a row-level table
CHAIN = Catalog.from_toml(
    """
[tables.people]
privacy_unit = "pid"
max_partitions = 3
max_rows_per_partition = 10
[tables.people.columns]
pid = "int"
tier = { type = "int", lower = 0, upper = 9, user_constant = true }
"a.b" = { type = "int", user_constant = true }

[tables.orders]
references = { owner = "people.pid" }
max_partitions = 3
max_rows_per_partition = 10
[tables.orders.columns]
oid = { type = "int", unique = true }
owner = "int"
tier = { type = "int", lower = 0, upper = 9, user_constant = true }
amount = { type = "float", lower = 0, upper = 100 }

[tables.items]
references = { order_id = "orders.oid" }
max_partitions = 3
max_rows_per_partition = 10
[tables.items.columns]
order_id = "int"
tier = { type = "int", lower = 0, upper = 9, user_constant = true }
price = { type = "float", lower = 0, upper = 10 }

[tables.census]
[tables.census.columns]
age = { type = "int", lower = 0, upper = 120 }
income = { type = "float", lower = 0, upper = 1000 }
"""
)

CHAIN_BOXES: list[tuple[str, Box | None]] = [
    ("SELECT COUNT(*) FROM people WHERE tier = 1", _user(tier=(1, 1))),
    ("SELECT COUNT(*) FROM orders WHERE tier = 1", _user(**{"orders.tier": (1, 1)})),
    ("SELECT COUNT(*) FROM items WHERE tier = 1", _user(**{"items.tier": (1, 1)})),
    (
        "SELECT COUNT(*) FROM orders WHERE owner < 4 AND tier = 1",
        _user(pid=_open(None, 4), **{"orders.tier": (1, 1)}),
    ),
    (
        "SELECT COUNT(*) FROM orders JOIN people ON owner = pid WHERE people.tier = 1 AND orders.tier = 2",
        _user(tier=(1, 1), **{"orders.tier": (2, 2)}),
    ),
    ("SELECT COUNT(*) FROM orders WHERE amount < 5", None),
    # a column name with a dot could pass for another table's column: no region
    ('SELECT COUNT(*) FROM people WHERE "a.b" = 1', None),
    ("SELECT COUNT(*) FROM census WHERE age BETWEEN 18 AND 65", Box({"age": (18, 65)}, unit="record")),
]


@pytest.mark.parametrize(("sql", "box"), CHAIN_BOXES)
def test_each_table_of_one_person_has_coordinates_of_its_own(sql: str, box: Box | None) -> None:
    assert analyze(sql, CHAIN).where_box == box


# --- charges on TPC-H (DuckDB) ---------------------------------------------------------------------------

#: ten disjoint slices of o_totalprice, [0, 50000), ..., [450000, 500000)
SLICES = [(50_000 * i, 50_000 * (i + 1)) for i in range(10)]


def _busiest_customer(tpch_duckdb: Path) -> tuple[int, int]:
    """The customer whose orders fall in the most of :data:`SLICES`, and how many."""
    width, top = SLICES[0][1], SLICES[-1][1]
    with duckdb.connect(str(tpch_duckdb), read_only=True) as con:
        (row,) = con.sql(
            f"SELECT o_custkey, COUNT(DISTINCT FLOOR(o_totalprice / {width})) AS k FROM orders "
            f"WHERE o_totalprice < {top} GROUP BY o_custkey ORDER BY k DESC, o_custkey LIMIT 1"
        ).fetchall()
    return int(row[0]), int(row[1])


@pytest.mark.parametrize("one_customer", [False, True], ids=["all", "one-customer"])
def test_disjoint_price_slices_of_orders_are_charged_their_sum(
    tpch_duckdb: Path, tmp_path: Path, one_customer: bool
) -> None:
    """The review's shape (ten slices instead of 50): each customer's orders take many prices, so the ten
    queries may all read one customer and are charged 10 x epsilon; they were charged epsilon once."""
    customer, slices = _busiest_customer(tpch_duckdb)
    assert slices >= 5  # the premise: one person's rows lie in several of the "disjoint" regions
    who = f"o_custkey = {customer} AND " if one_customer else ""
    with _session(str(tpch_duckdb), TPCH, tmp_path / "ledger.db") as session:
        for lo, hi in SLICES:
            session.sql(
                f"SELECT SUM(o_totalprice) AS s FROM orders WHERE {who}o_totalprice >= {lo} "
                f"AND o_totalprice < {hi}",
                epsilon=EPS,
            )
        assert [entry.region for entry in session.ledger.entries()] == [None] * len(SLICES)
        assert _spent(session) == len(SLICES) * EPS


def test_disjoint_ranges_of_the_customer_key_still_compose_in_parallel(
    tpch_duckdb: Path, tmp_path: Path
) -> None:
    """Ranges of the person's key are disjoint sets of people, whichever table holds the key: five
    o_custkey ranges on orders and a c_custkey range beside them on customer cost epsilon once; a customer
    range that meets one of them costs it again."""
    with _session(str(tpch_duckdb), TPCH, tmp_path / "ledger.db") as session:
        for i in range(5):
            lo, hi = 300 * i, 300 * (i + 1)
            query = f"SELECT COUNT(*) AS n FROM orders WHERE o_custkey > {lo} AND o_custkey <= {hi}"
            session.sql(query, epsilon=EPS)
        session.sql("SELECT COUNT(*) AS n FROM customer WHERE c_custkey > 1500", epsilon=EPS)
        assert _spent(session) == EPS
        session.sql("SELECT SUM(c_acctbal) AS s FROM customer WHERE c_custkey = 300", epsilon=EPS)
        assert _spent(session) == 2 * EPS
        regions = [entry.region for entry in session.ledger.entries()]
        assert all(r is not None and r.unit == "user" and r.columns == ("c_custkey",) for r in regions)


def test_a_declared_constant_that_holds_gives_a_region_on_tpch(tpch_duckdb: Path, tmp_path: Path) -> None:
    """c_nationkey is declared constant per customer, and customer has one row per customer: 25 queries, one
    per nation, cost epsilon once."""
    with _session(str(tpch_duckdb), TPCH, tmp_path / "ledger.db") as session:
        for nation in range(25):
            session.sql(f"SELECT COUNT(*) AS n FROM customer WHERE c_nationkey = {nation}", epsilon=EPS)
        assert _spent(session) == EPS


def test_a_false_declaration_on_tpch_is_refused_before_the_draw(tpch_duckdb: Path, tmp_path: Path) -> None:
    """Declaring o_totalprice constant per customer would make the review's slices disjoint regions again;
    the engine shows a customer with two prices, so the query is refused and nothing is charged."""
    data = TPCH.to_dict()
    data["tables"]["orders"]["columns"]["o_totalprice"]["user_constant"] = True
    claimed = Catalog.from_dict(data)
    assert analyze("SELECT COUNT(*) FROM orders WHERE o_totalprice < 50000", claimed).where_box == _user(
        **{"orders.o_totalprice": _open(None, 50000)}
    )
    with _session(str(tpch_duckdb), claimed, tmp_path / "ledger.db") as session:
        with pytest.raises(CatalogMismatch, match=r"orders\.o_totalprice constant per person"):
            session.sql("SELECT COUNT(*) AS n FROM orders WHERE o_totalprice < 50000", epsilon=EPS)
        assert session.ledger.entries() == []
        session.sql("SELECT COUNT(*) AS n FROM orders", epsilon=EPS)  # no region relies on it
        assert _spent(session) == EPS


# --- a row-level table ------------------------------------------------------------------------------------


def test_a_row_level_table_still_composes_disjoint_slices_in_parallel(tmp_path: Path) -> None:
    backend = DuckDBBackend()
    backend.load_table(
        "census", pa.table({"age": list(range(100)), "income": [10.0 * i for i in range(100)]})
    )
    with _session(backend, CHAIN, tmp_path / "ledger.db") as session:
        for lo in range(0, 100, 20):
            session.sql(
                f"SELECT COUNT(*) AS n FROM census WHERE age >= {lo} AND age < {lo + 20}", epsilon=EPS
            )
        regions = [entry.region for entry in session.ledger.entries()]
        assert all(r is not None and r.unit == "record" for r in regions)
        assert _spent(session) == EPS


# --- declarations checked against the engine: DuckDB and PostgreSQL --------------------------------------

#: people 1..6, each with orders 10 * pid and 10 * pid + 1, each order with two items
PEOPLE = list(range(1, 7))


def _chain_tables(
    order_tier: dict[int, int | None] | None = None, item_tier: dict[int, int] | None = None
) -> dict[str, pa.Table]:
    """The chain's tables, every tier = pid % 3 (the declarations hold) unless ``order_tier`` or
    ``item_tier`` (by order key) says otherwise."""
    orders = [(10 * p + k, p) for p in PEOPLE for k in (0, 1)]
    order_tiers = [(order_tier or {}).get(oid, owner % 3) for oid, owner in orders]
    items = [(oid, owner) for oid, owner in orders for _ in range(2)]
    return {
        "people": pa.table({"pid": PEOPLE, "tier": [p % 3 for p in PEOPLE], "a.b": [0] * len(PEOPLE)}),
        "orders": pa.table(
            {
                "oid": [oid for oid, _ in orders],
                "owner": [owner for _, owner in orders],
                "tier": pa.array(order_tiers, pa.int64()),
                "amount": [float(oid % 7) for oid, _ in orders],
            }
        ),
        "items": pa.table(
            {
                "order_id": [oid for oid, _ in items],
                "tier": [(item_tier or {}).get(oid, owner % 3) for oid, owner in items],
                "price": [1.0] * len(items),
            }
        ),
        "census": pa.table({"age": [30], "income": [1.0]}),
    }


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.xdist_group("postgres"))])
def chain_engine(request: pytest.FixtureRequest) -> Any:
    """A function that loads the chain's tables into a fresh database of the parametrised engine."""

    def load(tables: dict[str, pa.Table]) -> Backend:
        if request.param == "duckdb":
            backend = DuckDBBackend()
            for name, table in tables.items():
                backend.load_table(name, table)
            return backend
        from kakeibo.backends.postgres import PostgresBackend

        server = request.getfixturevalue("postgres_server")
        return PostgresBackend(postgres_database_with(server, tables))

    return load


def test_regions_over_declared_constants_that_hold(chain_engine: Any, tmp_path: Path) -> None:
    """Three tiers on each table cost epsilon once per table's coordinate; the same tier name on two tables
    is two coordinates, so one query of each costs twice."""
    with _session(chain_engine(_chain_tables()), CHAIN, tmp_path / "ledger.db") as session:
        for table in ("people", "orders", "items"):
            for tier in range(3):
                session.sql(f"SELECT COUNT(*) AS n FROM {table} WHERE tier = {tier}", epsilon=EPS)
        assert _spent(session) == 3 * EPS  # each table's coordinate meets the others' boxes (unbounded there)
    with _session(chain_engine(_chain_tables()), CHAIN, tmp_path / "other.db") as session:
        session.sql("SELECT COUNT(*) AS n FROM people WHERE tier = 0", epsilon=EPS)
        session.sql("SELECT COUNT(*) AS n FROM orders WHERE tier = 1", epsilon=EPS)
        assert _spent(session) == 2 * EPS


@pytest.mark.parametrize(
    ("tables", "table"),
    [
        (_chain_tables(order_tier={10: 2}), "orders"),  # person 1's two orders: tiers 2 and 1
        # constant within each order, not within the person: only grouping by the person (through orders)
        # shows it
        (_chain_tables(item_tier={20: 0}), "items"),
    ],
    ids=["orders", "items-across-orders"],
)
def test_a_false_declaration_is_refused_before_the_draw(
    chain_engine: Any, tmp_path: Path, tables: dict[str, pa.Table], table: str
) -> None:
    with _session(chain_engine(tables), CHAIN, tmp_path / "ledger.db") as session:
        with pytest.raises(CatalogMismatch, match=rf"{table}\.tier constant per person"):
            session.sql(f"SELECT COUNT(*) AS n FROM {table} WHERE tier = 1", epsilon=EPS)
        assert session.ledger.entries() == []
        # the same table without a region over the column, and the person's key, are answered
        session.sql(f"SELECT COUNT(*) AS n FROM {table}", epsilon=EPS)
        session.sql("SELECT COUNT(*) AS n FROM orders WHERE owner <= 3", epsilon=EPS)
        assert _spent(session) == 2 * EPS


def test_null_values_of_a_declared_constant_are_in_no_region(chain_engine: Any, tmp_path: Path) -> None:
    """Person 1 has tier NULL on one order and 1 on the other: no comparison selects the NULL row, so the
    person still sits at one point of every region over tier, and the declaration is accepted."""
    tables = _chain_tables(order_tier={10: None})
    with _session(chain_engine(tables), CHAIN, tmp_path / "ledger.db") as session:
        for tier in range(3):
            session.sql(f"SELECT COUNT(*) AS n FROM orders WHERE tier = {tier}", epsilon=EPS)
        assert _spent(session) == EPS


def test_the_declaration_is_checked_once_per_session(tmp_path: Path) -> None:
    """The check is a fact about the data owner's schema, kept like the unique-key checks: a second query
    over the same column sends no second check statement."""
    backend = DuckDBBackend()
    for name, table in _chain_tables().items():
        backend.load_table(name, table)
    sent: list[str] = []
    execute = backend.execute

    def recording(statement: str, *args: Any, **kwargs: Any) -> pa.Table:
        sent.append(statement)
        return execute(statement, *args, **kwargs)

    backend.execute = recording  # type: ignore[method-assign]
    with _session(backend, CHAIN, tmp_path / "ledger.db") as session:
        for tier in range(2):
            session.sql(f"SELECT COUNT(*) AS n FROM items WHERE tier = {tier}", epsilon=EPS)
    checks = [s for s in sent if "COUNT(DISTINCT" in s and "__values" in s]
    assert len(checks) == 1 and '"__person_1"' in checks[0]


@pytest.mark.xdist_group("spark")
def test_the_check_statement_runs_on_spark(spark_backend: Any) -> None:
    """The check groups and counts only; Spark reads it as DuckDB and PostgreSQL do, NULLs included."""
    for name, table in _chain_tables(item_tier={20: 0}).items():
        spark_backend.load_table(name, table)
    for table, violated in (("orders", False), ("items", True)):
        statement = constant_check_sql(CHAIN, CHAIN.table(table), "tier")
        rows = spark_backend.execute(sqlglot.transpile(statement, read="duckdb", write="spark")[0])
        assert rows.num_rows == int(violated)
