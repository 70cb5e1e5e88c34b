"""Security corpus of the query service (issue 7 acceptance): every attack a stranger or an analyst can send,
table-driven. Each attack must get its expected status, cost nothing (ledger entries, spent per scope,
budgets and grants unchanged; the ledger still verifies) and leak nothing (no data value of any table of
the DuckDB files -- the catalog's and the hidden ``secrets`` -- no name the catalog does not declare, no
engine message, stack trace or server path). Multi-step attacks (revocation, request ids, rate limits,
chunked bodies) follow the table as scenarios with the same checks. Last, every status the corpus saw on
an operation must be one the service's OpenAPI document lists for it, and a 405 must allow what is served.

The service runs in-process (FastAPI's TestClient) on a two-dataset configuration: alice and carol may
query ``shop``, bob ``clinic``; the chunked-body cases use one real server (uvicorn), since the test
client cannot send a body without a Content-Length."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import duckdb
import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.types import Message, Scope

from kakeibo.accounting import Ledger
from kakeibo.service import AnalystRegistry, ServiceConfig, create_app, new_key
from kakeibo.service import registry as registry_module
from kakeibo.service.process import free_port, start_server
from kakeibo.sql import Catalog
from test_service import bearer, make_analyst, spent, write_service

pytestmark = pytest.mark.xdist_group("service-security")  # one shared world and one server per run

DATASETS = ("shop", "clinic")
COUNT = "SELECT COUNT(*) AS n FROM visits"
# the second dataset: its own DuckDB file and catalog, made by write_service in a sub-folder
CLINIC = """
[datasets.clinic]
database = "clinic/visits.duckdb"
catalog = "clinic/catalog.toml"
budget = 5
"""
# who may query what (and with which per-analyst budget) in every world
GRANTS = {"alice": ("shop", 1.0), "bob": ("clinic", 1.0), "carol": ("shop", 1.0), "oscar": ("shop", 1.0)}
# what betrays an engine message, a stack trace or a server file (the data values are checked separately)
MARKS = (
    r"Traceback \(most recent call last\)",
    r'File "[^"]*", line \d+',
    r"\w\.py\b",
    r"site-packages",
    r"\b[A-Z][a-z]+ Error: ",  # DuckDB: "Conversion Error: ...", "Binder Error: ..."
    r"\bLINE \d+:",  # DuckDB's caret context around the failing part of a statement
    r"__unit|__qi|__bucket",  # names of the bounded statement the engine runs
    re.escape(str(Path(__file__).resolve().parents[1])),  # the source tree
)


# ---------------------------------------------------------------------------------------------- the world


@dataclass(frozen=True)
class Vocabulary:
    """What no refusal may contain: the data values and the names the catalog does not declare (``hidden``).

    Strings of 4+ characters are matched as whole tokens. A number in a text is a leak when it has 5+
    significant digits and some data value rounds (or truncates) to it at the precision it is printed with,
    whatever the format: DuckDB writes ``117.27372794628752`` in one message and ``117.273728`` in another.
    Shorter numbers, like the user ids 0-299, cannot be told from line numbers, counts or budgets; the
    hidden table's 9-digit ids and its social security numbers are covered."""

    strings: frozenset[str]
    numbers: tuple[float, ...]  # sorted
    hidden: frozenset[str]

    def leaks(self, text: str) -> set[str]:
        """The data values and hidden names that occur in ``text``."""
        found = {
            w for w in self.strings | self.hidden if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text)
        }
        values = np.asarray(self.numbers)
        for token in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?!\w|\.\d)", text):  # "... 117.27." ends at 7
            if len(token.replace(".", "").lstrip("0")) < 5:
                continue
            unit = 10.0 ** -len(token.partition(".")[2])  # one unit in the last printed place
            low, high = np.searchsorted(values, [float(token) - unit, float(token) + unit])
            if high > low:
                found.add(token)
        return found


def plant_secrets(database: Path, seed: int) -> None:
    """Fill the ``secrets`` table (in the DuckDB file, not in the catalog) with 9-digit user ids and social
    security numbers, so that any answer read from it would show."""
    rng = np.random.default_rng(seed)
    users, ssns = rng.integers(10**8, 10**9, 20), rng.integers(10**8, 10**9, 20)
    rows = [
        (int(u), f"{s // 10**6:03d}-{s // 10**4 % 100:02d}-{s % 10**4:04d}")
        for u, s in zip(users, ssns, strict=True)
    ]
    with duckdb.connect(str(database)) as con:
        con.executemany("INSERT INTO secrets VALUES (?, ?)", rows)


def read_vocabulary(databases: list[Path], catalogs: list[Path]) -> Vocabulary:
    """Every distinct value of every column of every table in ``databases``."""
    declared: set[str] = set()
    for path in catalogs:
        for table in Catalog.from_toml(path).tables.values():
            declared |= {table.name, *table.columns}
    strings: set[str] = set()
    numbers: set[float] = set()
    names: set[str] = set()
    for database in databases:
        with duckdb.connect(str(database), read_only=True) as con:
            columns = con.execute(
                "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE NOT internal"
            ).fetchall()
            for table, column, kind in columns:
                names |= {table, column}
                values = [v for (v,) in con.execute(f'SELECT DISTINCT "{column}" FROM "{table}"').fetchall()]
                if kind == "VARCHAR":
                    strings |= {v for v in values if len(v) >= 4}
                else:
                    numbers |= {float(v) for v in values}
    return Vocabulary(frozenset(strings), tuple(sorted(numbers)), frozenset(names - declared))


@dataclass
class World:
    """A running service with its analysts' keys, its files and what must never leak from it."""

    root: Path
    config: ServiceConfig
    client: TestClient
    admin: str
    keys: dict[str, str]
    vocabulary: Vocabulary
    users: tuple[int, int]  # a user id that occurs in shop's visits, and one that does not
    credentials: dict[str, str] = field(init=False)  # Authorization headers by name: good, bad and odd

    def __post_init__(self) -> None:
        alice, bob = self.keys["alice"], self.keys["bob"]
        alice_id, bob_secret = alice.split("_")[1], bob.split("_", 2)[2]
        self.credentials = {
            **{name: f"Bearer {key}" for name, key in self.keys.items()},
            "admin": f"Bearer {self.admin}",
            "basic": "Basic " + base64.b64encode(f"alice:{alice}".encode()).decode(),
            "empty-bearer": "Bearer ",
            "not-a-key": "Bearer not-a-key",
            "truncated": f"Bearer {alice[:-1]}",
            "trailing-garbage": f"Bearer {alice} x",
            "wrong-secret": f"Bearer kak_{alice_id}_{new_key()[2]}",
            "swapped-halves": f"Bearer kak_{alice_id}_{bob_secret}",
            "unknown-id": f"Bearer {new_key()[0]}",
            "sql-in-key": "Bearer kak_' OR '1'='1",
        }

    def send(self, attack: Attack) -> httpx.Response:
        """Send ``attack`` as it is written (its JSON encoded here, so NaN and lone surrogates go out)."""
        headers = {"content-type": "application/json"}
        if attack.auth is not None:
            headers["Authorization"] = self.credentials[attack.auth]
        response: httpx.Response = self.client.request(
            attack.method, attack.path, content=attack.content(), headers=headers
        )
        return response

    def state(self) -> dict[str, object]:
        """Everything an attack must leave as it was: ledger entries, spent per (analyst, dataset) scope,
        budgets, analysts and grants -- and whether the ledger verifies. Read from the files, not through
        the service (whose answers are under test)."""
        registry = AnalystRegistry(self.config.registry)
        try:
            analysts = [{**a, "datasets": registry.datasets(str(a["name"]))} for a in registry.analysts()]
        finally:
            registry.close()
        scopes = [(str(a["name"]), d) for a in analysts for d in (*DATASETS, None)] + [(None, "shop")]
        with Ledger(self.config.ledger) as ledger:
            return {
                "entries": [e.seq for e in ledger.entries()],
                "spent": {(a, d): ledger.spent(analyst=a, dataset=d) for a, d in scopes},
                "budgets": ledger.budgets(),
                "analysts": analysts,
                "verified": ledger.verify().ok,
            }

    def assert_silent(self, response: httpx.Response, sent: str) -> None:
        """See :func:`assert_silent`; every key of this world counts as a secret."""
        assert_silent(response, sent, self.vocabulary, self.root, [*self.keys.values(), self.admin])


