"""Views say what they count, and ``rows_per_person="auto"`` (:mod:`kakeibo.sql.view_bounds`, issue 31):
every answer from a view over a table with a privacy unit says it counts each person's first rows only; the
private choice of the bound keeps its share of epsilon, and the interval of what it drops covers the truth
at its stated rate on heavy-tailed data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sqlglot
from scipy import stats

import kakeibo
from kakeibo.audit import audit
from kakeibo.backends import DuckDBBackend
from kakeibo.mechanisms import Laplace
from kakeibo.privacy import PureDP
from kakeibo.sql import Catalog
from kakeibo.sql.view_bounds import (
    CHOICE_SHARE,
    bin_edges,
    candidates,
    choose,
    dropped_interval,
    estimate_deviation,
    histogram_counts,
    histogram_sql,
)
from kakeibo.sql.views import RowsBound, ViewCodec, parse_view_definition, rows_bound

REGIONS = ["north", "south", "east", "west", "central", "islands", "mountain", "coast"]


def _catalog(top: int | None = None) -> Catalog:
    sales: dict[str, Any] = {
        "privacy_unit": "customer_id",
        "columns": {
            "customer_id": "int",
            "region": {"type": "str", "public_values": REGIONS},
            "amount": {"type": "float", "lower": 0, "upper": 1000},
        },
    }
    if top is not None:
        sales |= {"max_rows_per_partition": "auto", "max_rows_bound": top}
    people = {"columns": {"region": {"type": "str", "public_values": REGIONS}}}
    return Catalog.from_dict({"tables": {"sales": sales, "people": people}})


def _sales(customers: int, orders: int, seed: int) -> pa.Table:
    """Orders of customers whose popularity is 1/(rank + 5) (the shape of ../shared/data/gen_sales.py: a few
    customers hold thousands of rows each), each customer in one region."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / (np.arange(customers) + 5)
    customer = rng.choice(customers, orders, p=weights / weights.sum())
    region = rng.choice(len(REGIONS), customers)
    return pa.table(
        {
            "customer_id": customer.astype(np.int64),
            "region": np.array(REGIONS)[region[customer]],
            "amount": np.round(np.clip(rng.lognormal(4.5, 1.0, orders), 1, 999), 2),
        }
    )


def _rows(table: pa.Table) -> np.ndarray:
    """Each customer's rows (the truth the bound cuts)."""
    return np.bincount(table.column("customer_id").to_numpy())


def _dropped(rows: np.ndarray, k: int) -> int:
    return int(np.maximum(rows - k, 0).sum())


def _session(table: pa.Table, catalog: Catalog, ledger: Path | str = ":memory:") -> kakeibo.sql.Session:
    backend = DuckDBBackend()
    backend.load_table("sales", table)
    backend.load_table("people", pa.table({"region": REGIONS * 10}))
    return kakeibo.connect(backend, catalog=catalog, ledger=ledger, budget=100, source="sales-test")


@pytest.fixture(scope="module")
def sales() -> pa.Table:
    return _sales(2_000, 20_000, seed=3)


def _engine_histogram(table: pa.Table, top: int) -> pa.Table:
    backend = DuckDBBackend()
    backend.load_table("sales", table)
    return backend.execute(histogram_sql(_catalog(top).table("sales"), top))


# --- every answer says what it counts ----------------------------------------------------------------------


def test_an_answer_from_a_bounded_view_says_it_counts_the_bounded_table(sales: pa.Table) -> None:
    """rows_per_person = 3 keeps a fraction of the heavy customers' rows; the answer, its Arrow table and the
    view's description say so, and the interval is not claimed for the whole table."""
    session = _session(sales, _catalog())
    built = session.create_view(
        "v", "SELECT region FROM sales", epsilon=1, rows_per_person=3, rng=np.random.default_rng(1)
    )
    result = session.sql("SELECT COUNT(*) AS n FROM v")
    expected = (
        "counts of the view v, built from table sales with each person bounded to 3 rows: rows past a "
        "person's 3rd are not counted (the intervals cover the bounded counts only)"
    )
    assert result.note == expected
    assert result.to_arrow().schema.metadata[b"kakeibo.note"].decode() == expected
    assert built.view.describe().endswith(expected) and built.view.choice is None
    kept = int(np.minimum(_rows(sales), 3).sum())
    assert kept < sales.num_rows / 2  # what the note warns of: most rows are not counted
    assert session.explain("SELECT COUNT(*) AS n FROM v").endswith(expected)


