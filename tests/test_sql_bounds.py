"""Bounds chosen privately (``"auto"`` in the catalog, :mod:`kakeibo.sql.bounds`).

What is checked:

* the catalog's settings and their refusals, before any data is read;
* the histograms' calibration on the engine: for neighbouring databases -- one person added, the person
  whose rows and values set the bounds (10^4 rows over every group, 1e300, NaN, the infinities, the
  smallest subnormal) -- the rows histogram moves by exactly one person in one cell and each value
  histogram by at most 1 in L1: the sensitivity the noise is calibrated to;
* an audit of the whole selection (noisy histograms, then the choice) on those neighbours: it does not
  refute the histograms' epsilon, while the same audit refutes a selection whose value histogram counts
  rows instead of shares of a person (sensitivity 10^4), which shows the audit has power;
* the ledger is charged once, with the declared split; the release keeps the chosen bounds through a replay;
* what the answer gains: on Zipf-skewed visits the chosen bounds' error is a fraction of the hand-set
  bounds' bias, and the warning fires when the estimated bias exceeds the noise and stays silent when it
  does not.
"""

from __future__ import annotations

import tempfile
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from kakeibo.audit import audit
from kakeibo.backends import DuckDBBackend
from kakeibo.mechanisms import AccuracyWarning, UnresolvedBiasWarning
from kakeibo.noise import resolve_source
from kakeibo.privacy import PureDP
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql.bounds import POWERS, BoundChoice
from kakeibo.sql.options import QueryOptions

CATEGORIES = [f"c{i:02d}" for i in range(8)]
QUERY = "SELECT category, COUNT(*) AS n, SUM(amount) AS total FROM visits GROUP BY category"


def _catalog(**table: Any) -> Catalog:
    amount = table.pop("amount", {"type": "float", "lower": "auto", "upper": "auto"})
    settings = {
        "privacy_unit": "user_id",
        "max_partitions": "auto",
        "max_rows_per_partition": "auto",
        "bound_selection": "histogram",  # these tests are of the histograms; the ladders have their own
    } | table
    return Catalog.from_dict(
        {
            "tables": {
                "visits": settings
                | {
                    "columns": {
                        "user_id": "int",
                        "category": {"type": "str", "public_values": CATEGORIES},
                        "amount": amount,
                    }
                }
            }
        }
    )


AUTO = _catalog()
HANDSET = _catalog(
    max_partitions=3, max_rows_per_partition=5, amount={"type": "float", "lower": 0, "upper": 100}
)


def _visits(users: int, seed: int, exponent: float = 1.6, cap: int = 400) -> pa.Table:
    """Visits of ``users`` persons with Zipf-many rows each (at most ``cap``), categories weighted 1/i,
    amounts Gamma(2, 15)."""
    rng = np.random.default_rng(seed)
    per_user = np.minimum(rng.zipf(exponent, size=users), cap)
    user = np.repeat(np.arange(users), per_user)
    weights = 1 / np.arange(1, len(CATEGORIES) + 1)
    category = rng.choice(np.array(CATEGORIES), size=user.size, p=weights / weights.sum())
    return pa.table({"user_id": user, "category": category, "amount": rng.gamma(2.0, 15.0, size=user.size)})


#: the person whose rows and values set the bounds: many rows in every group, extreme values
TARGET = 10**9


def _with_target(table: pa.Table) -> pa.Table:
    specials = [1e300, float("nan"), float("inf"), float("-inf"), 5e-324, -0.0, -1e300, 3.0]
    rows = 10_000
    extra = pa.table(
        {
            "user_id": np.full(rows, TARGET),
            "category": np.resize(np.array(CATEGORIES), rows),
            "amount": np.resize(np.array(specials), rows),
        }
    )
    return pa.concat_tables([table, extra.cast(table.schema)])


def _backend(table: pa.Table) -> DuckDBBackend:
    backend = DuckDBBackend()
    backend.load_table("visits", table)
    return backend


def _session(backend: Any, catalog: Catalog, tmp_path: Path, budget: float = 100.0) -> kakeibo.sql.Session:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return kakeibo.connect(backend, catalog=catalog, ledger=tmp_path / "ledger.sqlite", budget=budget)


def _choice(session: kakeibo.sql.Session, epsilon: float = 1.0) -> BoundChoice:
    _, choice, _ = session._planned(QUERY, QueryOptions(epsilon=epsilon))
    assert choice is not None
    return choice


