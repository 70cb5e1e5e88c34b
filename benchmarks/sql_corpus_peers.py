"""Issue 17's corpus against the peers: how many of the same queries each system answers, and how fast.

Run through ``bench_sql_peers.py --corpus`` (the options are documented there)::

    python3 -m venv /tmp/peers/snsql && /tmp/peers/snsql/bin/pip install smartnoise-sql==1.0.10 pyarrow
    python3 -m venv /tmp/peers/qrlew && /tmp/peers/qrlew/bin/pip install pyqrlew==0.9.27 duckdb
    python3 -m venv /tmp/peers/opendp && /tmp/peers/opendp/bin/pip install 'opendp[polars]==0.16.0'
    .venv/bin/python benchmarks/bench_sql_peers.py --corpus --corpus-json /tmp/peers/corpus.json \\
        --smartnoise-python /tmp/peers/snsql/bin/python --qrlew-python /tmp/peers/qrlew/bin/python \\
        --opendp-python /tmp/peers/opendp/bin/python

The peers pin versions kakeibo's dev environment cannot take (pyqrlew needs numpy 1, so no pyarrow 26 either,
and reads the Parquet files with DuckDB; opendp 0.16 needs polars 1.36 where kakeibo has polars 2), so each
runs in an interpreter of its own; without its option a peer runs in the current interpreter if it imports
there, and is skipped with the reason otherwise. The parent reads the corpus of ``tests/sql_corpus.py`` at run
time (``ACCEPTED`` + ``REFUSED``, in that order, the same list for every system), writes its tables as Parquet
files and the queries and catalog as JSON, and runs one child per system (this file, ``--child``), which needs
only its peer and the standard library at top level: no peer environment imports kakeibo. A child prints one
JSON line when it is ready and one per query; a query that takes longer than ``--query-timeout`` is recorded
as ``Timeout`` and the child is restarted after it. The time of a query is the wall time of the system's call
for it (parsing, rewriting, running the rewritten SQL and fetching the rows), with epsilon 1 and delta 1e-6
for the query, each query on a fresh budget. A query is *answered* when the call returns at least one row
without raising.

How the catalog maps onto each system, derived from ``CATALOG`` (column types, bounds, public values,
privacy unit, ``max_partitions`` L0 and ``max_rows_per_partition`` kappa), never retyped:

* kakeibo: ``kakeibo.connect`` on a ``DuckDBBackend`` with the catalog, ``session.sql(query, epsilon=1,
  delta=1e-6)`` as in ``tests/test_sql_corpus.py``.
* SmartNoise SQL (``snsql.from_df`` over one pandas frame per table): ``row_privacy: true`` for a table
  without a privacy unit; otherwise the unit is ``private_id`` and ``max_ids`` = L0 * kappa (the only bound
  it has on a person); ``lower``/``upper`` from the bounds. The tables sit in a schema-less collection so
  that the corpus's unqualified names resolve. It has no public key list on a pandas reader (public values
  are not given to it) and thresholds the groups it releases with delta.
* Qrlew (``pyqrlew``): a ``Dataset`` read from a SQLite copy of the tables (so the table sizes are
  Qrlew's, as it computes them), ``with_range`` for the bounds, ``with_possible_values`` for public values;
  privacy unit ``_PRIVACY_UNIT_ROW_`` for a row-level table, else the unit column; ``max_multiplicity`` =
  L0 * kappa and ``max_privacy_unit_groups`` = L0 (one value for the whole query: the largest over the
  tables). ``rewrite_with_differential_privacy`` gives DP SQL (PostgreSQL dialect), which DuckDB runs on
  the same tables.
* OpenDP (polars front end): OpenDP has no SQL parser, but a ``LazyFrameQuery`` from ``Context.query()``
  has polars' ``LazyFrame.sql``, so the query text becomes the polars plan that OpenDP's ``release()``
  turns into a measurement. One context per query on the table the query names: ``unit_of(contributions=1)``
  for a row-level table, ``unit_of(contributions=L0 * kappa)`` otherwise (a bound OpenDP trusts: with
  ``identifier=`` it needs ``truncate_per_group`` in the plan, which SQL cannot express), and a
  ``Margin(by=[column], invariant="keys")`` for each column with public values.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

EPSILON, DELTA = 1.0, 1e-6
SYSTEMS = ("kakeibo", "smartnoise", "qrlew", "opendp")
LABELS = {
    "kakeibo": "kakeibo (DuckDB)",
    "smartnoise": "SmartNoise SQL (pandas)",
    "qrlew": "Qrlew (rewritten SQL on DuckDB)",
    "opendp": "OpenDP (polars SQL plan)",
}
PROBES = {  # what a child imports: the current interpreter runs a peer only if this works there
    "kakeibo": "import kakeibo, duckdb, pyarrow",
    "smartnoise": "import snsql, pandas, pyarrow",
    "qrlew": "import pyqrlew, duckdb, sqlalchemy",
    "opendp": "import opendp.prelude, polars",
}
Corpus = dict[str, Any]  # {"catalog": Catalog.to_dict(), "tables": {name: parquet}, "queries": [...], ...}
Runner = Callable[[str], int]  # query -> number of rows returned


def _tables(corpus: Corpus) -> dict[str, dict[str, Any]]:
    tables: dict[str, dict[str, Any]] = corpus["catalog"]["tables"]
    return tables


def _rows_per_unit(spec: dict[str, Any]) -> int:
    """L0 * kappa: the most rows one privacy unit may hold (1 for a row-level table)."""
    if "privacy_unit" not in spec:
        return 1
    return int(spec.get("max_partitions", 1)) * int(spec.get("max_rows_per_partition", 1))


def _version(*distributions: str) -> str:
    return ", ".join(f"{d} {metadata.version(d)}" for d in distributions)


# --- the children: each builds a runner for its system, in the interpreter of its environment ---


def runner_kakeibo(corpus: Corpus) -> tuple[str, Runner]:
    import pyarrow.parquet as pq

    import kakeibo
    from kakeibo.accounting import Ledger
    from kakeibo.backends import DuckDBBackend
    from kakeibo.sql import Catalog

    db = DuckDBBackend()
    for name, path in corpus["tables"].items():
        db.load_table(name, pq.read_table(path))
    ledger = Ledger(":memory:", budget=(10**9, 0.5))
    session = kakeibo.connect(db, catalog=Catalog.from_dict(corpus["catalog"]), ledger=ledger)

    def run(sql: str) -> int:
        released = session.sql(sql, epsilon=corpus["epsilon"], delta=corpus["delta"])
        return int(released.to_arrow().num_rows)

    return _version("kakeibo", "duckdb"), run


SMARTNOISE_TYPES = {"int": "int", "float": "float", "str": "string", "bool": "boolean", "date": "datetime"}


def smartnoise_metadata(corpus: Corpus) -> dict[str, Any]:
    """SmartNoise SQL's metadata dictionary for the catalog (collection -> schema -> table -> columns)."""
    tables: dict[str, Any] = {}
    for name, spec in _tables(corpus).items():
        unit = spec.get("privacy_unit")
        table: dict[str, Any] = {"row_privacy": unit is None}
        if unit is not None:
            table["max_ids"] = _rows_per_unit(spec)
        for column, col in spec["columns"].items():
            entry: dict[str, Any] = {"type": SMARTNOISE_TYPES[col["type"]]}
            if column == unit:
                entry["private_id"] = True
            if "lower" in col:
                entry["lower"], entry["upper"] = col["lower"], col["upper"]
            table[column] = entry
        tables[name] = table
    return {"corpus": {"": tables}}  # no schema: the corpus's unqualified table names resolve


