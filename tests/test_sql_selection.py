"""Private partition selection through the whole DP SQL pipeline (engine, noise, threshold, ledger).

Issue 3's acceptance item: a GROUP BY key contributed by a single user appears in at most delta (plus test
slack) of 10^5 runs. Each key's noise is independent, so one query over a table with 10^5 keys, each held
by its own single user, is 10^5 independent runs of "is a one-user key released?".
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

import kakeibo
from kakeibo.backends import DuckDBBackend
from kakeibo.privacy import ApproxDP
from kakeibo.sql import Catalog
from kakeibo.sql.rewrite import bounded_sql

SINGLETONS = 100_000
CATALOG = Catalog.from_toml(
    '[tables.t]\nprivacy_unit = "u"\nmax_partitions = 3\nmax_rows_per_partition = 2\n'
    '[tables.t.columns]\nu = { type = "int" }\nk = { type = "str" }\n'
)
QUERY = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"
#: the same selection with and without an aggregate: keys alone (issue 17) are released by it and nothing else
SELECTING = (QUERY, "SELECT k FROM t GROUP BY k", "SELECT DISTINCT k FROM t")


def _table(seed: int) -> pa.Table:
    """10^5 users holding one unique key each (1-5 rows), and 3 popular keys of 2,000 users each."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, 6, size=SINGLETONS)
    singles_u = np.repeat(np.arange(SINGLETONS), rows)
    singles_k = np.char.add("solo", singles_u.astype(str))
    popular_u = np.arange(SINGLETONS, SINGLETONS + 6000)
    popular_k = np.array(["pop0", "pop1", "pop2"])[np.arange(6000) % 3]
    return pa.table(
        {"u": np.concatenate([singles_u, popular_u]), "k": np.concatenate([singles_k, popular_k])}
    )


@pytest.mark.parametrize("query", SELECTING)
def test_a_key_held_by_one_user_is_released_with_probability_at_most_delta_over_l0(
    tmp_path: Path, query: str
) -> None:
    """delta = 0.03 and L0 = 3: each one-user key may be released with probability at most the per-key
    delta' = 1 - (1 - 0.03)^(1/3) (the optimal selection's pi(1), PoPETs 2022). The observed number of
    released one-user keys among 10^5 must not reject the plan's exact pi(1) in a two-sided exact binomial
    test at level 1e-6 (so a keep probability wrong in either direction is caught) nor reject ``p <=
    delta'`` one-sided at 1e-6. The popular keys (2,000 users each) are all released; the ledger is charged
    once, (epsilon, delta). The same holds for the keys alone, written as a GROUP BY without an aggregate
    or as SELECT DISTINCT."""
    db = DuckDBBackend()
    db.load_table("t", _table(seed=1))
    session = kakeibo.connect(db, catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=ApproxDP(10, 0.1))
    plan = session.plan(query, epsilon=1, delta=0.03)
    assert plan.selection is not None and plan.max_partitions == 3
    per_key = 1 - (1 - 0.03) ** (1 / 3)
    exact = float(plan.selection.keep_probability(1))
    assert exact <= per_key and plan.selection.keep_probability(2000) == 1.0

    released = session.sql(query, epsilon=1, delta=0.03, rng=np.random.default_rng(2)).to_pandas()
    keys = set(released["k"])
    solo = sum(1 for k in keys if k.startswith("solo"))
    assert {"pop0", "pop1", "pop2"} <= keys
    assert stats.binomtest(solo, SINGLETONS, exact).pvalue >= 1e-6, (solo, exact)
    assert stats.binomtest(solo, SINGLETONS, per_key, alternative="greater").pvalue >= 1e-6
    assert [e.loss for e in session.ledger.entries()] == [ApproxDP(1, 0.03)]


def test_a_user_with_many_keys_counts_in_at_most_l0_of_them() -> None:
    """One user with 50 keys of their own: after bounding they count as a distinct user in exactly
    min(L0, 50) = 3 keys (the engine's bounded statement, no noise involved)."""
    table = pa.table({"u": [7] * 50, "k": [f"key{i}" for i in range(50)]})
    plan = kakeibo.sql.plan_query(kakeibo.sql.analyze(QUERY, CATALOG), epsilon=1, delta=1e-6)
    con = duckdb.connect()
    con.register("t", table)
    users = con.sql(bounded_sql(plan)).fetchnumpy()["users"]
    assert int(users.sum()) == 3 and int(users.max()) == 1