@pytest.fixture(scope="module")
def neighbours() -> tuple[pa.Table, pa.Table]:
    base = _visits(3_000, seed=5)
    return base, _with_target(base)


# --- the catalog -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"amount": {"type": "float", "lower": "auto", "upper": 10}}, 'needs both bounds "auto"'),
        (
            {"amount": {"type": "str", "lower": "auto", "upper": "auto"}},
            "only int, float and decimal columns take bounds",
        ),
        ({"bounds_share": 1.0}, "bounds_share of table 'visits' must lie strictly between 0 and 1"),
        ({"bounds_share": "a lot"}, "bounds_share of table 'visits' must lie strictly between 0 and 1"),
        (
            {"bound_selection": "guess"},
            'bound_selection of table \'visits\' is "histogram", "ladder" or "race"',
        ),
        ({"bound_selection": "race"}, "races max_rows_per_partition"),
        ({"bound_selection": "race", "max_partitions": 3}, "chooses no column bounds"),
        ({"truncation_base": 4.0}, 'sets the grid of bound_selection = "race"'),
        ({"max_rows_per_partition": 5, "max_rows_bound": 10}, "bounds the choice of max_rows_per_partition"),
        ({"privacy_unit": None, "max_rows_per_partition": 1}, 'so max_partitions is 1, not "auto"'),
    ],
)
def test_the_catalog_refuses_settings_it_cannot_honour(change: dict[str, Any], fragment: str) -> None:
    settings = {k: v for k, v in change.items() if v is not None}
    removed = [k for k, v in change.items() if v is None]
    data = AUTO.to_dict()
    data["tables"]["visits"].update(settings)
    if "amount" in settings:
        data["tables"]["visits"]["columns"]["amount"] = settings.pop("amount")
        data["tables"]["visits"].pop("amount")
    for key in removed:
        data["tables"]["visits"].pop(key)
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        Catalog.from_dict(data)


def test_the_catalog_reads_and_writes_auto() -> None:
    table = AUTO.table("visits")
    assert table.chooses_bounds and not table.auto_truncation
    assert table.column("amount").auto_bounds and not table.column("amount").bounded
    assert Catalog.from_dict(AUTO.to_dict()) == AUTO
    assert AUTO.to_dict()["tables"]["visits"]["columns"]["amount"] == {
        "type": "float",
        "lower": "auto",
        "upper": "auto",
    }


def test_what_needs_declared_bounds_is_refused_before_any_charge(tmp_path: Path) -> None:
    session = _session(_backend(_visits(100, seed=1)), AUTO, tmp_path)
    with pytest.raises(QueryRefused, match=r'chosen when a query runs \("auto"\)'):
        session.sql("SELECT SUM(amount * 2) FROM visits", epsilon=1)
    with pytest.raises(QueryRefused, match="accuracy= needs an error that does not depend on the data"):
        session.sql("SELECT COUNT(*) FROM visits", accuracy=(10.0, 0.05))
    assert session.ledger.entries() == []


# --- the histograms' calibration on the engine -----------------------------------------------------------


def _exact(table: pa.Table, tmp_path: Path) -> tuple[np.ndarray, np.ndarray]:
    session = _session(_backend(table), AUTO, tmp_path / str(table.num_rows))
    choice = _choice(session)
    return choice.exact(session._execute(choice.histograms_sql()))


def test_one_person_moves_each_histogram_by_at_most_one(
    neighbours: tuple[pa.Table, pa.Table], tmp_path: Path
) -> None:
    """The target adds weights summing to 1 to the rows histogram (all in one cell: 8 groups of 1,250 rows)
    and shares summing to 1 (over the
    bins of 1e300, NaN, the infinities, a subnormal and 0) to the value histogram (up to the engine's
    rounding of the other persons' summed shares)."""
    (cells, values), (cells_t, values_t) = (_exact(t, tmp_path) for t in neighbours)
    moved = cells_t - cells
    assert np.abs(moved).sum() == pytest.approx(1.0, abs=1e-9)
    rows_bin, groups_bin = np.argwhere(moved > 0.5)[0]
    assert (rows_bin, groups_bin) == (10, 3)  # 1,250 rows in [2^10, 2^11) in each of 8 groups, [2^3, 2^4)
    shift = values_t - values
    assert np.abs(shift).sum() == pytest.approx(1.0, abs=1e-9) and (shift >= -1e-9).all()
    middle = top = len(POWERS) + 1
    touched = {int(i) - middle for i in np.flatnonzero(shift > 1e-9)}
    three = list(POWERS).index(2) + 1  # 3.0 is in (2^1, 2^2]
    assert touched == {top, -top, 0, 1, three}  # beyond 2^40 (1e300, NaN, inf), below -2^40, 0, 5e-324, 3


