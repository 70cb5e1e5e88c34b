"""TPC-H joins under DP: kakeibo next to Qrlew, Tumult Analytics, PipelineDP, OpenDP and SmartNoise SQL.

Run (each peer in an environment of its own under ``/tmp/peers``; see ``--help`` for the paths)::

    .venv/bin/python benchmarks/bench_tpch_peers.py [--scale 1] [--runs 10] [--systems kakeibo,qrlew,...]
        [--queries R2T-Q18,R2T-Q10,Q6,Q1] [--max-seconds 600]

    python3 -m venv /tmp/peers/qrlew && /tmp/peers/qrlew/bin/pip install pyqrlew==0.9.27 duckdb sqlalchemy
    python3 -m venv /tmp/peers/tumult && /tmp/peers/tumult/bin/pip install tmlt.analytics==0.21.0 \\
        pyspark==3.5.9
    python3 -m venv /tmp/peers/snsql && /tmp/peers/snsql/bin/pip install smartnoise-sql==1.0.10 duckdb
    python3 -m venv /tmp/peers/opendp && /tmp/peers/opendp/bin/pip install 'opendp[polars]==0.16.0' duckdb
    python3 -m venv /tmp/peers/pipelinedp && /tmp/peers/pipelinedp/bin/pip install pipeline-dp duckdb

Data: TPC-H at ``--scale`` made by ``kakeibo.data.tpch.generate`` and loaded with ``load_duckdb`` into a
DuckDB file cached under the system temp folder (the cache of ``bench_tpch.py``). The parent exports the
columns the queries use to Parquet files next to it (``peers/``), plus one pre-joined table,
``lineitem_cust`` = lineitem with its order's ``o_custkey`` (an inner join on ``l_orderkey = o_orderkey``),
for the peers that need a customer column on the line items. The person is the customer. epsilon 0.8 for
the whole query; delta 1e-6 where a system takes one.

Queries (``_queries`` below): ``R2T-Q18`` and ``R2T-Q10`` are ``bench_tpch.R2T_QUERIES`` (SUM(l_quantity)
over customer x orders x lineitem; COUNT(*) over orders x customer x nation), ``Q6`` is
``kakeibo.data.tpch.QUERIES["Q6"]``, and ``Q1`` is TPC-H Q1 reduced to COUNT(*) and SUM(l_quantity) per
(l_returnflag, l_linestatus), what every peer can express.

Measured, per (query, system), each system in a child process of its own (this file, ``--child``), one
child per query: the wall time of the query (median over ``--runs`` runs, each a fresh DP release; loading
the data and building the session are not timed), the peak resident memory of the child (``VmHWM`` of its
process plus that of its child processes, i.e. Spark's JVM for Tumult), and the median relative error over
the runs, groups and aggregates against the exact, untruncated answer (DuckDB on the raw tables, in the
parent); a group the system does not release counts as 0 (error 100%). ``--max-seconds`` stops a slow
child's repetitions once its runs took that long (at least one run); the table gives the runs done.

Bounds, the same for every system (those of ``kakeibo/data/tpch_catalog.toml``): l_quantity in [1, 50],
l_extendedprice in [0, 104950], l_discount in [0, 0.10], so l_extendedprice * l_discount in [0, 10495]; at
most 20 orders and 100 line items of a customer per group, at most 4 (l_returnflag, l_linestatus) groups per
customer; the 6 pairs A/N/R x F/O public. How each system takes them:

* ``kakeibo`` (fixed): ``kakeibo.connect`` on the DuckDB file with ``kakeibo.data.tpch.catalog()`` (orders:
  20 rows per group; lineitem: 100 rows per group, 4 groups); the relational tables as they are, no
  pre-join. ``kakeibo-r2t``: the same catalog with ``max_rows_per_partition = "auto"`` and
  ``max_rows_bound = 10000`` on orders and lineitem (the R2T race, built by ``bench_tpch.catalogs`` with
  kakeibo's default truncation base).
* Qrlew (``pyqrlew``): a ``Dataset`` read from a SQLite copy of the used columns of customer, orders,
  lineitem and nation (made once per scale factor with ``executemany``, timed apart, cached next to the
  DuckDB file). Privacy unit propagated along the foreign keys: customer by ``c_custkey``, orders by
  ``o_custkey -> customer.c_custkey``, lineitem by ``l_orderkey -> orders.o_orderkey -> o_custkey ->
  customer.c_custkey``; nation is left out of the privacy unit, which makes it public in Qrlew.
  ``with_range`` for the three numeric bounds, ``with_possible_values`` for l_returnflag and l_linestatus;
  ``max_multiplicity`` = 100 line items (20 orders for R2T-Q10, which reads no line item) and
  ``max_privacy_unit_groups`` = 4 (1 for the scalar queries). Qrlew 0.9.27 panics on comma joins and on
  DATE literals, so it gets the same joins as ``JOIN ... ON`` and dates as string literals (``QRLEW_SQL``).
  The query is rewritten with ``rewrite_with_differential_privacy`` (epsilon 0.8, delta 1e-6) and the
  rewritten SQL run on DuckDB over the same tables; the time is the rewrite plus the run.
* Tumult Analytics (Spark local[2], driver memory 4g, Spark's defaults otherwise): one ID space
  ``customer``, each private table added with ``AddRowsWithID`` on its customer column, the ID columns
  renamed to ``custkey`` everywhere (Tumult joins two private tables only on ID columns of one name),
  ``orderkey`` likewise; lineitem has no customer column, so it is ``lineitem_cust`` (the pre-join above,
  what Tumult needs). R2T-Q18: lineitem ``join_private`` orders (on custkey, orderkey) ``join_private``
  customer, ``MaxRowsPerID(100)``, sum of l_quantity clamped to [1, 50]. R2T-Q10: orders ``join_private``
  customer ``join_public`` nation, ``MaxRowsPerID(20)``, count. Q6: filter, ``map`` adding price *
  discount, ``MaxRowsPerID(100)``, sum clamped to [0, 10495]. Q1: filter, ``map`` adding one column for the
  (returnflag, linestatus) pair, ``MaxGroupsPerID(4)`` and ``MaxRowsPerGroupPerID(100)`` on it, the 6 pairs
  as the KeySet; count and sum are two queries of epsilon 0.4 each (its query builder makes one aggregate
  per query). Pure DP (Laplace): Tumult needs no delta here.
* PipelineDP (LocalBackend), OpenDP (polars front end) and SmartNoise SQL (pandas reader) run Q6 and Q1 on
  ``lineitem_cust`` only, with ``o_custkey`` as the privacy id. PipelineDP: Q6 one public partition with
  ``max_partitions_contributed = 1`` and ``max_contributions_per_partition = 100``, values in [0, 10495];
  Q1 the 6 public pairs, 4 partitions, 100 contributions per partition, l_quantity in [1, 50]; Laplace
  noise; the rows are Python tuples and the filter runs in Python inside the timed part. OpenDP:
  ``unit_of(contributions=1, identifier="o_custkey")`` (one identifier per customer; bounds on the rows
  there instead give OpenDP a sensitivity 100 times too large, as they count identifiers) with
  ``truncate_per_group(100)``; for Q1 ``truncate_per_group(100, by=pair)``,
  ``truncate_num_groups(4, by=pair, keep="first")``, the 6 pairs as public keys (``Margin`` with
  ``max_groups=6``); the table size as the public bound on a group's length. OpenDP 0.16 takes no date
  literal nor ``is_between`` in a plan: the dates are compared as days since 1970 (a cast inside the plan)
  and BETWEEN as two comparisons. SmartNoise: ``private_id`` o_custkey with ``max_ids`` = 100 for Q6 and
  4 * 100 = 400 for Q1 (its only bound on a person), ``lower``/``upper`` from the bounds, dates as string
  literals (its parser takes no DATE literal); it has no public key list on a pandas reader and thresholds
  the released groups with delta. None of the three is given the R2T queries, which join private tables:
  PipelineDP and OpenDP's DP plans take no join, and SmartNoise is run on the one pre-joined table only
  (the table says "not run").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

EPSILON, DELTA = 0.8, 1e-6
ORDERS_PER_GROUP, ITEMS_PER_GROUP, ITEM_GROUPS, R2T_BOUND = 20, 100, 4, 10_000
QUANTITY, PRICE, DISCOUNT = (1.0, 50.0), (0.0, 104950.0), (0.0, 0.10)
REVENUE = (0.0, PRICE[1] * DISCOUNT[1])  # l_extendedprice * l_discount
FLAGS, STATUSES = ("A", "N", "R"), ("F", "O")
Q1_REDUCED = (
    "SELECT l_returnflag, l_linestatus, COUNT(*) AS n, SUM(l_quantity) AS q FROM lineitem "
    "WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag, l_linestatus"
)
#: the exported columns of each table (``lineitem_cust`` = lineitem with its order's customer)
COLUMNS = {
    "customer": "c_custkey, c_nationkey",
    "orders": "o_orderkey, o_custkey",
    "lineitem": "l_orderkey, l_quantity, l_extendedprice, l_discount, l_shipdate, l_returnflag, l_linestatus",
    "nation": "n_nationkey",
}
SYSTEMS = ("kakeibo", "kakeibo-r2t", "qrlew", "tumult", "pipelinedp", "opendp", "smartnoise")
QUERY_NAMES = ("R2T-Q18", "R2T-Q10", "Q6", "Q1")
SINGLE_TABLE = ("pipelinedp", "opendp", "smartnoise")
PREJOINED = {
    "kakeibo": "none (the relational tables)",
    "kakeibo-r2t": "none (the relational tables)",
    "qrlew": "none (the relational tables, copied to SQLite for its Dataset)",
    "tumult": "lineitem joined with orders for o_custkey (lineitem_cust)",
    "pipelinedp": "lineitem joined with orders for o_custkey (lineitem_cust); Q6 and Q1 only",
    "opendp": "lineitem joined with orders for o_custkey (lineitem_cust); Q6 and Q1 only",
    "smartnoise": "lineitem joined with orders for o_custkey (lineitem_cust); Q6 and Q1 only",
}
Job = dict[str, Any]
Answer = dict[str, list[float]]  # "returnflag|linestatus" (or "" for a scalar query) -> aggregate values


def _queries() -> dict[str, dict[str, Any]]:
    """Name -> SQL text, grouping columns and aggregate aliases (from bench_tpch and kakeibo.data.tpch)."""
    from bench_tpch import R2T_QUERIES
    from kakeibo.data import tpch

    return {
        "R2T-Q18": {"sql": R2T_QUERIES["R2T-Q18"], "keys": [], "values": ["q"]},
        "R2T-Q10": {"sql": R2T_QUERIES["R2T-Q10"], "keys": [], "values": ["n"]},
        "Q6": {"sql": tpch.QUERIES["Q6"], "keys": [], "values": ["revenue"]},
        "Q1": {"sql": Q1_REDUCED, "keys": ["l_returnflag", "l_linestatus"], "values": ["n", "q"]},
    }


# --- measuring, in every child ---


def _hwm_kb(pid: int | str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _peak_mb() -> float:
    """Peak resident memory of this process and of its living descendants (a JVM), in MB."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += _hwm_kb(pid)
        todo.extend(parents.get(pid, []))
    return total / 1024


