"""TPC-H data for kakeibo's relational DP SQL: generate it, read it as Arrow, load it into DuckDB.

TPC-H (specification v3.0.1) is an eight-table retail schema. For DP SQL the person is the customer:
``orders`` reference ``customer`` through ``o_custkey`` and ``lineitem`` reference ``orders`` through
``l_orderkey``, so every order and every line item belongs to one customer, while ``part``, ``partsupp``,
``supplier``, ``nation`` and ``region`` hold no personal data. The catalog of that schema is
``tpch_catalog.toml`` next to this module (:data:`CATALOG_PATH`); its clamping bounds and public values
come from the specification (section 4.2.3), not from generated data, and its comments say how.

The data are made on this machine by ``tpchgen-cli`` (the PyPI package ``tpchgen-cli``, in kakeibo's
``dev`` extra), which writes one Parquet file per table; nothing is downloaded. Scale factor 1 is 8.66
million rows (6,001,215 line items) in 345 MB of Parquet; the tests use scale factor 0.01.

Parquet keeps TPC-H's money columns as ``DECIMAL(15, 2)`` and its text as ``string_view``, which the
catalog's types do not take (a DECIMAL column would be converted row by row in every comparison), so
:func:`arrow_tables` and :func:`load_duckdb` convert them: DECIMAL to float64 (DOUBLE), text to plain
strings (VARCHAR), every integer to int64 (BIGINT); dates stay dates.

>>> import tempfile
>>> import duckdb
>>> with tempfile.TemporaryDirectory() as tmp:
...     folder = generate(0.001, tmp)
...     tables = arrow_tables(folder)
...     connection = duckdb.connect()
...     load_duckdb(connection, folder)
...     counted = connection.execute("SELECT COUNT(*) FROM orders").fetchall()
>>> tables["customer"].num_rows, counted
(150, [(1500,)])
>>> str(tables["lineitem"].schema.field("l_extendedprice").type)
'double'
"""

from __future__ import annotations

import math
import numbers
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ArgumentError, ArgumentTypeError, ConfigurationError

__all__ = [
    "CATALOG_PATH",
    "TABLES",
    "arrow_tables",
    "catalog",
    "generate",
    "load_duckdb",
    "two_person_catalog",
]

#: the eight TPC-H tables, the sensitive ones first (each file is ``<table>.parquet``)
TABLES: tuple[str, ...] = (
    "customer",
    "orders",
    "lineitem",
    "part",
    "partsupp",
    "supplier",
    "nation",
    "region",
)

_REVENUE = "l_extendedprice * (1 - l_discount)"