def runner_smartnoise(corpus: Corpus) -> tuple[str, Runner]:
    import pyarrow.parquet as pq
    import snsql

    frames = {name: pq.read_table(path).to_pandas() for name, path in corpus["tables"].items()}
    privacy = snsql.Privacy(epsilon=corpus["epsilon"], delta=corpus["delta"])
    reader = snsql.from_df(frames, privacy=privacy, metadata=smartnoise_metadata(corpus))

    def run(sql: str) -> int:
        return len(reader.execute(sql)) - 1  # the first row holds the column names

    return _version("smartnoise-sql", "pandas"), run


def runner_qrlew(corpus: Corpus) -> tuple[str, Runner]:
    import duckdb
    import pyqrlew
    import sqlalchemy as sa

    engine = duckdb.connect()
    for name, path in corpus["tables"].items():
        engine.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet(?)", [path])
    tables = _tables(corpus)
    types = {"int": sa.BigInteger, "float": sa.Float, "str": sa.String, "bool": sa.Boolean, "date": sa.Date}
    sqlite, schema = sa.create_engine("sqlite://"), sa.MetaData()
    for name, spec in tables.items():
        sa.Table(name, schema, *(sa.Column(c, types[col["type"]]) for c, col in spec["columns"].items()))
    schema.create_all(sqlite)
    with sqlite.begin() as con:
        for name, spec in tables.items():
            columns = list(spec["columns"])
            rows = engine.execute(f"SELECT {', '.join(columns)} FROM {name}").fetchall()
            con.execute(schema.tables[name].insert(), [dict(zip(columns, r, strict=True)) for r in rows])
    dataset = pyqrlew.Dataset.from_database("corpus", sqlite)
    for name, spec in tables.items():
        for column, col in spec["columns"].items():
            if "lower" in col:
                dataset = dataset.with_range(None, name, column, float(col["lower"]), float(col["upper"]))
            if "public_values" in col:
                dataset = dataset.with_possible_values(
                    None, name, column, [str(v) for v in col["public_values"]]
                )
    unit: list[tuple[str, list[tuple[str, str, str]], str]] = [
        (name, [], spec.get("privacy_unit", "_PRIVACY_UNIT_ROW_")) for name, spec in tables.items()
    ]
    multiplicity = max(_rows_per_unit(spec) for spec in tables.values())
    groups = max(int(spec.get("max_partitions", 1)) for spec in tables.values())
    budget = {"epsilon": corpus["epsilon"], "delta": corpus["delta"]}

    def run(sql: str) -> int:
        relation = dataset.relation(sql)
        private = relation.rewrite_with_differential_privacy(
            dataset, unit, budget, multiplicity, None, groups
        )
        return len(engine.execute(private.relation().to_query()).fetchall())

    return _version("pyqrlew", "duckdb"), run