def _key(values: Any) -> str:
    return "|".join(str(v) for v in values)


def _repeat(job: Job, release: Callable[[int], Answer]) -> tuple[list[float], list[Answer]]:
    """Run ``release`` ``job['runs']`` times (fewer once ``job['max_seconds']`` passed; at least once)."""
    times: list[float] = []
    answers: list[Answer] = []
    for run in range(job["runs"]):
        start = time.perf_counter()
        answers.append(release(run))
        times.append(time.perf_counter() - start)
        if sum(times) > job["max_seconds"]:
            break
    return times, answers


def _version(*distributions: str) -> str:
    return ", ".join(f"{d} {metadata.version(d)}" for d in distributions)


def _duckdb_tables(job: Job, names: list[str]) -> Any:
    import duckdb

    con = duckdb.connect()
    for name in names:
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet(?)", [job["data"][name]])
    return con


class CannotExpressError(Exception):
    """The system has no way to state the query (the reason is the message)."""


# --- the children ---


def child_kakeibo(job: Job) -> dict[str, Any]:
    import kakeibo
    from bench_tpch import catalogs
    from kakeibo.sql import Catalog
    from kakeibo.sql.truncation import DEFAULT_BASE

    if job["system"] == "kakeibo":
        from kakeibo.data import tpch

        catalog = Catalog.from_toml(tpch.catalog())
    else:
        catalog = next(c for label, c in catalogs([DEFAULT_BASE], [R2T_BOUND]).items() if label != "fixed")
    q = job["query_spec"]
    with tempfile.TemporaryDirectory() as tmp:
        ledger = os.path.join(tmp, "ledger.db")
        with kakeibo.connect(job["duckdb"], catalog=catalog, ledger=ledger, budget=(1e9, 0.5)) as session:

            def release(run: int) -> Answer:
                result = session.sql(q["sql"], epsilon=EPSILON, delta=DELTA, request_id=f"run-{run}")
                return {
                    _key(r[k] for k in q["keys"]): [float(r[v]) for v in q["values"]]
                    for r in result.table.to_pylist()
                }

            times, answers = _repeat(job, release)
    return {"times": times, "answers": answers}