#: TPC-H queries (specification v3.0.1, section 2.4) in the select-project-join-aggregate form kakeibo
#: answers with the customer as the person: joins and filters as written, the aggregates kept, and what
#: would release one row per order or customer dropped. Q1, Q6, Q12 and Q14 are the specification's
#: queries without ORDER BY; Q3 and Q10 sum the revenue of the specification's rows (Q3 over all orders
#: instead of per order, Q10 per nation instead of per customer); Q5 is the specification's; Q18 sums
#: the quantity of every customer's line items (R2T's form, without the specification's HAVING subquery).
QUERIES: dict[str, str] = {
    "Q1": "SELECT l_returnflag, l_linestatus, SUM(l_quantity) AS sum_qty, SUM(l_extendedprice) AS "
    "sum_base_price, "
    f"SUM({_REVENUE}) AS sum_disc_price, SUM({_REVENUE} * (1 + l_tax)) AS sum_charge, "
    "AVG(l_quantity) AS avg_qty, AVG(l_discount) AS avg_disc, COUNT(*) AS count_order FROM lineitem "
    "WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag, l_linestatus",
    "Q3": f"SELECT SUM({_REVENUE}) AS revenue FROM customer, orders, lineitem "
    "WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey "
    "AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15'",
    "Q5": f"SELECT n_name, SUM({_REVENUE}) AS revenue FROM customer, orders, lineitem, supplier, "
    "nation, region "
    "WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey "
    "AND c_nationkey = s_nationkey AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey "
    "AND r_name = 'ASIA' AND o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01' "
    "GROUP BY n_name",
    "Q6": "SELECT SUM(l_extendedprice * l_discount) AS revenue FROM lineitem WHERE l_shipdate >= "
    "DATE '1994-01-01' "
    "AND l_shipdate < DATE '1995-01-01' AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24",
    "Q10": f"SELECT c_nationkey, SUM({_REVENUE}) AS revenue FROM customer JOIN orders ON c_custkey = "
    "o_custkey "
    "JOIN lineitem ON l_orderkey = o_orderkey JOIN nation ON c_nationkey = n_nationkey "
    "WHERE o_orderdate >= DATE '1993-10-01' AND o_orderdate < DATE '1994-01-01' AND l_returnflag = 'R' "
    "GROUP BY c_nationkey",
    "Q12": "SELECT l_shipmode, SUM(CASE WHEN o_orderpriority = '1-URGENT' OR o_orderpriority = "
    "'2-HIGH' THEN 1 "
    "ELSE 0 END) AS high_line_count, SUM(CASE WHEN o_orderpriority <> '1-URGENT' AND o_orderpriority <> "
    "'2-HIGH' THEN 1 ELSE 0 END) AS low_line_count FROM orders, lineitem WHERE o_orderkey = l_orderkey "
    "AND l_shipmode IN ('MAIL', 'SHIP') AND l_commitdate < l_receiptdate AND l_shipdate < l_commitdate "
    "AND l_receiptdate >= DATE '1994-01-01' AND l_receiptdate < DATE '1995-01-01' GROUP BY l_shipmode",
    "Q14": f"SELECT 100.00 * SUM(CASE WHEN p_type LIKE 'PROMO%' THEN {_REVENUE} ELSE 0 END) "
    f"/ SUM({_REVENUE}) AS promo_revenue FROM lineitem, part WHERE l_partkey = p_partkey "
    "AND l_shipdate >= DATE '1995-09-01' AND l_shipdate < DATE '1995-10-01'",
    "Q18": "SELECT SUM(l_quantity) AS quantity FROM customer, orders, lineitem WHERE c_custkey = o_custkey "
    "AND o_orderkey = l_orderkey",
}

#: the kakeibo catalog of the TPC-H schema (customer is the person; see the file's comments)
CATALOG_PATH: Path = Path(__file__).with_name("tpch_catalog.toml")

_PROGRAM = "tpchgen-cli"
# Written after a complete generation: the scale factor the files in the folder were made at.
_STAMP = ".tpchgen-scale"

# The engine types of the converted columns (DuckDB's names for the Arrow types).
_DUCKDB_TYPES = {pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.string(): "VARCHAR", pa.date32(): "DATE"}


def catalog() -> Path:
    """The path of the TPC-H catalog file (:data:`CATALOG_PATH`), for ``kakeibo.sql.Catalog.from_toml``.

    >>> catalog().name
    'tpch_catalog.toml'
    >>> catalog().is_file()
    True
    """
    return CATALOG_PATH


def two_person_catalog() -> dict[str, Any]:
    """The TPC-H catalog (:func:`catalog`) with suppliers protected too, as R2T's TPC-H experiments have it
    (Dong et al., SIGMOD 2022, Section 8: customer and supplier both primary private relations): supplier
    names its privacy unit ``s_suppkey``, and a line item references its supplier besides its order, so it
    belongs to two persons and a query over line items is answered by R2T's linear program
    (:mod:`kakeibo.sql.program`). The structure :meth:`kakeibo.sql.Catalog.from_dict` reads.

    >>> from kakeibo.sql import Catalog
    >>> [str(r) for r in Catalog.from_dict(two_person_catalog()).table("lineitem").references]
    ['l_orderkey -> orders.o_orderkey', 'l_suppkey -> supplier.s_suppkey']
    """
    from ..sql.catalog import Catalog

    data = Catalog.from_toml(CATALOG_PATH).to_dict()
    tables = data["tables"]
    supplier = {key: value for key, value in tables["supplier"].items() if key != "public"}
    tables["supplier"] = {**supplier, "privacy_unit": "s_suppkey", "max_partitions": 1}
    tables["supplier"]["max_rows_per_partition"] = 1
    tables["lineitem"]["references"] = {"l_orderkey": "orders.o_orderkey", "l_suppkey": "supplier.s_suppkey"}
    return data


