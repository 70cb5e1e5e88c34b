"""Neighbouring databases on three engines, and a comparable record of what one query does on each.

The adversarial corpus (``test_adversarial_sql.py``), the differential fuzzer
(``test_adversarial_fuzz.py``) and ``benchmarks/fuzz_neighbours.py`` share this module.

Threat model (``../shared/DESIGN.md``; issue 15): an analyst with a key sees the released values, the
error class and text, whether the query was answered, the ledger's spent budget, the schema of the released
table -- and latency. Each must depend only on public inputs (catalog, query, epsilon) and on noised values
that were charged. So every query runs on a pair of NEIGHBOURING databases, the *base* world and the
*target* world (the base plus ONE user, ``TARGET_ID``, whose rows hold extreme values: backslashes, SQL
wildcards, quotes, non-ASCII and long strings; 1e308, -1e308, NaN, infinities, 5e-324 and -0.0; a
text 'B12' in a column whose other values look numeric; NULLs; a category outside the public values;
x = 0.5 and the double just above it; an age beyond its bound and the largest int64 as a birth year), and
the two :class:`Outcome` records must be equal: same acceptance, same error class, same error text, same
charge, same released schema. Only the released values and the number of released rows are noisy, so
they are recorded but not compared; the time of each call is recorded for the benchmark, never asserted.

Each call gets a fresh SQLite ledger, so nothing is answered from a stored release, and both worlds get
the same seeded generator (``rng_seed``), so the noise itself is the same draw in both: what still
differs is what the target's rows did.

A third database, ``empty`` (the same tables, no rows), is consulted only when an error text holds a
number that no public input (query, catalog, epsilon, the bounded statement) holds: a number the empty
database's error shows too is a limit of kakeibo's or an echo of the query, not anyone's data.

Engines: DuckDB (in-memory databases), PostgreSQL (fresh databases on the test server, loaded with
:meth:`PostgresBackend.load_table`) and Spark (sessions of the one local ``SparkContext``, from
``SparkSession.newSession()``, each with its own temporary views loaded by :meth:`SparkBackend.load_table`).
Spark evaluates a filter over such a local relation while *optimising* the plan, on the driver, where no
job can be cancelled: a statement the harness's ``timeout`` cannot stop is why the LIKE patterns here stay
short enough (see ``LONG_NAME``).
"""

from __future__ import annotations

import datetime
import decimal
import functools
import itertools
import math
import random
import re
import struct
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import kakeibo
from kakeibo.accounting import BudgetExceeded, Ledger
from kakeibo.backends import Backend, DuckDBBackend
from kakeibo.privacy import ApproxDP
from kakeibo.sql import Catalog

__all__ = [
    "ABOVE_HALF",
    "CATALOG",
    "CATALOG_TOML",
    "ENGINES",
    "TARGET_DAYS",
    "TARGET_ID",
    "TARGET_PRICES",
    "TARGET_ROWS",
    "WORLDS",
    "Drawn",
    "Outcome",
    "Worlds",
    "assert_indistinguishable",
    "base_tables",
    "compare",
    "data_dependent_numbers",
    "duckdb_worlds",
    "mismatch",
    "neighbour_outcomes",
    "numeric_query",
    "outcome",
    "postgres_worlds",
    "public_texts",
    "report",
    "spark_worlds",
    "target_tables",
]

ENGINES = ("duckdb", "postgres", "spark")
WORLDS = ("base", "target")
#: a third database with the same tables and no rows: a number an error text shows there too is not taken
#: from anyone's data (a limit of kakeibo's, an echo of the query), see :func:`mismatch`
EMPTY = "empty"
LOADED = (*WORLDS, EMPTY)
TARGET_ID = 999999
BASE_USERS = 400
CATEGORIES = ("a", "b", "c", "d", "e")
#: the base world's buildings: numeric-looking text, 8 of them (the dropped-group case needs 8)
BUILDINGS = ("1", "2", "3", "5", "8", "12", "21", "40")
#: the double just above 0.5 (0.5 + 2**-53)
ABOVE_HALF = struct.unpack("<d", struct.pack("<q", struct.unpack("<q", struct.pack("<d", 0.5))[0] + 1))[0]
#: the target's long name: long enough to stand out, short enough that an 11-pair LIKE wildcard pattern
#: still finishes on Spark's backtracking matcher (issue 15, G2) within a unit test
LONG_NAME = "T" + "z" * 23
#: a much longer string, only in the row-level ``people`` table (the fuzzer does not read it; the wildcard
#: patterns of the corpus and of ``benchmarks/fuzz_neighbours.py`` do)
VERY_LONG = "T" + "z" * 4095
LEDGER_BUDGET = ApproxDP(10**6, Fraction(1, 2))
DEFAULT_DELTA = "1e-6"

_VISITS_TOML = """
[tables.visits]
privacy_unit = "user_id"
max_partitions = 3
max_rows_per_partition = 4
[tables.visits.columns]
user_id = { type = "int" }
category = { type = "str", public_values = ["a", "b", "c", "d", "e"] }
name = { type = "str" }
building = { type = "str" }
level = { type = "str", public_values = ["1", "2", "3", "5", "8", "12", "21", "40"] }
amount = { type = "float", lower = 0, upper = 100 }
age = { type = "int", lower = 0, upper = 120, user_constant = true }
birth_year = { type = "int", user_constant = true }
x = { type = "float", lower = 0, upper = 1 }
price = { type = "decimal", precision = 15, scale = 2, lower = 0, upper = 100 }
day = { type = "date", lower = "2025-01-01", upper = "2025-12-31" }
"""
CATALOG_TOML = (
    _VISITS_TOML
    # the same table again, as ``ledger`` in the schema ``archive`` (issue 32; ARCHIVE)
    + _VISITS_TOML.replace("[tables.visits]", '[tables.ledger]\nschema = "archive"').replace(
        "[tables.visits.", "[tables.ledger."
    )
    + """
[tables.dim]
public = true
[tables.dim.columns]
category = { type = "str", unique = true }
k = { type = "int", unique = true }
label = { type = "str", unique = true }
weight = { type = "float", unique = true }

[tables.people]
[tables.people.columns]
age = { type = "int", lower = 0, upper = 120 }
city = { type = "str" }
category = { type = "str" }
income = { type = "float", lower = 0, upper = 1000 }
"""
)
CATALOG = Catalog.from_toml(CATALOG_TOML)
#: the schema and name of ``ledger``, a copy of ``visits`` the catalog declares in a schema of its own
#: (Spark's backend serves only its own temporary views, in no schema: there its queries are refused alike)
ARCHIVE = ("archive", "ledger")
#: the users of ``visits`` correlated under seed 001's Gaussian model (``kakeibo.sql.correlation``): a path
#: over users 1..10 that ends at the target, so the target's neighbours are correlated with them
CORRELATION_TOML = (
    "[tables.visits.correlation]\nedges = ["
    + ", ".join(f"[{u}, {v}, 1.0]" for u, v in [*((i, i + 1) for i in range(1, 10)), (10, 999999)])
    + "]\ntau = 1.0\n"
)
CORRELATED_CATALOG = Catalog.from_toml(
    CATALOG_TOML.replace("[tables.dim]", CORRELATION_TOML + "\n[tables.dim]", 1)
)

_VISITS_SCHEMA = pa.schema(
    [
        ("user_id", pa.int64()),
        ("category", pa.string()),
        ("name", pa.string()),
        ("building", pa.string()),
        ("level", pa.string()),  # the building again, declared as public numerals (issue 32's literals)
        ("amount", pa.float64()),
        ("age", pa.int64()),
        ("birth_year", pa.int64()),
        ("x", pa.float64()),
        ("price", pa.decimal128(15, 2)),  # an exact DECIMAL (issue 32): the amount, to the cent
        ("day", pa.date32()),  # a date declared within 2025 (issue 32: its days are public keys)
    ]
)
_PEOPLE_SCHEMA = pa.schema(
    [("age", pa.int64()), ("city", pa.string()), ("category", pa.string()), ("income", pa.float64())]
)
_NAMES = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy")