#: Qrlew 0.9.27 panics on comma joins (InvalidPath) and on DATE literals ("not yet implemented"): the same
#: joins as JOIN ... ON, and dates as string literals (DuckDB casts them to DATE in the comparison)
QRLEW_SQL = {
    "R2T-Q18": "SELECT SUM(l_quantity) AS q FROM customer JOIN orders ON c_custkey = o_custkey "
    "JOIN lineitem ON o_orderkey = l_orderkey",
    "R2T-Q10": "SELECT COUNT(*) AS n FROM orders JOIN customer ON c_custkey = o_custkey "
    "JOIN nation ON c_nationkey = n_nationkey",
}
QRLEW_PATHS = {
    "customer": [],
    "orders": [("o_custkey", "customer", "c_custkey")],
    "lineitem": [("l_orderkey", "orders", "o_orderkey"), ("o_custkey", "customer", "c_custkey")],
}


def _qrlew_sqlite(job: Job, con: Any) -> tuple[str, float]:
    """The SQLite copy of the exported tables (made once per scale factor) and the seconds it took now."""
    import sqlalchemy as sa

    path = job["sqlite"]
    if os.path.exists(path):
        return path, 0.0
    start = time.perf_counter()
    partial = path + ".partial"
    if os.path.exists(partial):
        os.remove(partial)
    engine = sa.create_engine(f"sqlite:///{partial}")
    types = {"BIGINT": sa.BigInteger, "DOUBLE": sa.Float, "VARCHAR": sa.String, "DATE": sa.Date}
    schema = sa.MetaData()
    for name in COLUMNS:
        described = con.execute(f"DESCRIBE {name}").fetchall()
        sa.Table(name, schema, *(sa.Column(c, types[t]) for c, t, *_ in described))
    schema.create_all(engine)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        for name in COLUMNS:
            count = len(con.execute(f"DESCRIBE {name}").fetchall())
            insert = f"INSERT INTO {name} VALUES ({', '.join('?' * count)})"
            result = con.execute(f"SELECT * FROM {name}")
            while batch := result.fetchmany(200_000):
                cursor.executemany(
                    insert, [tuple(str(v) if hasattr(v, "isoformat") else v for v in r) for r in batch]
                )
        raw.commit()
    finally:
        raw.close()
        engine.dispose()
    os.replace(partial, path)
    return path, time.perf_counter() - start


