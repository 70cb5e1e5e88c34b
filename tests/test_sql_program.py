"""Queries whose join results reference several persons, answered by R2T's linear program
(:mod:`kakeibo.sql.program`, issue 33).

Neighbour relation under test: add or remove one person (a ``people.id``) with every row that references
them (each transfer they pay or receive), hence every join result that references them. Sensitivity of each
candidate: ``tau`` (the program's), released with Laplace noise of sensitivity ``(1 + 2e-6) tau``.

The data: 40 people and 160 transfers between them (seeded), some to oneself, some with a NULL payee, some
amounts above the bound, NULL or NaN.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from scipy.stats import binom

import kakeibo
from kakeibo.accounting import Ledger
from kakeibo.audit import audit
from kakeibo.backends import Backend, DuckDBBackend
from kakeibo.data import tpch
from kakeibo.errors import ArgumentError
from kakeibo.noise import resolve_source
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql.program import ProgramQuery, analyze_program, incidence
from kakeibo.sql.truncation_lp import SENSITIVITY_FACTOR, Incidence, truncated_values

PEOPLE = 40
CATALOG = Catalog.from_dict(
    {
        "tables": {
            "people": {
                "privacy_unit": "id",
                "columns": {"id": "int", "city": {"type": "str", "public_values": ["a", "b"]}},
            },
            "transfers": {
                "references": {"payer": "people.id", "payee": "people.id"},
                "max_rows_bound": 100,
                "columns": {
                    "payer": "int",
                    "payee": "int",
                    "amount": {"type": "float", "lower": 0, "upper": 100},
                    "fee": {"type": "float", "lower": -5, "upper": 5},
                },
            },
            "log": {"columns": {"payer": "int", "note": "str"}},  # row-level: each row a person
            "cities": {"public": True, "columns": {"name": {"type": "str", "unique": True}, "size": "int"}},
        }
    }
)
QUERY = (
    "SELECT SUM(amount) AS total FROM transfers t JOIN people p1 ON p1.id = t.payer "
    "JOIN people p2 ON p2.id = t.payee"
)


def _tables(without: int | None = None) -> dict[str, pa.Table]:
    """The people, their transfers and the public cities; ``without``: that person removed with every
    transfer that references them (the neighbour)."""
    rng = np.random.default_rng(33)
    payer = rng.integers(0, PEOPLE, 160)
    payee = rng.integers(0, PEOPLE, 160).astype(object)
    payee[::17] = None
    payer[::23] = 7  # person 7 pays often: the programs below the largest total bind on them
    amount = rng.gamma(2.0, 30.0, 160).astype(object)
    amount[::13] = None
    amount[5::29] = math.nan
    people = [i for i in range(PEOPLE) if i != without]
    keep = [i for i in range(160) if without not in (payer[i], payee[i])]
    return {
        "people": pa.table({"id": pa.array(people, pa.int64()), "city": ["ab"[i % 2] for i in people]}),
        "transfers": pa.table(
            {
                "payer": pa.array([int(payer[i]) for i in keep], pa.int64()),
                "payee": pa.array([payee[i] for i in keep], pa.int64()),
                "amount": pa.array([amount[i] for i in keep], pa.float64()),
                "fee": pa.array([1.0] * len(keep), pa.float64()),
            }
        ),
        "log": pa.table({"payer": pa.array([1], pa.int64()), "note": ["x"]}),
        "cities": pa.table({"name": ["a", "b"], "size": pa.array([1, 2], pa.int64())}),
    }


def _engine(tables: dict[str, pa.Table]) -> DuckDBBackend:
    con = duckdb.connect()
    for name, table in tables.items():
        con.register("arrow_in", table)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM arrow_in")
        con.unregister("arrow_in")
    return DuckDBBackend(con)


def _program(sql: str = QUERY, **options: Any) -> ProgramQuery:
    return analyze_program(sql, CATALOG, why="test", dialect="duckdb", database=None, epsilon=1, **options)


def _values(tables: dict[str, pa.Table], query: ProgramQuery) -> np.ndarray:
    raw = _engine(tables).execute(query.statement)
    return truncated_values(incidence(raw, query.person_tables, query.weighted), query.race.taus)


def _expected_results(tables: dict[str, pa.Table]) -> list[tuple[frozenset[int], float]]:
    """The join results of :data:`QUERY` computed here, independently: transfers whose two ends are people,
    persons {payer, payee}, weight the amount clamped into [0, 100] (NULL 0, NaN the upper bound, as every
    engine's GREATEST and LEAST order NaN above every number)."""
    people = set(tables["people"]["id"].to_pylist())
    out = []
    for row in tables["transfers"].to_pylist():
        if row["payer"] in people and row["payee"] in people:
            amount = row["amount"]
            weight = 0.0 if amount is None else 100.0 if math.isnan(amount) else min(max(amount, 0.0), 100.0)
            out.append((frozenset({row["payer"], row["payee"]}), weight))
    return sorted(out, key=repr)


def test_the_statement_returns_each_results_persons_and_clamped_weight() -> None:
    """The engine's join results are those computed here, and the incidence holds one reference per
    distinct person of a result (a transfer to oneself references one person)."""
    query = _program()
    assert query.person_tables == ("people", "people")  # p1.id and p2.id are t.payer and t.payee: not kept
    raw = _engine(_tables()).execute(query.statement)
    found = incidence(raw, query.person_tables, query.weighted)
    pairs = [frozenset((raw["__p0"][i].as_py(), raw["__p1"][i].as_py())) for i in range(raw.num_rows)]
    assert sorted(zip(pairs, found.weights.tolist(), strict=True), key=repr) == _expected_results(_tables())
    references = np.bincount(found.results, minlength=found.size)
    assert references.tolist() == [len(pair) for pair in pairs] and 1 in references.tolist()
    truth = sum(w for _, w in _expected_results(_tables()))
    assert truncated_values(found, [1e9])[0] == pytest.approx(truth, rel=1e-12)


def test_a_query_is_answered_charged_once_and_replayed_free(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.sqlite", budget=10)
    session = kakeibo.connect(_engine(_tables()), catalog=CATALOG, ledger=ledger)
    first = session.sql(QUERY, epsilon=1, rng=np.random.default_rng(1)).to_arrow()
    assert first.column_names == ["total", "total_ci_low", "total_ci_high"] and first.num_rows == 1
    row = first.to_pylist()[0]
    assert 0 <= row["total"] == row["total_ci_low"] <= row["total_ci_high"]
    again = session.sql(QUERY, epsilon=1).to_arrow()
    assert again.equals(first) and float(ledger.spent().epsilon) == 1 and len(ledger.entries()) == 1
    entry = ledger.entries()[0]
    assert entry.dataset == "people" and entry.label == QUERY


def test_one_person_moves_every_candidate_by_at_most_tau() -> None:
    """For every person: the program's values with and without them (and their transfers), through the
    engine statement, differ by at least 0 and at most the sensitivity the noise is calibrated to; and
    some person moves the smallest threshold's value by most of tau, so the check has power (measured:
    0.82 tau, person 7)."""
    query = _program()
    full = _values(_tables(), query)
    taus = np.array(query.race.taus)
    worst = np.zeros(len(taus))
    for person in range(PEOPLE):
        moved = full - _values(_tables(without=person), query)
        assert np.all(moved >= -1e-6 * taus) and np.all(moved <= taus * SENSITIVITY_FACTOR), person
        worst = np.maximum(worst, moved / taus)
    assert worst[0] > 0.75


@pytest.mark.statistical
def test_the_race_through_the_statement_is_epsilon_dp_under_person_neighbours() -> None:
    """The race's release on the program values of the data with and without the person who moves them
    most, 200,000 times each; :func:`kakeibo.audit.audit` bounds epsilon from below at 95% confidence, and
    the bound must not exceed the claim (epsilon 1). Seed 34."""
    query = _program()
    full = _values(_tables(), query)
    moves = [(float(np.max(full - _values(_tables(person), query))), person) for person in range(PEOPLE)]
    neighbour = _values(_tables(max(moves)[1]), query)
    race = query.race

    def sampler(row: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return race.release(np.tile(row, (n, 1)), resolve_source(rng))[0]

    result = audit(sampler, full, neighbour, trials=200_000, rng=np.random.default_rng(34))
    assert not result.refutes(1.0), str(result)
    assert result.epsilon_lower_bound > 0.05, str(result)  # the audit sees the pair apart


def test_the_answer_is_below_the_truth_with_probability_at_least_one_minus_beta(tmp_path: Path) -> None:
    """200 releases through the session at epsilon 4 (fresh request ids): the number above the truth is
    consistent with a rate of at most beta = 0.05 (one-sided binomial test at 1e-6), and so is the number
    of 95% intervals that miss it. Seed 35."""
    truth = sum(w for _, w in _expected_results(_tables()))
    ledger = Ledger(tmp_path / "l.sqlite", budget=10_000)
    session = kakeibo.connect(_engine(_tables()), catalog=CATALOG, ledger=ledger)
    rng = np.random.default_rng(35)
    above = missed = 0
    for i in range(200):
        row = session.sql(QUERY, epsilon=4, rng=rng, request_id=str(i)).to_arrow().to_pylist()[0]
        above += row["total"] > truth
        missed += not row["total_ci_low"] <= truth <= row["total_ci_high"]
    assert binom.sf(above - 1, 200, 0.05) > 1e-6 and binom.sf(missed - 1, 200, 0.05) > 1e-6
    assert float(ledger.spent().epsilon) == 800


def test_self_joins_and_a_public_table_twice_are_answered(tmp_path: Path) -> None:
    """Chains of two transfers (a self-join of transfers: up to three persons per result) and transfers
    between people of cities of different sizes (the public table cities twice, each a lookup on its
    unique key): the statement's persons and results against the ones computed here."""
    tables = _tables()
    chains = _program("SELECT COUNT(*) FROM transfers a JOIN transfers b ON a.payee = b.payer")
    assert len(chains.person_tables) == 3  # a.payer, a.payee (= b.payer), b.payee
    found = incidence(_engine(tables).execute(chains.statement), chains.person_tables, chains.weighted)
    rows = tables["transfers"].to_pylist()
    expected = [
        len({a["payer"], a["payee"], b["payee"]})
        for a in rows
        for b in rows
        if a["payee"] is not None and a["payee"] == b["payer"]
    ]
    assert sorted(np.bincount(found.results, minlength=found.size).tolist()) == sorted(expected)
    cities = _program(
        "SELECT COUNT(*) FROM transfers t JOIN people p1 ON p1.id = t.payer "
        "JOIN people p2 ON p2.id = t.payee JOIN cities c1 ON c1.name = p1.city "
        "JOIN cities c2 ON c2.name = p2.city WHERE c1.size < c2.size"
    )
    found = incidence(_engine(tables).execute(cities.statement), cities.person_tables, cities.weighted)
    people = {p: "ab"[p % 2] for p in tables["people"]["id"].to_pylist()}
    assert found.size == sum(
        1 for r in rows if r["payee"] is not None and people[r["payer"]] == "a" and people[r["payee"]] == "b"
    )
    session = kakeibo.connect(_engine(tables), catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=10)
    assert session.sql(
        "SELECT COUNT(*) AS n FROM transfers a JOIN transfers b ON a.payee = b.payer", epsilon=1
    ).to_arrow().column_names == ["n", "n_ci_low", "n_ci_high"]


def test_grouped_by_public_keys_each_key_is_raced_at_its_share(tmp_path: Path) -> None:
    """GROUP BY the payer's city (public values a, b): both keys are released (in declared order), each
    group's programs are those of its own results (against the results computed here), each key's race
    spends epsilon / 2, and the ledger is charged epsilon once."""
    sql = (
        "SELECT p1.city AS city, SUM(amount) AS total FROM transfers t JOIN people p1 ON p1.id = t.payer "
        "JOIN people p2 ON p2.id = t.payee GROUP BY p1.city"
    )
    query = _program(sql)
    assert query.group_names == ("city",) and query.keys == (("a",), ("b",))
    assert sum(m.privacy_loss.epsilon for m in query.race.mechanisms) == Fraction(1, 2)
    tables = _tables()
    raw = _engine(tables).execute(query.statement)
    found = incidence(raw, query.person_tables, query.weighted)
    cities = np.array(raw["__g0"].to_pylist())
    for city in ("a", "b"):  # a group's incidence holds its results and their persons only
        part = found.restricted(cities == city)
        assert part.size == int(np.sum(cities == city)) and part.n_persons == found.n_persons
        assert np.bincount(part.results).tolist() == np.bincount(found.results)[cities == city].tolist()
    payer_city = {p: "ab"[p % 2] for p in range(PEOPLE)}
    people = set(tables["people"]["id"].to_pylist())
    truth = {"a": 0.0, "b": 0.0}
    for row in tables["transfers"].to_pylist():
        if row["payer"] in people and row["payee"] in people:
            amount = row["amount"]
            weight = 0.0 if amount is None else 100.0 if math.isnan(amount) else min(max(amount, 0.0), 100.0)
            truth[payer_city[row["payer"]]] += weight
    sums = {c: float(found.restricted(cities == c).weights.sum()) for c in ("a", "b")}
    assert sums == pytest.approx(truth, rel=1e-12)
    ledger = Ledger(tmp_path / "l.sqlite", budget=10)
    session = kakeibo.connect(_engine(tables), catalog=CATALOG, ledger=ledger)
    released = session.sql(sql, epsilon=1, rng=np.random.default_rng(37)).to_arrow()
    assert released.column_names == ["city", "total", "total_ci_low", "total_ci_high"]
    assert released["city"].to_pylist() == ["a", "b"] and float(ledger.spent().epsilon) == 1
    assert "one race per key of city (2 public keys, each at epsilon 0.5)" in session.explain(sql, epsilon=1)


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("SELECT t.payer, COUNT(*) FROM transfers t GROUP BY t.payer", "GROUP BY takes text, integer or"),
        (
            "SELECT COUNT(*) FROM transfers t JOIN people p ON p.id = t.payer GROUP BY p.city",
            "is selected too",
        ),
        (f"{QUERY} HAVING SUM(amount) > 1", "HAVING is not supported yet where a join result can belong"),
        ("SELECT AVG(amount) FROM transfers", "AVG is not supported yet where a join result can belong"),
        ("SELECT COUNT(*), SUM(amount) FROM transfers", "selects one COUNT or SUM, and no column but"),
        ("SELECT SUM(fee) FROM transfers", "bounded below by 0 and above by a positive bound"),
        ("SELECT COUNT(*) FROM transfers t, people p", "no equality along a declared reference joins the"),
        ("SELECT COUNT(*) FROM transfers t JOIN log l ON l.payer = t.payer", "row-level privacy"),
        ("SELECT SUM(t.payer) FROM transfers t", "SUM(t.payer) aggregates the privacy unit payer"),
        (
            "SELECT COUNT(*) FROM transfers t JOIN cities c ON c.size = t.payer",
            "joining on payer, which identifies a person's rows",
        ),
        ("SELECT COUNT(*) FROM transfers t WHERE t.amount LIKE 'x%'", "LIKE"),
    ],
)
def test_refused_before_any_data_is_read(sql: str, fragment: str, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.sqlite", budget=10)
    session = kakeibo.connect(_engine(_tables()), catalog=CATALOG, ledger=ledger)
    with pytest.raises(QueryRefused) as info:
        session.sql(sql, epsilon=1)
    assert fragment in str(info.value)
    assert len(ledger.entries()) == 0


def test_options_the_program_does_not_take_are_refused_by_name(tmp_path: Path) -> None:
    session = kakeibo.connect(_engine(_tables()), catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=10)
    with pytest.raises(QueryRefused, match="accuracy= is not supported where a join result can belong"):
        session.sql(QUERY, accuracy=(100.0, 0.05))
    with pytest.raises(ArgumentError, match=r"takes bounds=\{'max_rows_bound': N\} only .* not amount"):
        session.sql(QUERY, epsilon=1, bounds={"amount": (0, 10)})
    with pytest.raises(ArgumentError, match="max_rows_bound must be a positive integer"):
        session.sql(QUERY, epsilon=1, bounds={"max_rows_bound": 0})
    with pytest.raises(QueryRefused, match=r"answered by R2T's linear program .* which has no noise plan"):
        session.plan(QUERY, epsilon=1)
    assert session.ledger.entries() == []


def test_explain_says_the_program_answers_and_how(tmp_path: Path) -> None:
    session = kakeibo.connect(_engine(_tables()), catalog=CATALOG, ledger=tmp_path / "l.sqlite", budget=10)
    text = session.explain(QUERY, epsilon=1, bounds={"max_rows_bound": 1000})
    assert "R2T's linear program per threshold tau" in text and "persons of table(s) people" in text
    assert "GS = 100 x 1,000 join results per person" in text and "R2T race over 4 thresholds" in text
    assert 'FROM "transfers" AS "t" JOIN "people" AS "p1"' in text
    assert session.ledger.entries() == []


def test_the_grid_follows_the_declared_or_given_bound() -> None:
    assert _program().race.taus == (100.0, 1000.0, 10000.0)  # GS = 100 x max_rows_bound 100
    counted = _program("SELECT COUNT(*) FROM transfers", bounds={"max_rows_bound": 10})
    assert counted.race.taus == (1.0, 10.0) and not counted.weighted
    assert [m.sensitivity for m in counted.race.mechanisms] == [t * SENSITIVITY_FACTOR for t in (1.0, 10.0)]


def test_line_items_belong_to_their_customer_and_their_supplier(tpch_tables: dict[str, pa.Table]) -> None:
    """TPC-H with suppliers protected too (:func:`kakeibo.data.tpch.two_person_catalog`): a query over line
    items reaches the customer through a join kakeibo adds, the supplier directly; the charge names no
    dataset, so it counts against every dataset's budget."""
    catalog = Catalog.from_dict(tpch.two_person_catalog())
    query = analyze_program(
        "SELECT COUNT(*) FROM lineitem WHERE l_quantity > 10",
        catalog,
        why="test",
        dialect="duckdb",
        database=None,
        epsilon=1,
    )
    assert query.person_tables == ("customer", "supplier") and query.dataset is None
    assert 'JOIN "orders" AS "__person_1" ON "__person_1"."o_orderkey" = "lineitem"."l_orderkey"' in (
        query.statement
    )
    tables = {name: tpch_tables[name] for name in ("lineitem", "orders")}
    raw = _engine(tables).execute(query.statement)
    found = incidence(raw, query.person_tables, query.weighted)
    truth = (
        duckdb.sql("SELECT COUNT(*) FROM lineitem_t WHERE l_quantity > 10", connection=None)
        if False
        else None
    )
    del truth
    assert found.size == int(
        pa.compute.sum(pa.compute.greater(tpch_tables["lineitem"]["l_quantity"], 10)).as_py()
    )
    assert found.n_persons == len(set(raw["__p0"].to_pylist())) + len(set(raw["__p1"].to_pylist()))


@pytest.mark.xdist_group("spark")
def test_postgres_and_spark_answer_as_duckdb_does(
    tmp_path: Path, postgres_backend: Backend, spark_backend: Backend
) -> None:
    """The same query and seed on the three engines: the same statement (translated), the same join
    results, so the same release up to the program's certified tolerance (the engines return rows in
    different orders, so the solver sees the same program with its rows and columns permuted)."""
    tables = _tables()
    answers = []
    for i, backend in enumerate((_engine(tables), postgres_backend, spark_backend)):
        if i:
            for name, table in tables.items():
                backend.load_table(name, table)
        session = kakeibo.connect(backend, catalog=CATALOG, ledger=tmp_path / f"l{i}.sqlite", budget=10)
        answers.append(session.sql(QUERY, epsilon=1, rng=np.random.default_rng(36)).to_arrow().to_pylist()[0])
    for answer in answers[1:]:
        for key, value in answer.items():
            assert value == pytest.approx(answers[0][key], rel=0, abs=1e-6 * 10_000 + 1e-9), key


def test_splitting_by_group_is_restricting_to_each_group() -> None:
    """``Incidence.split`` (one pass) gives, group by group, what ``restricted`` gives: the same results in
    the same order, renumbered, with their persons; empty groups included."""
    rng = np.random.default_rng(41)
    found = Incidence.from_codes(
        [rng.integers(0, 30, 500), rng.integers(0, 30, 500), rng.integers(0, 30, 500)], 30, rng.random(500)
    )
    labels = rng.integers(0, 6, 500)
    labels[labels == 4] = 5  # group 4 is empty
    for g, part in enumerate(found.split(labels, 6)):
        alone = found.restricted(labels == g)
        assert part.n_persons == alone.n_persons == 30
        assert np.array_equal(part.weights, alone.weights)
        assert np.array_equal(part.results, alone.results) and np.array_equal(part.persons, alone.persons)
    assert sum(p.size for p in found.split(labels, 6)) == found.size
