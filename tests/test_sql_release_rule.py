"""The release rule and the side channels of a DP SQL answer (issue 15, defects A-G, on DuckDB).

An analyst with a key sees values, errors, the ledger and every bit of a released number. These tests take
each channel the adversarial review used and check that it now depends on public inputs and charged noise
only: an error after the draw is charged and says nothing (A), a release's lattice and errors do not depend
on groups partition selection dropped (B), a join cannot repeat a row-level table's rows (C), a WHERE region
is built from the values the engine compares (D), catalog and engine types agree (E), stored releases are
keyed by their data source (G4), COUNT of a text column never casts it (G6), and bad epsilons are refused
with a sentence (minor). The cross-engine corpus and the differential fuzzer are in test_adversarial_*.py.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

import kakeibo
from kakeibo.accounting import Ledger
from kakeibo.backends import DuckDBBackend, StatementTimeout
from kakeibo.errors import ReleaseFailed
from kakeibo.mechanisms import Laplace
from kakeibo.privacy import ApproxDP, PureDP
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql import execute as execute_module
from kakeibo.sql.session import CatalogMismatch

CATALOG = """
[tables.visits]
privacy_unit = "user_id"
max_partitions = 1
max_rows_per_partition = 3
[tables.visits.columns]
user_id = "int"
shop = "str"
building = "str"
amount = { type = "float", lower = 0, upper = 100 }
x = { type = "float", lower = 0, upper = 1, user_constant = true }

[tables.people]
[tables.people.columns]
k = "str"
age = { type = "int", lower = 0, upper = 120 }

[tables.dim]
public = true
[tables.dim.columns]
k = { type = "str", unique = true }
label = "str"

[tables.repeated]
public = true
[tables.repeated.columns]
k = "str"
label = "str"

[tables.claimed]
public = true
[tables.claimed.columns]
k = { type = "str", unique = true }
label = "str"
"""

SHOPS = ["north", "south", "east", "west"]  # 4 groups: a fifth one used to halve the noise grid's step
TARGET = 999_999


def _visits(with_target: bool) -> pa.Table:
    users = np.repeat(np.arange(400), 3)
    rows = {
        "user_id": users,
        "shop": [SHOPS[u % 4] for u in users],
        "building": ["B12" if u % 2 else "A" for u in users],
        "amount": (users % 97).astype(float),
        "x": np.where(users % 2 == 0, 0.5, 0.25),
    }
    table = pa.table(rows)
    if with_target:
        target = pa.table(
            {
                "user_id": [TARGET],
                "shop": ["only-target"],
                "building": ["not a number"],
                "amount": [1e308],
                "x": [0.5],
            }
        )
        table = pa.concat_tables([table, target.cast(table.schema)])
    return table


def _session(tmp_path: Path, with_target: bool) -> kakeibo.sql.session.Session:
    db = DuckDBBackend()
    db.load_table("visits", _visits(with_target))
    db.load_table("people", pa.table({"k": ["a", "b"] * 50, "age": list(range(100))}))
    db.load_table("dim", pa.table({"k": ["a", "b"], "label": ["A", "B"]}))
    db.load_table("repeated", pa.table({"k": ["a"] * 1000, "label": ["A"] * 1000}))
    db.load_table("claimed", pa.table({"k": ["a", "a"], "label": ["A", "A2"]}))
    name = "with" if with_target else "without"
    return kakeibo.connect(
        db,
        catalog=Catalog.from_toml(CATALOG),
        ledger=tmp_path / f"{name}.sqlite",
        budget=ApproxDP(10_000, 0.01),
    )


def _spent(session: kakeibo.sql.session.Session) -> Fraction:
    loss = session.ledger.spent()
    return Fraction(loss.epsilon)


# -- A: once noise is drawn, nothing is free ------------------------------------------------------------


def test_an_error_after_the_draw_is_charged_and_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure while the release is derived (here: forced, with the noisy value in its message) leaves
    the charge in the ledger and raises a fixed sentence; asking again charges nothing more and reveals
    nothing more (the retry's draw is discarded)."""
    session = _session(tmp_path, with_target=False)

    def failing(*args: object, **kwargs: object) -> object:
        raise ValueError(f"value {args[3]} cannot be used")  # an engine-like message quoting the value

    monkeypatch.setattr(execute_module, "_aggregate", failing)
    query = "SELECT COUNT(*) AS n FROM visits"
    for _ in range(3):
        with pytest.raises(ReleaseFailed) as info:
            session.sql(query, epsilon=1)
        assert str(info.value).startswith(
            "the release failed after its noise was drawn; its cost was charged"
        )
        assert info.value.__cause__ is None and info.value.__suppress_context__  # the cause is not chained
        assert not re.search(r"\d", str(info.value))
    assert _spent(session) == 1 and len(session.ledger.entries()) == 1