def runner_opendp(corpus: Corpus) -> tuple[str, Runner]:
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    warnings.simplefilter("ignore", FutureWarning)  # dp.len's default changes; not relevant here
    tables = _tables(corpus)
    frames = {name: pl.read_parquet(path).lazy() for name, path in corpus["tables"].items()}

    def run(sql: str) -> int:
        # the first table the text names (a query naming none fails in polars with its own error)
        name = next((t for t in tables if re.search(rf"\b{t}\b", sql, re.IGNORECASE)), next(iter(tables)))
        spec = tables[name]
        context = dp.Context.compositor(
            data=frames[name],
            privacy_unit=dp.unit_of(contributions=_rows_per_unit(spec)),
            privacy_loss=dp.loss_of(epsilon=corpus["epsilon"], delta=corpus["delta"]),
            split_evenly_over=1,
            margins=[
                dp.polars.Margin(by=[column], invariant="keys")
                for column, col in spec["columns"].items()
                if "public_values" in col
            ],
        )
        return int(context.query().sql(sql, table_name=name).release().collect().height)

    return _version("opendp", "polars"), run


RUNNERS: dict[str, Callable[[Corpus], tuple[str, Runner]]] = {
    "kakeibo": runner_kakeibo,
    "smartnoise": runner_smartnoise,
    "qrlew": runner_qrlew,
    "opendp": runner_opendp,
}


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def child(system: str, corpus_file: str, start: int) -> None:
    """Run the corpus from query ``start`` on, one JSON line per query on stdout."""
    corpus: Corpus = json.loads(Path(corpus_file).read_text())
    version, run = RUNNERS[system](corpus)
    _emit({"ready": True, "version": version})
    for index, query in enumerate(corpus["queries"][start:], start):
        error, message, rows = None, "", 0
        began = time.perf_counter()
        try:
            rows = run(query["sql"])
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # every refusal or failure is a result here, with its class (Qrlew's
            # Rust panics arrive as pyo3's PanicException, which derives from BaseException only)
            error, message = type(exc).__name__, " ".join(str(exc).split())[:300]
        ms = (time.perf_counter() - began) * 1000
        answered = error is None and rows > 0
        _emit({"i": index, "answered": answered, "rows": rows, "error": error, "message": message, "ms": ms})


