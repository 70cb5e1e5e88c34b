"""The TPC-H data layer (:mod:`kakeibo.data.tpch`) and its catalog, checked on data generated at scale
factor 0.01: the generator's cache and errors, the types every engine ends up with, and the catalog's
declarations (types, clamping bounds, public values, unique keys, references) against the data."""

from __future__ import annotations

import math
import os
import stat
import sys
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kakeibo.backends import Backend, DuckDBBackend
from kakeibo.data import tpch
from kakeibo.errors import ConfigurationError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: rows per table at scale factor 0.01 (the specification's SF * 150,000 customers, SF * 1,500,000 orders;
#: line items vary with the random 1 to 7 per order)
SF001_ROWS = {
    "customer": 1_500,
    "orders": 15_000,
    "lineitem": 60_175,
    "part": 2_000,
    "partsupp": 8_000,
    "supplier": 100,
    "nation": 25,
    "region": 5,
}

#: the keys the catalog format documents (kakeibo.sql.catalog), and the new ``references`` of issue 18
TABLE_KEYS = {"privacy_unit", "max_partitions", "max_rows_per_partition", "public", "source", "columns"}
COLUMN_KEYS = {"type", "lower", "upper", "public_values", "user_constant", "unique"}

#: the Arrow type arrow_tables gives each catalog type
ARROW_TYPE = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "date": pa.date32()}

#: which engine (Arrow) types hold each catalog type, as a session checks them before a query
ENGINE_FAMILY = {
    "int": pa.types.is_integer,
    "float": pa.types.is_floating,
    "str": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
    "date": pa.types.is_date,
}


def _tables() -> dict[str, dict[str, Any]]:
    with tpch.CATALOG_PATH.open("rb") as handle:
        tables: dict[str, dict[str, Any]] = tomllib.load(handle)["tables"]
    return tables


def _columns(table: str) -> dict[str, dict[str, Any]]:
    """A table's columns, each as a mapping (a bare type name ``"int"`` as ``{"type": "int"}``)."""
    columns = _tables()[table]["columns"]
    return {name: {"type": spec} if isinstance(spec, str) else spec for name, spec in columns.items()}