def assert_silent(
    response: httpx.Response, sent: str, vocabulary: Vocabulary, root: Path, credentials: list[str]
) -> None:
    """``response`` holds no data value, hidden name, engine message, trace, path or credential. What
    ``sent`` (the request's path and body) itself contains is an echo, not a leak, except data values: no
    attack sends one, so that finding one in an answer always means it came from the data."""
    text = response.text + "".join(f"\n{k}: {v}" for k, v in response.headers.items())
    assert not vocabulary.leaks(sent) - vocabulary.hidden, "an attack must not carry data values"
    assert not vocabulary.leaks(text) - vocabulary.leaks(sent), text
    for mark in (*MARKS, re.escape(str(root))):
        assert not re.search(mark, text) or re.search(mark, sent), (mark, text)
    for credential in credentials:  # kak_<id>_<secret>: the secret (43 characters) may itself hold "_"
        assert credential not in text and credential.split("_", 2)[2] not in text


#: (method, path, status) of every answer any world of this corpus gave (for the OpenAPI check at the end)
OBSERVED: set[tuple[str, str, int]] = set()


def observe(client: httpx.Client) -> None:
    """Record every answer ``client`` receives in :data:`OBSERVED`."""

    def record(response: httpx.Response) -> None:
        OBSERVED.add((response.request.method, response.request.url.path, response.status_code))

    client.event_hooks = {**client.event_hooks, "response": [*client.event_hooks["response"], record]}


@contextmanager
def open_world(root: Path, *, per_minute: int) -> Iterator[World]:
    """Two datasets (``shop`` and ``clinic``, each with a hidden ``secrets`` table) served in-process, with
    the analysts of :data:`GRANTS`."""
    config, admin = write_service(root, per_minute=per_minute, dataset_budget=5)
    (root / "clinic").mkdir()
    write_service(root / "clinic")
    for seed, database in enumerate([root / "visits.duckdb", root / "clinic" / "visits.duckdb"]):
        plant_secrets(database, seed)
    two = root / "two-datasets.toml"
    two.write_text(config.read_text() + CLINIC)
    vocabulary = read_vocabulary(
        [root / "visits.duckdb", root / "clinic" / "visits.duckdb"],
        [root / "catalog.toml", root / "clinic" / "catalog.toml"],
    )
    with duckdb.connect(str(root / "visits.duckdb"), read_only=True) as con:
        [(present, absent)] = con.execute("SELECT MIN(user_id), MAX(user_id) + 1 FROM visits").fetchall()
    service = ServiceConfig.from_toml(two)
    with TestClient(create_app(service)) as client:
        observe(client)
        keys: dict[str, str] = {}
        for name, (dataset, budget) in GRANTS.items():
            keys[name] = make_analyst(client, admin, name, budget=None)
            grant(client, admin, name, dataset, budget)
        yield World(root, service, client, admin, keys, vocabulary, (int(present), int(absent)))


def grant(client: TestClient, admin: str, analyst: str, dataset: str, budget: float) -> None:
    """Let ``analyst`` query ``dataset`` up to ``budget`` (make_analyst grants shop only)."""
    answer = client.post(
        "/v1/admin/grants",
        json={"analyst": analyst, "dataset": dataset, "budget": budget},
        headers=bearer(admin),
    )
    assert answer.status_code == 200, answer.text


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One world for the whole corpus (each attack checks its own before and after); its ledger must still
    verify once every attack and scenario has run."""
    with open_world(tmp_path_factory.mktemp("security"), per_minute=10**6) as opened:
        yield opened
        with Ledger(opened.config.ledger) as ledger:  # after the whole corpus, the chains still verify
            verification = ledger.verify()
        assert verification.ok, verification.problems


# ---------------------------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Attack:
    """One named attack: who sends (a credential of :attr:`World.credentials`, ``None`` for no
    Authorization header) what, the status it must get, a part of the reason its answer must give, and the
    attack whose answer it must be byte-identical to, so that the two cannot be told apart."""

    name: str
    status: int
    body: object = None  # a JSON value, or raw bytes
    auth: str | None = "alice"
    path: str = "/v1/query"
    method: str = "POST"
    reason: str = ""
    same_as: str | None = None

    def content(self) -> bytes | None:
        """The body as sent: JSON as Python writes it (NaN and Infinity included), or raw bytes."""
        if self.body is None or isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body).encode()


def ask(sql: object, **fields: Any) -> dict[str, Any]:
    """A query body on shop at epsilon 0.1, with ``fields`` changed."""
    return {"dataset": "shop", "sql": sql, "epsilon": 0.1, **fields}


def refused(name: str, sql: str, reason: str, path: str = "/v1/query") -> Attack:
    """alice's query on her own dataset, refused (400) for ``reason``."""
    return Attack(name, 400, ask(sql), path=path, reason=reason)


def anonymous(name: str, auth: str, path: str = "/v1/query") -> Attack:
    """A bad credential on an analyst endpoint: the very 401 of a request without any."""
    body, method = (ask(COUNT), "POST") if path in ("/v1/query", "/v1/explain") else (None, "GET")
    return Attack(name, 401, body, auth=auth, path=path, method=method, same_as="no-authorization")


def not_admin(name: str, path: str, body: object = None, method: str = "POST") -> Attack:
    """alice's valid analyst key on an admin endpoint: the very 401 of no key at all."""
    return Attack(name, 401, body, path=path, method=method, same_as="admin-without-key")


def hidden_dataset(name: str, dataset: str, auth: str = "alice", path: str = "/v1/query") -> Attack:
    """A dataset the sender may not query: the very 403 of one that does not exist."""
    twin = "nonexistent-dataset" if path == "/v1/query" else "explain-nonexistent-dataset"
    return Attack(name, 403, ask(COUNT, dataset=dataset), auth=auth, path=path, same_as=twin)


def accuracy(alpha: object, *beta: object) -> dict[str, Any]:
    """A query body asking for an accuracy instead of an epsilon."""
    return {"dataset": "shop", "sql": COUNT, "accuracy": [alpha, *beta]}


def grant_body(**fields: Any) -> dict[str, Any]:
    """A grant of shop to bob (who may query clinic only), with ``fields`` changed."""
    return {"analyst": "bob", "dataset": "shop", "budget": 1.0, **fields}


def admin_write(name: str, endpoint: str, body: object, reason: str = "") -> Attack:
    """An admin request the schema refuses (422): nothing may be written."""
    return Attack(name, 422, body, auth="admin", path=f"/v1/admin/{endpoint}", reason=reason or FINITE)