def child_qrlew(job: Job) -> dict[str, Any]:
    import pyqrlew
    import sqlalchemy as sa

    con = _duckdb_tables(job, list(COLUMNS))
    sqlite, copy_seconds = _qrlew_sqlite(job, con)
    engine = sa.create_engine(f"sqlite:///{sqlite}")
    dataset = pyqrlew.Dataset.from_database("tpch", engine)
    for column, (low, high) in {
        "l_quantity": QUANTITY,
        "l_extendedprice": PRICE,
        "l_discount": DISCOUNT,
    }.items():
        dataset = dataset.with_range(None, "lineitem", column, low, high)
    dataset = dataset.with_possible_values(None, "lineitem", "l_returnflag", list(FLAGS))
    dataset = dataset.with_possible_values(None, "lineitem", "l_linestatus", list(STATUSES))
    unit = [(name, paths, "c_custkey") for name, paths in QRLEW_PATHS.items()]
    q = job["query_spec"]
    multiplicity = ORDERS_PER_GROUP if job["query"] == "R2T-Q10" else ITEMS_PER_GROUP
    groups = ITEM_GROUPS if q["keys"] else 1
    budget = {"epsilon": EPSILON, "delta": DELTA}
    width = len(q["keys"])

    sql = QRLEW_SQL.get(job["query"], q["sql"]).replace("DATE '", "'")

    def release(run: int) -> Answer:
        relation = dataset.relation(sql)
        private = relation.rewrite_with_differential_privacy(
            dataset, unit, budget, multiplicity, None, groups
        )
        rows = con.execute(private.relation().to_query()).fetchall()
        return {_key(r[:width]): [float(v) for v in r[width:]] for r in rows}

    times, answers = _repeat(job, release)
    note = f"SQLite copy {copy_seconds:.1f} s" if copy_seconds else "SQLite copy cached"
    return {"times": times, "answers": answers, "note": note}