# The target user's rows: (category, name, building, amount, x). Age 121 (beyond the bound) and birth year
# 2**63 - 1 on every row (both columns are user-constant).
TARGET_AGE = 121
TARGET_BIRTH_YEAR = 2**63 - 1
TARGET_ROWS: tuple[tuple[str | None, str | None, str | None, float | None, float | None], ...] = (
    ("a", "T\\", "B12", 1e308, 0.5),
    ("only-target", LONG_NAME, "12", -1e308, ABOVE_HALF),
    (None, "%", None, math.nan, 5e-324),
    ("b", "_", "1e999", 5e-324, None),
    ("c", "Tüñî日本😀", " 7 ", math.inf, 1.0),
    ("a", None, "", None, 0.0),
    ("d", "T'; --\"", "-0", -0.0, -0.0),
    ("e", "T%_\\%", "0x1F", -math.inf, 1e-300),
)
#: the target's days, one per row of TARGET_ROWS: the ends of the declared 2025 and of the date range,
#: the days either side of 2025, NULL, and a Monday whose week starts in the year before
TARGET_DAYS = (
    "2025-01-01",
    "2025-12-31",
    "0001-01-01",
    "9999-12-31",
    "2024-12-31",
    None,
    "2026-01-01",
    "2024-12-30",
)
#: the target's prices, one per row of TARGET_ROWS: the ends of DECIMAL(15, 2), a cent either side of 0, 0
TARGET_PRICES = (
    "9999999999999.99",
    "-9999999999999.99",
    None,
    "0.01",
    "1000000000000.00",
    "0.00",
    "-0.01",
    "100.01",
)


def base_tables() -> dict[str, pa.Table]:
    """The base world: 400 users with ordinary values (some NULLs), a public ``dim``, 200 ``people`` rows."""
    rng = np.random.default_rng(20240615)
    rows: dict[str, list[Any]] = {f.name: [] for f in _VISITS_SCHEMA}
    for user in range(1, BASE_USERS + 1):
        age = int(user % 121)  # 0 and 120 (the bounds) included
        birth_year = 1900 + user % 121
        for category in rng.choice(CATEGORIES, size=int(rng.integers(1, 4)), replace=False):
            for _ in range(int(rng.integers(1, 6))):
                rows["user_id"].append(user)
                rows["category"].append(str(category))
                rows["name"].append(None if rng.random() < 0.03 else str(rng.choice(_NAMES)))
                rows["building"].append(str(rng.choice(BUILDINGS)))
                rows["level"].append(rows["building"][-1])
                rows["amount"].append(None if rng.random() < 0.05 else round(float(rng.gamma(2, 30)), 2))
                rows["age"].append(age)
                rows["birth_year"].append(birth_year)
                rows["x"].append(0.5 if rng.random() < 0.1 else round(float(rng.random()), 3))
                amount = rows["amount"][-1]
                rows["price"].append(None if amount is None else decimal.Decimal(f"{amount:.2f}"))
                rows["day"].append(datetime.date(2025, 1, 1) + datetime.timedelta(days=(user * 7) % 365))
    visits = pa.table(rows, schema=_VISITS_SCHEMA)
    dim = pa.table(
        {
            "category": pa.array(list(CATEGORIES), pa.string()),
            "k": pa.array(range(1, len(CATEGORIES) + 1), pa.int64()),
            "label": pa.array([f"label {c}" for c in CATEGORIES], pa.string()),
            "weight": pa.array([0.5 * (i + 1) for i in range(len(CATEGORIES))], pa.float64()),
        }
    )
    people_rows = [
        (int(rng.integers(0, 121)), str(rng.choice(_NAMES)), str(rng.choice(CATEGORIES)), float(i % 500))
        for i in range(200)
    ]
    people = pa.table(
        {name: [r[i] for r in people_rows] for i, name in enumerate(_PEOPLE_SCHEMA.names)},
        schema=_PEOPLE_SCHEMA,
    )
    return {"visits": visits, "dim": dim, "people": people}


def target_tables() -> dict[str, pa.Table]:
    """The target world: the base plus user ``TARGET_ID`` in ``visits`` and one extreme row in ``people``."""
    base = base_tables()
    extra = pa.table(
        {
            "user_id": [TARGET_ID] * len(TARGET_ROWS),
            "category": [r[0] for r in TARGET_ROWS],
            "name": [r[1] for r in TARGET_ROWS],
            "building": [r[2] for r in TARGET_ROWS],
            "level": [r[2] for r in TARGET_ROWS],  # "12", and numerals the catalog does not list
            "amount": [r[3] for r in TARGET_ROWS],
            "age": [TARGET_AGE] * len(TARGET_ROWS),
            "birth_year": [TARGET_BIRTH_YEAR] * len(TARGET_ROWS),
            "x": [r[4] for r in TARGET_ROWS],
            "price": [None if p is None else decimal.Decimal(p) for p in TARGET_PRICES],
            "day": [None if d is None else datetime.date.fromisoformat(d) for d in TARGET_DAYS],
        },
        schema=_VISITS_SCHEMA,
    )
    person = pa.table(
        {"age": [TARGET_AGE], "city": [VERY_LONG], "category": ["only-target"], "income": [1e308]},
        schema=_PEOPLE_SCHEMA,
    )
    return {
        "visits": pa.concat_tables([base["visits"], extra]),
        "dim": base["dim"],
        "people": pa.concat_tables([base["people"], person]),
    }


def world_tables(world: str) -> dict[str, pa.Table]:
    if world == EMPTY:
        return {name: table.slice(0, 0) for name, table in base_tables().items()}
    if world == "base":
        return base_tables()
    if world == "target":
        return target_tables()
    raise ValueError(f"unknown world {world!r}")


# ------------------------------------------------------------------------------------------ engines


@dataclass
class Worlds:
    """The two neighbouring databases of one engine. ``cleanup`` runs when the engine is no longer needed
    (it never stops a Spark session it did not start)."""

    engine: str
    backends: dict[str, Backend]
    cleanup: Callable[[], None] = lambda: None
    #: a timeout (seconds) per statement where the engine lets the harness cancel one (Spark)
    cancel: Callable[[], None] | None = None

    def close(self) -> None:
        self.cleanup()


def _load(backend: Backend, world: str) -> None:
    for name, table in world_tables(world).items():
        backend.load_table(name, table)
    if backend.dialect in ("duckdb", "postgres"):  # visits again, in a schema of its own (issue 32)
        for statement in (
            f"CREATE SCHEMA IF NOT EXISTS {ARCHIVE[0]}",
            f"DROP TABLE IF EXISTS {ARCHIVE[0]}.{ARCHIVE[1]}",
            f"CREATE TABLE {ARCHIVE[0]}.{ARCHIVE[1]} AS SELECT * FROM visits",
        ):
            backend.execute(statement)


def duckdb_worlds() -> Worlds:
    """Two in-memory DuckDB databases."""
    backends: dict[str, Backend] = {}
    for world in LOADED:
        backend = DuckDBBackend(":memory:")
        _load(backend, world)
        backends[world] = backend

    def cleanup() -> None:
        for backend in backends.values():
            backend.close()

    return Worlds("duckdb", backends, cleanup)


def postgres_worlds(server_conninfo: str) -> Worlds:
    """Two fresh databases on the PostgreSQL server of ``server_conninfo`` (the ``postgres_server``
    fixture), loaded with :meth:`PostgresBackend.load_table`; dropped again by ``cleanup``."""
    import psycopg

    from kakeibo.backends.postgres import PostgresBackend

    params = dict(part.split("=", 1) for part in server_conninfo.split())
    admin = " ".join(f"{k}={v}" for k, v in {**params, "dbname": "postgres"}.items())
    names = {world: f"kakeibo_adv_{world}_{uuid.uuid4().hex[:10]}" for world in LOADED}
    backends: dict[str, Backend] = {}
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in names.values():
            conn.execute(f"CREATE DATABASE {name}".encode())
    for world, name in names.items():
        backend = PostgresBackend(" ".join(f"{k}={v}" for k, v in {**params, "dbname": name}.items()))
        _load(backend, world)
        backends[world] = backend

    def cleanup() -> None:
        for backend in backends.values():
            backend.close()
        with psycopg.connect(admin, autocommit=True) as conn:
            for name in names.values():
                conn.execute(f"DROP DATABASE IF EXISTS {name}".encode())

    return Worlds("postgres", backends, cleanup)


def spark_worlds(spark: Any) -> Worlds:
    """Two Spark sessions sharing ``spark``'s context (a :class:`SparkBackend` or a ``SparkSession``),
    each with its own temporary views, loaded with :meth:`SparkBackend.load_table`."""
    from kakeibo.backends.spark import SparkBackend

    root = spark.session if isinstance(spark, SparkBackend) else spark
    backends: dict[str, Backend] = {}
    for world in LOADED:
        backend = SparkBackend(session=root.newSession())
        _load(backend, world)
        backends[world] = backend

    def cancel() -> None:
        root.sparkContext.cancelAllJobs()

    def cleanup() -> None:  # drops the worlds' views; leaves the shared context running
        for backend in backends.values():
            backend.close()

    return Worlds("spark", backends, cleanup, cancel=cancel)