# --- the parent ---


def load_corpus() -> tuple[Any, list[str], list[str], dict[str, Any]]:
    """Catalog, ACCEPTED, refused queries and tables of ``tests/sql_corpus.py``, read now (it may grow)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import sql_corpus

    refused = [sql for sql, _fragment in sql_corpus.REFUSED]
    return sql_corpus.CATALOG, list(sql_corpus.ACCEPTED), refused, sql_corpus.tables()


def _probe(python: str, system: str) -> str | None:
    """None if the peer imports in ``python``, else why not."""
    try:
        done = subprocess.run([python, "-c", PROBES[system]], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python}: {exc}"
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["import failed"])[-1]
    return None


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str | None:
    """The child's next line; None if it ended, or (still running) stayed silent for ``timeout`` seconds."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line and ready:  # end of its output: let it exit, so that poll() tells it died
        proc.wait()
    return line or None


def _stop(proc: subprocess.Popen[str], stderr: Path) -> str:
    """End the child (started here) if it still runs, and return the last line of its stderr."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate()
    return (stderr.read_text(errors="replace").strip().splitlines() or [""])[-1][:300]


def run_system(
    system: str, python: str, corpus_file: str, total: int, query_timeout: float, setup_timeout: float
) -> tuple[str, list[dict[str, Any]]]:
    """Run every query in a child of ``python``, restarting the child after a query that times out."""
    results: list[dict[str, Any]] = []
    version = ""
    stderr = Path(corpus_file).with_name(f"{system}.stderr")  # a file: a full pipe would block the child
    while len(results) < total:
        start = len(results)
        command = [python, __file__, "--child", system, "--corpus-file", corpus_file, "--start", str(start)]
        with stderr.open("w") as err:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True)
        line = _read_line(proc, setup_timeout)
        if line is None:
            reason = _stop(proc, stderr) or f"no answer in {setup_timeout:.0f} s"
            raise RuntimeError(f"setup failed: {reason}")
        version = json.loads(line)["version"]
        began = time.perf_counter()
        while len(results) < total:
            line = _read_line(proc, query_timeout)
            if line is None:  # stuck or died on this query: record it, then start again after it
                waited = (time.perf_counter() - began) * 1000
                error = "Timeout" if proc.poll() is None else "ChildDied"
                message = _stop(proc, stderr)
                results.append(
                    {"answered": False, "rows": 0, "error": error, "message": message, "ms": waited}
                )
                break
            record = json.loads(line)
            assert record.pop("i") == len(results)
            results.append(record)
            began = time.perf_counter()
        else:
            _stop(proc, stderr)
    return version, results


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else ""


def main_corpus(args: argparse.Namespace) -> None:
    systems = args.corpus_systems.split(",")
    if unknown := sorted(set(systems) - set(SYSTEMS)):
        raise SystemExit(f"--corpus-systems: unknown {', '.join(unknown)} (known: {', '.join(SYSTEMS)})")
    catalog, accepted, refused, tables = load_corpus()
    queries = [{"sql": q, "set": "accepted"} for q in accepted]
    queries += [{"sql": q, "set": "refused"} for q in refused]
    pythons = {
        "kakeibo": sys.executable,
        "smartnoise": args.smartnoise_python,
        "qrlew": args.qrlew_python,
        "opendp": args.opendp_python,
    }
    report: dict[str, dict[str, dict[str, Any]]] = {}
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        import pyarrow.parquet as pq

        paths = {}
        for name, table in tables.items():
            paths[name] = os.path.join(tmp, f"{name}.parquet")
            pq.write_table(table, paths[name])
        corpus_file = os.path.join(tmp, "corpus.json")
        corpus = {
            "catalog": catalog.to_dict(),
            "tables": paths,
            "queries": queries,
            "epsilon": EPSILON,
            "delta": DELTA,
        }
        Path(corpus_file).write_text(json.dumps(corpus))
        print(
            f"# issue 17 corpus: {len(queries)} queries ({len(accepted)} ACCEPTED, {len(refused)} REFUSED), "
            f"epsilon={EPSILON}, delta={DELTA}; a child process per system"
        )
        for system in systems:
            python = pythons[system] or sys.executable
            reason = _probe(python, system)
            if reason is not None:
                hint = (
                    "run this with kakeibo's environment"
                    if system == "kakeibo"
                    else f"give --{system}-python"
                )
                print(f"{LABELS[system]}: skipped ({reason}; {hint})")
                continue
            try:
                version, results = run_system(
                    system, python, corpus_file, len(queries), args.query_timeout, args.setup_timeout
                )
            except RuntimeError as exc:
                print(f"{LABELS[system]}: {exc}")
                continue
            print(f"{LABELS[system]}: {version} ({python})")
            report[system] = {q["sql"]: {"set": q["set"], **r} for q, r in zip(queries, results, strict=True)}
            answered = [r for r in results if r["answered"]]
            of = {
                kind: sum(r["answered"] for q, r in zip(queries, results, strict=True) if q["set"] == kind)
                for kind in ("accepted", "refused")
            }
            empty = sum(r["error"] is None and not r["answered"] for r in results)
            rows.append(
                f"| {LABELS[system]} | {len(answered)} of {len(queries)} "
                f"| {of['accepted']} of {len(accepted)} | {of['refused']} of {len(refused)} "
                f"| {_median([r['ms'] for r in answered])} "
                f"| {_median([r['ms'] for r in results])} | {empty} |"
            )
    print()
    print(
        "| system | answered of N | of ACCEPTED | of REFUSED | median ms per answered query "
        "| median ms per query | ran, 0 rows |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(row)
    if args.corpus_json:
        Path(args.corpus_json).write_text(json.dumps(report, indent=1))
        print(f"\nper-query results: {args.corpus_json}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--corpus`` options of ``bench_sql_peers.py``."""
    parser.add_argument("--corpus", action="store_true", help="run issue 17's query corpus on every system")
    parser.add_argument("--corpus-json", help="with --corpus: write system -> query -> result here")
    parser.add_argument("--smartnoise-python", help="with --corpus: interpreter with smartnoise-sql")
    parser.add_argument("--qrlew-python", help="with --corpus: interpreter with pyqrlew")
    parser.add_argument(
        "--corpus-systems", default=",".join(SYSTEMS), help=f"with --corpus: a subset of {','.join(SYSTEMS)}"
    )
    parser.add_argument("--query-timeout", type=float, default=120, help="with --corpus: seconds per query")
    parser.add_argument(
        "--setup-timeout", type=float, default=600, help="with --corpus: seconds for a child to load"
    )


def _child_main() -> None:
    parser = argparse.ArgumentParser(description="one system's child process of the corpus comparison")
    parser.add_argument("--child", choices=SYSTEMS, required=True)
    parser.add_argument("--corpus-file", required=True)
    parser.add_argument("--start", type=int, default=0)
    args = parser.parse_args()
    child(args.child, args.corpus_file, args.start)


if __name__ == "__main__":
    _child_main()