ROWS = "individual rows"
UNIT = "privacy unit"
SUBQUERY = "subqueries are not supported"
UNKNOWN = "unknown table"
FILES = "is not allowed; query a catalog table by name"
ONLY_SELECT = "only SELECT queries are answered"
AGGREGATE = "is not supported; use one of COUNT"
PARTIAL = "is not allowed ("  # a filter the engine could fail on for some rows (analyze._total)
NESTED = "nested too deeply"
UNPARSED = "could not be parsed"
NOT_GRANTED = "no access to that dataset"
BAD_KEY = "missing, invalid or revoked API key"
TOO_LARGE = "request body too large"
FINITE = "finite number"
BUDGET = "budget exhausted"
DEEP = "SELECT COUNT(*) FROM visits WHERE "

ATTACKS = [
    # -- who is asking: every bad credential gets the same 401, with no hint of which part was wrong
    Attack("no-authorization", 401, ask(COUNT), auth=None, reason=BAD_KEY),  # anonymous spending
    anonymous("basic-scheme", "basic"),  # another scheme carrying a real key must not be read as Bearer
    anonymous("empty-bearer", "empty-bearer"),  # an empty token must not match an empty digest
    anonymous("malformed-key", "not-a-key"),  # garbage must fail before any lookup
    anonymous("truncated-key", "truncated"),  # a prefix match would shrink the key space
    anonymous("key-with-garbage", "trailing-garbage"),  # a loose parse would accept a key plus injected text
    anonymous("wrong-secret", "wrong-secret"),  # a real key id alone must neither pass nor show it exists
    anonymous("unknown-key-id", "unknown-id"),  # a well-formed unknown key: same answer as a wrong secret
    anonymous("swapped-key-halves", "swapped-halves"),  # alice's id with bob's secret must not combine
    anonymous("sql-injection-in-key", "sql-in-key"),  # the key id goes into a registry lookup
    anonymous("no-key-budget", "empty-bearer", path="/v1/budget"),  # budgets tell what others asked for
    anonymous("no-key-history", "not-a-key", path="/v1/history"),  # history holds SQL text
    anonymous("no-key-dashboard", "basic", path="/v1/dashboard"),  # the dashboard shows analysts' SQL
    # -- the administrator is not an analyst: its key neither spends a budget nor reads data, so every
    # answer in the ledger is an analyst's (an administrator who wants answers makes an analyst)
    anonymous("admin-queries", "admin"),  # an answer charged to no analyst's budget
    anonymous("admin-explains", "admin", path="/v1/explain"),  # plans name the catalog's bounds
    anonymous("admin-reads-budget", "admin", path="/v1/budget"),  # no analyst's view without their key
    anonymous("admin-reads-history", "admin", path="/v1/history"),
    # -- an analyst's valid key on admin endpoints: the 401 of no key (a valid analyst key is not revealed)
    Attack("admin-without-key", 401, {"name": "eve"}, auth=None, path="/v1/admin/analysts", reason=BAD_KEY),
    not_admin("analyst-creates-analyst", "/v1/admin/analysts", {"name": "eve"}),  # sock puppets: more budget
    not_admin("analyst-lists-analysts", "/v1/admin/analysts", method="GET"),  # who else queries what
    # granting itself another analyst's dataset, or more budget, would defeat every other check
    not_admin(
        "analyst-grants-itself", "/v1/admin/grants", {"analyst": "alice", "dataset": "clinic", "budget": 9}
    ),
    not_admin(
        "analyst-raises-own-budget", "/v1/admin/budgets", {"dataset": "shop", "analyst": "alice", "budget": 9}
    ),
    not_admin("analyst-raises-dataset-budget", "/v1/admin/budgets", {"dataset": "shop", "budget": 9}),
    not_admin("analyst-revokes-rival", "/v1/admin/analysts/bob/revoke"),  # locking a rival out
    not_admin("analyst-deletes-grant", "/v1/admin/grants/bob/clinic", method="DELETE"),  # taking a grant away
    # -- datasets: one 403 for "not yours" and "does not exist", so that the names of datasets stay secret
    Attack("nonexistent-dataset", 403, ask(COUNT, dataset="no-such-dataset"), reason=NOT_GRANTED),
    hidden_dataset("other-analysts-dataset", "clinic"),  # bob's data, and the name must not be confirmed
    hidden_dataset("other-analysts-dataset-by-bob", "shop", auth="bob"),
    hidden_dataset("dataset-name-case", "CLINIC"),  # a case-insensitive lookup would bypass the grant
    hidden_dataset("dataset-path-traversal", "../clinic"),  # dataset names must never become paths
    hidden_dataset("dataset-with-nul", "clinic\x00"),  # C strings end at NUL: "clinic" after truncation
    hidden_dataset("dataset-homoglyph", "сlinic"),  # Cyrillic с: a normalising lookup would find clinic
    Attack(
        "explain-nonexistent-dataset", 403, ask(COUNT, dataset="nope"), path="/v1/explain", reason=NOT_GRANTED
    ),
    hidden_dataset("explain-other-analysts-dataset", "clinic", path="/v1/explain"),  # plans show bounds
    # -- SQL that would read raw rows, or per-person values: each would publish records without noise
    refused("select-star", "SELECT * FROM visits", ROWS),
    refused("select-star-exclude", "SELECT * EXCLUDE (user_id) FROM visits", ROWS),  # DuckDB's star variant
    refused("select-columns-regex", "SELECT COLUMNS('.*') FROM visits", ROWS),  # DuckDB's star by regex
    refused("select-amount", "SELECT amount FROM visits", ROWS),
    refused("select-user-id", "SELECT user_id FROM visits", ROWS),  # the identifiers themselves
    refused("from-first-all-rows", "FROM visits", ROWS),  # DuckDB's FROM-first syntax means SELECT *
    refused("group-by-privacy-unit", "SELECT user_id, COUNT(*) FROM visits GROUP BY user_id", UNIT),
    refused("group-by-unit-expression", "SELECT COUNT(*) FROM visits GROUP BY user_id % 1000", "expression"),
    refused("sum-of-privacy-unit", "SELECT SUM(user_id) FROM visits", UNIT),  # sums of ids reveal ids
    refused("max-of-privacy-unit", "SELECT MAX(user_id) FROM visits", UNIT),  # the largest id, exactly
    refused("window-count", "SELECT COUNT(*) OVER () FROM visits", "window functions"),  # one row per row
    refused(
        "window-per-user", "SELECT SUM(amount) OVER (PARTITION BY user_id) FROM visits", "window functions"
    ),
    refused(  # one person's total read as a value (per-person totals are summed or counted: issue 32)
        "subquery-in-from",
        "SELECT COUNT(*) FROM (SELECT user_id, SUM(amount) AS s FROM visits GROUP BY user_id) WHERE s > 50",
        "is one person's total",
    ),
    refused("subquery-in-where", DEEP + "amount IN (SELECT amount FROM visits)", SUBQUERY),
    refused("scalar-subquery", "SELECT COUNT(*), (SELECT MAX(amount) FROM visits) FROM visits", SUBQUERY),
    refused("subquery-in-order-by", f"{COUNT} ORDER BY (SELECT 1)", SUBQUERY),  # ordering by hidden data
    refused("lateral", "SELECT COUNT(*) FROM visits, LATERAL (SELECT 1)", SUBQUERY),
    refused("union", f"{COUNT} UNION SELECT amount FROM visits", "UNION"),  # raw rows after a count
    refused("union-all", f"{COUNT} UNION ALL {COUNT}", "UNION"),  # two releases for the price of one
    refused("except", f"{COUNT} EXCEPT {COUNT}", "EXCEPT"),
    refused("intersect", f"{COUNT} INTERSECT {COUNT}", "INTERSECT"),
    refused("cte", "WITH t AS (SELECT * FROM visits LIMIT 5) SELECT COUNT(*) FROM t", "LIMIT"),  # a sample
    # a self-join is answered by R2T's program (issue 33); grouped by the person it would be per-person rows
    refused(
        "self-join-per-person",
        "SELECT a.user_id, COUNT(*) FROM visits a JOIN visits b ON a.user_id = b.user_id GROUP BY a.user_id",
        "GROUP BY takes text, integer or boolean columns whose public_values",
    ),
    # aggregates whose result is the values themselves
    refused("string-agg", "SELECT string_agg(category, ',') FROM visits", AGGREGATE),
    refused("list-agg", "SELECT list(amount) FROM visits", AGGREGATE),
    refused("array-agg", "SELECT array_agg(amount) FROM visits", AGGREGATE),
    refused("first-value", "SELECT first(amount) FROM visits", AGGREGATE),
    refused("any-value", "SELECT any_value(category) FROM visits", AGGREGATE),
    refused("arg-max", "SELECT arg_max(user_id, amount) FROM visits", AGGREGATE),  # who spent the most
    refused("mode", "SELECT mode(category) FROM visits", AGGREGATE),
    refused("histogram", "SELECT histogram(category) FROM visits", "not supported"),  # exact counts
    refused("count-distinct-value", "SELECT COUNT(DISTINCT amount) FROM visits", "not supported"),
    refused("filter-one-user", "SELECT COUNT(*) FILTER (WHERE user_id = 5) FROM visits", "FILTER"),
    # -- SQL that would read another table, a file or the engine's catalog, or change the database
    refused("hidden-table", "SELECT ssn FROM secrets", UNKNOWN),  # in the DuckDB file, not in the catalog
    refused("hidden-table-count", "SELECT COUNT(*) FROM secrets", UNKNOWN),
    refused("hidden-table-from-first", "FROM secrets", UNKNOWN),
    refused("hidden-table-join", "SELECT COUNT(*) FROM visits JOIN secrets USING (user_id)", UNKNOWN),
    refused("hidden-table-comma-join", "SELECT COUNT(*) FROM visits v, secrets s", UNKNOWN),
    refused("hidden-table-in-subquery", DEEP + "user_id IN (SELECT user_id FROM secrets)", SUBQUERY),
    refused("hidden-table-qualified", "SELECT COUNT(*) FROM main.secrets", "without a schema"),
    refused("information-schema", "SELECT COUNT(*) FROM information_schema.tables", "without a schema"),
    refused("duckdb-tables", "SELECT COUNT(*) FROM duckdb_tables()", FILES),  # lists the hidden tables
    refused("read-csv-passwd", "SELECT COUNT(*) FROM read_csv('/etc/passwd')", FILES),  # the server's files
    refused("replacement-scan", "SELECT COUNT(*) FROM '/etc/passwd'", FILES),  # DuckDB reads a quoted path
    refused("read-parquet", "SELECT COUNT(*) FROM read_parquet('data.parquet')", FILES),
    refused("glob", "SELECT COUNT(*) FROM glob('/etc/*')", FILES),  # lists the server's directories
    refused("table-function-range", "SELECT COUNT(*) FROM range(10)", FILES),
    refused("query-table", "SELECT COUNT(*) FROM query_table('secrets')", FILES),  # a table named by a string
    refused("values-list", "SELECT COUNT(*) FROM (VALUES (1)) t(x)", FILES),
    refused("read-file-in-where", DEEP + "read_text('/etc/passwd') IS NULL", "unknown to"),
    refused("environment-in-where", DEEP + "getenv('HOME') = 'x'", "unknown to"),  # server secrets in env
    refused("attach", "ATTACH 'other.duckdb' AS other", ONLY_SELECT),  # any database file on the server
    refused("detach", "DETACH visits", ONLY_SELECT),  # denial of service for every analyst
    refused("copy-to", "COPY visits TO '/tmp/visits.csv'", ONLY_SELECT),  # exfiltration to a file
    refused("copy-from", "COPY visits FROM '/etc/passwd'", ONLY_SELECT),  # poisoning the data
    refused("install-extension", "INSTALL httpfs", ONLY_SELECT),  # network access from the engine
    refused("load-extension", "LOAD httpfs", ONLY_SELECT),
    refused("pragma", "PRAGMA table_info('secrets')", ONLY_SELECT),  # schema of the hidden table
    refused("set", "SET enable_external_access = true", ONLY_SELECT),  # lifting the engine's sandbox
    refused("call", "CALL duckdb_tables()", ONLY_SELECT),
    refused("describe", "DESCRIBE secrets", ONLY_SELECT),
    refused("show-tables", "SHOW TABLES", ONLY_SELECT),
    refused("summarize", "SUMMARIZE visits", ONLY_SELECT),  # exact minimum, maximum and unique counts
    refused("explain-analyze", f"EXPLAIN ANALYZE {COUNT}", ONLY_SELECT),  # exact row counts per operator
    refused("multiple-statements", f"{COUNT}; DROP TABLE visits", "statements"),  # a checked one, then more
    refused("statements-after-nul", f"{COUNT}\x00; DROP TABLE visits", "statements"),  # a C-string checker
    refused("insert", "INSERT INTO visits VALUES (1, 'x', 1)", ONLY_SELECT),  # planting a known record
    refused("update", "UPDATE visits SET amount = 0", ONLY_SELECT),
    refused("delete", "DELETE FROM visits", ONLY_SELECT),  # differencing attacks on a changed table
    refused("create-table", "CREATE TABLE copy AS SELECT * FROM visits", ONLY_SELECT),
    refused("create-macro", "CREATE MACRO leak(x) AS x", ONLY_SELECT),  # a function the checker cannot see
    refused("drop-table", "DROP TABLE visits", ONLY_SELECT),
    refused("alter-table", "ALTER TABLE visits ADD COLUMN x INTEGER", ONLY_SELECT),
    refused("explain-endpoint-raw-rows", "SELECT * FROM visits", ROWS, path="/v1/explain"),
    # -- SQL the engine would fail on because of a data value: DuckDB's own message would quote the value, and
    #    whether it fails at all tells whether such a value exists; the checker refuses all of it
    refused("cast-string-column", DEEP + "CAST(category AS INTEGER) = 1", PARTIAL),
    refused("string-column-vs-number", DEEP + "category = 1", PARTIAL),
    refused("number-column-vs-string", DEEP + "amount = 'x'", PARTIAL),
    refused("cast-to-date", DEEP + "category::DATE IS NULL", PARTIAL),
    refused("narrowing-cast", DEEP + "CAST(user_id AS TINYINT) = 1", PARTIAL),  # quotes the first big id
    refused("decimal-overflow", DEEP + "CAST(amount AS DECIMAL(3, 1)) > 0", PARTIAL),  # quotes an amount
    refused("strptime-on-value", DEEP + "strptime(category, '%Y') IS NULL", PARTIAL),
    refused("json-on-value", DEEP + "json_extract(category, '$.a') IS NULL", PARTIAL),
    # -- long, nested and odd input
    Attack("sql-over-body-limit", 413, ask(DEEP + "amount > 1 OR " * 400 + "1 = 1"), reason=TOO_LARGE),
    refused("deep-parentheses", DEEP + "(" * 1000 + "1 = 1" + ")" * 1000, NESTED),  # the parser recurses
    refused("deep-not-chain", DEEP + "NOT " * 900 + "1 = 1", NESTED),  # must be refused, not crash a worker
    refused("nul-in-sql", DEEP + "category = \x00'x'", UNPARSED),  # checker and engine must read one text
    refused("zero-width-space-table", "SELECT COUNT(*) FROM vis\u200bits", UNKNOWN),  # invisible to reviewers
    refused("fullwidth-table", "SELECT COUNT(*) FROM ｖｉｓｉｔｓ", UNKNOWN),  # NFKC would make it visits
    refused("right-to-left", "SELECT * FROM visits -- \u202e)*(TNUOC TCELES", ROWS),  # displays as COUNT(*)
    refused("homoglyph-keyword", "ЅELECT COUNT(*) FROM visits", UNPARSED),  # Cyrillic Ѕ
    Attack("lone-surrogate-in-sql", 422, ask(DEEP + "category = '\ud800'")),  # cannot be encoded back
    Attack("invalid-utf8-body", 400, b'{"dataset": "shop", "sql": "SELECT \xff\xfe", "epsilon": 0.1}'),
    # -- JSON of the wrong shape: refused before any work, and never read as something else
    Attack("body-not-json", 422, b"SELECT * FROM visits"),  # a raw statement where JSON is expected
    Attack("body-is-array", 422, [ask(COUNT)]),  # a batch would be several charges in one request
    Attack("sql-as-number", 422, ask(1)),
    Attack("dataset-as-list", 422, ask(COUNT, dataset=["shop"])),  # a lookup of a list could match anything
    Attack("dataset-over-64-characters", 422, ask(COUNT, dataset="d" * 65)),
    Attack("epsilon-as-string", 422, ask(COUNT, epsilon="0.1")),  # strings are not numbers here
    Attack("epsilon-as-boolean", 422, ask(COUNT, epsilon=True)),  # lax parsing would charge epsilon 1
    Attack("epsilon-negative", 422, ask(COUNT, epsilon=-0.1)),  # a negative charge would refill the budget
    Attack("epsilon-zero", 422, ask(COUNT, epsilon=0)),  # infinite noise scale, or a division by zero
    Attack("epsilon-nan", 422, ask(COUNT, epsilon=math.nan)),  # every budget comparison with NaN is false
    Attack("epsilon-minus-infinity", 422, ask(COUNT, epsilon=-math.inf)),
    Attack("epsilon-infinity", 422, ask(COUNT, epsilon=math.inf), reason=FINITE),  # no noise at all
    Attack(
        "epsilon-overflowing-literal",
        422,
        b'{"dataset": "shop", "sql": "%s", "epsilon": 1e400}' % COUNT.encode(),
    ),
    Attack("epsilon-tiny", 400, ask(COUNT, epsilon=1e-300), reason="epsilon must lie between"),
    Attack("epsilon-denormal", 400, ask(COUNT, epsilon=1e-320), reason="epsilon must lie between"),
    # the smallest double: formatting its refusal once overflowed (a 500)
    Attack("epsilon-smallest-double", 400, ask(COUNT, epsilon=5e-324), reason="epsilon must lie between"),
    Attack(
        "explain-epsilon-smallest-double",
        400,
        ask(COUNT, epsilon=5e-324),
        path="/v1/explain",
        reason="epsilon must lie between",
    ),
    Attack("explain-epsilon-infinity", 422, ask(COUNT, epsilon=math.inf), path="/v1/explain", reason=FINITE),
    Attack("explain-epsilon-nan", 422, ask(COUNT, epsilon=math.nan), path="/v1/explain", reason=FINITE),
    Attack("explain-delta-infinity", 422, ask(COUNT, delta=math.inf), path="/v1/explain", reason=FINITE),
    Attack("explain-delta-nan", 422, ask(COUNT, delta=math.nan), path="/v1/explain", reason=FINITE),
    Attack("delta-infinity", 422, ask(COUNT, delta=math.inf), reason=FINITE),
    Attack("delta-minus-infinity", 422, ask(COUNT, delta=-math.inf), reason=FINITE),
    Attack("delta-nan", 422, ask(COUNT, delta=math.nan)),
    Attack("delta-one", 422, ask(COUNT, delta=1)),  # delta 1 allows publishing everything
    Attack("delta-negative", 422, ask(COUNT, delta=-0.1)),
    Attack("request-id-as-number", 422, ask(COUNT, request_id=7)),
    Attack("accuracy-one-number", 422, accuracy(10)),
    Attack("accuracy-as-strings", 422, accuracy("10", "0.05")),
    # the schema's rules (alpha > 0, 0 < beta < 1, one of epsilon and accuracy): 422, as the document says
    Attack("accuracy-nan", 422, accuracy(math.nan, 0.05), reason=FINITE),  # an epsilon derived from NaN
    Attack("accuracy-infinity", 422, accuracy(math.inf, 0.05), reason=FINITE),
    Attack("accuracy-beta-nan", 422, accuracy(10, math.nan), reason=FINITE),
    Attack("accuracy-negative", 422, accuracy(-1, 0.05), reason="greater than 0"),
    Attack("accuracy-beta-zero", 422, accuracy(10, 0), reason="greater than 0"),  # needs infinite epsilon
    Attack("accuracy-beta-above-one", 422, accuracy(10, 2), reason="less than 1"),
    Attack("epsilon-and-accuracy", 422, ask(COUNT, accuracy=[10, 0.05]), reason="at most one"),  # which one?
    # neither is a query over a view (free) or a 400: which one depends on the analyst's views, not the body
    Attack("neither-epsilon-nor-accuracy", 400, {"dataset": "shop", "sql": COUNT}, reason="exactly one"),
    Attack("epsilon-null-and-no-accuracy", 400, ask(COUNT, epsilon=None), reason="exactly one"),
    Attack(
        "explain-epsilon-and-accuracy",
        422,
        ask(COUNT, accuracy=[10, 0.05]),
        path="/v1/explain",
        reason="at most one",
    ),
    # -- admin requests are checked whole before anything is written: a grant with an infinite budget once
    #    wrote the grant, then failed (a plain 500) before its budget, leaving the analyst with no cap
    admin_write("grant-budget-infinity", "grants", grant_body(budget=math.inf)),
    admin_write("grant-budget-minus-infinity", "grants", grant_body(budget=-math.inf)),
    admin_write("grant-budget-nan", "grants", grant_body(budget=math.nan)),
    admin_write("grant-delta-infinity", "grants", grant_body(delta=math.inf)),
    admin_write("grant-delta-nan", "grants", grant_body(delta=math.nan)),
    admin_write("budget-infinity", "budgets", {"dataset": "shop", "analyst": "alice", "budget": math.inf}),
    admin_write("budget-nan", "budgets", {"dataset": "shop", "analyst": "alice", "budget": math.nan}),
    admin_write("budget-delta-infinity", "budgets", {"dataset": "shop", "budget": 9, "delta": math.inf}),
    admin_write("dataset-budget-infinity", "budgets", {"dataset": "shop", "budget": math.inf}),
    admin_write("dataset-budget-minus-infinity", "budgets", {"dataset": "clinic", "budget": -math.inf}),
    admin_write("grant-analyst-name-digit-first", "grants", grant_body(analyst="1bob"), "pattern"),
    admin_write("grant-dataset-path", "grants", grant_body(dataset="../clinic"), "pattern"),
    admin_write("analyst-name-path", "analysts", {"name": "../eve"}, "pattern"),
    admin_write("analyst-name-empty", "analysts", {"name": ""}, "at least 1"),
    Attack(
        "grant-unknown-dataset", 404, grant_body(dataset="nowhere"), auth="admin", path="/v1/admin/grants"
    ),
    Attack("grant-unknown-analyst", 404, grant_body(analyst="nobody"), auth="admin", path="/v1/admin/grants"),
    Attack(
        "budget-unknown-dataset",
        404,
        {"dataset": "nowhere", "budget": 1},
        auth="admin",
        path="/v1/admin/budgets",
    ),
    Attack("revoke-bad-name", 422, None, auth="admin", path="/v1/admin/analysts/1x/revoke", reason="pattern"),
    Attack("revoke-unknown", 404, None, auth="admin", path="/v1/admin/analysts/nobody/revoke"),
    # -- more than the budget: 409 saying so, and nothing spent
    Attack("epsilon-above-budget", 409, ask(COUNT, epsilon=1000), reason=BUDGET),  # an almost exact answer
    Attack("epsilon-1e308", 400, ask(COUNT, epsilon=1e308), reason="epsilon must lie between"),
    Attack("accuracy-above-budget", 409, accuracy(1e-9, 0.05), reason=BUDGET),  # a tiny alpha: a huge epsilon
    # -- size limits: a declared Content-Length over the limit is refused before the key is even checked
    Attack("declared-body-over-limit", 413, b" " * 5000 + json.dumps(ask(COUNT)).encode(), reason=TOO_LARGE),
    Attack("declared-body-over-limit-no-key", 413, b" " * 5000, auth=None, reason=TOO_LARGE),  # memory
    # -- methods and paths that do not exist: no hidden behaviour behind them
    Attack("get-on-query", 405, None, method="GET"),
    Attack("delete-on-query", 405, None, method="DELETE"),
    Attack("put-on-grants", 405, None, auth="admin", path="/v1/admin/grants", method="PUT"),
    Attack("unknown-path", 404, None, path="/v1/raw", method="GET"),
    Attack("path-traversal", 404, None, path="/v1/../../etc/passwd", method="GET"),  # the server's files
]
BY_NAME = {attack.name: attack for attack in ATTACKS}