def test_a_person_table_says_nothing_about_bounding(sales: pa.Table) -> None:
    session = _session(sales, _catalog())
    built = session.create_view("p", "SELECT region FROM people", epsilon=1, rng=np.random.default_rng(1))
    assert built.view.note() is None and "bounded" not in built.view.describe()
    assert session.sql("SELECT COUNT(*) AS n FROM p").note is None


def test_a_view_stored_before_the_note_still_decodes_and_states_its_bound(sales: pa.Table) -> None:
    """A stored view without the new header fields decodes as bounded, with no private choice (the sentence
    is true of a person table too, whose persons hold one row each)."""
    session = _session(sales, _catalog())
    built = session.create_view(
        "v", "SELECT region FROM sales", epsilon=1, rows_per_person=2, rng=np.random.default_rng(1)
    )
    codec = ViewCodec()
    head, _, body = codec.encode(built.view, False).partition(b"\n")
    header = json.loads(head)
    del header["bounded"], header["choice"]
    old, seeded = codec.decode(json.dumps(header).encode() + b"\n" + body)
    assert not seeded and old.bounded and old.choice is None and old.rows_per_person == 2
    assert old.note() == built.view.note()


# --- rows_per_person="auto" in a session --------------------------------------------------------------------


def test_auto_is_one_release_charged_epsilon_and_replayed_free(sales: pa.Table, tmp_path: Path) -> None:
    """One ledger entry of epsilon; the view is built at (epsilon - share) / k; the note carries the choice;
    the same call from another session is a free replay of the same choice, and a fixed bound under the
    same name is another definition (the request id holds "auto")."""
    ledger = tmp_path / "ledger.sqlite"
    session = _session(sales, _catalog(), ledger)
    query = "SELECT region FROM sales"
    built = session.create_view("v", query, epsilon=2, rows_per_person="auto", rng=np.random.default_rng(4))
    choice = built.view.choice
    assert choice is not None and choice.rows == built.view.rows_per_person
    assert choice.rows in candidates(_catalog().table("sales").max_rows_bound)
    assert choice.epsilon == pytest.approx(float(2 * CHOICE_SHARE))
    assert built.view.view.epsilon == pytest.approx((2 - choice.epsilon) / choice.rows)
    assert 0 <= choice.low <= choice.dropped <= choice.high
    assert built.privacy_loss == PureDP(2) and session.ledger.spent() == PureDP(2)
    assert len(session.ledger.entries()) == 1
    note = session.sql("SELECT region, COUNT(*) AS n FROM v GROUP BY region").note
    assert note is not None and f"rows per person were chosen privately at epsilon {choice.epsilon:g}" in note
    assert f"at least {choice.low:,.0f} rows (95%)" in note and "max_rows_bound" in note
    top = (
        _catalog().table("sales").max_rows_bound
    )  # the estimate's deviation, from the public histogram noise
    deviation = estimate_deviation(
        choice.rows, top, Laplace(sensitivity=1, epsilon=choice.epsilon, coordinates=1)
    )
    assert choice.deviation == pytest.approx(deviation) and f"standard deviation {deviation:,.0f}" in note
    again = _session(sales, _catalog(), ledger)
    replayed = again.create_view("v", query, epsilon=2, rows_per_person="auto", rng=np.random.default_rng(5))
    assert replayed.view.choice == choice and replayed.view.describe() == built.view.describe()
    assert len(again.ledger.entries()) == 1 and again.ledger.spent() == PureDP(2)
    with pytest.raises(kakeibo.sql.QueryRefused, match="exists already"):
        again.create_view("v", query, epsilon=2, rows_per_person=choice.rows)


@pytest.mark.parametrize("bad", ["x", 0, 2.5, -1, True])
def test_a_bad_rows_per_person_is_refused_before_any_charge(sales: pa.Table, bad: object) -> None:
    session = _session(sales, _catalog())
    with pytest.raises(kakeibo.Error, match="rows_per_person"):
        session.create_view("v", "SELECT region FROM sales", epsilon=1, rows_per_person=bad)  # type: ignore[arg-type]
    with pytest.raises(kakeibo.Error, match="is a person: rows_per_person must be 1"):
        session.create_view("p", "SELECT region FROM people", epsilon=1, rows_per_person="auto")
    assert session.ledger.entries() == []


def test_the_candidates_are_near_powers_of_root_two_up_to_the_top() -> None:
    ks = candidates(10_000)
    assert ks[:8] == (1, 2, 3, 4, 6, 8, 11, 16) and ks[-1] == 8192
    assert max(candidates(10**9)) == 2**20
    assert all(abs(np.log2(k) * 2 - round(np.log2(k) * 2)) < 0.5 for k in ks)


