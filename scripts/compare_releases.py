"""Seeded releases and explain texts of the SQL workloads, written to a file or checked against one.

A reorganisation of the SQL package must not change a released byte (issue 30). This script runs three
workloads on DuckDB, each call with its own seeded generator, and records for every call the explain text
and the release -- the Arrow table's bytes (IPC stream, hashed) with its privacy loss -- or the error's
class and message::

    corpus      tests/sql_corpus.py: every accepted query (nonnegative on every other one) and every
                refused one
    numeric     tests/adversarial_harness.numeric_query, seeds 0-299, on the world with the target user
                (extreme values; a quarter under the correlated catalog)
    relational  tests/test_adversarial_relational_fuzz.relational_query, seeds 0-119, on TPC-H (SF 0.01)
                with the target customer, under the fixed, race and chosen catalogs

Run ``python scripts/compare_releases.py write before.json`` on the old tree and
``python scripts/compare_releases.py check before.json`` on the new one: the check prints every call whose
record differs and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import kakeibo  # noqa: E402
from kakeibo.accounting import Ledger  # noqa: E402
from kakeibo.sql.session import Session  # noqa: E402

NUMERIC_SEEDS = 300
RELATIONAL_SEEDS = 120


def _table_digest(table: pa.Table) -> str:
    """The SHA-256 of ``table`` as an Arrow IPC stream (schema and every value's bytes)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def _builtin_name(error: Exception) -> str:
    """The error's class name, with kakeibo's argument errors named by their built-in base: issue 30 turned
    bare ``ValueError``/``TypeError`` raises into them on purpose, with the same messages."""
    if isinstance(error, kakeibo.ArgumentError):
        return "ValueError"
    if isinstance(error, kakeibo.ArgumentTypeError):
        return "TypeError"
    return type(error).__name__


def _attempt(call: Callable[[], Any], describe: Callable[[Any], object]) -> object:
    """``describe(call())``, or the error's class and message when the call raises."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = call()
    except Exception as error:  # every error is part of the record
        return {"error": _builtin_name(error), "message": str(error)}
    return {"value": describe(value), "warnings": [str(w.message) for w in caught]}


def _record(session: Session, query: str, seed: int, **options: Any) -> dict[str, object]:
    """The explain text and the seeded release of one call. The engine's own ``random()`` (which of a
    person's groups are kept) is seeded too, on one thread, so that a release depends on ``seed`` alone."""
    explained = _attempt(lambda: session.explain(query, **options), str)
    cursor = session.backend._cursor()  # type: ignore[attr-defined]  # the thread's DuckDB cursor
    cursor.execute("SET threads = 1")
    cursor.execute(f"SELECT setseed({seed / (NUMERIC_SEEDS + RELATIONAL_SEEDS + 1000)})")
    released = _attempt(
        lambda: session.sql(query, rng=np.random.default_rng(seed), **options),
        lambda r: {"table": _table_digest(r.to_arrow()), "loss": str(r.privacy_loss), "rows": len(r)},
    )
    return {"explain": explained, "release": released}


def _corpus(directory: Path) -> Iterator[tuple[str, dict[str, object]]]:
    from sql_corpus import ACCEPTED, REFUSED, connect

    with connect(directory / "corpus.sqlite", budget=(10**9, 0.5)) as session:
        for i, query in enumerate(ACCEPTED):
            options = {"epsilon": 1, "delta": 1e-6, "nonnegative": i % 2 == 1}
            yield f"corpus {i}: {query}", _record(session, query, i, **options)
        for i, (query, _) in enumerate(REFUSED):
            yield f"corpus refused {i}: {query}", _record(session, query, i, epsilon=1, delta=1e-6)


def _session(backend: Any, catalog: Any, path: Path, delta: object = None) -> Session:
    ledger = Ledger(path, budget=(10**6, 0.5))
    return kakeibo.connect(backend, catalog=catalog, ledger=ledger, delta=delta)


def _numeric(directory: Path) -> Iterator[tuple[str, dict[str, object]]]:
    from adversarial_harness import CATALOG, CORRELATED_CATALOG, DEFAULT_DELTA, duckdb_worlds, numeric_query

    worlds = duckdb_worlds()
    try:
        for seed in range(NUMERIC_SEEDS):
            drawn = numeric_query(random.Random(seed))
            catalog = CORRELATED_CATALOG if drawn.correlated else CATALOG
            path = directory / f"numeric-{seed}.sqlite"
            session = _session(worlds.backends["target"], catalog, path, DEFAULT_DELTA)
            options: dict[str, Any] = {
                "epsilon": drawn.epsilon,
                "dialect": drawn.dialect,
                "nonnegative": drawn.nonnegative,
            }
            if drawn.bounds is not None:
                options["bounds"] = drawn.bounds
            key = f"numeric {seed}: {drawn.query} {drawn.bounds}"
            yield key, _record(session, drawn.query, seed, **options)
    finally:
        worlds.close()


def _relational(directory: Path) -> Iterator[tuple[str, dict[str, object]]]:
    from kakeibo.data.tpch import arrow_tables, generate
    from test_adversarial_relational_fuzz import CATALOGS, relational_query
    from test_sql_relational import _engine, _with_target

    tables = _with_target(arrow_tables(generate(0.01, directory / "tpch")))
    backend = _engine(tables)
    try:
        for seed in range(RELATIONAL_SEEDS):
            query, name, bounds = relational_query(random.Random(seed))
            session = _session(backend, CATALOGS[name], directory / f"relational-{seed}.sqlite")
            options: dict[str, Any] = {"epsilon": 1, "delta": 1e-6}
            if bounds is not None:
                options["bounds"] = bounds
            yield f"relational {seed} ({name}): {query} {bounds}", _record(session, query, seed, **options)
    finally:
        backend.close()


WORKLOADS: Mapping[str, Callable[[Path], Iterator[tuple[str, dict[str, object]]]]] = {
    "corpus": _corpus,
    "numeric": _numeric,
    "relational": _relational,
}


def run() -> dict[str, dict[str, object]]:
    """Every call's record, by a key naming the workload, the seed and the call."""
    records: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as directory:
        for name, workload in WORKLOADS.items():
            for key, record in workload(Path(directory)):
                records[key] = record
            print(f"{name}: done ({len(records)} calls so far)", file=sys.stderr)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("mode", choices=("write", "check"))
    parser.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    records = run()
    if args.mode == "write":
        args.file.write_text(json.dumps(records, indent=1, sort_keys=True))
        print(f"wrote {len(records)} records to {args.file}")
        return 0
    before = json.loads(args.file.read_text())
    differ = sorted(k for k in before.keys() | records.keys() if before.get(k) != records.get(k))
    for key in differ:
        print(f"DIFFERS {key}\n  before: {before.get(key)}\n  after:  {records.get(key)}")
    print(f"{len(records)} calls, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