def sent_text(attack: Attack) -> str:
    """The path and body of an attack as the server reads them (JSON escapes decoded)."""
    content = attack.content() or b""
    try:
        body = json.dumps(json.loads(content), ensure_ascii=False)
    except ValueError:
        body = content.decode(errors="replace")
    return attack.path + "\n" + body


@pytest.mark.parametrize("attack", ATTACKS, ids=[attack.name for attack in ATTACKS])
def test_attack(world: World, attack: Attack) -> None:
    """The attack gets its status and reason, changes nothing in the ledger or the registry, leaks nothing,
    and (``same_as``) cannot be told from its twin."""
    before = world.state()
    response = world.send(attack)
    assert response.status_code == attack.status, response.text
    assert world.state() == before
    assert before["verified"]
    world.assert_silent(response, sent_text(attack))
    if attack.reason:
        detail = response.json()["detail"]
        said = detail if isinstance(detail, str) else " ".join(problem["msg"] for problem in detail)
        assert attack.reason in said, response.text
    if attack.same_as is not None:
        twin = world.send(BY_NAME[attack.same_as])
        assert (response.status_code, response.content, response.headers) == (
            twin.status_code,
            twin.content,
            twin.headers,
        )


# ---------------------------------------------------------------------------------------------- scenarios


def test_a_revoked_key_stops_at_once_and_its_answers_stay(world: World) -> None:
    """Revocation takes effect on the next request, on every endpoint, with the anonymous 401; what the key
    was answered before stays in the ledger (its budget was spent)."""
    key = make_analyst(world.client, world.admin, "dave", budget=None)
    grant(world.client, world.admin, "dave", "shop", 1.0)
    answered = world.client.post(
        "/v1/query", json=ask(COUNT, request_id="before-revocation"), headers=bearer(key)
    )
    assert answered.status_code == 200, answered.text
    with Ledger(world.config.ledger) as ledger:
        kept = ledger.entries(analyst="dave")
    assert [e.seq for e in kept] == [answered.json()["ledger_entry"]]
    revoked = world.client.post("/v1/admin/analysts/dave/revoke", headers=bearer(world.admin))
    assert revoked.status_code == 200, revoked.text
    before = world.state()
    anonymous = world.send(BY_NAME["no-authorization"])
    for method, path, body in [
        ("POST", "/v1/query", ask(COUNT, request_id="before-revocation")),  # not even its stored answer
        ("POST", "/v1/query", ask(COUNT, epsilon=0.2)),
        ("POST", "/v1/explain", ask(COUNT)),
        ("GET", "/v1/budget", None),
        ("GET", "/v1/history", None),
    ]:
        response = world.client.request(method, path, json=body, headers=bearer(key))
        assert (response.status_code, response.content) == (401, anonymous.content), path
        world.assert_silent(response, path + json.dumps(body))
    assert world.state() == before
    with Ledger(world.config.ledger) as ledger:
        assert ledger.entries(analyst="dave") == kept and ledger.verify().ok