def child_tumult(job: Job) -> dict[str, Any]:
    from pyspark.sql import SparkSession
    from tmlt.analytics import (
        AddRowsWithID,
        ColumnType,
        KeySet,
        MaxGroupsPerID,
        MaxRowsPerGroupPerID,
        MaxRowsPerID,
        PureDPBudget,
        QueryBuilder,
        Session,
    )

    os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers: this environment, not python3
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    read = spark.read.parquet
    data = job["data"]
    renames = {
        "c_custkey": "custkey",
        "o_custkey": "custkey",
        "c_nationkey": "nationkey",
        "n_nationkey": "nationkey",
        "o_orderkey": "orderkey",
        "l_orderkey": "orderkey",
    }

    def frame(name: str) -> Any:
        df = read(data[name])
        return df.withColumnsRenamed({c: renames[c] for c in df.columns if c in renames})

    session = (
        Session.Builder()
        .with_privacy_budget(PureDPBudget(float("inf")))
        .with_id_space("customer")
        .with_private_dataframe("customer", frame("customer"), AddRowsWithID("custkey", "customer"))
        .with_private_dataframe("orders", frame("orders"), AddRowsWithID("custkey", "customer"))
        .with_private_dataframe("lineitem", frame("lineitem_cust"), AddRowsWithID("custkey", "customer"))
        .with_public_dataframe("nation", frame("nation"))
        .build()
    )
    q6_filter = (
        "l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' "
        "AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24"
    )
    queries: list[tuple[Any, float]]  # (query, epsilon)
    name = job["query"]
    if name == "R2T-Q18":
        joined = QueryBuilder("lineitem").join_private("orders").join_private("customer")
        queries = [
            (joined.enforce(MaxRowsPerID(ITEMS_PER_GROUP)).sum("l_quantity", *QUANTITY, name="q"), EPSILON)
        ]
    elif name == "R2T-Q10":
        joined = QueryBuilder("orders").join_private("customer").join_public("nation")
        queries = [(joined.enforce(MaxRowsPerID(ORDERS_PER_GROUP)).count(name="n"), EPSILON)]
    elif name == "Q6":
        revenue = (
            QueryBuilder("lineitem")
            .filter(q6_filter)
            .map(
                lambda r: {"rev": r["l_extendedprice"] * r["l_discount"]},
                new_column_types={"rev": ColumnType.DECIMAL},
                augment=True,
            )
            .enforce(MaxRowsPerID(ITEMS_PER_GROUP))
        )
        queries = [(revenue.sum("rev", *REVENUE, name="revenue"), EPSILON)]
    else:
        pairs = (
            QueryBuilder("lineitem")
            .filter("l_shipdate <= DATE '1998-09-02'")
            .map(
                lambda r: {"pair": f"{r['l_returnflag']}|{r['l_linestatus']}"},
                new_column_types={"pair": ColumnType.VARCHAR},
                augment=True,
            )
            .enforce(MaxGroupsPerID("pair", ITEM_GROUPS))
            .enforce(MaxRowsPerGroupPerID("pair", ITEMS_PER_GROUP))
            .groupby(KeySet.from_dict({"pair": [f"{f}|{s}" for f in FLAGS for s in STATUSES]}))
        )
        queries = [
            (pairs.count(name="n"), EPSILON / 2),
            (pairs.sum("l_quantity", *QUANTITY, name="q"), EPSILON / 2),
        ]

    def release(run: int) -> Answer:
        out: Answer = {}
        for query, epsilon in queries:
            for row in session.evaluate(query, PureDPBudget(epsilon)).collect():
                values = row.asDict()
                key = values.pop("pair", "")
                out.setdefault(key, []).extend(float(v) for v in values.values())
        return out

    times, answers = _repeat(job, release)
    peak = _peak_mb()
    spark.stop()
    return {"times": times, "answers": answers, "peak_mb": peak}


