"""What importing kakeibo costs, and the error tree (issue 16).

A device that only randomizes its reports imports ``kakeibo.ldp``; it must not load the SQL engines, the
ledger or scipy's sparse matrices (megabytes and seconds on a phone-class machine). Every error kakeibo
raises on purpose is a ``kakeibo.Error`` and keeps its built-in base.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import kakeibo
from kakeibo.accounting import BudgetExceeded, DuplicateRequest, LedgerIntegrityError
from kakeibo.accounting.storage import StoreError
from kakeibo.backends import StatementTimeout
from kakeibo.correlated.gaussian import CertificationError
from kakeibo.errors import ReleaseFailed
from kakeibo.ldp import ClientBudgetExceeded, ClientLedgerIntegrityError, ReportFormatError
from kakeibo.sql import QueryRefused
from kakeibo.sql.session import CatalogMismatch

HEAVY = (
    "duckdb",
    "sqlglot",
    "pyarrow",
    "scipy.sparse",
    "psycopg",
    "pyspark",
    "kakeibo.accounting",
    "kakeibo.sql",
)


def test_importing_the_ldp_client_side_loads_no_engine_ledger_or_sparse_matrices() -> None:
    code = (
        "import sys, kakeibo.ldp\n"
        "oracle = kakeibo.ldp.recommend_oracle(domain_size=16, epsilon=1).oracle\n"
        "oracle.randomize([1, 2, 3]).to_bytes()\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert loaded.strip() == ""


#: Another thread loads sqlglot's DuckDB dialect while this one transpiles; registering the dialect's tries is
#: slowed down, which widens the window in which sqlglot has registered the class but not yet attached its
#: generator (the query service's first concurrent requests hit it: RANDOM() sent to DuckDB as RAND()).
DIALECT_RACE = """
import sys, threading, time
if sys.argv[1] == "after-kakeibo":
    import kakeibo.sql
import sqlglot
import sqlglot.dialects.dialect as dialect_module
slowed = []
original = dialect_module.new_trie
def slow_trie(*args, **kwargs):
    slowed.append(1)
    time.sleep(0.2)
    return original(*args, **kwargs)
dialect_module.new_trie = slow_trie
def load():
    import sqlglot.dialects.duckdb
loader = threading.Thread(target=load)
loader.start()
time.sleep(0.05)
print(sqlglot.transpile("SELECT random()", read="duckdb", write="duckdb")[0], len(slowed) > 0)
loader.join()
"""


def test_sql_dialects_are_loaded_whole_before_any_thread_uses_them() -> None:
    """Without kakeibo the harness reaches the window (and, with sqlglot 30, prints ``SELECT RAND()``);
    after ``import kakeibo.sql`` every dialect kakeibo uses is already whole, so the race cannot happen."""

    def run(mode: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", DIALECT_RACE, mode], check=True, capture_output=True, text=True
        )
        return done.stdout.strip()

    assert run("plain").endswith(" True")  # the harness did widen sqlglot's loading window
    assert run("after-kakeibo") == "SELECT RANDOM() False"


def test_the_front_doors_load_on_first_use() -> None:
    assert kakeibo.connect.__module__ == "kakeibo.sql.session"
    assert kakeibo.private.__module__ == "kakeibo.decorator"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        kakeibo.nothing  # noqa: B018


def test_no_module_imports_another_packages_private_module() -> None:
    """Packages reach each other through public names: ``from ..noise.source import ...``, never
    ``from ..noise._grid import ...`` (a package's own ``from ._x`` is its business)."""
    private = re.compile(r"^\s*from \.\.[\w.]*\._\w+ import|^\s*from \.\.[\w.]* import _\w+", re.MULTILINE)
    source = Path(kakeibo.__file__).parent
    offenders = [
        f"{path.relative_to(source)}: {match.group(0).strip()}"
        for path in sorted(source.rglob("*.py"))
        for match in private.finditer(path.read_text())
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (QueryRefused, ValueError),
        (kakeibo.ConfigurationError, ValueError),
        (CatalogMismatch, ValueError),
        (BudgetExceeded, Exception),
        (DuplicateRequest, ValueError),
        (LedgerIntegrityError, RuntimeError),
        (StoreError, ValueError),
        (StatementTimeout, Exception),
        (ReleaseFailed, RuntimeError),
        (CertificationError, ValueError),
        (ReportFormatError, ValueError),
        (ClientBudgetExceeded, Exception),
        (ClientLedgerIntegrityError, RuntimeError),
    ],
)
def test_every_error_is_a_kakeibo_error_and_keeps_its_builtin_base(error: type, builtin: type) -> None:
    assert issubclass(error, kakeibo.Error) and issubclass(error, builtin)