def test_the_histograms_are_noised_at_the_declared_share(
    neighbours: tuple[pa.Table, pa.Table], tmp_path: Path
) -> None:
    session = _session(_backend(neighbours[0]), AUTO, tmp_path)
    choice = _choice(session)
    rows, values = choice._mechanisms()
    assert choice.histogram_epsilon == pytest.approx(0.1) and choice.answer_epsilon == pytest.approx(0.9)
    assert rows.sensitivity == 1 and values.sensitivity == 1
    assert rows.epsilon == pytest.approx(0.05) and values.epsilon == pytest.approx(0.05)  # two histograms


# --- the audit of the whole selection --------------------------------------------------------------------


def _outcome(choice: BoundChoice, cells: np.ndarray, values: np.ndarray, rng: Any) -> int:
    """One run of the selection on exact histograms, coded as one integer (kappa, L0, upper bound)."""
    persons, shares = choice.noisy(cells, values, resolve_source(rng))
    chosen = choice.decide(persons, shares)
    kappa, l0 = chosen.max_rows_per_partition or 1, chosen.max_partitions or 1
    upper = round(4 * np.log2(chosen.columns["amount"][1])) + 512  # the candidates are 2^(q/4)
    return (round(2 * np.log2(kappa)) * 64 + int(np.log2(l0))) * 1024 + upper


def _sampler(choice: BoundChoice, worlds: list[tuple[np.ndarray, np.ndarray]]) -> Any:
    def sample(index: int, n: int, rng: Any) -> np.ndarray:
        cells, values = worlds[index]
        return np.array([_outcome(choice, cells, values, rng) for _ in range(n)])

    return sample


