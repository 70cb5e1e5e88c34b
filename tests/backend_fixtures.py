"""Session fixtures for the SQL-engine tests: a throwaway PostgreSQL server and a local Spark session.

Loaded as a pytest plugin by ``tests/conftest.py`` (``pytest_plugins = ["backend_fixtures"]``).

``postgres_server`` runs ``initdb`` and ``pg_ctl`` from the machine's PostgreSQL into a fresh directory
under the system temp dir, serving on a free loopback port (and a Unix socket in that directory only),
with durability switched off (``fsync``, WAL) because the data is thrown away. PostgreSQL refuses to run
as root, so as root the server runs as the ``postgres`` system user when there is one, else as a
``kakeibo-pg`` system user created for it. The tests fail, never skip, when PostgreSQL is missing.

With ``pytest -n N`` each worker that needs them starts its own server and Spark session.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PG_INSTALL_HINT = (
    "PostgreSQL server programs (initdb, pg_ctl) were not found on PATH, in /usr/lib/postgresql/*/bin, "
    "/usr/pgsql-*/bin or /usr/local/pgsql/bin. Install PostgreSQL: Debian/Ubuntu `apt-get install "
    "postgresql`, Fedora/RHEL `dnf install postgresql-server`, macOS `brew install postgresql`; or point "
    "KAKEIBO_PG_BIN at the directory holding initdb and pg_ctl. (`make test` installs it on Debian.)"
)
JAVA_INSTALL_HINT = (
    "Spark needs a Java runtime (17 or 21) on PATH or in JAVA_HOME: Debian/Ubuntu `apt-get install "
    "default-jre-headless`, macOS `brew install openjdk@17`. (`make test` installs it on Debian.)"
)
PG_SYSTEM_USER = "kakeibo-pg"
PG_SUPERUSER = "kakeibo"
PG_DATABASE = "kakeibo_test"

# Settings for a disposable test server: nothing needs to survive a crash.
_PG_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "wal_level": "minimal",
    "max_wal_senders": "0",
    "max_connections": "60",
    "shared_buffers": "128MB",
    "logging_collector": "off",
    "log_min_messages": "warning",
    "timezone": "'UTC'",
}


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path))


def find_postgres_bin() -> Path:
    """Directory holding ``initdb`` and ``pg_ctl``; fails the test with install instructions if none."""
    candidates: list[Path] = []
    override = os.environ.get("KAKEIBO_PG_BIN")
    if override:
        candidates.append(Path(override))
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(os.path.realpath(on_path)).parent)
    for pattern in ("/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/opt/homebrew/opt/postgresql*/bin"):
        candidates.extend(Path(p) for p in sorted(glob.glob(pattern), key=_version_key, reverse=True))
    candidates.append(Path("/usr/local/pgsql/bin"))
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    if override:
        pytest.fail(f"KAKEIBO_PG_BIN={override} holds no initdb and pg_ctl. {PG_INSTALL_HINT}", pytrace=False)
    pytest.fail(PG_INSTALL_HINT, pytrace=False)


@dataclass(frozen=True)
class _RunAs:
    """Who the server processes run as (``uid is None``: the current user)."""

    uid: int | None = None
    gid: int | None = None

    def run(self, args: list[str], *, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LC_ALL": "C",
            "LANG": "C",
            "HOME": str(cwd),
            "TZ": "UTC",
        }
        kwargs: dict[str, Any] = {}
        if self.uid is not None:
            kwargs = {"user": self.uid, "group": self.gid, "extra_groups": []}
        return subprocess.run(
            args,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **kwargs,
        )


def _server_account() -> _RunAs:
    """As root: a non-root account for the server (``postgres``, else ``kakeibo-pg``, created if needed)."""
    if os.geteuid() != 0:
        return _RunAs()
    for name in ("postgres", PG_SYSTEM_USER):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return _RunAs(entry.pw_uid, entry.pw_gid)
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    result = subprocess.run(
        [
            useradd,
            "--system",
            "--user-group",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            PG_SYSTEM_USER,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    try:  # another pytest worker may have created it at the same time
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        pytest.fail(
            f"running as root, PostgreSQL needs a non-root account and `useradd {PG_SYSTEM_USER}` failed: "
            f"{result.stderr.strip()}. Create a system user named postgres or {PG_SYSTEM_USER}.",
            pytrace=False,
        )
    return _RunAs(entry.pw_uid, entry.pw_gid)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _fail_with_output(what: str, result: subprocess.CompletedProcess[str], log: Path | None = None) -> None:
    details = (result.stdout + result.stderr).strip()
    if log is not None and log.exists():
        details += "\n--- server log ---\n" + log.read_text(errors="replace")[-4000:]
    pytest.fail(f"{what} failed (exit {result.returncode}):\n{details}", pytrace=False)


def _create_database(conninfo: str) -> None:
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(conninfo, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {PG_DATABASE}")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """Conninfo of a PostgreSQL server started for this test session (superuser, trust auth)."""
    bindir = find_postgres_bin()
    account = _server_account()
    root = Path(tempfile.mkdtemp(prefix="kakeibo-pg-"))
    data, log = root / "data", root / "server.log"
    if account.uid is not None:
        os.chown(root, account.uid, account.gid if account.gid is not None else -1)
    started = False
    try:
        result = account.run(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                PG_SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            cwd=root,
        )
        if result.returncode != 0:
            _fail_with_output(f"initdb ({bindir / 'initdb'})", result)
        with open(data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# kakeibo test server\n")
            conf.writelines(f"{key} = {value}\n" for key, value in _PG_SETTINGS.items())
            conf.write(f"unix_socket_directories = '{root}'\n")
        port = 0
        for _attempt in range(3):  # the free port may be taken between choosing it and binding it
            port = _free_port()
            pg_ctl_start = [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", f"-p {port}"]
            result = account.run([*pg_ctl_start, "-w", "-t", "60", "start"], cwd=root)
            if result.returncode == 0:
                started = True
                break
        if not started:
            _fail_with_output(f"pg_ctl start ({bindir / 'pg_ctl'})", result, log)
        conninfo = f"host=127.0.0.1 port={port} user={PG_SUPERUSER}"
        _create_database(f"{conninfo} dbname=postgres")
        yield f"{conninfo} dbname={PG_DATABASE}"
    finally:
        if (data / "postmaster.pid").exists():  # also after a start that timed out but did start
            stop = [str(bindir / "pg_ctl"), "-D", str(data), "-w", "-t", "30", "stop"]
            if account.run([*stop, "-m", "fast"], cwd=root).returncode != 0:
                account.run([*stop, "-m", "immediate"], cwd=root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_backend(postgres_server: str) -> Iterator[Any]:
    """A :class:`~kakeibo.backends.postgres.PostgresBackend` on the session's server, closed afterwards."""
    from kakeibo.backends.postgres import PostgresBackend

    backend = PostgresBackend(postgres_server)
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture
def postgres_database(postgres_server: str) -> str:
    """URL of a new, empty database on the session's server (for ledgers and registries)."""
    import psycopg

    name = f"kakeibo_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    params = dict(part.split("=", 1) for part in postgres_server.split())
    return f"postgresql://{params['user']}@{params['host']}:{params['port']}/{name}"