def test_the_cli_creates_an_auto_view_and_prints_the_note(tmp_path: Path, sales: pa.Table) -> None:
    database, catalog, ledger = tmp_path / "s.duckdb", tmp_path / "catalog.toml", tmp_path / "ledger.sqlite"
    con = duckdb.connect(str(database))
    con.register("frame", sales)
    con.execute("CREATE TABLE sales AS SELECT * FROM frame")
    con.close()
    catalog.write_text(
        '[tables.sales]\nprivacy_unit = "customer_id"\n'
        '[tables.sales.columns]\ncustomer_id = { type = "int" }\n'
        f'region = {{ type = "str", public_values = {json.dumps(REGIONS)} }}\n'
    )
    common = [
        "--database",
        str(database),
        "--catalog",
        str(catalog),
        "--ledger",
        str(ledger),
        "--budget",
        "5",
    ]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "kakeibo.cli", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    created = run(
        "view",
        "create",
        *common,
        "--epsilon",
        "1",
        "--rows-per-person",
        "auto",
        "v",
        "SELECT region FROM sales",
    )
    assert created.returncode == 0, created.stderr
    assert "rows per person were chosen privately at epsilon 0.1" in created.stdout
    answered = run("sql", *common, "SELECT COUNT(*) AS n FROM v")
    assert answered.returncode == 0, answered.stderr
    assert "note counts of the view v, built from table sales with each person bounded to" in answered.stderr
    refused = run(
        "view", "create", *common, "--epsilon", "1", "--rows-per-person", "x", "w", "SELECT region FROM sales"
    )
    assert refused.returncode == 2 and 'a whole number or "auto"' in refused.stderr


# --- the histogram statement on every engine ----------------------------------------------------------------


def _persons_by_bin(rows: np.ndarray, top: int) -> np.ndarray:
    """The histogram computed here, person by person: bin floor(log2 rows), the top bin holding the rest."""
    firsts, _ = bin_edges(top)
    held = rows[rows > 0]
    return np.bincount(
        np.minimum(np.floor(np.log2(held)).astype(int), firsts.size - 1), minlength=firsts.size
    )


EDGE_ROWS = [1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 100, 255, 256, 600]


def _edge_table() -> pa.Table:
    """Customers with row counts at the bins' edges, and rows without a person (counted nowhere)."""
    ids = np.repeat(np.arange(len(EDGE_ROWS)), EDGE_ROWS)
    customer = pa.array(list(ids) + [None] * 5, pa.int64())
    return pa.table(
        {
            "customer_id": customer,
            "region": ["north"] * len(customer),
            "amount": [1.0] * len(customer),
        }
    )


def _check_engine(backend: Any) -> None:
    top = 300  # bins 1, 2-3, ..., 128-255, and 256-300 holding 600 as well
    statement = sqlglot.transpile(
        histogram_sql(_catalog(top).table("sales"), top), read="duckdb", write=backend.dialect
    )[0]
    counts = histogram_counts(backend.execute(statement), top)
    assert counts.tolist() == _persons_by_bin(np.array(EDGE_ROWS), top).tolist()
    assert counts.tolist() == [1, 2, 2, 2, 2, 1, 1, 1, 2]


def test_duckdb_counts_persons_by_rows_as_the_bins_say() -> None:
    backend = DuckDBBackend()
    backend.load_table("sales", _edge_table())
    _check_engine(backend)


@pytest.mark.xdist_group("postgres")
def test_postgres_counts_persons_by_rows_as_duckdb_does(postgres_server: str) -> None:
    from kakeibo.backends.postgres import PostgresBackend
    from tpch_fixtures import postgres_database_with

    backend = PostgresBackend(postgres_database_with(postgres_server, {"sales": _edge_table()}))
    try:
        _check_engine(backend)
    finally:
        backend.close()


@pytest.mark.xdist_group("spark")
def test_spark_counts_persons_by_rows_as_duckdb_does(spark_backend: Any) -> None:
    from kakeibo.backends.spark import SparkBackend

    backend = SparkBackend(session=spark_backend.session)
    backend.load_table("sales", _edge_table())
    try:
        _check_engine(backend)
    finally:
        backend.close()


# --- the privacy claim of the choice ------------------------------------------------------------------------


def _auto(top: int | None, epsilon: float, columns: str = "region") -> RowsBound:
    catalog = _catalog(top)
    definition = parse_view_definition("v", f"SELECT {columns} FROM sales", catalog)
    bound = rows_bound(definition, PureDP(epsilon).epsilon, "auto", None)
    assert bound.histogram is not None
    return bound