def test_a_withdrawn_grant_gets_the_403_of_a_missing_dataset(world: World) -> None:
    """Once a grant is deleted, the dataset is as unknown to the analyst as a name that never existed:
    the same bytes for query and explain, and it leaves the analyst's budget list."""
    carol = bearer(world.keys["carol"])
    grant(world.client, world.admin, "carol", "clinic", 0.5)
    assert world.client.post("/v1/query", json=ask(COUNT, dataset="clinic"), headers=carol).status_code == 200
    deleted = world.client.delete("/v1/admin/grants/carol/clinic", headers=bearer(world.admin))
    assert deleted.status_code == 200, deleted.text
    before = world.state()
    for path in ("/v1/query", "/v1/explain"):
        withdrawn = world.client.post(path, json=ask(COUNT, dataset="clinic"), headers=carol)
        missing = world.client.post(path, json=ask(COUNT, dataset="never-existed"), headers=carol)
        assert withdrawn.status_code == 403
        assert (withdrawn.content, withdrawn.headers) == (missing.content, missing.headers)
    budgets = world.client.get("/v1/budget", headers=carol).json()
    assert [row["dataset"] for row in budgets] == ["shop"]
    assert world.state() == before


def test_an_analyst_sees_nothing_of_another(world: World) -> None:
    """bob's history and budget show his own dataset only: not alice's SQL, entries or dataset."""
    sql = "SELECT COUNT(*) AS only_alice_asks_this FROM visits WHERE amount > 12"
    answered = world.client.post("/v1/query", json=ask(sql), headers=bearer(world.keys["alice"]))
    assert answered.status_code == 200, answered.text
    alice_history = world.client.get("/v1/history", headers=bearer(world.keys["alice"])).json()
    assert answered.json()["ledger_entry"] in [row["ledger_entry"] for row in alice_history]
    bob = bearer(world.keys["bob"])
    history, budgets = (
        world.client.get("/v1/history", headers=bob),
        world.client.get("/v1/budget", headers=bob),
    )
    assert history.status_code == budgets.status_code == 200
    assert "only_alice_asks_this" not in history.text and "shop" not in history.text + budgets.text
    assert [row["dataset"] for row in budgets.json()] == ["clinic"]