def child_pipelinedp(job: Job) -> dict[str, Any]:
    import datetime

    import pipeline_dp

    if job["query"] not in ("Q6", "Q1"):
        raise CannotExpressError("no join")
    con = _duckdb_tables(job, ["lineitem_cust"])
    rows = con.execute(
        "SELECT o_custkey, l_returnflag, l_linestatus, l_shipdate, l_quantity, l_extendedprice, l_discount "
        "FROM lineitem_cust"
    ).fetchall()
    con.close()
    q6 = job["query"] == "Q6"
    start, end, last = datetime.date(1994, 1, 1), datetime.date(1995, 1, 1), datetime.date(1998, 9, 2)
    pairs = [f"{f}|{s}" for f in FLAGS for s in STATUSES]

    def release(run: int) -> Answer:
        if q6:
            kept = [r for r in rows if start <= r[3] < end and 0.05 <= r[6] <= 0.07 and r[4] < 24]
        else:
            kept = [r for r in rows if r[3] <= last]
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=DELTA)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
        metrics = [pipeline_dp.Metrics.SUM] if q6 else [pipeline_dp.Metrics.COUNT, pipeline_dp.Metrics.SUM]
        params = pipeline_dp.AggregateParams(
            metrics=metrics,
            noise_kind=pipeline_dp.NoiseKind.LAPLACE,
            max_partitions_contributed=1 if q6 else ITEM_GROUPS,
            max_contributions_per_partition=ITEMS_PER_GROUP,
            min_value=REVENUE[0] if q6 else QUANTITY[0],
            max_value=REVENUE[1] if q6 else QUANTITY[1],
        )
        extractors = pipeline_dp.DataExtractors(
            privacy_id_extractor=lambda r: r[0],
            partition_extractor=(lambda r: "") if q6 else (lambda r: f"{r[1]}|{r[2]}"),
            value_extractor=(lambda r: r[5] * r[6]) if q6 else (lambda r: r[4]),
        )
        result = engine.aggregate(kept, params, extractors, public_partitions=[""] if q6 else pairs)
        accountant.compute_budgets()
        return {key: [float(m.sum)] if q6 else [float(m.count), float(m.sum)] for key, m in result}

    times, answers = _repeat(job, release)
    return {"times": times, "answers": answers}


def child_opendp(job: Job) -> dict[str, Any]:
    import datetime

    import opendp.prelude as dp
    import polars as pl

    if job["query"] not in ("Q6", "Q1"):
        raise CannotExpressError("no join")
    dp.enable_features("contrib")
    frame = pl.read_parquet(job["data"]["lineitem_cust"])
    size = frame.height
    lazy = frame.lazy()
    flag, status = pl.col("l_returnflag"), pl.col("l_linestatus")

    def context(margins: list[Any]) -> Any:
        return dp.Context.compositor(
            data=lazy,
            privacy_unit=dp.unit_of(contributions=1, identifier="o_custkey"),
            privacy_loss=dp.loss_of(epsilon=EPSILON, delta=DELTA),
            split_evenly_over=1,
            margins=margins,
        )

    if job["query"] == "Q6":
        date, day = pl.col("l_shipdate").cast(pl.Int32), datetime.date(1970, 1, 1)

        def release(run: int) -> Answer:
            ctx = context([dp.polars.Margin(by=[], max_length=size)])
            query = (
                ctx.query()
                .filter(
                    (date >= (datetime.date(1994, 1, 1) - day).days)
                    & (date < (datetime.date(1995, 1, 1) - day).days)
                    & (pl.col("l_discount") >= 0.05)
                    & (pl.col("l_discount") <= 0.07)
                    & (pl.col("l_quantity") < 24)
                )
                .with_columns((pl.col("l_extendedprice") * pl.col("l_discount")).alias("rev"))
                .truncate_per_group(ITEMS_PER_GROUP)
                .select(pl.col("rev").fill_null(0.0).dp.sum(REVENUE))
            )
            return {"": [float(query.release().collect().item())]}

    else:
        keys = pl.DataFrame(
            {"l_returnflag": [f for f in FLAGS for _ in STATUSES], "l_linestatus": list(STATUSES) * 3}
        )
        by, day = ["l_returnflag", "l_linestatus"], datetime.date(1970, 1, 1)

        def release(run: int) -> Answer:
            ctx = context(
                [dp.polars.Margin(by=by, invariant="keys", max_length=size, max_groups=keys.height)]
            )
            query = (
                ctx.query()
                .filter(pl.col("l_shipdate").cast(pl.Int32) <= (datetime.date(1998, 9, 2) - day).days)
                .truncate_per_group(ITEMS_PER_GROUP, by=[flag, status])
                .truncate_num_groups(ITEM_GROUPS, by=[flag, status], keep="first")
                .group_by(by)
                .agg(dp.len(), pl.col("l_quantity").fill_null(1.0).dp.sum(QUANTITY))
                .with_keys(keys)
            )
            released = query.release().collect()
            return {
                f"{f}|{s}": [float(n), float(total)]
                for f, s, n, total in released.select(*by, "len", "l_quantity").iter_rows()
            }

    times, answers = _repeat(job, release)
    return {"times": times, "answers": answers}