def _scale_text(scale: float) -> str:
    """The scale factor as ``tpchgen-cli -s`` takes it.

    >>> _scale_text(1), _scale_text(0.01), _scale_text(10.0)
    ('1', '0.01', '10')
    """
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise ArgumentTypeError(f"the scale factor must be a number, got {scale!r}.")
    value = float(scale)
    if not (value > 0 and math.isfinite(value)):
        raise ArgumentError(f"the scale factor must be a positive finite number, got {scale!r}.")
    return str(int(value)) if value.is_integer() else repr(value)


def _program() -> str:
    """The ``tpchgen-cli`` executable: the one installed next to this Python first, else one on PATH."""
    found = shutil.which(_PROGRAM, path=str(Path(sys.executable).parent)) or shutil.which(_PROGRAM)
    if found is None:
        raise ConfigurationError(
            f"the TPC-H generator {_PROGRAM} was found neither next to {sys.executable} nor on PATH; "
            f"install it with `pip install {_PROGRAM}` (it is in kakeibo's dev extra)."
        )
    return found


def _files(directory: Path) -> dict[str, Path]:
    return {table: directory / f"{table}.parquet" for table in TABLES}


def generate(scale: float, directory: str | os.PathLike[str]) -> Path:
    """Generate the eight TPC-H tables at scale factor ``scale`` as Parquet files in ``directory``
    (created when missing) and return that folder.

    Runs ``tpchgen-cli parquet -s <scale> --output-dir=<folder>`` (``tpchgen-cli`` 4). When the folder
    already holds the eight files of a complete generation at the same scale factor, nothing runs: the
    folder is a cache. Files at another scale factor, or left by an interrupted run, are replaced. The
    program writes into a fresh subfolder, and each file then replaces its old copy in one rename, so a
    reader never sees a half-written file; two processes may generate one scale factor into one folder
    at once (the generator is deterministic: both write the same files).

    A missing ``tpchgen-cli`` raises :class:`~kakeibo.errors.ConfigurationError`; a failed run raises
    :class:`RuntimeError` with the program's message. Measured once on the machine this module was
    written on (2 cores): 5.1 s at scale factor 1 (7 s of CPU, 0.4 GB of memory at most); 1.1 s at 0.01,
    about what any run costs before it writes a row.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     folder = generate(0.001, tmp)
    ...     sorted(path.name for path in folder.glob("*.parquet"))[:3]
    ['customer.parquet', 'lineitem.parquet', 'nation.parquet']
    """
    text = _scale_text(scale)
    folder = Path(directory)
    files = _files(folder)
    stamp = folder / _STAMP
    if (
        stamp.is_file()
        and stamp.read_text(encoding="utf-8") == text
        and all(p.is_file() for p in files.values())
    ):
        return folder
    program = _program()
    folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tpchgen-", dir=folder))
    try:
        result = subprocess.run(
            [program, "parquet", "-s", text, f"--output-dir={work}", "--quiet"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        made = _files(work)
        missing = [table for table, path in made.items() if not path.is_file()]
        if result.returncode != 0 or missing:
            message = (result.stderr or result.stdout).strip() or f"no file for {', '.join(missing)}"
            raise RuntimeError(f"{program} failed (exit status {result.returncode}): {message}")
        stamp.unlink(missing_ok=True)  # the folder is not a complete generation while files are replaced
        for table, path in made.items():
            os.replace(path, files[table])
        (work / _STAMP).write_text(text, encoding="utf-8")
        os.replace(work / _STAMP, stamp)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder


def _engine_type(column: str, parquet_type: pa.DataType) -> pa.DataType:
    """The Arrow type kakeibo's catalog takes for a column that Parquet holds as ``parquet_type``.

    >>> _engine_type("price", pa.decimal128(15, 2)), _engine_type("name", pa.string_view())
    (DataType(double), DataType(string))
    """
    t = parquet_type
    if pa.types.is_decimal(t) or pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_integer(t):
        return pa.int64()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_date(t):
        return pa.date32()
    raise ArgumentTypeError(f"column {column!r} has Parquet type {t}, which no TPC-H column has.")


def _schema(path: Path) -> pa.Schema:
    """The converted schema of a Parquet file: nullable fields without Parquet's metadata."""
    return pa.schema([pa.field(f.name, _engine_type(f.name, f.type)) for f in pq.read_schema(path)])


def _existing_files(directory: str | os.PathLike[str]) -> dict[str, Path]:
    files = _files(Path(directory))
    missing = [table for table, path in files.items() if not path.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{os.fspath(directory)} holds no Parquet file for TPC-H table(s) {', '.join(missing)}; "
            "make them with kakeibo.data.tpch.generate."
        )
    return files


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _connect(database: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection of this module's own, which draws no progress bar on long statements."""
    connection = duckdb.connect(database)
    connection.execute("SET enable_progress_bar = false")
    return connection


def _select(path: Path, schema: pa.Schema) -> str:
    """DuckDB's query of one Parquet file with every column cast to its type in ``schema``."""
    columns = ", ".join(
        f"CAST({_quote(field.name)} AS {_DUCKDB_TYPES[field.type]}) AS {_quote(field.name)}"
        for field in schema
    )
    source = os.fspath(path.resolve()).replace("'", "''")
    return f"SELECT {columns} FROM read_parquet('{source}')"


def arrow_tables(directory: str | os.PathLike[str]) -> dict[str, pa.Table]:
    """The eight tables of a :func:`generate` folder as Arrow tables, in the order of :data:`TABLES`,
    with the column types kakeibo's catalog takes: DECIMAL as float64, text as ``string``, integers as
    int64, dates as date32 (column names as generated, lower case; rows in the files' order).

    DuckDB reads the files, with the statement :func:`load_duckdb` runs, so both hold the same values:
    each DECIMAL as the double nearest to it (Arrow's own cast of a DECIMAL to float64 does not round
    correctly: it turns 950.05 into 950.0500000000001). The whole data are read into memory: 1.2 GB of
    Arrow buffers at scale factor 1 (read in 1 to 3 s on 2 cores), so larger scales are better loaded
    into an engine straight from the files (:func:`load_duckdb`).
    """
    tables: dict[str, pa.Table] = {}
    connection = _connect(":memory:")
    try:
        for table, path in _existing_files(directory).items():
            schema = _schema(path)
            tables[table] = connection.sql(_select(path, schema)).to_arrow_table().cast(schema)
    finally:
        connection.close()
    return tables


def load_duckdb(
    connection_or_path: duckdb.DuckDBPyConnection | str | os.PathLike[str], directory: str | os.PathLike[str]
) -> None:
    """Create the eight tables of a :func:`generate` folder in a DuckDB database (an open connection, or
    the path of a database file, created when missing and closed afterwards), replacing tables of the
    same names.

    Each table is ``CREATE OR REPLACE TABLE t AS SELECT CAST(c AS ...) ... FROM read_parquet(...)``,
    read by DuckDB straight from the file, with the types of :func:`arrow_tables`: DECIMAL columns as
    DOUBLE, text as VARCHAR, integers as BIGINT, dates as DATE. Measured once at scale factor 1 on the
    machine this module was written on (2 cores, the Parquet files in the page cache): 6.5 s into a new
    database file (276 MB), 1.8 s into an in-memory database.
    """
    statements = [
        f"CREATE OR REPLACE TABLE {_quote(table)} AS {_select(path, _schema(path))}"
        for table, path in _existing_files(directory).items()
    ]
    if isinstance(connection_or_path, duckdb.DuckDBPyConnection):
        for statement in statements:
            connection_or_path.execute(statement)
        return
    connection = _connect(os.fspath(connection_or_path))
    try:
        for statement in statements:
            connection.execute(statement)
    finally:
        connection.close()