def test_post_processing_runs_after_the_charge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HAVING, ORDER BY and LIMIT run on the stored noisy table after the charge: if they fail, the charge
    stays, the failure is the fixed ``ReleaseFailed`` sentence (the error's own text could quote a noisy
    value), and the next call returns the stored release (post-processed) at no further cost."""
    session = _session(tmp_path, with_target=False)
    query = "SELECT shop, COUNT(*) AS n FROM visits GROUP BY shop HAVING n > 10 ORDER BY n DESC LIMIT 2"
    real = execute_module._post_process

    def failing(*args: object) -> object:
        raise RuntimeError("post-processing failed")

    monkeypatch.setattr(execute_module, "_post_process", failing)
    with pytest.raises(ReleaseFailed) as info:
        session.sql(query, epsilon=1, delta=1e-6)
    assert "post-processing" not in str(info.value) and info.value.__suppress_context__
    assert _spent(session) == 1
    monkeypatch.setattr(execute_module, "_post_process", real)
    result = session.sql(query, epsilon=1, delta=1e-6)
    assert _spent(session) == 1 and len(result) <= 2
    assert list(result.table.column("n").to_pylist()) == sorted(result.table.column("n").to_pylist())[::-1]


def test_a_statement_timeout_is_charged_like_an_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How long a statement runs depends on the data, so its expiry costs what an answer costs; a retry
    under the same request id charges nothing more and draws nothing that leaves."""
    session = _session(tmp_path, with_target=False)

    execute = session.backend.execute

    def slow(sql: str, *, timeout: float | None = None) -> pa.Table:
        if sql.endswith("LIMIT 0"):  # the schema check reads no row
            return execute(sql)
        raise StatementTimeout(60.0)

    monkeypatch.setattr(session.backend, "execute", slow)
    with pytest.raises(StatementTimeout):
        session.sql("SELECT COUNT(*) AS n FROM visits", epsilon=1)
    assert _spent(session) == 1
    monkeypatch.undo()
    with pytest.raises(ReleaseFailed):
        session.sql("SELECT COUNT(*) AS n FROM visits", epsilon=1)
    assert _spent(session) == 1 and len(session.ledger.entries()) == 1
    session.sql("SELECT COUNT(*) AS n FROM visits", epsilon=1, request_id="new")
    assert _spent(session) == 2


def test_having_and_order_by_that_could_fail_are_refused_before_anything(tmp_path: Path) -> None:
    """What kakeibo's total evaluator does not compute is refused before any read; what it computes
    (issue 32) cannot fail: a division by zero is NULL, and HAVING keeps nothing of it."""
    session = _session(tmp_path, with_target=True)
    for query in (
        "SELECT COUNT(*) AS n FROM visits HAVING CAST(n + 1000 AS UTINYINT) > 0",
        "SELECT COUNT(*) AS n FROM visits HAVING REPEAT('a', n) = ''",
        "SELECT COUNT(*) AS n FROM visits ORDER BY n % 2",
        "SELECT COUNT(*) AS n FROM visits ORDER BY CAST(n AS DECIMAL(4, 1))",
    ):
        with pytest.raises(QueryRefused):
            session.sql(query, epsilon=1)
    assert session.ledger.entries() == []
    computed = session.sql(
        "SELECT COUNT(*) AS n FROM visits HAVING CASE WHEN n < 1000000000 THEN 1 / 0 ELSE 0 END = 0",
        epsilon=1,
    )
    assert computed.to_arrow().num_rows == 0 and len(session.ledger.entries()) == 1


# -- B: nothing of a release depends on groups that selection dropped ------------------------------------


def test_the_noise_grid_is_fixed_by_the_declared_coordinates() -> None:
    """With ``coordinates`` (L0 in SQL) the grid step and its guard are the same for 1 and 10^6 values."""
    laplace = Laplace(sensitivity=300, epsilon=Fraction(1, 2), coordinates=1)
    assert laplace._grid_for(1) == laplace._grid_for(5) == laplace._grid_for(10**6)
    plain = Laplace(sensitivity=300, epsilon=Fraction(1, 2))
    assert plain._grid_for(4) != plain._grid_for(5)  # without it, the step follows the array's size