def child_smartnoise(job: Job) -> dict[str, Any]:
    import snsql

    if job["query"] not in ("Q6", "Q1"):
        raise CannotExpressError("no join")
    con = _duckdb_tables(job, ["lineitem_cust"])
    frame = con.execute("SELECT * FROM lineitem_cust").df()
    con.close()
    q = job["query_spec"]
    table: dict[str, Any] = {
        "row_privacy": False,
        "max_ids": ITEMS_PER_GROUP * (ITEM_GROUPS if q["keys"] else 1),
        "o_custkey": {"type": "int", "private_id": True},
        "l_orderkey": {"type": "int"},
        "l_quantity": {"type": "float", "lower": QUANTITY[0], "upper": QUANTITY[1]},
        "l_extendedprice": {"type": "float", "lower": PRICE[0], "upper": PRICE[1]},
        "l_discount": {"type": "float", "lower": DISCOUNT[0], "upper": DISCOUNT[1]},
        "l_shipdate": {"type": "datetime"},
        "l_returnflag": {"type": "string"},
        "l_linestatus": {"type": "string"},
    }
    metadata_ = {"tpch": {"": {"lineitem": table}}}
    reader = snsql.from_df(
        {"lineitem": frame}, privacy=snsql.Privacy(epsilon=EPSILON, delta=DELTA), metadata=metadata_
    )
    width = len(q["keys"])

    def release(run: int) -> Answer:
        try:
            rows = reader.execute(q["sql"].replace("DATE '", "'"))[1:]
        except ValueError as exc:
            if "support aggregation over expressions" in str(exc):
                raise CannotExpressError(f"SUM of an expression ({exc})") from exc
            raise
        return {_key(r[:width]): [float(v) for v in r[width:]] for r in rows}

    times, answers = _repeat(job, release)
    return {"times": times, "answers": answers}


CHILDREN: dict[str, Callable[[Job], dict[str, Any]]] = {
    "kakeibo": child_kakeibo,
    "kakeibo-r2t": child_kakeibo,
    "qrlew": child_qrlew,
    "tumult": child_tumult,
    "pipelinedp": child_pipelinedp,
    "opendp": child_opendp,
    "smartnoise": child_smartnoise,
}
DISTRIBUTIONS = {
    "kakeibo": ("kakeibo", "duckdb"),
    "kakeibo-r2t": ("kakeibo", "duckdb"),
    "qrlew": ("pyqrlew", "duckdb", "sqlalchemy"),
    "tumult": ("tmlt.analytics", "pyspark"),
    "pipelinedp": ("pipeline-dp", "python-dp"),
    "opendp": ("opendp", "polars"),
    "smartnoise": ("smartnoise-sql", "pandas"),
}
LABELS = {
    "kakeibo": "kakeibo (fixed catalog)",
    "kakeibo-r2t": "kakeibo (R2T race, GS 10^4)",
    "qrlew": "Qrlew (rewritten SQL on DuckDB)",
    "tumult": "Tumult Analytics (Spark local[2])",
    "pipelinedp": "PipelineDP (LocalBackend)",
    "opendp": "OpenDP (polars)",
    "smartnoise": "SmartNoise SQL (pandas)",
}