# ----------------------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Outcome:
    """What an analyst observes of one ``session.sql`` call (see the module docstring).

    ``schema`` is the released table's column names and Arrow types (accepted queries only); ``spent`` the
    ledger's total after the call and ``charges`` its number of entries. ``rows`` and ``seconds`` are
    recorded but not compared (noisy and timing). ``timed_out`` is set when the harness cancelled a
    statement that outran ``timeout``.
    """

    accepted: bool
    error_class: str | None
    error_text: str | None
    spent: str
    charges: int
    schema: tuple[tuple[str, str], ...] | None
    rows: int | None = field(default=None, compare=False)
    seconds: float = field(default=0.0, compare=False)
    timed_out: bool = field(default=False, compare=False)
    #: the error is a refusal the service answers with a 4xx (a ValueError, TypeError or BudgetExceeded),
    #: not an engine's or an internal error
    refusal: bool = field(default=False, compare=False)
    #: the statistics (``"rows"`` or a column) whose persons' group totals the answer truncated at a
    #: threshold a ladder chose (``ChosenBounds.dropped_intervals``): released, so not compared
    truncated: tuple[str, ...] = field(default=(), compare=False)

    def observable(self) -> dict[str, object]:
        """The fields that must be equal on neighbouring databases."""
        return {
            "accepted": self.accepted,
            "error class": self.error_class,
            "error text": self.error_text,
            "spent": self.spent,
            "charges": self.charges,
            "schema": self.schema,
        }

    def short(self, width: int = 300) -> str:
        if self.accepted:
            what = f"answered, {self.rows} rows, schema {_schema_text(self.schema)}"
        else:
            text = self.error_text or ""
            text = text if len(text) <= width else text[:width] + f"... [{len(text)} chars]"
            what = f"{self.error_class}: {text!r}"
        return f"{what}; spent {self.spent} in {self.charges} charges ({self.seconds:.2f} s)"


def _schema_text(schema: tuple[tuple[str, str], ...] | None) -> str:
    return "(" + ", ".join(f"{n}: {t}" for n, t in schema or ()) + ")"


_ledger_counter = itertools.count()


def outcome(
    worlds: Worlds,
    world: str,
    query: str,
    epsilon: object = 1,
    *,
    ledger_dir: str | Path | None = None,
    delta: object = None,
    rng_seed: int | None = 0,
    timeout: float | None = None,
    dialect: str | None = None,
    nonnegative: bool = False,
    bounds: Mapping[str, object] | None = None,
    catalog: Catalog = CATALOG,
    synthesis: Mapping[str, object] | None = None,
) -> Outcome:
    """Run ``session.sql(query, epsilon=epsilon)`` on one world with a fresh ledger and record it; with
    ``synthesis`` (keyword arguments such as ``delta`` and ``rows_per_person``), ``session.synthesize(query,
    epsilon=epsilon, **synthesis)`` instead, its synthetic table recorded as the answer, followed by
    ``session.fidelity`` at ``synthesis["fidelity"]`` when that is given.

    ``rng_seed=None`` uses the secure default generator; otherwise both worlds draw from
    ``numpy.random.default_rng(rng_seed)``. ``timeout`` (Spark only) cancels the engine's jobs when the call
    outruns it; the outcome then has ``timed_out`` set (and the call's own error). ``dialect`` and
    ``nonnegative`` are passed to ``session.sql`` as they are, and so is ``bounds`` (the analyst's override of
    limits and column bounds) when given; ``catalog`` is the session's (:data:`CATALOG`, or
    :data:`CORRELATED_CATALOG`).
    """
    directory = Path(ledger_dir) if ledger_dir is not None else Path(tempfile.mkdtemp(prefix="kakeibo-adv-"))
    path = directory / f"ledger-{world}-{next(_ledger_counter)}.sqlite"
    ledger = Ledger(path, budget=LEDGER_BUDGET)
    session = kakeibo.connect(worlds.backends[world], catalog=catalog, ledger=ledger, delta=DEFAULT_DELTA)
    kwargs: dict[str, Any] = {"epsilon": epsilon, "dialect": dialect, "nonnegative": nonnegative}
    if delta is not None:
        kwargs["delta"] = delta
    if bounds is not None:
        kwargs["bounds"] = bounds
    if rng_seed is not None:
        kwargs["rng"] = np.random.default_rng(rng_seed)
    timer = None
    fired: list[bool] = []
    if timeout is not None and worlds.cancel is not None:
        import threading

        def on_timeout() -> None:
            fired.append(True)
            assert worlds.cancel is not None
            worlds.cancel()

        timer = threading.Timer(timeout, on_timeout)
        timer.start()
    error_class: str | None = None
    error_text: str | None = None
    schema: tuple[tuple[str, str], ...] | None = None
    rows: int | None = None
    truncated: tuple[str, ...] = ()
    refusal = False
    start = time.perf_counter()
    try:
        if synthesis is not None:
            fit = {k: v for k, v in synthesis.items() if k != "fidelity"}
            made = session.synthesize(query, epsilon=epsilon, rng=kwargs.get("rng"), **fit)
            if "fidelity" in synthesis:
                session.fidelity(made, epsilon=synthesis["fidelity"], random_state=0, rng=kwargs.get("rng"))
            table, chosen = made.table, None
        else:
            result = session.sql(query, **kwargs)
            table, chosen = result.to_arrow(), result.bounds
    except Exception as exc:  # every failure is an observation
        seconds = time.perf_counter() - start
        accepted, error_class, error_text = False, _class_name(exc), str(exc)
        refusal = isinstance(exc, (ValueError, TypeError, BudgetExceeded))
    else:
        seconds = time.perf_counter() - start
        accepted = True
        schema = tuple((f.name, str(f.type)) for f in table.schema)
        rows = table.num_rows
        truncated = tuple(sorted(chosen.dropped_intervals)) if chosen is not None else ()
    finally:
        if timer is not None:
            timer.cancel()
    try:
        spent = repr(ledger.spent())
        charges = len(ledger.entries())
    finally:
        ledger.close()  # the backend stays open: the worlds are shared between calls
    return Outcome(
        accepted=accepted,
        error_class=error_class,
        error_text=error_text,
        spent=spent,
        charges=charges,
        schema=schema,
        rows=rows,
        seconds=seconds,
        timed_out=bool(fired),
        refusal=refusal,
        truncated=truncated,
    )


def _class_name(exc: BaseException) -> str:
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"


def neighbour_outcomes(worlds: Worlds, query: str, epsilon: object = 1, **kwargs: Any) -> dict[str, Outcome]:
    """The outcome of ``query`` on both worlds of one engine."""
    return {world: outcome(worlds, world, query, epsilon, **kwargs) for world in WORLDS}


# ------------------------------------------------------------------------------- the public numbers

#: a number as it stands in a text: digits not glued to a letter, digit or underscore (so the 64 of
#: INT64 or the 0 of __g0 is part of a name, not a number)
_NUMBER = re.compile(r"(?<![A-Za-z0-9_])\d+(?![A-Za-z0-9_])")
#: numbers an engine's message takes from the statement's text, never from the data
_POSITIONS = re.compile(
    r"(?i)(?:line|position|pos|col|column|char|character|SQLSTATE:?|SQLSTATE\s*=)\s*\d+"
    r"|\(\s*line\s*\d+\s*,\s*position\s*\d+\s*\)"
)


def _numbers(text: str) -> set[str]:
    return set(_NUMBER.findall(text))


def _cheap_public_texts(query: str, epsilon: object) -> list[str]:
    texts = [query, CATALOG_TOML, CORRELATION_TOML, repr(epsilon), str(epsilon), DEFAULT_DELTA]
    texts.append(repr(LEDGER_BUDGET))
    for convert in (float, Fraction):
        try:
            value = convert(epsilon)  # type: ignore[call-overload, arg-type, unused-ignore]
        except (TypeError, ValueError, OverflowError, ZeroDivisionError):
            continue
        texts += [repr(value), str(value)]
    return texts


@functools.lru_cache(maxsize=256)
def _statements(query: str, epsilon_key: str, epsilon: object, dialect: str | None) -> tuple[str, ...]:
    try:
        from kakeibo.sql import analyze, plan_query
        from kakeibo.sql.bounds import provisional
        from kakeibo.sql.dp_clause import read_clause
        from kakeibo.sql.options import QueryOptions
        from kakeibo.sql.rewrite import bounded_sql, engine_sql

        asked = QueryOptions(epsilon=epsilon, dialect=dialect)  # type: ignore[arg-type]
        query, options = read_clause(query, asked)
        catalog, totals = CATALOG, {}
        if options.clause is not None:  # as the session plans it (Session._planned)
            named = analyze(query, CATALOG, dialect=options.dialect, require_limits=False)
            catalog, totals = options.clause.applied(CATALOG, named, None)
        analyzed = analyze(query, provisional(catalog), dialect=options.dialect)
        assert options.epsilon is not None
        plan = plan_query(analyzed, epsilon=options.epsilon, delta=DEFAULT_DELTA, totals=totals)
        statement = bounded_sql(plan)
        translated = [engine_sql(statement, d) for d in ("postgres", "spark")]
        return (statement, *translated, str(plan.privacy_loss))
    except Exception:
        return ()