def test_a_dropped_group_leaves_no_trace_in_the_released_bits(tmp_path: Path) -> None:
    """Seeded, 150 releases per world of SUM by shop at epsilon 1: the target (a unique key, dropped by
    partition selection with probability >= 1 - 1e-6 each time) changes nothing of the released bits:

    * every released SUM in both worlds is a multiple of the plan's grid step 2^k (before the fix the target
      made a fifth group and halved the step: about half its values were odd multiples of 2^(k-1));
    * the lowest lattice bit (value / 2^k mod 2) is equally distributed in both worlds: a two-sample
      chi-square test does not reject at level 1e-4 (the false-failure rate);
    * the released schema is the same, and the target's key is never released."""
    worlds = {flag: _session(tmp_path, with_target=flag) for flag in (False, True)}
    query = "SELECT shop, SUM(amount) AS s FROM visits GROUP BY shop"
    plan = worlds[False].plan(query, epsilon=1, delta=1e-6)
    laplace = plan.statistic("s_amount").mechanism
    assert isinstance(laplace, Laplace)
    step = math.ldexp(1.0, laplace._grid_for(1)[0])
    low_bits: dict[bool, list[int]] = {}
    schemas = set()
    for flag, session in worlds.items():
        rng = np.random.default_rng(20261125 + flag)
        bits = []
        for i in range(150):
            result = session.sql(query + f" LIMIT {100 + i}", epsilon=1, delta=1e-6, rng=rng)
            schemas.add(result.table.schema)
            assert "only-target" not in result.table.column("shop").to_pylist()
            for value in result.table.column("s").to_pylist():
                lattice = value / step
                assert lattice == math.floor(lattice), (flag, value, step)
                bits.append(int(lattice) % 2)
        low_bits[flag] = bits
    assert len(schemas) == 1
    table = [[bits.count(0), bits.count(1)] for bits in low_bits.values()]
    assert stats.chi2_contingency(table).pvalue > 1e-4


def test_a_grid_too_coarse_is_refused_from_public_inputs_alone(tmp_path: Path) -> None:
    """At an epsilon whose noise is beyond the exact grid, both worlds are refused by the plan, with the same
    sentence and no charge (it used to count the groups the engine returned)."""
    outcomes = []
    for flag in (False, True):
        session = _session(tmp_path, with_target=flag)
        with pytest.raises(ValueError) as info:
            session.sql("SELECT shop, SUM(amount) AS s FROM visits GROUP BY shop", epsilon=2**-35, delta=1e-6)
        outcomes.append(str(info.value))
        assert session.ledger.entries() == []
    assert outcomes[0] == outcomes[1]


def test_group_key_types_come_from_the_catalog(tmp_path: Path) -> None:
    session = _session(tmp_path, with_target=False)
    result = session.sql("SELECT shop, COUNT(*) AS n, AVG(amount) AS a FROM visits GROUP BY shop", epsilon=5)
    schema = result.table.schema
    assert schema.field("shop").type == pa.string() and schema.field("n").type == pa.int64()
    assert schema.field("a").type == pa.float64() and schema.field("n_ci_low").type == pa.float64()


# -- C: a row-level table's rows are not repeated by a join ----------------------------------------------


def test_a_row_level_join_must_be_on_a_unique_public_column(tmp_path: Path) -> None:
    """``people JOIN repeated`` with the key repeated 1000 times would multiply each row by 1000 while the
    noise is calibrated for 1: refused. A column declared unique that the engine repeats: refused before the
    engine runs the query. A unique key: answered, with sensitivity 1."""
    session = _session(tmp_path, with_target=False)
    with pytest.raises(QueryRefused, match="declares unique"):
        session.sql("SELECT COUNT(*) AS n FROM people JOIN repeated ON people.k = repeated.k", epsilon=1)
    with pytest.raises(CatalogMismatch, match="repeats values"):
        session.sql("SELECT COUNT(*) AS n FROM people JOIN claimed ON people.k = claimed.k", epsilon=1)
    assert session.ledger.entries() == []
    result = session.sql("SELECT COUNT(*) AS n FROM people JOIN dim ON people.k = dim.k", epsilon=50)
    assert abs(result.table.column("n")[0].as_py() - 100) <= 2
    assert "per-group sensitivity 1" in session.explain("SELECT COUNT(*) FROM people JOIN dim USING (k)")


# -- D: a region is never narrower than the rows the engine selects -------------------------------------