def _check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").is_file():
        return
    if shutil.which("java") is None:
        pytest.fail(JAVA_INSTALL_HINT, pytrace=False)


@pytest.fixture(scope="session")
def spark_backend() -> Iterator[Any]:
    """A :class:`~kakeibo.backends.spark.SparkBackend` in local mode (2 threads), stopped at the end."""
    _check_java()
    try:
        import pyspark  # noqa: F401
    except ImportError:
        pytest.fail(
            "PySpark is not installed: pip install -e '.[dev]' (or pip install pyspark)", pytrace=False
        )
    from kakeibo.backends.spark import SparkBackend

    backend = SparkBackend("local[2]")
    try:
        yield backend
    finally:
        backend.close()


# --- Shared sample data and statements for the engine tests --------------------------------------------
#
# Statements are written once in DuckDB's dialect (kakeibo's reference dialect) and translated with
# ``to_dialect``, so the tests also check sqlglot's translation of each construct for each engine.

SAMPLE_TABLE = "events"

# Per-user attributes (constant over a user's rows): region, weight (int), score (float).
_USERS = {
    1: ("north", 5, 1.25),
    2: ("north", 2, -0.5),
    3: ("south", None, 0.75),
    4: (None, 1, 2.75),
    5: ("south", 3, 0.5),
}
# Rows: row_id, user_id, amount (float), qty (int32), label (string). Amounts are multiples of 1/4 so
# float sums are exact in any order.
_ROWS = [
    (1, 1, 12.5, 3, "a"),
    (2, 1, -1.0, None, "b"),
    (3, 1, None, 7, ""),
    (4, 1, 4.25, 2, "a"),
    (5, 1, 0.5, 1, None),
    (6, 2, 3.0, 4, "c"),
    (7, 2, 10.0, 5, "it's"),
    (8, 3, -7.75, 0, "d"),
    (9, 3, 2.0, None, "b"),
    (10, 3, None, 6, 'comma, "quoted"\nnewline'),
    (11, 3, 9.5, 2, "e"),
    (12, 4, 1.5, 8, None),
    (13, 4, 100.0, -3, "f"),
    (14, 4, 0.0, 1, "a"),
    (15, 5, None, None, None),
]