def public_texts(query: str, epsilon: object, dialect: str | None = None) -> list[str]:
    """Texts made of public inputs only: the query, the catalog, epsilon, the default delta, the ledger's
    budget, and -- when the query can be planned -- the bounded statement kakeibo sends to each engine."""
    return [*_cheap_public_texts(query, epsilon), *_statements(query, repr(epsilon), epsilon, dialect)]


def data_dependent_numbers(
    text: str | None, query: str, epsilon: object, dialect: str | None = None
) -> list[str]:
    """Numbers in an error ``text`` that no public input holds.

    A number of the text (a run of digits not part of a name such as ``INT64``; positions in the statement
    such as ``LINE 1`` or ``position 17`` and SQLSTATE codes are skipped) is public when the same number
    stands in the query, the catalog, epsilon or the bounded statement (:func:`public_texts`). Anything
    else -- a data value, a count of rows or groups, a noisy value -- is reported. The check is
    one-sided: a public-looking number may still be the data's, by chance, and digits glued to letters
    ('B12') are not numbers here (the neighbour comparison sees those)."""
    if not text:
        return []
    found = _numbers(_POSITIONS.sub(" ", text))
    for item in _cheap_public_texts(query, epsilon):
        found -= _numbers(item)
    if found:  # only then plan the query (slow for some hostile queries) for its statement's numbers
        for item in _statements(query, repr(epsilon), epsilon, dialect):
            found -= _numbers(item)
    return sorted(found, key=lambda n: (len(n), n))


def mismatch(
    outcomes: Mapping[str, Outcome],
    query: str,
    epsilon: object,
    *,
    empty: Outcome | None = None,
    dialect: str | None = None,
) -> list[str]:
    """What differs between the two worlds' outcomes, and which numbers of an error text come from the data
    (empty when the pair is indistinguishable). A number the ``empty`` world's error text (same query, no
    rows at all) holds too is not counted as data-dependent."""
    base, target = outcomes["base"], outcomes["target"]
    problems = []
    for key, value in base.observable().items():
        other = target.observable()[key]
        if value != other:
            problems.append(f"{key} differs: base {_show(value)} / target {_show(other)}")
    null = set(_NUMBER.findall(empty.error_text or "")) if empty is not None else set()
    for world in WORLDS:
        result = outcomes[world]
        numbers = data_dependent_numbers(result.error_text, query, epsilon, dialect)
        leaked = [n for n in numbers if n not in null]
        if leaked:
            problems.append(f"the {world} world's error text holds data-dependent numbers {leaked[:8]}")
        if result.timed_out:
            problems.append(f"the {world} world's call outran the harness timeout ({result.seconds:.1f} s)")
    return problems


def compare(
    worlds: Worlds, query: str, epsilon: object = 1, **kwargs: Any
) -> tuple[dict[str, Outcome], list[str]]:
    """Run ``query`` on both worlds (and, when an error text holds numbers the public inputs do not, on
    the empty database too) and return the outcomes with :func:`mismatch`'s problems."""
    outcomes = neighbour_outcomes(worlds, query, epsilon, **kwargs)
    dialect = kwargs.get("dialect")
    empty = None
    if any(data_dependent_numbers(outcomes[w].error_text, query, epsilon, dialect) for w in WORLDS):
        empty = outcome(worlds, EMPTY, query, epsilon, **kwargs)
        outcomes[EMPTY] = empty
    return outcomes, mismatch(outcomes, query, epsilon, empty=empty, dialect=dialect)


def _show(value: object, width: int = 400) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width] + f"... [{len(text)} chars]"


def report(outcomes: Mapping[str, Outcome], problems: list[str], query: str, epsilon: object) -> str:
    """Both outcomes side by side, with what differs."""
    lines = [
        f"query: {_show(query, 600)}  (epsilon={epsilon!r})",
        *(f"  - {p}" for p in problems),
        f"  base:   {outcomes['base'].short()}",
        f"  target: {outcomes['target'].short()}",
    ]
    if EMPTY in outcomes:
        lines.append(f"  empty:  {outcomes[EMPTY].short()}")
    return "\n".join(lines)


def assert_indistinguishable(
    worlds: Worlds, query: str, epsilon: object = 1, **kwargs: Any
) -> dict[str, Outcome]:
    """Fail with both outcomes side by side when the two worlds are distinguishable (see :func:`compare`)."""
    outcomes, problems = compare(worlds, query, epsilon, **kwargs)
    if problems:
        raise AssertionError(report(outcomes, problems, query, epsilon))
    return outcomes


def iter_engine_worlds(engines: tuple[str, ...], **resources: Any) -> Iterator[Worlds]:
    """Build the worlds of each engine in turn (for scripts); ``postgres`` needs ``postgres_conninfo``,
    ``spark`` a ``spark`` backend or session."""
    for engine in engines:
        if engine == "duckdb":
            worlds = duckdb_worlds()
        elif engine == "postgres":
            worlds = postgres_worlds(resources["postgres_conninfo"])
        elif engine == "spark":
            worlds = spark_worlds(resources["spark"])
        else:
            raise ValueError(f"unknown engine {engine!r}; the engines are {', '.join(ENGINES)}")
        try:
            yield worlds
        finally:
            worlds.close()


# ------------------------------------------------------------------------------------ the grammar

#: numeric literals at the edges of int64, double and decimal arithmetic, as SQL text
NUMERIC_LITERALS = (
    "0",
    "-0.0",
    "0.5",
    repr(ABOVE_HALF),
    "1",
    "4",
    "100",
    "120",
    "121",
    "999999",
    "1e308",
    "-1e308",
    "1.7976931348623157e308",
    "5e-324",
    "2e-324",
    "1e-300",
    "9007199254740993",  # 2**53 + 1
    "9223372036854775807",  # 2**63 - 1
    "9223372036854775808",  # 2**63
    "-9223372036854775808",
    "1e19",
    "0.50000000000000000020",
    "30.0000000000000010e0",
    "1980.00000000000000000001",
    "0.00000000000000000000000000000000001",
    "121.000000000000000000000000000000001",
    "1e400",
    # decimal literals at the scale and range of price's DECIMAL(15, 2) (issue 32)
    "100.01",
    "10.005",
    "9999999999999.99",
    "99999999999999.99",
    "-0.01",
)
#: text literals with quotes, backslashes, LIKE wildcards, non-ASCII and the target's own values
TEXT_LITERALS = (
    "",
    "a",
    "T",
    "T\\",
    "\\",
    "T'",
    "'",
    "%",
    "_",
    "B12",
    "12",
    "1e999",
    " 7 ",
    "only-target",
    "Tüñî日本😀",
    LONG_NAME,
    "T%_\\%",
)
#: pieces of LIKE patterns, several with '%': any number of '%' is accepted (issue 32), and every engine
#: matches in time linear in the text (Spark as :func:`kakeibo.sql.predicates.linear_like` writes it)
LIKE_PIECES = ("T", "z", "a", "\\", "%", "_", "'", "ü", "!", "B1", "%_", "%z%", "%%", "_%T", "%😀%")
#: columns of ``visits`` by catalog type (the privacy unit is only ever compared, never aggregated)
TEXT_COLUMNS = ("category", "name", "building", "level")
NUMBER_COLUMNS = ("user_id", "amount", "age", "birth_year", "x", "price")
BOUNDED_COLUMNS = ("amount", "age", "x", "price")
EPSILONS = (1, 0.5, 2, 1000, 1000, "1e-3")
#: HAVING operands kakeibo computes on the released table (issue 32): ``{c}`` an output or an aggregate,
#: ``{k}`` any output (a text key: read through a cast), ``{l}`` a literal
HAVING_TERMS = (
    "{c} * 100 / {l}",
    "{c} / CAST({k} AS INT)",
    "CAST({c} AS BIGINT) - {l}",
    "{c} / ({c} - {l})",
    "ROUND({c} / {l}, 2)",
    "CAST({k} AS DOUBLE) + {c}",
)
#: what a query without a join reads: the table, or its rows through a nested query (issue 32)
SOURCES = (
    "visits",
    "visits",
    "visits",
    "(SELECT * FROM visits) AS visits",
    "(SELECT * FROM visits WHERE TRUE) visits",
    "WITH visits AS (SELECT * FROM visits)",
    "archive.ledger AS visits",  # the same rows in a schema of their own (issue 32)
)
#: ORDER BY items kakeibo computes on the released table, ``{o}`` an output
ORDER_TERMS = ("CAST({o} AS TEXT)", "{o} * -1", "CAST({o} AS INT) * -1", "{o} / ({o} - 1)")
#: aggregates of per-person totals ``s`` (a SUM), ``c`` (COUNT(*)) and ``k`` (a COUNT of a column), read
#: back as aggregates of the table (issue 32), and some refused (a mean of SUMs, a maximum, a total itself)
PER_PERSON_AGGREGATES = (
    "SUM(s)",
    "COUNT(*)",
    "AVG(c)",
    "SUM(c)",
    "SUM(k)",
    "AVG(k)",
    "SUM(s) / COUNT(*)",
    "AVG(s)",
    "MAX(s)",
)
#: BigQuery's DP clause (issue 32, :mod:`kakeibo.sql.dp_clause`): its options beside epsilon, and the bounds
#: its calls give (within the catalog's limits, past them, and at the edges of the double range)
CLAUSE_OPTIONS = (
    "",
    ", delta=1e-6",
    ", max_groups_contributed=1",
    ", max_groups_contributed=3",
    ", max_groups_contributed=4",
    ", privacy_unit_column=user_id",
    ", privacy_unit_column=visits.user_id",
    ", privacy_unit_column=category",
)
CLAUSE_BOUNDS = ((0, 1), (0, 4), (0, 100), (0, 400), (0, 5e-324), (0, 1e308), (-1, 1), (1e-100, 50), (0, 0))
CLAUSE_CALLS = (
    "COUNT(*, contribution_bounds_per_group => ({lo}, {hi}))",
    "COUNT({c}, contribution_bounds_per_group => ({lo}, {hi}))",
    "SUM({c}, contribution_bounds_per_group => ({lo}, {hi}))",
    "AVG({c}, contribution_bounds_per_group => ({lo}, {hi}))",
    "PERCENTILE_CONT({c}, 0.5, contribution_bounds_per_row => ({lo}, {hi}))",
    "VAR_POP({c}, contribution_bounds_per_row => ({lo}, {hi}))",
)