@pytest.mark.statistical
def test_privacy_of_the_choice_of_rows_per_person(sales: pa.Table) -> None:
    """Audit (kakeibo.audit: 400,000 choices per input, 95% Clopper-Pearson lower bound on epsilon over the
    default events, seed 11) of the chosen k on the engine's histograms of two neighbouring tables: the
    heavy-tailed sales and the same without its heaviest customer (the one whose rows a bound cuts most).
    The view's epsilon is 10, so the choice spends 1 (CHOICE_SHARE) and must be 1-DP; the bound must not
    refute that, and must be far from 0 (the audit can see the heaviest customer)."""
    bound = _auto(None, 10.0)
    assert bound.histogram is not None and bound.histogram.epsilon == pytest.approx(1.0)
    rows = _rows(sales)
    heaviest = int(rows.argmax())
    without = sales.filter(pc.not_equal(sales.column("customer_id"), heaviest))
    top = bound.top
    d = histogram_counts(_engine_histogram(sales, top), top)
    d_prime = histogram_counts(_engine_histogram(without, top), top)
    assert np.abs(d - d_prime).sum() == 1
    noise = bound.histogram

    def sampler(counts: np.ndarray, n: int, rng: Any) -> np.ndarray:
        noisy = np.asarray(noise.release(np.tile(counts, (n, 1)), rng=rng), np.float64)
        return np.asarray(bound.ks)[choose(noisy, bound.ks, bound.costs, top)]

    result = audit(sampler, d, d_prime, trials=400_000, rng=np.random.default_rng(11))
    assert result.seeded and not result.refutes(1.0), str(result)
    assert result.epsilon_lower_bound > 0.1, f"the audit lost its power:\n{result}"


# --- calibration of what the choice drops -------------------------------------------------------------------


@pytest.fixture(scope="module")
def big() -> pa.Table:
    """A gen_sales-like table: 20,000 customers, 200,000 orders."""
    return _sales(20_000, 200_000, seed=42)


@pytest.mark.statistical
@pytest.mark.parametrize(("top", "epsilon"), [(None, 1.0), (None, 10.0), (10_000, 1.0), (10_000, 10.0)])
def test_the_dropped_rows_interval_covers_at_its_rate_at_the_chosen_k(
    big: pa.Table, top: int | None, epsilon: float
) -> None:
    """400 seeded choices per setting, made exactly as a session makes them, on the engine's histogram of
    ``big``: the interval of the rows the chosen k drops must cover the true drop in at least the 10^-6
    quantile of Binomial(400, 0.95) runs (a false failure once in 10^6). With the catalog's top at 10,000 and
    epsilon 10, the upper end must say something in most runs: below the table's rows."""
    rows = _rows(big)
    bound = _auto(top, epsilon)
    assert rows.max() <= bound.top  # the interval is conditional on the catalog's top
    histogram = _engine_histogram(big, bound.top)
    covered, informative = 0, 0
    for seed in range(400):
        k, choice = bound.choose(
            _catalog(top).table("sales"), lambda _: histogram, np.random.default_rng(seed)
        )
        assert choice is not None and choice.rows == k
        truth = _dropped(rows, k)
        covered += choice.low <= truth <= choice.high
        informative += choice.high < big.num_rows
    assert covered >= stats.binom.ppf(1e-6, 400, 0.95), covered
    if top is not None and epsilon == 10.0:
        assert informative > 200, informative


@pytest.mark.statistical
@pytest.mark.parametrize(("top", "epsilon"), [(10_000, 1.0), (1_000_000, 0.1)])
def test_the_dropped_rows_interval_covers_at_its_rate_at_any_k(
    big: pa.Table, top: int, epsilon: float
) -> None:
    """The interval alone, at k = 4, 64 and 1024 (from a bound that drops most rows to one that drops few),
    200 seeded histograms each at the choice's epsilon: coverage at least the 10^-6 quantile of
    Binomial(200, 0.95) for every k; at epsilon 1 and k = 4 the lower end must exceed a quarter of the
    truth in most runs (so the test can fail by an interval that says nothing)."""
    rows = _rows(big)
    counts = histogram_counts(_engine_histogram(big, top), top)
    noise = Laplace(sensitivity=1, epsilon=epsilon, coordinates=1)
    for k in (4, 64, 1024):
        truth = _dropped(rows, k)
        covered, informative = 0, 0
        for seed in range(200):
            noisy = np.asarray(noise.release(counts, rng=np.random.default_rng(seed)), np.float64)
            low, estimate, high = dropped_interval(noisy, k, top, noise)
            assert 0 <= low <= estimate <= high
            covered += low <= truth <= high
            informative += low > truth / 4
        assert covered >= stats.binom.ppf(1e-6, 200, 0.95), (k, covered)
        if epsilon == 1.0 and k == 4:
            assert informative > 100, informative