@pytest.mark.parametrize(
    "template",
    [
        "SELECT COUNT(*) FROM {}",
        "SELECT ssn FROM {}",
        "FROM {}",
        "SELECT COUNT(*) FROM visits JOIN {} USING (user_id)",
        "SELECT COUNT(*) FROM main.{}",
        "DESCRIBE {}",
    ],
)
def test_a_hidden_table_is_refused_like_a_missing_one(world: World, template: str) -> None:
    """``secrets`` is in the DuckDB file but not in the catalog: the refusal must read exactly as for a
    table that does not exist (the engine's own message would suggest the real names)."""
    hidden, missing = "secrets", "no_such_table"
    answers = [
        world.client.post("/v1/query", json=ask(template.format(name)), headers=bearer(world.keys["alice"]))
        for name in (hidden, missing)
    ]
    assert [a.status_code for a in answers] == [400, 400]
    assert answers[0].json()["detail"].replace(hidden, missing) == answers[1].json()["detail"]


def test_a_request_id_reused_by_another_analyst(world: World) -> None:
    """carol sends alice's request id with alice's query: she gets a release of her own, charged to her;
    alice's answer is neither served to carol nor charged again, and alice's retry still gets it."""
    alice, carol = bearer(world.keys["alice"]), bearer(world.keys["carol"])
    body = ask(COUNT, epsilon=0.05, request_id="shared-request-id")
    first = world.client.post("/v1/query", json=body, headers=alice)
    assert first.status_code == 200, first.text
    with Ledger(world.config.ledger) as ledger:
        alice_entries, alice_spent = ledger.entries(analyst="alice"), ledger.spent(analyst="alice")
    carol_spent = spent(world.client, world.keys["carol"])
    other = world.client.post("/v1/query", json=body, headers=carol)
    assert other.status_code == 200, other.text
    assert other.json()["ledger_entry"] != first.json()["ledger_entry"]
    with Ledger(world.config.ledger) as ledger:
        [entry] = [e for e in ledger.entries() if e.seq == other.json()["ledger_entry"]]
        assert entry.analyst == "carol"
        assert ledger.entries(analyst="alice") == alice_entries
        assert ledger.spent(analyst="alice") == alice_spent
    assert spent(world.client, world.keys["carol"]) == pytest.approx(carol_spent + 0.05)
    assert world.client.post("/v1/query", json=body, headers=alice).json() == first.json()