def sql_text(value: str) -> str:
    """A SQL string literal (quotes doubled; backslashes are plain characters in DuckDB's dialect)."""
    return "'" + value.replace("'", "''") + "'"


#: expressions around aggregates (post-processing, :mod:`kakeibo.sql.derived`), total or refused alike
DERIVED_TEMPLATES = (
    "{a} / {b}",
    "({a} - {b}) * 5",
    "ROUND({a}, 1)",
    "POWER({a}, 2)",
    "LN({a})",
    "SQRT({a} - {b})",
    "GREATEST({a}, 0)",
    "{a} / ({b} - {b})",
    "CASE WHEN {a} > 10 THEN 'many' ELSE 'few' END",
    "{a} % 2",
)

#: GROUP BY expressions (:mod:`kakeibo.sql.group_keys`) over the columns of ``visits`` (``{p}`` is the
#: column prefix), accepted and refused ones alike; a CASE over a drawn condition is added by the grammar
KEY_TEMPLATES = (
    "{p}age / 10",
    "{p}age // 7",
    "FLOOR({p}age / 12)",
    "ROUND({p}age / 25)",
    "{p}age % 5",
    "({p}age - 60) * 2",
    "CASE WHEN {p}amount < 50 THEN 1 WHEN {p}amount < 90 THEN 2 END",
    "CASE {p}category WHEN 'a' THEN 'first' ELSE 'other' END",
    "{p}amount / 10",
    "{p}user_id // 100",
    "{p}age + {p}birth_year",
    "UPPER({p}name)",
    "{p}age // 0",
    "DATE_TRUNC('month', {p}day)",
    "DATE_TRUNC('week', {p}day)",
    "DATE_TRUNC('year', {p}day)",
)


#: aggregates under the names other dialects give them (:mod:`kakeibo.sql.aggregate_calls`), ``{c}`` a
#: bounded column
SYNONYM_TEMPLATES = (
    "COUNT_BIG(*)",
    "STD({c})",
    "STDDEV_POP({c})",
    "VAR_SAMP({c})",
    "VARIANCE({c})",
    "APPROX_QUANTILE({c}, 0.9)",
    "PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY {c})",
)
#: what aggregates read (:mod:`kakeibo.sql.values`): arithmetic and CASE over bounded columns (``{c}``,
#: ``{d}``), literals at the edges of the flush and the double range (``{n}``), a drawn condition (``{w}``),
#: and chains of literals whose quotient lands next to TINY = 1e-100 (issue 29, R1)
VALUE_TEMPLATES = (
    "{c} * {d}",
    "{c} * {n}",
    "{c} / {n}",
    "({c} - {n}) * ({d} + {n})",
    "{c} / ({d} + 1)",
    "{c} * {n} * {n}",
    "-{c} * {d} / 3",
    "CASE WHEN {w} THEN {c} ELSE {n} END",
    "CASE WHEN {w} THEN {c} * {n} ELSE {d} / {n} END",
    "{n} / (CASE WHEN {w} THEN {q} ELSE 1 END)",
    "{c} / ({q})",
    "{c} + {q}",
)
#: literals inside aggregated expressions
VALUE_LITERALS = (
    "0",
    "1",
    "-2.5",
    "1e-60",
    "1e-99",
    "1e-100",
    "1.0000000000000001e-100",
    "9.999999999999999e-101",
    "1e99",
    "1e100",
    "5e-324",
    "1e308",
)
#: literal-only divisors whose value lies within an ulp of TINY, the way an engine and a reciprocal differ
QUOTIENT_CHAINS = (
    "3.1235316588560124e-31 / 4.156973258475554e+36 / 7.513956584848165e+32",
    "1e-50 / 1e50",
    "1e-50 / 1.0000000000000002e50",
    "2e-100 / 2",
    "1e-100 * 1",
)
#: clamping bounds an analyst may pass as ``bounds=`` (issue 29, R5 and R6): pairs of zero, subnormal and
#: tiny widths, at the flush and overflow edges, and non-finite; drawn as given or from ``BOUND_VALUES``
BOUND_PAIRS = (
    (0, 5e-324),
    (5e-324, 5e-324),
    (0, 1e-300),
    (-1e-300, 1e-300),
    (0, 1e-100),
    (1e308, 1.7e308),
    (-1.7e308, 1.7e308),
    (0, 1e160),
    (-1e100, 1e100),
    (1e100, 1e100),
    (0, math.inf),
    (math.nan, 1),
)
BOUND_VALUES = (0, 1, 100, -100, 5e-324, -5e-324, 1e-100, 1e-300, 1e100, 1e160, 1e308, -1e308)
#: the limits an analyst may pass as ``bounds=`` (``"auto"``: chosen privately for this query)
LIMIT_VALUES = (1, 2, 1000, "auto")
#: the aggregates whose persons' group totals a ladder truncates (``bound_selection = "ladder"``)
TOTAL_FUNCTIONS = ("SUM", "AVG", "COUNT")
#: constants and scalar functions of no column in the select list; the nondeterministic ones are refused
CONSTANTS = ("3", "'label'", "PI()", "1e308", "NULL", "RANDOM()", "NOW()")
#: dialects a query is read in (mostly DuckDB's, whose text the grammar writes; T-SQL adds ``TOP n``)
FUZZ_DIALECTS = ("duckdb", "duckdb", "duckdb", "postgres", "tsql", "bigquery")