def _declared(key: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Every (table, column) whose entry has ``key``."""
    return {(t, c): spec for t in _tables() for c, spec in _columns(t).items() if key in spec}


def _fetch(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        rows: list[tuple[Any, ...]] = con.execute(sql).fetchall()
        return rows


def _retail_price(partkey: Any) -> Any:
    """P_RETAILPRICE of the specification (4.2.3), in cents."""
    return 90000 + (partkey // 10) % 20001 + 100 * (partkey % 1000)


# --------------------------------------------------------------------------------------------- generate


def test_generate_makes_the_eight_tables_at_the_specified_sizes(
    tpch_dir: Path, tpch_tables: dict[str, pa.Table]
) -> None:
    assert sorted(p.name for p in tpch_dir.glob("*.parquet")) == sorted(f"{t}.parquet" for t in tpch.TABLES)
    assert {table: data.num_rows for table, data in tpch_tables.items()} == SF001_ROWS
    assert list(tpch_tables) == list(tpch.TABLES)


def test_a_complete_folder_is_not_generated_again(tpch_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in tpch_dir.iterdir()}

    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("tpchgen-cli ran for a folder that holds the data")

    monkeypatch.setattr(tpch.subprocess, "run", no_run)
    assert tpch.generate(0.01, tpch_dir) == tpch_dir
    assert tpch.generate(0.01, str(tpch_dir)) == tpch_dir
    assert {p.name: p.stat().st_mtime_ns for p in tpch_dir.iterdir()} == before


def test_files_of_another_run_are_replaced(tmp_path: Path) -> None:
    """Files without the stamp of a complete run (an interrupted run, or not ours), then files of another
    scale factor, are generated again; nothing of the work is left behind."""
    folder = tmp_path / "new" / "folder"
    folder.mkdir(parents=True)
    for table in tpch.TABLES:
        (folder / f"{table}.parquet").write_bytes(b"not parquet")
    assert tpch.generate(0.001, folder) == folder
    assert tpch.arrow_tables(folder)["customer"].num_rows == 150
    assert tpch.generate(0.002, folder) == folder
    tables = tpch.arrow_tables(folder)
    assert (tables["customer"].num_rows, tables["orders"].num_rows) == (300, 3000)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [".tpchgen-scale", *(f"{t}.parquet" for t in tpch.TABLES)]
    )


def test_the_generator_next_to_the_interpreter_is_found_without_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    found = Path(tpch._program())
    assert found.parent == Path(sys.executable).parent and found.name.startswith("tpchgen-cli")


def test_a_missing_generator_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setattr(sys, "executable", str(empty / "python"))
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ConfigurationError, match=r"pip install tpchgen-cli") as caught:
        tpch.generate(0.01, tmp_path / "out")
    message = str(caught.value)
    assert message.endswith(".") and message.count(". ") == 0  # one sentence
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(os.name != "posix", reason="the stand-in generator is a shell script")
def test_a_failed_run_raises_its_message_and_leaves_no_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "tpchgen-cli"
    fake.write_text("#!/bin/sh\necho 'scale factor out of range' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match=r"exit status 3\): scale factor out of range"):
        tpch.generate(0.01, out)
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("scale", [0, -1, float("nan"), float("inf")])
def test_the_scale_factor_must_be_positive(scale: float, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive finite"):
        tpch.generate(scale, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_arrow_tables_names_the_missing_files(tmp_path: Path) -> None:
    (tmp_path / "region.parquet").write_bytes(b"")
    with pytest.raises(
        FileNotFoundError, match="customer, orders, lineitem, part, partsupp, supplier, nation"
    ):
        tpch.arrow_tables(tmp_path)
    with duckdb.connect() as con, pytest.raises(FileNotFoundError, match="region"):
        tpch.load_duckdb(con, tmp_path / "nothing")


# ------------------------------------------------------------------------------------------ engines


def test_arrow_tables_have_the_catalogs_columns_and_types(tpch_tables: dict[str, pa.Table]) -> None:
    assert set(_tables()) == set(tpch_tables)
    for table, data in tpch_tables.items():
        columns = _columns(table)
        assert data.schema.names == list(columns), table  # every column, in the generated order
        for name, spec in columns.items():
            assert data.schema.field(name).type == ARROW_TYPE[spec["type"]], (table, name)


def test_float_columns_hold_the_nearest_double_of_each_decimal(
    tpch_dir: Path, tpch_tables: dict[str, pa.Table]
) -> None:
    """The float columns are exactly the files' DECIMAL columns, each value the double nearest to the
    decimal (its text parsed, which rounds correctly; Arrow's direct cast does not)."""
    for table, data in tpch_tables.items():
        raw = pq.read_table(tpch_dir / f"{table}.parquet")
        decimals = [field.name for field in raw.schema if pa.types.is_decimal(field.type)]
        assert decimals == [name for name, spec in _columns(table).items() if spec["type"] == "float"], table
        for name in decimals:
            nearest = raw[name].cast(pa.string()).cast(pa.float64()).combine_chunks()
            assert data[name].combine_chunks().equals(nearest), (table, name)


def test_load_duckdb_holds_what_arrow_tables_reads(
    tpch_duckdb: Path, tpch_tables: dict[str, pa.Table]
) -> None:
    backend = DuckDBBackend(tpch_duckdb, read_only=True)
    try:
        for table, data in tpch_tables.items():
            loaded = backend.execute(f"SELECT * FROM {table} ORDER BY ALL")
            expected = data.sort_by([(name, "ascending") for name in data.schema.names])
            assert loaded.schema == expected.schema, table
            assert loaded.equals(expected), table
    finally:
        backend.close()


def test_load_duckdb_into_an_open_connection_replaces_tables(tpch_dir: Path) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE region AS SELECT 'old' AS x")
    tpch.load_duckdb(con, tpch_dir)
    tpch.load_duckdb(con, tpch_dir)  # again: each table replaced, not appended to
    tables = {row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert tables == set(tpch.TABLES)
    assert con.execute("SELECT COUNT(*), MIN(r_regionkey), MAX(r_regionkey) FROM region").fetchall() == [
        (5, 0, 4)
    ]
    assert con.execute("SELECT COUNT(*) FROM lineitem").fetchall() == [(SF001_ROWS["lineitem"],)]
    con.close()


#: the engines holding the tables; a PostgreSQL or Spark case runs in the xdist group of that engine's
#: tests, so that one worker starts the server or the JVM
ENGINES = [
    "duckdb",
    pytest.param("postgres", marks=pytest.mark.xdist_group("postgres")),
    pytest.param("spark", marks=pytest.mark.xdist_group("spark")),
]


@pytest.fixture
def engine(request: pytest.FixtureRequest, tpch_duckdb: Path) -> Any:
    """A backend holding the eight tables at scale factor 0.01 (parametrized indirectly with ENGINES)."""
    if request.param == "duckdb":
        backend = DuckDBBackend(tpch_duckdb, read_only=True)
        request.addfinalizer(backend.close)
        return backend
    return request.getfixturevalue(f"tpch_{request.param}")


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_every_engine_has_the_catalogs_type_families(engine: Backend) -> None:
    for table in tpch.TABLES:
        schema = engine.execute(f"SELECT * FROM {table} LIMIT 0").schema
        found = {field.name.lower(): field.type for field in schema}
        columns = _columns(table)
        assert list(found) == list(columns), table
        for name, spec in columns.items():
            assert ENGINE_FAMILY[spec["type"]](found[name]), (engine.dialect, table, name, found[name])


#: the columns that identify a row of each table (its primary key in the specification)
KEYS = {
    "customer": ["c_custkey"],
    "orders": ["o_orderkey"],
    "lineitem": ["l_orderkey", "l_linenumber"],
    "part": ["p_partkey"],
    "partsupp": ["ps_partkey", "ps_suppkey"],
    "supplier": ["s_suppkey"],
    "nation": ["n_nationkey"],
    "region": ["r_regionkey"],
}


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_every_engine_holds_exactly_the_generated_rows(
    engine: Backend, tpch_tables: dict[str, pa.Table]
) -> None:
    """Every row and value as the Arrow tables have them (floats bit for bit), compared in key order."""
    for table, data in tpch_tables.items():
        keys = KEYS[table]
        loaded = engine.execute(f"SELECT * FROM {table} ORDER BY {', '.join(keys)}")
        assert loaded.num_rows == SF001_ROWS[table], (engine.dialect, table)
        expected = data.sort_by([(key, "ascending") for key in keys]).to_pylist()
        rows = [{name.lower(): value for name, value in row.items()} for row in loaded.to_pylist()]
        assert rows == expected, (engine.dialect, table)


# ---------------------------------------------------------------------------------------- the catalog


def test_the_catalog_follows_the_documented_format() -> None:
    tables = _tables()
    assert list(tables) == list(tpch.TABLES)
    sensitive = [t for t, spec in tables.items() if not spec.get("public", False)]
    assert sensitive == ["customer", "orders", "lineitem"]
    for table, spec in tables.items():
        allowed = TABLE_KEYS | ({"references"} if table in ("orders", "lineitem") else set())
        assert set(spec) <= allowed, table
        for name, column in _columns(table).items():
            assert set(column) <= COLUMN_KEYS, (table, name)
            assert column["type"] in ARROW_TYPE, (table, name)
            assert ("lower" in column) == ("upper" in column), (table, name)
        if spec.get("public", False):
            assert not {"privacy_unit", "max_partitions", "max_rows_per_partition", "references"} & set(spec)
    customer, orders, lineitem = (tables[t] for t in ("customer", "orders", "lineitem"))
    assert (customer["privacy_unit"], customer["max_partitions"], customer["max_rows_per_partition"]) == (
        "c_custkey",
        1,
        1,
    )
    assert orders["references"] == {"o_custkey": "customer.c_custkey"} and "privacy_unit" not in orders
    assert (orders["max_partitions"], orders["max_rows_per_partition"]) == (1, 20)
    assert lineitem["references"] == {"l_orderkey": "orders.o_orderkey"} and "privacy_unit" not in lineitem
    assert (lineitem["max_partitions"], lineitem["max_rows_per_partition"]) == (4, 100)
    assert _columns("customer")["c_nationkey"] == {
        "type": "int",
        "public_values": list(range(25)),
        "user_constant": True,
    }


def test_the_catalog_loads_in_kakeibo_sql() -> None:
    from kakeibo.sql import Catalog

    catalog = Catalog.from_toml(tpch.catalog())
    assert list(catalog.tables) == list(tpch.TABLES)
    assert [t.name for t in catalog.tables.values() if t.public] == [
        "part",
        "partsupp",
        "supplier",
        "nation",
        "region",
    ]
    customer = catalog.table("customer")
    assert (customer.privacy_unit, customer.max_partitions, customer.max_rows_per_partition) == (
        "c_custkey",
        1,
        1,
    )
    orders, lineitem = catalog.table("orders"), catalog.table("lineitem")
    assert (orders.max_partitions, orders.max_rows_per_partition) == (1, 20)
    assert (lineitem.max_partitions, lineitem.max_rows_per_partition) == (4, 100)
    for (table, column), spec in _declared("upper").items():
        declared = catalog.table(table).column(column)
        assert (declared.lower, declared.upper) == (spec["lower"], spec["upper"]), (table, column)


def test_the_price_bounds_follow_from_the_specifications_formula(tpch_tables: dict[str, pa.Table]) -> None:
    """P_RETAILPRICE repeats with period lcm(10 * 20001, 1000) = 20,001,000 in the part key, so its range
    over every scale factor is its range over one period; the bounds derived from it are those declared."""
    low, high = math.inf, -math.inf
    for start in range(1, 20_001_001, 2_000_000):
        cents = _retail_price(np.arange(start, min(start + 2_000_000, 20_001_001), dtype=np.int64))
        low, high = min(low, int(cents.min())), max(high, int(cents.max()))
    assert (low, high) == (90_000, 209_900)
    columns = {t: _columns(t) for t in ("part", "lineitem", "orders")}
    assert (columns["part"]["p_retailprice"]["lower"], columns["part"]["p_retailprice"]["upper"]) == (
        900,
        2099,
    )
    quantity, extended = columns["lineitem"]["l_quantity"], columns["lineitem"]["l_extendedprice"]
    assert extended["upper"] == quantity["upper"] * high / 100
    most_per_line = extended["upper"] * (1 + columns["lineitem"]["l_tax"]["upper"])
    most_per_line *= 1 - columns["lineitem"]["l_discount"]["lower"]
    assert columns["orders"]["o_totalprice"]["upper"] == pytest.approx(7 * most_per_line, abs=0.005)
    # the generated prices are the formula's, so the bounds apply to them
    part = tpch_tables["part"]
    formula = _retail_price(np.asarray(part["p_partkey"])) / 100
    assert np.array_equal(np.asarray(part["p_retailprice"]), formula)


def test_every_declared_bound_holds_on_the_data(tpch_duckdb: Path) -> None:
    bounded = _declared("upper")
    assert set(bounded) == {
        ("customer", "c_acctbal"),
        ("orders", "o_totalprice"),
        ("orders", "o_shippriority"),
        ("lineitem", "l_linenumber"),
        ("lineitem", "l_quantity"),
        ("lineitem", "l_extendedprice"),
        ("lineitem", "l_discount"),
        ("lineitem", "l_tax"),
        ("part", "p_size"),
        ("part", "p_retailprice"),
        ("partsupp", "ps_availqty"),
        ("partsupp", "ps_supplycost"),
        ("supplier", "s_acctbal"),
    }
    for (table, column), spec in bounded.items():
        ((low, high),) = _fetch(tpch_duckdb, f"SELECT MIN({column}), MAX({column}) FROM {table}")
        assert spec["lower"] <= low <= high <= spec["upper"], (table, column, low, high)


def test_every_public_values_list_is_exactly_the_generated_values(tpch_duckdb: Path) -> None:
    """Every generated value is listed, and at this size every listed value also occurs (so a misspelt
    entry fails too)."""
    listed = _declared("public_values")
    assert set(listed) == {
        ("customer", "c_nationkey"),
        ("customer", "c_mktsegment"),
        ("orders", "o_orderstatus"),
        ("orders", "o_orderpriority"),
        ("lineitem", "l_returnflag"),
        ("lineitem", "l_linestatus"),
        ("lineitem", "l_shipinstruct"),
        ("lineitem", "l_shipmode"),
    }
    for (table, column), spec in listed.items():
        found = {row[0] for row in _fetch(tpch_duckdb, f"SELECT DISTINCT {column} FROM {table}")}
        assert found == set(spec["public_values"]), (table, column)
        assert len(spec["public_values"]) == len(found), (table, column)


def test_every_column_declared_unique_is_unique(tpch_duckdb: Path) -> None:
    unique = _declared("unique")
    assert set(unique) == {
        ("customer", "c_custkey"),
        ("orders", "o_orderkey"),
        ("part", "p_partkey"),
        ("supplier", "s_suppkey"),
        ("nation", "n_nationkey"),
        ("region", "r_regionkey"),
    }
    for (table, column), spec in unique.items():
        assert spec["unique"] is True
        ((rows, values, distinct),) = _fetch(
            tpch_duckdb, f"SELECT COUNT(*), COUNT({column}), COUNT(DISTINCT {column}) FROM {table}"
        )
        assert rows == values == distinct == SF001_ROWS[table], (table, column)
    # partsupp's key is the pair, which is why no single column of it is declared unique
    ((pairs, parts),) = _fetch(
        tpch_duckdb,
        "SELECT COUNT(DISTINCT (ps_partkey, ps_suppkey)), COUNT(DISTINCT ps_partkey) FROM partsupp",
    )
    assert pairs == SF001_ROWS["partsupp"] and parts < pairs


def test_every_reference_leads_to_a_person(tpch_duckdb: Path) -> None:
    """Each reference names a unique key of a sensitive table, every referencing value is one of its keys,
    and following references from any sensitive table ends at the table of persons."""
    tables = _tables()
    for table in ("orders", "lineitem"):
        ((column, target),) = tables[table]["references"].items()
        target_table, key = target.split(".")
        assert not tables[target_table].get("public", False), table
        assert _columns(target_table)[key].get("unique") is True, table
        assert tables[target_table].get("privacy_unit") in (None, key), table
        sql = (
            f"SELECT COUNT(*) FROM {table} WHERE {column} IS NULL "
            f"OR {column} NOT IN (SELECT {key} FROM {target_table})"
        )
        assert _fetch(tpch_duckdb, sql) == [(0,)], table
        reached = table
        while "references" in tables[reached]:
            reached = next(iter(tables[reached]["references"].values())).split(".")[0]
        assert reached == "customer" and tables[reached]["privacy_unit"] == "c_custkey"