def sample_events() -> Any:
    """15 rows of 5 users: ints, floats, strings and NULLs in every kind of column."""
    import pyarrow as pa

    return pa.table(
        {
            "row_id": pa.array([r[0] for r in _ROWS], pa.int64()),
            "user_id": pa.array([r[1] for r in _ROWS], pa.int64()),
            "region": pa.array([_USERS[r[1]][0] for r in _ROWS], pa.string()),
            "weight": pa.array([_USERS[r[1]][1] for r in _ROWS], pa.int64()),
            "score": pa.array([_USERS[r[1]][2] for r in _ROWS], pa.float64()),
            "amount": pa.array([r[2] for r in _ROWS], pa.float64()),
            "qty": pa.array([r[3] for r in _ROWS], pa.int32()),
            "label": pa.array([r[4] for r in _ROWS], pa.string()),
        }
    )


def user_row_counts() -> dict[int, int]:
    counts: dict[int, int] = {}
    for row in _ROWS:
        counts[row[1]] = counts.get(row[1], 0) + 1
    return counts


def user_rows() -> dict[int, set[int]]:
    rows: dict[int, set[int]] = {}
    for row in _ROWS:
        rows.setdefault(row[1], set()).add(row[0])
    return rows


GROUP_BY_SQL = """
SELECT region, COUNT(*) AS n_rows, COUNT(amount) AS n_amount, SUM(qty) AS total_qty,
       SUM(amount) AS total_amount, MAX(label) AS max_label
FROM events
GROUP BY region
ORDER BY region NULLS LAST
"""
GROUP_BY_EXPECTED = [
    {
        "region": "north",
        "n_rows": 7,
        "n_amount": 6,
        "total_qty": 22,
        "total_amount": 29.25,
        "max_label": "it's",
    },
    {"region": "south", "n_rows": 5, "n_amount": 3, "total_qty": 8, "total_amount": 3.75, "max_label": "e"},
    {"region": None, "n_rows": 3, "n_amount": 3, "total_qty": 6, "total_amount": 101.5, "max_label": "f"},
]

# Clamping as kakeibo writes it. NULL inputs: LEAST/GREATEST skip NULLs in DuckDB, PostgreSQL and Spark,
# so GREATEST(NULL, lo) is lo and a NULL comes out as the lower bound.
CLAMP_SQL = """
SELECT row_id, LEAST(GREATEST(amount, 0.0), 10.0) AS amount_c, LEAST(GREATEST(qty, 0), 5) AS qty_c
FROM events
ORDER BY row_id
"""
CLAMP_EXPECTED = [
    {"row_id": i, "amount_c": a, "qty_c": q}
    for i, a, q in [
        (1, 10.0, 3),
        (2, 0.0, 0),
        (3, 0.0, 5),
        (4, 4.25, 2),
        (5, 0.5, 1),
        (6, 3.0, 4),
        (7, 10.0, 5),
        (8, 0.0, 0),
        (9, 2.0, 0),
        (10, 0.0, 5),
        (11, 9.5, 2),
        (12, 1.5, 5),
        (13, 10.0, 0),
        (14, 0.0, 1),
        (15, 0.0, 0),
    ]
]