def child(job_file: str) -> None:
    job: Job = json.loads(Path(job_file).read_text())
    record: dict[str, Any] = {"system": job["system"], "query": job["query"]}
    try:
        record["version"] = _version(*DISTRIBUTIONS[job["system"]])
        record.update(CHILDREN[job["system"]](job))
    except CannotExpressError as exc:
        record["cannot"] = str(exc)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # a failure is a result (Qrlew's Rust panics derive from BaseException)
        record["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    record.setdefault("peak_mb", _peak_mb())
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


# --- the parent ---


def prepare(scale: float) -> tuple[Path, dict[str, str]]:
    """The DuckDB file of TPC-H at ``scale`` (bench_tpch's cache) and Parquet exports for the peers."""
    import duckdb

    from kakeibo.data import tpch

    cache = Path(tempfile.gettempdir()) / f"kakeibo-tpch-sf{scale:g}"
    folder = tpch.generate(scale, cache / "parquet")
    database = cache / "tpch.duckdb"
    if not database.exists():
        tpch.load_duckdb(database, folder)
    exports = cache / "peers"
    exports.mkdir(exist_ok=True)
    selects = {name: f"SELECT {columns} FROM {name}" for name, columns in COLUMNS.items()}
    selects["lineitem_cust"] = (
        f"SELECT o_custkey, {COLUMNS['lineitem']} FROM lineitem JOIN orders ON l_orderkey = o_orderkey"
    )
    paths = {}
    with duckdb.connect(str(database), read_only=True) as con:
        for name, select in selects.items():
            path = exports / f"{name}.parquet"
            if not path.exists():
                con.execute(f"COPY ({select}) TO '{path}.partial' (FORMAT parquet)")
                os.replace(f"{path}.partial", path)
            paths[name] = str(path)
    return database, paths


def truth(database: Path, spec: dict[str, Any]) -> Answer:
    import duckdb

    with duckdb.connect(str(database), read_only=True) as con:
        rows = con.execute(spec["sql"]).fetchall()
    width = len(spec["keys"])
    return {_key(r[:width]): [float(v) for v in r[width:]] for r in rows}


def median_error(answers: list[Answer], exact: Answer) -> float:
    errors = [
        abs(answer.get(key, [0.0] * len(values))[i] - value) / abs(value)
        for answer in answers
        for key, values in exact.items()
        for i, value in enumerate(values)
        if value != 0
    ]
    return statistics.median(errors) if errors else float("nan")


def run_child(python: str, job: Job, work: str, timeout: float) -> dict[str, Any]:
    job_file = os.path.join(work, f"{job['system']}-{job['query']}.json")
    Path(job_file).write_text(json.dumps(job))
    try:
        done = subprocess.run(
            [python, __file__, "--child", job_file], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout:.0f} s"}
    except OSError as exc:
        return {"error": f"{python}: {exc}"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {"error": f"child failed: {tail[:300]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"a subset of {','.join(SYSTEMS)}")
    parser.add_argument(
        "--queries", default=",".join(QUERY_NAMES), help=f"a subset of {','.join(QUERY_NAMES)}"
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument(
        "--max-seconds", type=float, default=600, help="stop repeating a query after this long"
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed per child")
    for system in ("qrlew", "tumult", "pipelinedp", "opendp", "smartnoise"):
        folder = "snsql" if system == "smartnoise" else system
        parser.add_argument(f"--{system}-python", default=f"/tmp/peers/{folder}/bin/python")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    systems, names = args.systems.split(","), args.queries.split(",")
    if unknown := sorted(set(systems) - set(SYSTEMS)) + sorted(set(names) - set(QUERY_NAMES)):
        raise SystemExit(f"unknown system or query: {', '.join(unknown)}")
    start = time.perf_counter()
    database, paths = prepare(args.scale)
    print(f"TPC-H SF {args.scale:g}: {database} (ready in {time.perf_counter() - start:.1f} s)", flush=True)
    specs = _queries()
    pythons = {s: getattr(args, f"{s.replace('-', '_')}_python", sys.executable) for s in SYSTEMS}
    pythons["kakeibo"] = pythons["kakeibo-r2t"] = sys.executable
    versions: dict[str, str] = {}
    notes: dict[str, list[str]] = {}
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            spec = specs[name]
            exact = truth(database, spec)
            for system in systems:
                if system in SINGLE_TABLE and name not in ("Q6", "Q1"):
                    why = "not run: the query joins private tables; this peer gets one pre-joined table"
                    rows.append(f"| {name} | {LABELS[system]} | | | | | {why} |")
                    continue
                job = {
                    "system": system,
                    "query": name,
                    "query_spec": spec,
                    "runs": args.runs,
                    "max_seconds": args.max_seconds,
                    "duckdb": str(database),
                    "data": paths,
                    "sqlite": str(database.with_name("qrlew.sqlite")),
                }
                result = run_child(pythons[system], job, work, args.timeout)
                if "version" in result:
                    versions[system] = result["version"]
                if result.get("note"):
                    notes.setdefault(system, []).append(f"{name}: {result['note']}")
                if "cannot" in result or "error" in result:
                    what = f"cannot express: {result['cannot']}" if "cannot" in result else result["error"]
                    rows.append(
                        f"| {name} | {LABELS[system]} | | | {result.get('peak_mb', 0):,.0f} | | {what} |"
                    )
                else:
                    times, answers = result["times"], result["answers"]
                    rows.append(
                        f"| {name} | {LABELS[system]} | {len(times)} | {statistics.median(times):.3f} "
                        f"| {result['peak_mb']:,.0f} | {median_error(answers, exact):.3%} | |"
                    )
                print(rows[-1], flush=True)
    print(f"\n# TPC-H SF {args.scale:g}, epsilon {EPSILON} per query, delta {DELTA}; a process per cell\n")
    print("| query | system | runs | median s | peak RSS MB | median rel. error | note |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(row)
    print()
    for system in systems:
        extra = f"; {'; '.join(notes[system])}" if system in notes else ""
        print(
            f"* {LABELS[system]}: {versions.get(system, 'version unknown (no child ran)')}; "
            f"pre-joined: {PREJOINED[system]}{extra}"
        )


if __name__ == "__main__":
    main()