@dataclass(frozen=True)
class Drawn:
    """One generated call: the query text and the arguments of ``session.sql`` that go with it."""

    query: str
    epsilon: object
    dialect: str
    nonnegative: bool
    bounds: dict[str, object] | None = None
    correlated: bool = False  # under CORRELATED_CATALOG

    def options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`compare` beside the query and epsilon."""
        options = {"dialect": self.dialect, "nonnegative": self.nonnegative, "bounds": self.bounds}
        return options | ({"catalog": CORRELATED_CATALOG} if self.correlated else {})


def queries(clause_every: int = 7) -> Any:
    """A ``hypothesis`` strategy of :class:`Drawn` calls from the grammar the analyser accepts (see
    :mod:`kakeibo.sql.analyze`), with boundary literals, NULLs and literals of the wrong type mixed in so
    that refusals are exercised too::

        SELECT [DISTINCT | TOP n] <group columns and expressions>, <aggregates, their synonyms, expressions
            of them, constants> FROM visits [JOIN dim ...]
        [WHERE <boolean combination of comparisons, BETWEEN, IN, LIKE, IS NULL>] [GROUP BY ...]
        [HAVING <output column, aggregate not selected, or an expression over them (HAVING_TERMS)> op
        literal, or any output (a text key read as a number) op / IN numbers] [ORDER BY <output columns,
        or expressions over them (ORDER_TERMS)>] [LIMIT n]

    The select list may hold keys alone (a key release by partition selection), written as a GROUP BY or as
    ``SELECT DISTINCT``; each call is read in a drawn dialect and may ask for ``nonnegative`` clamping.
    Aggregates read columns or expressions (``VALUE_TEMPLATES``: arithmetic and CASE with the literals at
    the edges of the flush and of the double range); a quarter of the calls pass ``bounds=`` with limits
    (``LIMIT_VALUES``, ``"auto"`` included) and column bounds drawn from ``BOUND_VALUES`` (zero, subnormal,
    tiny and overflowing widths, non-finite) or ``"auto"``, and a third of those choose how the ``"auto"``
    ones are chosen (``bound_selection``, most often ``"ladder"``: each person's group totals truncated at
    a threshold chosen privately, issue 31; its calls then aggregate with ``TOTAL_FUNCTIONS`` only, so the
    ladder's statement runs). One in ``clause_every`` calls without a join is written with BigQuery's ``SELECT
    WITH DIFFERENTIAL_PRIVACY OPTIONS (...)`` (``CLAUSE_OPTIONS``) and calls bounded by
    ``contribution_bounds_per_group`` or ``_per_row`` (``CLAUSE_CALLS``, ``CLAUSE_BOUNDS``), epsilon given
    in the clause alone or again as the keyword. A tenth of the calls without a join aggregate per-person
    totals of a subquery grouped by ``user_id`` (``PER_PERSON_AGGREGATES``).
    """
    from hypothesis import strategies as st

    literal_any = st.one_of(
        st.sampled_from(NUMERIC_LITERALS),
        st.sampled_from(TEXT_LITERALS).map(sql_text),
        st.just("NULL"),
        st.sampled_from(("TRUE", "FALSE")),
    )

    @st.composite
    def operand(draw: Any, prefix: str) -> str:
        column = draw(st.sampled_from(TEXT_COLUMNS + NUMBER_COLUMNS))
        qualified = f"{prefix}{column}"
        if column in TEXT_COLUMNS and draw(st.integers(0, 5)) == 0:
            return f"{draw(st.sampled_from(('LOWER', 'UPPER')))}({qualified})"
        return qualified

    def literal_for(draw: Any, column: str) -> str:
        # mostly a literal of the column's kind, sometimes any literal (coercions must be refused alike)
        if draw(st.integers(0, 4)) == 0:
            return str(draw(literal_any))
        if column.endswith(("level", "level)")) and draw(st.booleans()):  # a number, converted (issue 32)
            return str(draw(st.sampled_from(NUMERIC_LITERALS)))
        if any(column.endswith(c) or column.endswith(c + ")") for c in TEXT_COLUMNS):
            return sql_text(draw(st.sampled_from(TEXT_LITERALS)))
        return str(draw(st.sampled_from(NUMERIC_LITERALS)))

    @st.composite
    def atom(draw: Any, prefix: str) -> str:
        column = draw(operand(prefix))
        kind = draw(st.sampled_from(("cmp", "cmp", "cmp", "between", "in", "like", "null", "target")))
        if kind == "cmp":
            op = draw(st.sampled_from(("=", "<>", "<", "<=", ">", ">=", "IS NOT DISTINCT FROM")))
            return f"{column} {op} {literal_for(draw, column)}"
        if kind == "between":
            low, high = literal_for(draw, column), literal_for(draw, column)
            return f"{column} {draw(st.sampled_from(('', 'NOT ')))}BETWEEN {low} AND {high}"
        if kind == "in":
            items = draw(st.lists(st.integers(0, 1000), min_size=1, max_size=4))
            values = ", ".join(literal_for(draw, column) for _ in items)
            return f"{column} {draw(st.sampled_from(('', 'NOT ')))}IN ({values})"
        if kind == "like":
            pieces = draw(st.lists(st.sampled_from(LIKE_PIECES), min_size=0, max_size=8))
            pattern = "".join(pieces)
            text_column = column if not column.endswith(NUMBER_COLUMNS) else f"{prefix}name"
            op = draw(st.sampled_from(("LIKE", "NOT LIKE", "ILIKE")))
            return f"{text_column} {op} {sql_text(pattern)}"
        if kind == "null":
            return f"{column} IS {draw(st.sampled_from(('', 'NOT ')))}NULL"
        return f"{prefix}user_id = {TARGET_ID}"

    @st.composite
    def predicate(draw: Any, prefix: str, depth: int = 2) -> str:
        """A comparison, or AND / OR / NOT of smaller predicates (at most ``depth`` levels)."""
        if depth == 0 or draw(st.integers(0, 2)) == 0:
            return str(draw(atom(prefix)))
        kind = draw(st.sampled_from(("AND", "OR", "NOT")))
        if kind == "NOT":
            return f"NOT ({draw(predicate(prefix, depth - 1))})"
        return f"({draw(predicate(prefix, depth - 1))} {kind} {draw(predicate(prefix, depth - 1))})"

    @st.composite
    def per_person(draw: Any, dialect: str) -> Drawn:
        """Totals of per-person totals (issue 32): an inner query grouped by the person (and a key)."""
        key = draw(st.sampled_from(("", "category", "building")))
        by = f"user_id{', ' + key if key else ''}"
        value = draw(st.sampled_from(BOUNDED_COLUMNS))
        inner = f"SELECT {by}, SUM({value}) AS s, COUNT(*) AS c, COUNT({value}) AS k FROM visits"
        if draw(st.booleans()):
            inner += f" WHERE {draw(predicate('', 1))}"
        totals = draw(st.lists(st.sampled_from(PER_PERSON_AGGREGATES), min_size=1, max_size=3))
        select = ([key] if key else []) + [f"{a} AS a{i}" for i, a in enumerate(totals)]
        sql = f"SELECT {', '.join(select)} FROM ({inner} GROUP BY {by}) t"
        if key and draw(st.booleans()):
            sql += f" WHERE {key} = {sql_text(draw(st.sampled_from(TEXT_LITERALS)))}"
        sql += f" GROUP BY {key}" if key else ""
        return Drawn(sql, draw(st.sampled_from(EPSILONS)), dialect, draw(st.booleans()))

    @st.composite
    def query(draw: Any) -> Drawn:
        join = draw(st.sampled_from(("", "", "", "using", "on")))
        prefix = "visits." if join == "on" else ""
        dialect = draw(st.sampled_from(FUZZ_DIALECTS))
        if not join and draw(st.integers(0, 9)) == 0:
            return draw(per_person(dialect))
        group_choices = ["category", "name", "building", "age", "day"] + (["dim.label"] if join else [])
        groups = draw(st.lists(st.sampled_from(group_choices), max_size=2, unique=True))
        key = st.one_of(
            st.sampled_from(KEY_TEMPLATES).map(lambda t: t.format(p=prefix)),
            predicate(prefix, 1).map(lambda c: f"CASE WHEN {c} THEN 'in' ELSE 'out' END"),
        )
        keys = draw(st.lists(key, max_size=1 if len(groups) < 2 else 0))
        value = st.builds(
            lambda t, c, d, n, w, q: t.format(c=c, d=d, n=n, w=w, q=q),
            st.sampled_from(VALUE_TEMPLATES),
            st.sampled_from(BOUNDED_COLUMNS).map(lambda c: prefix + c),
            st.sampled_from(BOUNDED_COLUMNS).map(lambda c: prefix + c),
            st.sampled_from(VALUE_LITERALS),
            predicate(prefix, 0),
            st.sampled_from(QUOTIENT_CHAINS),
        )
        bounds: dict[str, object] | None = None
        clause = not join and draw(st.integers(1, clause_every)) == 1  # BigQuery's DP clause, calls bounded
        if not clause and draw(st.integers(0, 3)) == 0:  # the analyst's own limits and bounds, extreme ones
            bounds = {}
            for column in draw(st.lists(st.sampled_from(BOUNDED_COLUMNS), max_size=2, unique=True)):
                pair = draw(
                    st.one_of(
                        st.sampled_from(BOUND_PAIRS),
                        st.lists(st.sampled_from(BOUND_VALUES), min_size=2, max_size=2).map(sorted),
                        st.just("auto"),
                    )
                )
                bounds[column] = pair if pair == "auto" else tuple(pair)
            for limit in ("max_rows_per_partition", "max_partitions"):
                if draw(st.booleans()):
                    bounds[limit] = draw(st.sampled_from(LIMIT_VALUES))
            if draw(st.integers(0, 2)) == 0:  # how the "auto" ones are chosen (issue 31)
                bounds["bound_selection"] = draw(st.sampled_from(("ladder", "ladder", "histogram")))
        # a ladder truncates totals when every aggregate is one (COUNT, SUM, AVG): it draws those most often
        ladder = bounds is not None and bounds.get("bound_selection") == "ladder"
        functions = TOTAL_FUNCTIONS if ladder else ("SUM", "AVG", "COUNT", "VARIANCE", "MEDIAN")
        choices = [
            st.just("COUNT(*)"),
            st.tuples(st.sampled_from(functions), value).map(lambda t: f"{t[0]}({t[1]})"),
            st.just("COUNT(DISTINCT user_id)"),
            st.sampled_from(TEXT_COLUMNS + BOUNDED_COLUMNS).map(lambda c: f"COUNT({prefix}{c})"),
            st.tuples(st.sampled_from(functions), st.sampled_from(BOUNDED_COLUMNS)).map(
                lambda t: f"{t[0]}({prefix}{t[1]})"
            ),
        ]
        if not ladder:
            synonyms = st.tuples(st.sampled_from(SYNONYM_TEMPLATES), st.sampled_from(BOUNDED_COLUMNS))
            choices.append(synonyms.map(lambda t: t[0].format(c=prefix + t[1])))
        if clause:
            bounded = st.tuples(
                st.sampled_from(CLAUSE_CALLS),
                st.sampled_from(BOUNDED_COLUMNS),
                st.sampled_from(CLAUSE_BOUNDS),
            )
            choices = [bounded.map(lambda t: t[0].format(c=t[1], lo=t[2][0], hi=t[2][1])), *choices]
        aggregate = st.one_of(*choices)
        derived = st.tuples(st.sampled_from(DERIVED_TEMPLATES), aggregate, aggregate).map(
            lambda t: t[0].format(a=t[1], b=t[2])
        )
        keys_alone = bool(groups or keys) and draw(st.integers(0, 4)) == 0
        aggregates = (
            []
            if keys_alone
            else draw(st.lists(st.one_of(aggregate, aggregate, derived), min_size=1, max_size=3))
        )
        for column in [] if keys_alone or bounds is None else [c for c in bounds if c in BOUNDED_COLUMNS]:
            # the bounded column read as the override means it (quantiles read the bucket width)
            read = TOTAL_FUNCTIONS if ladder else (*TOTAL_FUNCTIONS, "MEDIAN", "VARIANCE", "MAX")
            function = draw(st.sampled_from(read))
            aggregates.append(f"{function}({prefix}{column})")
        constants = draw(st.lists(st.sampled_from(CONSTANTS), max_size=0 if keys_alone else 1))
        aliases = [f"a{i}" for i in range(len(aggregates))]
        select = [("" if "." in g else prefix) + g for g in groups]
        select += [f"{k} AS k{i}" for i, k in enumerate(keys)]
        select += [f"{agg} AS {alias}" for agg, alias in zip(aggregates, aliases, strict=True)]
        select += [f"{c} AS c{i}" for i, c in enumerate(constants)]
        distinct = keys_alone and draw(st.booleans())  # the same key release, written as SELECT DISTINCT
        limits = ("0", "1", "3", "10", "1e3", "9223372036854775807")
        limit = draw(st.sampled_from(limits)) if draw(st.integers(0, 4)) == 0 else ""
        top = f"TOP {limit} " if limit and dialect == "tsql" else ""  # T-SQL's own row limit
        # the table, or the same rows through a subquery or a common table expression (issue 32: flattened)
        source = "visits" if join else draw(st.sampled_from(SOURCES))
        epsilon = draw(st.sampled_from(EPSILONS))
        head = "SELECT "
        if clause:  # epsilon in the clause alone, or given again as the keyword (equal, or not: refused)
            options = f"epsilon={epsilon}{draw(st.sampled_from(CLAUSE_OPTIONS))}"
            head += f"WITH DIFFERENTIAL_PRIVACY OPTIONS({options}) "
            epsilon = draw(st.sampled_from((None, None, epsilon, 3)))
        sql = f"{head}{'DISTINCT ' if distinct else ''}{top}{', '.join(select)} FROM {source}"
        if source.startswith("WITH"):
            sql = f"{source} {head}{'DISTINCT ' if distinct else ''}{top}{', '.join(select)} FROM visits"
        if join == "using":
            sql += " JOIN dim USING (category)"
        elif join == "on":
            sql += " JOIN dim ON visits.category = dim.category"
        # the analyst's bounds are about the target most often: rows of the base world alone fail alike
        where = draw(st.integers(0, 5)) if bounds is None else draw(st.sampled_from((1, 2, 3)))
        if where == 1:  # the target's rows alone: whatever fails for them fails in one world only
            sql += f" WHERE {prefix}user_id = {TARGET_ID}"
        elif where == 2:  # about the target alone: the membership oracles of issue 15
            sql += f" WHERE {prefix}user_id = {TARGET_ID} AND {draw(predicate(prefix))}"
        elif where > 2:
            sql += f" WHERE {draw(predicate(prefix))}"
        if (groups or keys) and not distinct:
            by = [("" if "." in g else prefix) + g for g in groups]
            by += [k if draw(st.booleans()) else f"k{i}" for i, k in enumerate(keys)]  # text or alias
            sql += " GROUP BY " + ", ".join(by)
        outputs = [g.split(".")[-1] for g in groups] + [f"k{i}" for i in range(len(keys))] + aliases
        having = draw(st.integers(0, 6))
        if having in (1, 2, 3):
            # an output column, or an aggregate named only here (noised and charged as if selected)
            column = draw(st.sampled_from(aliases)) if aliases and having == 1 else draw(aggregate)
            if having == 3 and outputs:  # an expression kakeibo computes from released values
                column = draw(st.sampled_from(HAVING_TERMS)).format(
                    c=column,
                    k=draw(st.sampled_from(outputs)),
                    l=draw(st.sampled_from(NUMERIC_LITERALS)),
                )
            op = draw(st.sampled_from(("=", "<", ">", ">=", "<>")))
            sql += f" HAVING {column} {op} {draw(st.sampled_from(NUMERIC_LITERALS))}"
        elif having == 4 and outputs:  # any output with numbers: a text key is compared as one (issue 32)
            numbers = draw(st.lists(st.sampled_from(NUMERIC_LITERALS), min_size=1, max_size=3))
            column, op = draw(st.sampled_from(outputs)), draw(st.sampled_from(("=", "<", ">=", "<>")))
            sql += f" HAVING {column} " + (
                f"IN ({', '.join(numbers)})" if len(numbers) > 1 else f"{op} {numbers[0]}"
            )
        if draw(st.integers(0, 3)) == 0:
            order = draw(st.lists(st.sampled_from(outputs), min_size=1, max_size=2, unique=True))
            order = [  # an output, or an expression kakeibo computes from it
                c if draw(st.booleans()) else draw(st.sampled_from(ORDER_TERMS)).format(o=c) for c in order
            ]
            sql += " ORDER BY " + ", ".join(f"{c} {draw(st.sampled_from(('ASC', 'DESC')))}" for c in order)
        if limit and not top:
            sql += f" LIMIT {limit}"
        return Drawn(sql, epsilon, dialect, draw(st.booleans()), bounds)

    return query()


#: the share of :func:`numeric_query` calls whose totals a ladder truncates (``bound_selection = "ladder"``)
LADDER_DRAWS = 1 / 4
#: their epsilons (at 1e-3 the histograms see no one, and no ladder runs)
LADDER_EPSILONS = (1, 2, 1000, 1000)
#: the aggregates of :func:`numeric_query`, ``{v}`` a column or an expression over columns; the first
#: three are the totals a ladder truncates, in the order of ``TOTAL_FUNCTIONS``
NUMERIC_AGGREGATES = (
    "SUM({v})",
    "AVG({v})",
    "COUNT({v})",
    "VARIANCE({v})",
    "STDDEV({v})",
    "MEDIAN({v})",
    "MIN({v})",
    "MAX({v})",
    "QUANTILE_CONT({v}, 0.9)",
)


def numeric_query(rng: random.Random) -> Drawn:
    """One call drawn from ``rng`` aimed at what the engine computes with numbers (issue 29): aggregates of
    the bounded columns and of expressions over them (``VALUE_TEMPLATES``), most often over the target's
    rows alone, with the analyst's ``bounds=`` (``BOUND_PAIRS``, pairs of ``BOUND_VALUES``, ``"auto"``, and
    limits) on the columns they read::

        SELECT [category,] <1-3 aggregates of columns or expressions> FROM visits
        [WHERE user_id = 999999 [AND <column> <op> <literal>]] [GROUP BY category]

    A quarter of the calls run under :data:`CORRELATED_CATALOG` (the target correlated with ten users).
    Another ``LADDER_DRAWS`` of them (drawn last, so the others are the calls they were before the ladder)
    aggregate totals only (SUM, AVG, COUNT) and choose their ``"auto"`` bounds by ``bound_selection =
    "ladder"`` (:func:`_ladder_bounds`): kakeibo then sends a third statement, each person's group totals
    truncated at 40-80 thresholds, over the target's 1e308, NaN and infinities clamped to ``[0, top]``.
    Where :func:`queries` covers the analyser's whole grammar through ``hypothesis`` (which explores by
    mutating what it drew before), these calls are independent draws, so a few hundred of them reach the
    statement's arithmetic (bucket widths, flushes, products, divisions, per-person sums) in many
    combinations."""

    def condition() -> str:
        column = rng.choice(BOUNDED_COLUMNS)
        return f"{column} {rng.choice(('=', '<', '<=', '>', '>=', '<>'))} {rng.choice(NUMERIC_LITERALS)}"

    def value(column: str) -> str:
        if rng.random() < 2 / 3:
            return column
        return rng.choice(VALUE_TEMPLATES).format(
            c=column,
            d=rng.choice(BOUNDED_COLUMNS),
            n=rng.choice(VALUE_LITERALS),
            w=condition(),
            q=rng.choice(QUOTIENT_CHAINS),
        )

    columns = [rng.choice(BOUNDED_COLUMNS) for _ in range(rng.randint(1, 3))]
    aggregates = [(rng.choice(NUMERIC_AGGREGATES), value(c)) for c in columns]
    grouped = rng.random() < 1 / 4
    where = rng.randrange(4)
    also = f" AND {condition()}" if where == 1 else ""
    bounds = _numeric_bounds(rng, columns) if rng.random() < 4 / 5 else None
    epsilon, nonnegative = rng.choice(EPSILONS), rng.random() < 1 / 2
    correlated = rng.random() < 1 / 4
    if rng.random() < LADDER_DRAWS:  # drawn last, so that the other calls are what they were before it
        # each aggregate becomes the total it maps to (SUM, AVG, COUNT come first in NUMERIC_AGGREGATES)
        # of the column itself most often (an expression of an "auto" column is refused), at an epsilon
        # whose histograms see the target
        totals = len(TOTAL_FUNCTIONS)
        aggregates = [
            (NUMERIC_AGGREGATES[NUMERIC_AGGREGATES.index(t) % totals], c if rng.random() < 3 / 4 else v)
            for (t, v), c in zip(aggregates, columns, strict=True)
        ]
        bounds, correlated = _ladder_bounds(rng, columns, bounds), False
        epsilon = rng.choice(LADDER_EPSILONS)
    select = (["category"] if grouped else []) + [
        f"{t.format(v=v)} AS a{i}" for i, (t, v) in enumerate(aggregates)
    ]
    sql = f"SELECT {', '.join(select)} FROM visits"
    if where in (0, 1):
        sql += f" WHERE user_id = {TARGET_ID}{also}"
    if grouped:
        sql += " GROUP BY category"
    return Drawn(sql, epsilon, "duckdb", nonnegative, bounds, correlated=correlated)


def _numeric_bounds(rng: random.Random, columns: list[str]) -> dict[str, object]:
    """The ``bounds=`` of a :func:`numeric_query` call: per column read, nothing, ``"auto"``, a pair of
    ``BOUND_VALUES`` or one of ``BOUND_PAIRS``; each limit sometimes."""
    bounds: dict[str, object] = {}
    for column in sorted(set(columns)):
        kind = rng.randrange(5)
        if kind == 1:
            bounds[column] = "auto"
        elif kind == 2:
            bounds[column] = tuple(sorted(rng.choice(BOUND_VALUES) for _ in range(2)))
        elif kind > 2:
            bounds[column] = rng.choice(BOUND_PAIRS)
    for limit in ("max_rows_per_partition", "max_partitions"):
        if rng.random() < 1 / 3:
            bounds[limit] = rng.choice((1, 2, 1000))
    return bounds


def _ladder_bounds(
    rng: random.Random, columns: list[str], drawn: dict[str, object] | None
) -> dict[str, object]:
    """The ``bounds=`` of a :func:`numeric_query` call whose totals a ladder truncates (issue 31): each
    column read ``"auto"`` three times in four, else as ``drawn`` (extreme pairs next to a ladder);
    ``max_rows_per_partition`` ``"auto"`` (the rows' ladder) half the time, ``max_partitions`` sometimes
    ``"auto"`` too (chosen by the histograms; a grouped call's ladders truncate at the L0 chosen)."""
    bounds: dict[str, object] = {"bound_selection": "ladder"}
    for column in sorted(set(columns)):
        if rng.random() < 3 / 4:
            bounds[column] = "auto"
        elif drawn is not None and column in drawn:
            bounds[column] = drawn[column]
    bounds["max_rows_per_partition"] = rng.choice(("auto", "auto", 1, 1000))
    if rng.random() < 1 / 2:
        bounds["max_partitions"] = rng.choice(LIMIT_VALUES)
    return bounds


#: the columns a synthesis takes (bounded or public-valued, the user-constant age among them), and those it
#: refuses (unbounded, decimal, date, the privacy unit itself)
SYNTHESIS_COLUMNS = ("category", "level", "amount", "age", "x")
REFUSED_SYNTHESIS_COLUMNS = ("name", "price", "day", "birth_year", "user_id")


def synthesis_call(
    rng: random.Random, methods: tuple[str, ...] = ("mst",)
) -> tuple[str, object, dict[str, object]]:
    """One ``Session.synthesize`` call: ``(query, epsilon, the other keyword arguments)``, its method drawn
    from ``methods`` (repeat one to draw it more often). Two in three are calls a session answers: 1-3
    columns of ``visits`` (whose target holds 1e308, -1e308, NaN, +-inf, 5e-324, -0.0, NULL and an age
    beyond its bound) at an ordinary epsilon, delta and person bound, a third of them followed by a charged
    fidelity report (``fidelity``: its epsilon, two of five refused); the rest draw a refused column, the
    row-level ``people``, another query shape, or epsilon, delta and the person bound at and past the edges
    the session refuses, and bins for any column."""
    columns = rng.sample(SYNTHESIS_COLUMNS, rng.choice([1, 2, 2, 3, 3]))
    options: dict[str, object] = {"delta": 1e-6, "rows_per_person": rng.choice([1, 2, 4, 9])}
    if len(methods) > 1:
        options["method"] = rng.choice(methods)
        if options["method"] == "privbayes" and rng.random() < 2 / 3:
            options["delta"] = 0  # pure epsilon-DP: any other delta is refused
    epsilon: object = rng.choice([0.5, 1, 8, 1000])
    if rng.random() < 2 / 3:
        if rng.random() < 1 / 3:  # then a fidelity report of the synthesis, charged (some refused)
            options["fidelity"] = rng.choice([0.5, 1, 8, 0, 2**41])
        return f"SELECT {', '.join(columns)} FROM visits", epsilon, options
    table = "visits"
    hostile = rng.choice(["column", "people", "shape", "numbers", "bins"])
    if hostile == "column":
        columns[-1] = rng.choice(REFUSED_SYNTHESIS_COLUMNS)
    elif hostile == "people":
        table, columns = "people", rng.sample(["age", "city", "category", "income"], rng.randint(1, 2))
    elif hostile == "numbers":
        options["delta"] = rng.choice([1e-9, "1e-6", 0.5, 0, 5e-324, 1])
        options["rows_per_person"] = rng.choice([1, 4, 1_000, 0, True, "auto"])
        epsilon = rng.choice([1e-3, 2**-41, 2**41, 1e308, 5e-324, 0])
    elif hostile == "bins":
        options["bins"] = {rng.choice(columns): rng.choice([1, 3, 1_000, 2**21])}
    query = f"SELECT {', '.join(columns)} FROM {table}"
    if hostile == "shape":
        query = rng.choice([f"{query} WHERE amount > 1e308", f"SELECT COUNT(*) FROM {table}", "SELECT 1"])
    return query, epsilon, options