# Contribution bounding: keep at most K random rows per user, ranked by random() in the window itself.
# PostgreSQL and Spark take this; DuckDB (2.0) rejects it: "ORDER BY window expressions cannot be volatile".
BOUND_K = 2
BOUNDED_ROWS_SQL = f"""
WITH ranked AS (
    SELECT user_id, row_id, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY random()) AS rn
    FROM events
)
SELECT user_id, row_id FROM ranked WHERE rn <= {BOUND_K} ORDER BY user_id, row_id
"""
BOUNDED_COUNTS_SQL = f"""
WITH ranked AS (
    SELECT user_id, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY random()) AS rn
    FROM events
)
SELECT user_id, COUNT(*) AS n FROM ranked WHERE rn <= {BOUND_K} GROUP BY user_id ORDER BY user_id
"""
# The portable form, which every engine takes: the random key drawn as a column in a CTE, the window
# ordered by that column.
PORTABLE_BOUNDED_ROWS_SQL = f"""
WITH keyed AS (
    SELECT user_id, row_id, random() AS sample_key FROM events
), ranked AS (
    SELECT user_id, row_id, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY sample_key) AS rn
    FROM keyed
)
SELECT user_id, row_id FROM ranked WHERE rn <= {BOUND_K} ORDER BY user_id, row_id
"""

# The whole pipeline (random per-user bounding, clamping, grouping) on per-user attributes: which rows
# are kept is random, but every aggregate is not, so all engines must agree exactly.
PIPELINE_SQL = f"""
WITH keyed AS (
    SELECT *, random() AS sample_key FROM events
), ranked AS (
    SELECT user_id, region,
           LEAST(GREATEST(weight, 0), 3) AS w,
           LEAST(GREATEST(score, 0.0), 2.0) AS s,
           ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY sample_key) AS rn
    FROM keyed
), bounded AS (
    SELECT * FROM ranked WHERE rn <= {BOUND_K}
)
SELECT region, COUNT(*) AS n, COUNT(DISTINCT user_id) AS users, SUM(w) AS sum_w,
       CAST(SUM(w) AS BIGINT) AS sum_w_int, SUM(s) AS sum_s
FROM bounded
GROUP BY region
ORDER BY region NULLS FIRST
"""
PIPELINE_EXPECTED = [
    {"region": None, "n": 2, "users": 1, "sum_w": 2, "sum_w_int": 2, "sum_s": 4.0},
    {"region": "north", "n": 4, "users": 2, "sum_w": 10, "sum_w_int": 10, "sum_s": 2.5},
    {"region": "south", "n": 3, "users": 2, "sum_w": 3, "sum_w_int": 3, "sum_s": 2.0},
]


def check_bounded_rows(rows: list[dict[str, Any]]) -> frozenset[int]:
    """Assert each user kept min(rows, K) of its own rows; return the row ids kept for user 1."""
    rows_of = user_rows()
    kept: dict[int, set[int]] = {}
    for row in rows:
        kept.setdefault(row["user_id"], set()).add(row["row_id"])
    assert sorted(kept) == sorted(rows_of)
    for user, ids in kept.items():
        assert len(ids) == min(len(rows_of[user]), BOUND_K), user
        assert ids <= rows_of[user], user
    return frozenset(kept[1])


def to_dialect(sql: str, dialect: str) -> str:
    """Translate a DuckDB-dialect statement the way kakeibo does (:func:`kakeibo.sql.rewrite.engine_sql`)."""
    from kakeibo.sql.rewrite import engine_sql

    return engine_sql(sql, dialect)


def run(backend: Any, duckdb_sql: str) -> Any:
    """Run a DuckDB-dialect statement on ``backend`` after sqlglot's translation."""
    return backend.execute(to_dialect(duckdb_sql, backend.dialect))