def test_literals_that_round_to_one_double_are_one_region(tmp_path: Path) -> None:
    """Ten BETWEENs on a user-constant DOUBLE column, distinct as exact decimals but all the double 0.5,
    select the same 200 users: they are charged 10 in total (they were charged 1 as disjoint boxes).
    Disjoint regions of doubles still compose in parallel."""
    session = _session(tmp_path, with_target=False)
    for i in range(10):
        literal = f"0.5000000000000000002{i}"
        result = session.sql(
            f"SELECT COUNT(*) AS n FROM visits WHERE x BETWEEN {literal} AND {literal}", epsilon=1
        )
        assert abs(result.table.column("n")[0].as_py() - 600) < 60
    assert _spent(session) == 10
    (tmp_path / "other").mkdir()
    other = _session(tmp_path / "other", with_target=False)
    other.sql("SELECT COUNT(*) AS n FROM visits WHERE x <= 0.25", epsilon=1)
    other.sql("SELECT COUNT(*) AS n FROM visits WHERE x > 0.25", epsilon=1)
    assert _spent(other) == 1


# -- E: the catalog's types are the engine's --------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "engine_type"),
    [
        ("amount", pa.string()),
        ("amount", pa.decimal128(10, 2)),
        ("user_id", pa.float64()),
        ("shop", pa.int64()),
    ],
)
def test_a_catalog_type_the_engine_does_not_have_is_refused(
    tmp_path: Path, column: str, engine_type: pa.DataType
) -> None:
    db = DuckDBBackend()
    visits = _visits(with_target=False)
    values = visits.column(column).to_pylist()
    if pa.types.is_string(engine_type):
        values = [str(v) for v in values]
    elif pa.types.is_integer(engine_type):
        values = list(range(len(values)))
    visits = visits.set_column(
        visits.schema.get_field_index(column), column, pa.array(values).cast(engine_type)
    )
    db.load_table("visits", visits)
    session = kakeibo.connect(db, catalog=Catalog.from_toml(CATALOG), ledger=tmp_path / "l.sqlite", budget=10)
    with pytest.raises(CatalogMismatch, match=f"column visits.{column} is"):
        session.sql(f"SELECT COUNT({column}) AS n FROM visits", epsilon=1)  # a column read is checked
    assert session.ledger.entries() == []


# -- G4: stored releases belong to their data source ------------------------------------------------------


def test_two_databases_sharing_a_catalog_and_a_ledger_get_their_own_releases(tmp_path: Path) -> None:
    """Monthly snapshots: the same query on two DuckDB files with one catalog and one ledger is charged and
    answered for each (it used to return the first file's stored release for the second, for free)."""
    import duckdb

    ledger = Ledger(tmp_path / "l.sqlite", budget=100)
    answers = []
    for month, users in (("feb", 500), ("mar", 900)):
        path = tmp_path / f"{month}.duckdb"
        with duckdb.connect(str(path)) as con:
            con.execute(
                "CREATE TABLE visits AS SELECT i AS user_id, 'north' AS shop, 'A' AS building, "
                f"CAST(1 AS DOUBLE) AS amount, CAST(0.5 AS DOUBLE) AS x FROM range({users}) t(i)"
            )
        session = kakeibo.connect(path, catalog=Catalog.from_toml(CATALOG), ledger=ledger)
        answers.append(session.sql("SELECT COUNT(DISTINCT user_id) AS n FROM visits", epsilon=20))
        again = session.sql("SELECT COUNT(DISTINCT user_id) AS n FROM visits", epsilon=20)
        assert again.table.equals(answers[-1].table)  # the same source: the stored release, no charge
    assert ledger.spent() == PureDP(40)
    for answer, users in zip(answers, (500, 900), strict=True):
        assert abs(answer.table.column("n")[0].as_py() - users) <= 2


# -- G6: COUNT(column) counts values of any type -----------------------------------------------------------


def test_count_of_a_text_column_never_casts_it(tmp_path: Path) -> None:
    """COUNT(building) where the target's building is 'not a number': answered in both worlds (it failed with
    a conversion error naming the value, only when the target was present)."""
    for flag in (False, True):
        session = _session(tmp_path, with_target=flag)
        result = session.sql(f"SELECT COUNT(building) AS n FROM visits WHERE user_id = {TARGET}", epsilon=1)
        assert result.table.schema.field("n").type == pa.int64()
        assert _spent(session) == 1


# -- minor: bad epsilons are refused with a sentence -------------------------------------------------------


@pytest.mark.parametrize("epsilon", [1e-320, 5e-324, "1e400", 1e300, 0, -1, float("inf"), float("nan")])
def test_an_epsilon_out_of_range_is_refused_with_a_sentence(tmp_path: Path, epsilon: object) -> None:
    session = _session(tmp_path, with_target=False)
    with pytest.raises(ValueError, match="epsilon must"):
        session.sql("SELECT COUNT(*) AS n FROM visits", epsilon=epsilon)  # type: ignore[arg-type]
    assert session.ledger.entries() == []