def test_a_request_id_reused_with_other_sql_is_a_new_question(world: World) -> None:
    """The request id makes a retry of one question idempotent; with another SQL it is another question:
    answered and charged as such, never given the first question's answer (which a retry still gets)."""
    alice = bearer(world.keys["alice"])
    first = world.client.post("/v1/query", json=ask(COUNT, request_id="reused-id"), headers=alice)
    assert first.status_code == 200, first.text
    with Ledger(world.config.ledger) as ledger:
        entries = len(ledger.entries())
    other_sql = ask("SELECT SUM(amount) AS total FROM visits", request_id="reused-id")
    second = world.client.post("/v1/query", json=other_sql, headers=alice)
    assert second.status_code == 200, second.text
    assert second.json()["columns"][0] == "total" and first.json()["columns"][0] == "n"
    assert second.json()["ledger_entry"] != first.json()["ledger_entry"]
    retry = world.client.post("/v1/query", json=ask(COUNT, request_id="reused-id"), headers=alice)
    assert retry.json() == first.json()
    with Ledger(world.config.ledger) as ledger:
        assert len(ledger.entries()) == entries + 1  # the other SQL only


def test_key_guessing_is_throttled_per_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each key check costs a scrypt derivation, so after ``failed_auth_per_minute`` bad keys an address gets
    429 with no derivation at all, at no cost to anyone's budget; keys this process verified before keep
    working (analyst and admin), a key it never verified waits like a guess, and other addresses are free."""
    config, admin = write_service(tmp_path, failed_per_minute=3)
    app = create_app(ServiceConfig.from_toml(config))
    derivations = []
    real = registry_module._digest
    monkeypatch.setattr(registry_module, "_digest", lambda *a, **k: derivations.append(1) or real(*a, **k))
    with TestClient(app) as client, TestClient(app, client=("192.0.2.7", 40000)) as elsewhere:
        alice, bob = make_analyst(client, admin, "alice"), make_analyst(client, admin, "bob")
        assert client.get("/v1/budget", headers=bearer(alice)).status_code == 200  # alice's key is verified
        guess = bearer(new_key()[0])
        statuses = [client.get("/v1/budget", headers=guess).status_code for _ in range(3)]
        before = len(derivations)
        statuses += [client.post("/v1/query", json=ask(COUNT), headers=guess).status_code for _ in range(3)]
        assert statuses == [401] * 3 + [429] * 3
        assert len(derivations) == before  # throttled guesses cost no key derivation
        assert client.get("/v1/budget", headers=bearer(alice)).status_code == 200
        assert client.get("/v1/admin/analysts", headers=bearer(admin)).status_code == 200
        assert client.get("/v1/budget", headers=bearer(bob)).status_code == 429
        assert elsewhere.get("/v1/budget", headers=bearer(bob)).status_code == 200
        assert "too many failed key checks" in client.get("/v1/history", headers=guess).json()["detail"]
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        assert ledger.entries() == []


def test_the_rate_limit_is_per_key_and_refuses_for_free(tmp_path: Path) -> None:
    """Past requests_per_minute a key gets 429 on every endpoint, costing nothing; another key is not
    affected, and failed guesses at a key do not use up its owner's requests (no lock-out by strangers)."""
    with open_world(tmp_path, per_minute=5) as world:
        guesses = [world.send(Attack("guess", 401, ask(COUNT), auth="wrong-secret")) for _ in range(8)]
        assert {g.status_code for g in guesses} == {401}
        alice = bearer(world.keys["alice"])
        assert [world.client.get("/v1/budget", headers=alice).status_code for _ in range(5)] == [200] * 5
        before = world.state()
        for attack in [
            Attack("over", 429, ask(COUNT)),
            Attack("over", 429, None, path="/v1/history", method="GET"),
        ]:
            response = world.send(attack)
            assert response.status_code == 429 and "too many requests" in response.json()["detail"]
            world.assert_silent(response, sent_text(attack))
        assert world.state() == before
        bob = bearer(world.keys["bob"])
        explained = world.client.post("/v1/explain", json=ask(COUNT, dataset="clinic"), headers=bob)
        assert explained.status_code == 200 and world.client.get("/v1/budget", headers=bob).status_code == 200


def test_an_endless_chunked_body_is_cut_off_at_the_limit(world: World) -> None:
    """A body without Content-Length is counted while it is read: 413 as soon as it passes max_body_bytes,
    so nobody (the key is not checked yet) can make the server buffer an unbounded body. Driven through
    the ASGI interface, which shows how much was read."""
    chunk, chunks = b" " * 1000, 1000
    read = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal read
        if read == chunks:
            return {"type": "http.disconnect"}
        read += 1
        return {"type": "http.request", "body": chunk, "more_body": read < chunks}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/query",
        "raw_path": b"/v1/query",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }

    async def post() -> None:
        await world.client.app(scope, receive, send)

    asyncio.run(post())
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 413
    assert read * len(chunk) <= world.config.max_body_bytes + len(chunk)