@pytest.mark.statistical
def test_an_audit_of_the_selection_does_not_refute_its_epsilon(
    neighbours: tuple[pa.Table, pa.Table], tmp_path: Path
) -> None:
    """1,000 selections per neighbour (seeded, after 250 to choose the events): the audit's 95% lower bound
    on epsilon stays below the histograms' 0.1; a selection whose value histogram counts rows (one person
    moves it by 10^4) is refuted by the same audit."""
    worlds = [_exact(t, tmp_path) for t in neighbours]
    choice = _choice(_session(_backend(neighbours[0]), AUTO, tmp_path / "audit"))
    honest = audit(
        _sampler(choice, worlds),
        0,
        1,
        trials=1_000,
        rng=np.random.default_rng(19),
        batch=250,
        selection_trials=250,
    )
    assert not honest.refutes(float(choice.histogram_epsilon)), honest

    def counted_rows(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        cells, values = _exact(table, tmp_path / "rows")
        amounts = np.nan_to_num(table.column("amount").to_numpy(zero_copy_only=False), nan=np.inf)
        positive = amounts[amounts > 0]
        bins = np.searchsorted(2.0 ** np.array(POWERS), positive) + 1  # the bin of (2^(k-1), 2^k]
        values[0] = 0
        np.add.at(values[0], bins + len(POWERS) + 1, 1.0)
        return cells, values

    broken = audit(
        _sampler(choice, [counted_rows(t) for t in neighbours]),
        0,
        1,
        trials=1_000,
        rng=np.random.default_rng(19),
        batch=250,
        selection_trials=250,
    )
    assert broken.refutes(float(choice.histogram_epsilon)), broken


# --- the release: one charge, the chosen bounds kept, the answer's accuracy --------------------------------


def test_one_ledger_entry_is_charged_with_the_declared_split(tmp_path: Path) -> None:
    backend = _backend(_visits(2_000, seed=2))
    session = _session(backend, _catalog(bounds_share=0.25), tmp_path)
    result = session.sql(QUERY, epsilon=0.8, rng=np.random.default_rng(3))
    (entry,) = session.ledger.entries()
    assert entry.loss == PureDP(Fraction(4, 5)) and result.privacy_loss == entry.loss
    choice = _choice(session, epsilon=0.8)
    assert choice.share == pytest.approx(0.25)
    assert result.bounds is not None and float(result.bounds.histogram_epsilon) == pytest.approx(0.2)
    answer = choice.answer_plan(result.bounds)
    assert float(answer.epsilon) == pytest.approx(0.6)  # 0.8 in all at epsilon=0.8: 0.2 + 0.6
    again = session.sql(QUERY, epsilon=0.8, rng=np.random.default_rng(4))
    assert again.to_arrow().equals(result.to_arrow()) and again.bounds == result.bounds
    assert len(session.ledger.entries()) == 1


def test_explain_shows_the_split_the_histograms_and_their_statement(tmp_path: Path) -> None:
    session = _session(_backend(_visits(100, seed=1)), AUTO, tmp_path)
    text = session.explain(QUERY, epsilon=1)
    chosen = "max_rows_per_partition, max_partitions, the bounds of amount"
    assert f"bounds chosen privately ({chosen}) at epsilon 0.1" in text
    assert "the answer at 0.9" in text and "engine statement of the histograms:" in text
    assert text.count("Laplace noise of scale 20;") == 2  # 0.1 over two histograms of sensitivity 1
    assert session.ledger.entries() == []


def _median_errors(result: kakeibo.sql.Result, table: pa.Table) -> tuple[float, float]:
    """Median relative errors of the counts and sums over the categories, against the unbounded answer."""
    exact = _exact_answer(table)
    rows = result.to_arrow().to_pylist()
    counts = [abs(r["n"] - exact[r["category"]][0]) / exact[r["category"]][0] for r in rows]
    sums = [abs(r["total"] - exact[r["category"]][1]) / exact[r["category"]][1] for r in rows]
    return float(np.median(counts)), float(np.median(sums))


def _exact_answer(table: pa.Table) -> dict[str, tuple[float, float]]:
    categories = np.array(table.column("category").to_pylist())
    amounts = table.column("amount").to_numpy()
    return {c: (float((categories == c).sum()), float(amounts[categories == c].sum())) for c in CATEGORIES}


def test_chosen_bounds_beat_hand_set_bounds_on_skewed_visits(tmp_path: Path) -> None:
    """383,000 visits of 20,000 Zipf users: the docs-style hand-set limits (5 rows, 3 groups) lose more
    than half of every category; the chosen ones err by less than a third of that, and estimate what
    they dropped."""
    table = _visits(20_000, seed=7)
    backend = _backend(table)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        chosen = _session(backend, AUTO, tmp_path / "auto").sql(
            QUERY, epsilon=1, rng=np.random.default_rng(8)
        )
        handset = _session(backend, HANDSET, tmp_path / "hand").sql(
            QUERY, epsilon=1, rng=np.random.default_rng(8)
        )
    auto_errors, hand_errors = _median_errors(chosen, table), _median_errors(handset, table)
    assert hand_errors[0] > 0.5 and hand_errors[1] > 0.5
    assert auto_errors[0] < hand_errors[0] / 3 and auto_errors[1] < hand_errors[1] / 3
    dropped = None if chosen.bounds is None else chosen.bounds.dropped_rows
    assert dropped is not None and 0 < dropped < 0.5


def test_the_warning_fires_when_the_estimated_bias_exceeds_the_noise(tmp_path: Path) -> None:
    """Light users (1 row each) lose nothing to any limit: no warning of a measured bias, only the
    UnresolvedBiasWarning that nothing rules out a heavier person in groups the measurement leaves out. A
    declared L0 of 1 on users who visit every category drops most rows: the estimate says so and warns."""
    rng = np.random.default_rng(9)
    light = pa.table(
        {
            "user_id": np.arange(5_000),
            "category": rng.choice(np.array(CATEGORIES), size=5_000),
            "amount": rng.gamma(2.0, 15.0, size=5_000),
        }
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _session(_backend(light), AUTO, tmp_path / "light").sql(QUERY, epsilon=1)
    assert [w.category for w in caught] == [UnresolvedBiasWarning], [str(w.message) for w in caught]
    assert "may exceed their noise" in str(caught[0].message)
    assert result.bounds is not None and result.bounds.max_rows_per_partition == 1
    heavy = pa.table(
        {
            "user_id": np.repeat(np.arange(500), 80),
            "category": np.tile(np.repeat(np.array(CATEGORIES), 10), 500),
            "amount": np.full(40_000, 10.0),
        }
    )
    with pytest.warns(AccuracyWarning, match="bias these statistics toward zero by more than their noise"):
        result = _session(_backend(heavy), _catalog(max_partitions=1), tmp_path / "heavy").sql(
            QUERY, epsilon=1
        )
    dropped = None if result.bounds is None else result.bounds.dropped_rows
    assert dropped is not None and dropped > 0.5


def test_histograms_that_saw_nothing_take_the_widest_bounds_and_say_so(tmp_path: Path) -> None:
    """40 persons: no cell of either histogram rises above its noise floor (about 270 at epsilon 0.05 each).
    Nothing is estimated, so the limits and bounds are the widest candidates (their intervals cover the
    unbounded answer), what they drop is unknown rather than 0%, and the warning names both histograms."""
    table = _visits(40, seed=21)
    unseen = r"no cell of the histogram of rows, amount rose above its noise"
    with pytest.warns(AccuracyWarning, match=unseen):
        result = _session(_backend(table), AUTO, tmp_path).sql(QUERY, epsilon=1, rng=np.random.default_rng(3))
    bounds = result.bounds
    assert bounds is not None and bounds.dropped_rows is None and bounds.clipped_values == {"amount": None}
    assert bounds.columns == {"amount": (-(2.0**40), 2.0**40)}
    widest_rows = AUTO.tables["visits"].max_rows_bound
    assert bounds.max_rows_per_partition == widest_rows and bounds.max_partitions == len(CATEGORIES)
    assert "an unknown share of the rows, an unknown share of the mass of amount" in bounds.describe()
    exact = _exact_answer(table)
    answer = result.to_arrow().to_pylist()
    assert {row["category"] for row in answer} == set(exact)
    for row in answer:
        true_count, true_total = exact[row["category"]]
        assert row["n_ci_low"] <= true_count <= row["n_ci_high"]
        assert row["total_ci_low"] <= true_total <= row["total_ci_high"]


def test_a_row_level_table_chooses_its_column_bounds(tmp_path: Path) -> None:
    """Each row a person: the value histogram counts rows (weight 1 each), and no limit is chosen."""
    rng = np.random.default_rng(11)
    table = pa.table({"amount": rng.gamma(2.0, 15.0, size=20_000)})
    catalog = Catalog.from_dict(
        {"tables": {"visits": {"columns": {"amount": {"type": "float", "lower": "auto", "upper": "auto"}}}}}
    )
    result = _session(_backend(table), catalog, tmp_path).sql(
        "SELECT SUM(amount) AS total FROM visits", epsilon=1
    )
    assert result.bounds is not None and result.bounds.max_rows_per_partition is None
    low, high = result.bounds.columns["amount"]
    assert low == 0 and 32 <= high <= 512  # Gamma(2, 15): mean 30, 99.9% below 140
    total = float(np.sum(table.column("amount").to_numpy()))
    assert abs(result.to_arrow().column("total")[0].as_py() - total) < 0.05 * total


def test_declared_limits_and_chosen_column_bounds(tmp_path: Path) -> None:
    """Only the amount is "auto": the rows histogram still estimates the rows the declared limits keep
    (so the bound is scored against them) and what they drop."""
    table = _visits(20_000, seed=12)
    catalog = _catalog(max_partitions=8, max_rows_per_partition=50)
    result = _session(_backend(table), catalog, tmp_path).sql(QUERY, epsilon=1, rng=np.random.default_rng(13))
    assert result.bounds is not None and result.bounds.max_rows_per_partition is None
    low, high = result.bounds.columns["amount"]
    dropped = result.bounds.dropped_rows
    assert low == 0 and 32 <= high <= 512 and dropped is not None and 0 < dropped < 0.5


# --- the histograms on every engine ----------------------------------------------------------------------

ROW_LEVEL = Catalog.from_dict(
    {"tables": {"visits": {"columns": {"amount": {"type": "float", "lower": "auto", "upper": "auto"}}}}}
)


def _histograms(backend: Any, tmp_path: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """The exact histograms of the person-level query and of a row-level one on ``backend``."""
    out = []
    for catalog, query in ((AUTO, QUERY), (ROW_LEVEL, "SELECT SUM(amount) AS total FROM visits")):
        session = _session(backend, catalog, tmp_path / f"h{len(out)}")
        _, choice, _ = session._planned(query, QueryOptions(epsilon=1))
        assert choice is not None
        out.append(choice.exact(session._execute(choice.histograms_sql())))
    return out


def _assert_same(
    found: list[tuple[np.ndarray, np.ndarray]], expected: list[tuple[np.ndarray, np.ndarray]]
) -> None:
    for (cells, values), (cells_e, values_e) in zip(found, expected, strict=True):
        np.testing.assert_allclose(cells, cells_e, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(values, values_e, rtol=1e-12, atol=1e-9)


@pytest.fixture(scope="module")
def with_target(neighbours: tuple[pa.Table, pa.Table]) -> pa.Table:
    return neighbours[1]


@pytest.mark.xdist_group("postgres")
def test_postgres_bins_every_value_as_duckdb_does(
    postgres_server: str, with_target: pa.Table, tmp_path: Path
) -> None:
    """NaN, the infinities, 1e300, -0.0 and the smallest subnormal land in the same bins, and the weights
    sum alike (up to the rounding of sums in another order)."""
    from kakeibo.backends.postgres import PostgresBackend
    from tpch_fixtures import postgres_database_with

    backend = PostgresBackend(postgres_database_with(postgres_server, {"visits": with_target}))
    try:
        _assert_same(
            _histograms(backend, tmp_path / "pg"), _histograms(_backend(with_target), tmp_path / "duck")
        )
    finally:
        backend.close()


@pytest.mark.xdist_group("spark")
def test_spark_bins_every_value_as_duckdb_does(
    spark_backend: Any, with_target: pa.Table, tmp_path: Path
) -> None:
    from kakeibo.backends.spark import SparkBackend

    backend = SparkBackend(session=spark_backend.session)
    backend.load_table("visits", with_target)
    try:
        _assert_same(
            _histograms(backend, tmp_path / "spark"), _histograms(_backend(with_target), tmp_path / "duck")
        )
    finally:
        backend.close()


def test_quantiles_get_limits_of_their_own_and_are_calibrated_to_them() -> None:
    """With quantile limits (kappa_q, L0_q) the quantile's utility sensitivity is kappa_q max(q, 1 - q) at
    epsilon / L0_q per group, and in the engine one person adds at most kappa_q to the histogram of each of
    at most L0_q groups, while the counts keep the query's (kappa, L0)."""
    from kakeibo.sql import analyze
    from kakeibo.sql.plan import plan_query
    from kakeibo.sql.rewrite import bounded_sql

    catalog = _catalog(
        max_partitions=6, max_rows_per_partition=40, amount={"type": "float", "lower": 0, "upper": 100}
    )
    query = analyze(
        "SELECT category, COUNT(*) AS n, MEDIAN(amount) AS m FROM visits GROUP BY category", catalog
    )
    plan = plan_query(query, epsilon=1, quantile_limits=(3, 2))
    (median,) = plan.quantiles
    assert median.utility_sensitivity == 3 * 0.5 and plan.quantile_rows == 3 and plan.quantile_partitions == 2
    assert float(median.value.epsilon) == pytest.approx(1 / 2 / 2 / 2)  # share 1/2, / L0_q, half to the value
    person = pa.table(
        {
            "user_id": np.full(80, 7),
            "category": np.repeat(np.array(CATEGORIES), 10),
            "amount": np.full(80, 5.0),
        }
    )
    rows = _backend(person).execute(bounded_sql(plan)).to_pylist()
    mass = {}
    for row in rows:
        mass[row["__g0"]] = mass.get(row["__g0"], 0.0) + row["__mass"]
    assert sum(1 for m in mass.values() if m > 0) == 2 and max(mass.values()) == pytest.approx(3.0)
    counts = {}
    for row in rows:
        counts[row["__g0"]] = counts.get(row["__g0"], 0.0) + row["rows"]
    assert len(counts) == 6 and all(c == pytest.approx(10.0) for c in counts.values())  # kappa 40, L0 6


# --- a query's own bounds ---------------------------------------------------------------------------------


def test_a_query_overrides_the_catalogs_limits_and_bounds(tmp_path: Path) -> None:
    """``bounds=`` replaces what the catalog declares for one query: "auto" limits become fixed (no
    histogram, the hand-set catalog's plan) or fixed ones "auto"; each override is its own release (request
    id), asking the same again replays it, and bad overrides are refused before any charge."""
    session = _session(_backend(_visits(2_000, seed=14)), AUTO, tmp_path / "auto")
    fixed = {"max_rows_per_partition": 5, "max_partitions": 3, "amount": (0, 100)}
    assert session._planned(QUERY, QueryOptions(epsilon=1, bounds=fixed))[1] is None
    hand = _session(_backend(_visits(10, seed=1)), HANDSET, tmp_path / "hand").plan(QUERY, epsilon=1)
    overridden = session.plan(QUERY, epsilon=1, bounds=fixed)
    assert [s.mechanism.scale for s in overridden.statistics] == [s.mechanism.scale for s in hand.statistics]  # type: ignore[attr-defined]
    first = session.sql(QUERY, epsilon=1, bounds=fixed)
    assert first.bounds is None and len(session.ledger.entries()) == 1
    assert session.sql(QUERY, epsilon=1, bounds=fixed).to_arrow().equals(first.to_arrow())
    chosen = session.sql(QUERY, epsilon=1, bounds={"max_partitions": 8})  # kappa and amount stay "auto"
    assert chosen.bounds is not None and chosen.bounds.max_partitions is None
    assert chosen.bounds.max_rows_per_partition is not None and len(session.ledger.entries()) == 2
    handset = _session(_backend(_visits(2_000, seed=14)), HANDSET, tmp_path / "h2")
    auto = handset.sql(QUERY, epsilon=1, bounds={"max_rows_per_partition": "auto", "visits.amount": "auto"})
    assert auto.bounds is not None and auto.bounds.max_rows_per_partition is not None
    assert set(auto.bounds.columns) == {"amount"}
    for bad, fragment in (
        ({"height": (0, 1)}, "names a column of none of the query's tables"),
        ({"amount": (5, 1)}, "lower bound 5 above its upper bound 1"),
        ({"amount": 7}, 'a pair \\(lower, upper\\) or "auto"'),
        ({"max_partitions": 0}, "max_partitions of table 'visits' must be a positive integer"),
    ):
        with pytest.raises(ValueError, match=fragment):
            session.sql(QUERY, epsilon=1, bounds=bad)
    assert len(session.ledger.entries()) == 2


def _quantile_statement_rows(backend: Any) -> list[tuple[object, ...]]:
    """The histogram statement of a MEDIAN under its own limits (kappa_q 3, L0_q 2 of L0 6), on persons with
    at most two groups each (so the random order of groups cannot change what is kept)."""
    from kakeibo.sql import analyze
    from kakeibo.sql.plan import plan_query
    from kakeibo.sql.rewrite import bounded_sql

    catalog = _catalog(
        max_partitions=6, max_rows_per_partition=40, amount={"type": "float", "lower": 0, "upper": 100}
    )
    query = analyze(
        "SELECT category, COUNT(*) AS n, MEDIAN(amount) AS m FROM visits GROUP BY category", catalog
    )
    plan = plan_query(query, epsilon=1, quantile_limits=(3, 2))
    session = _session(backend, catalog, Path(tempfile.mkdtemp()))
    rows = session._execute(bounded_sql(plan)).to_pylist()
    return sorted((r["__g0"], r["__bucket"], round(r["__mass"], 9), round(r["rows"], 9)) for r in rows)


def _two_group_persons() -> pa.Table:
    rng = np.random.default_rng(15)
    user = np.repeat(np.arange(300), 10)
    category = np.array(CATEGORIES)[user % 7 + np.arange(user.size) % 2]  # two categories per person
    return pa.table(
        {"user_id": user, "category": category, "amount": rng.uniform(0, 100, user.size).round(2)}
    )


@pytest.mark.xdist_group("postgres")
def test_postgres_weighs_the_quantiles_own_limits_as_duckdb_does(postgres_server: str) -> None:
    from kakeibo.backends.postgres import PostgresBackend
    from tpch_fixtures import postgres_database_with

    table = _two_group_persons()
    backend = PostgresBackend(postgres_database_with(postgres_server, {"visits": table}))
    try:
        expected = _quantile_statement_rows(_backend(table))
        assert len(expected) > 100 and _quantile_statement_rows(backend) == expected
    finally:
        backend.close()


@pytest.mark.xdist_group("spark")
def test_spark_weighs_the_quantiles_own_limits_as_duckdb_does(spark_backend: Any) -> None:
    from kakeibo.backends.spark import SparkBackend

    table = _two_group_persons()
    backend = SparkBackend(session=spark_backend.session)
    backend.load_table("visits", table)
    try:
        expected = _quantile_statement_rows(_backend(table))
        assert len(expected) > 100 and _quantile_statement_rows(backend) == expected
    finally:
        backend.close()