@dataclass(frozen=True)
class Served:
    """The real server of the chunked-body cases: a client on it, an analyst's key and its files."""

    client: httpx.Client
    key: str
    admin: str
    ledger: str
    root: Path
    vocabulary: Vocabulary


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``kakeibo serve`` as a process on a free port, with analyst alice on shop; stopped at the end."""
    root = tmp_path_factory.mktemp("served")
    config, admin = write_service(root)
    plant_secrets(root / "visits.duckdb", 7)
    vocabulary = read_vocabulary([root / "visits.duckdb"], [root / "catalog.toml"])
    port = free_port()
    server = start_server(config, port)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            observe(client)
            created = client.post("/v1/admin/analysts", json={"name": "alice"}, headers=bearer(admin))
            created.raise_for_status()
            key = str(created.json()["key"])
            granted = {"analyst": "alice", "dataset": "shop", "budget": 1}
            client.post("/v1/admin/grants", json=granted, headers=bearer(admin)).raise_for_status()
            yield Served(client, key, admin, ServiceConfig.from_toml(config).ledger, root, vocabulary)
    finally:
        server.terminate()
        server.wait(timeout=30)


def in_chunks(data: bytes, size: int) -> Iterator[bytes]:
    """``data`` as a generator: httpx sends it with Transfer-Encoding: chunked and no Content-Length."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.parametrize(
    ("padding", "with_key", "chunked", "status"),
    [
        pytest.param(0, True, True, 200, id="chunked-within-limit-is-answered"),  # counted, passed on intact
        pytest.param(12_000, True, True, 413, id="chunked-over-limit"),  # no Content-Length to refuse early
        pytest.param(12_000, False, True, 413, id="chunked-over-limit-no-key"),  # memory, before any key
        pytest.param(12_000, True, False, 413, id="declared-over-limit"),
    ],
)
def test_body_limits_on_a_real_server(
    served: Served, padding: int, with_key: bool, chunked: bool, status: int
) -> None:
    """uvicorn behind the same limits: a body over max_body_bytes gets 413 and costs nothing, whether its
    length is declared or it comes in chunks; a chunked body within the limit is answered (and charged)."""
    body = b" " * padding + json.dumps(ask(COUNT)).encode()
    headers = {"content-type": "application/json", **(bearer(served.key) if with_key else {})}
    with Ledger(served.ledger) as ledger:
        entries = len(ledger.entries())
    content = in_chunks(body, 1024) if chunked else body
    response = served.client.post("/v1/query", content=content, headers=headers)
    assert response.status_code == status, response.text
    assert ("content-length" not in response.request.headers) == chunked
    with Ledger(served.ledger) as ledger:
        assert len(ledger.entries()) == entries + (status == 200) and ledger.verify().ok
    if status != 200:
        assert TOO_LARGE in response.json()["detail"]
        assert_silent(
            response,
            "/v1/query\n" + body.decode(),
            served.vocabulary,
            served.root,
            [served.key, served.admin],
        )


@pytest.mark.parametrize(
    "gate",
    [
        "CASE WHEN user_id = {u} THEN CAST(category AS INTEGER) ELSE 1 END = 1",
        "user_id = {u} AND CAST(category AS INTEGER) = 1",  # short-circuit evaluation as the gate
        "user_id <> {u} OR amount / 0 > 1",
        "user_id = {u} AND amount * 1e308 * 1e308 > 0",  # DuckDB fails on a DOUBLE overflow
        "user_id = {u} AND category = 1",  # an implicit cast of each row's text
    ],
)
def test_an_engine_failure_does_not_tell_whether_a_row_matches(world: World, gate: str) -> None:
    """Each WHERE below would fail in the engine only if some row has user_id = u. If the status depended on
    u, one query per guess would tell -- exactly and at no cost -- whether a person is in the data, or any
    predicate about them. The checker refuses every such filter before the engine runs, whoever u is
    (``world.users[0]`` is in the data, ``world.users[1]`` is not)."""
    oscar = bearer(world.keys["oscar"])
    before = world.state()
    answers = [
        world.client.post(
            "/v1/query",
            json=ask(f"SELECT COUNT(*) AS n FROM visits WHERE {gate.format(u=user)}", epsilon=0.01),
            headers=oscar,
        )
        for user in world.users
    ]
    assert [a.status_code for a in answers] == [400, 400], [a.text for a in answers]
    assert all(PARTIAL in a.json()["detail"] for a in answers)
    assert world.state() == before


# ---------------------------------------------------------------------------------------------- the document


def serves(template: str, path: str) -> bool:
    """Whether the OpenAPI path ``template`` (``/a/{name}/b``) matches ``path``."""
    return re.fullmatch(re.sub(r"\{[^/]+\}", "[^/]+", template.replace(".", r"\.")), path) is not None


def operation_of(document: dict[str, Any], method: str, path: str) -> str | None:
    """The path template of ``document`` that serves ``method`` on ``path``, if any."""
    for template, operations in document["paths"].items():
        if method.lower() in operations and serves(template, path):
            return str(template)
    return None


def test_the_document_lists_every_status_the_corpus_saw(world: World) -> None:
    """Every status the corpus observed on an operation (this test sends the attack table once more; the
    scenarios before it add theirs) is one the OpenAPI document lists for that operation, so a client
    generated from the document knows every answer it can get; what no operation serves is 404 or 405."""
    for attack in ATTACKS:
        world.send(attack)
    document = cast(FastAPI, world.client.app).openapi()
    seen: dict[tuple[str, str], set[int]] = {}
    for method, path, status in OBSERVED:
        template = operation_of(document, method, path)
        if template is None:
            assert status in (404, 405), (method, path, status)
            continue
        seen.setdefault((method, template), set()).add(status)
    undocumented = {
        operation: sorted(
            statuses - {int(s) for s in document["paths"][operation[1]][operation[0].lower()]["responses"]}
        )
        for operation, statuses in seen.items()
    }
    assert not any(undocumented.values()), undocumented
    statuses = set().union(*seen.values())
    assert statuses >= {200, 400, 401, 403, 404, 409, 413, 422}, statuses  # the check above checked something


@pytest.mark.parametrize(
    "path", ["/v1/query", "/v1/budget", "/v1/admin/analysts", "/v1/admin/grants/a/b", "/dashboard"]
)
def test_a_405_allows_what_the_path_serves(world: World, path: str) -> None:
    """OPTIONS (which the service does not serve) and any other method a path does not serve get 405 with an
    ``Allow`` that names every method served there: on /v1/admin/analysts that is GET and POST, though
    Starlette names only the first route's."""
    document = cast(FastAPI, world.client.app).openapi()
    template = next((t for t in document["paths"] if serves(t, path)), None)
    served = {"GET"} if template is None else {m.upper() for m in document["paths"][template]}  # the page
    for method in ("OPTIONS", "PUT", "PATCH", *({"GET", "POST", "DELETE"} - served)):
        response = world.client.request(method, path, headers={"Authorization": world.credentials["admin"]})
        assert response.status_code == 405, (method, response.text)
        assert set(response.headers["allow"].split(", ")) == served, (method, response.headers["allow"])
