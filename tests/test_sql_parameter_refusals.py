"""Issue 29, R3, R8 and R9: what the model or the planner cannot cover is refused before any read.

* R3: a view on a table with a correlation graph was built at plain epsilon (leaf totals of Laplace scale
  1 / epsilon_p where seed 001's eq. 26 needs ``(1 + l*)`` times more: 40 users in a clique at tau = 0.001).
* R8: ``bound_selection = "race"`` on a correlated table replaced the correlated mechanism by the race's
  plain ones.
* R9: ``create_view(..., epsilon=1e-30)``, ``bounds_share=1e-300`` and views over ``date`` or ``bool``
  public-value columns passed every check and failed inside the draw (charged, in every world); an
  epsilon whose noise is beyond the exact samplers raised a raw ``ValueError`` while planning.

Each refusal is checked on two neighbouring databases (:mod:`adversarial_harness`: without and with one
target person holding extreme values): the same error class and text in both, and the ledger untouched.
No test here is statistical.
"""

from __future__ import annotations

import datetime
import itertools
import re
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from adversarial_harness import BASE_USERS, CATALOG_TOML, TARGET_ID, Worlds, duckdb_worlds
from kakeibo.backends import Backend, DuckDBBackend
from kakeibo.errors import ConfigurationError
from kakeibo.privacy import PureDP
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql.catalog import Catalog as CatalogClass
from kakeibo.sql.views import check_view_epsilon, parse_view_definition
from kakeibo.views.hdpview import build

#: the review's graph: the target and 39 base users in one clique, tau = 0.001 (R3, R8)
CLIQUE = [TARGET_ID, *range(39)]
EDGES = [list(pair) for pair in itertools.combinations(CLIQUE, 2)]
CORRELATION = f"[tables.visits.correlation]\nedges = {EDGES}\ntau = 0.001\n"
CORRELATED_TOML = CATALOG_TOML + CORRELATION

Call = Callable[[kakeibo.sql.Session], object]


@pytest.fixture(scope="module")
def worlds() -> Iterator[Worlds]:
    built = duckdb_worlds()
    yield built
    built.close()


def observe(backend: Backend, catalog: Catalog, call: Call, ledger: Path) -> tuple[str, str, PureDP, int]:
    """The error ``call`` raises on a fresh session over ``backend``, and the ledger after it."""
    session = kakeibo.connect(backend, catalog=catalog, ledger=ledger, budget=1000)
    with pytest.raises(kakeibo.Error) as raised:
        call(session)
    spent, entries = session.ledger.spent(), len(session.ledger.entries())
    session.ledger.close()
    return type(raised.value).__name__, str(raised.value), spent, entries


def refused_alike(backends: dict[str, Backend], catalog: Catalog, call: Call, tmp_path: Path) -> str:
    """``call`` is refused (``QueryRefused``) with one text in the base and the target world, free in both;
    returns the text."""
    seen = {
        world: observe(backends[world], catalog, call, tmp_path / f"{world}.sqlite") for world in backends
    }
    assert len(set(seen.values())) == 1, seen
    kind, text, spent, entries = seen["base"]
    assert kind == "QueryRefused" and spent == PureDP(0) and entries == 0, seen["base"]
    assert text.count(". ") == 0 and text.endswith("."), text  # one sentence
    return text


def neighbours(worlds: Worlds) -> dict[str, Backend]:
    return {world: worlds.backends[world] for world in ("base", "target")}


# --- R3: views on correlated tables --------------------------------------------------------------------


def test_the_clique_is_the_reviews_and_needs_about_40_times_a_views_noise() -> None:
    """The graph of the regression tests is the review's. For the clique ``K_n`` with unit weights, ``L`` has
    eigenvalues 0 (once) and ``n`` (``n - 1`` times), so ``tau S_ii = 1/n + (n - 1) tau / (n (n + tau))``
    and ``l* = 1 / (tau S_ii) - 1`` (about 38.96 for n = 40, tau = 0.001): eq. 26 needs ``1 + l*`` times the
    noise a view draws at the same epsilon."""
    spec = Catalog.from_toml(CORRELATED_TOML).table("visits").correlation
    assert spec is not None
    n, tau = Fraction(40), Fraction(1, 1000)
    truth = float(1 / (1 / n + (n - 1) * tau / (n * (n + tau))) - 1)
    assert truth > 38.9
    certified = spec.bound("int").max_leakage
    assert truth <= certified <= truth * (1 + 1e-6)


def test_a_view_on_a_correlated_table_is_refused_free_in_both_worlds(worlds: Worlds, tmp_path: Path) -> None:
    catalog = Catalog.from_toml(CORRELATED_TOML)
    text = refused_alike(
        neighbours(worlds),
        catalog,
        lambda s: s.create_view("v", "SELECT category, amount FROM visits", epsilon=1),
        tmp_path,
    )
    assert "correlated" in text and "sql()" in text  # says why, and what to ask instead
    # the same view on the independent catalog is built: the refusal is the correlation's
    session = kakeibo.connect(
        worlds.backends["base"],
        catalog=Catalog.from_toml(CATALOG_TOML),
        ledger=tmp_path / "i.sqlite",
        budget=9,
    )
    assert session.create_view("v", "SELECT category, amount FROM visits", epsilon=1).privacy_loss == PureDP(
        1
    )


def test_view_bins_beside_a_correlation_graph_are_refused_when_the_catalog_loads() -> None:
    binned = CORRELATED_TOML.replace(
        'amount = { type = "float", lower = 0, upper = 100 }',
        'amount = { type = "float", lower = 0, upper = 100, bins = 10 }',
    )
    assert binned != CORRELATED_TOML
    with pytest.raises(ConfigurationError, match=r"declares the bins of a view.*drop bins and ask COUNT"):
        Catalog.from_toml(binned)
    Catalog.from_toml(binned.replace(CORRELATION, ""))  # bins alone are fine


# --- R8: the race on correlated tables -----------------------------------------------------------------

RACE = 'max_rows_per_partition = "auto"\nbound_selection = "race"\nmax_rows_bound = 100\n'


def _racing(toml: str) -> str:
    racing = toml.replace("max_rows_per_partition = 4\n", RACE, 1)
    assert racing != toml
    return racing


def test_the_race_beside_a_correlation_graph_is_refused_when_the_catalog_loads() -> None:
    with pytest.raises(ConfigurationError, match=r"races its limits.*declare a fixed max_rows_per_partition"):
        Catalog.from_toml(_racing(CORRELATED_TOML))
    Catalog.from_toml(_racing(CATALOG_TOML))  # the race alone is fine


def test_a_referencing_table_cannot_race_for_correlated_persons() -> None:
    """The race may be declared on a table whose rows reach the correlated persons by a reference."""
    purchases = (
        '\n[tables.purchases]\nreferences = { user_id = "visits.user_id" }\nmax_partitions = 1\n'
        + RACE
        + '[tables.purchases.columns]\nuser_id = "int"\nprice = { type = "float", lower = 0, upper = 5 }\n'
    )
    with pytest.raises(ConfigurationError, match=r"table 'purchases' races its limits.*table 'visits'"):
        Catalog.from_toml(CORRELATED_TOML + purchases)
    Catalog.from_toml(CATALOG_TOML + purchases)


def test_the_planner_refuses_the_race_on_a_correlated_table_when_the_catalog_did_not(
    worlds: Worlds, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second line: with the catalog's check switched off, a query still never reaches the race on a
    correlated table (it used to be planned with the race's plain Laplace scales)."""
    monkeypatch.setattr(CatalogClass, "_check_correlated", lambda self, table: None)
    catalog = Catalog.from_toml(_racing(CORRELATED_TOML))
    assert catalog.table("visits").auto_truncation and catalog.table("visits").correlation is not None
    for query in (
        "SELECT COUNT(*) AS n FROM visits",
        "SELECT category, SUM(amount) FROM visits GROUP BY category",
    ):
        text = refused_alike(neighbours(worlds), catalog, lambda s, q=query: s.sql(q, epsilon=1), tmp_path)
        assert "R2T race" in text and "declare a fixed max_rows_per_partition" in text


@pytest.mark.parametrize(
    "bounds",
    [{"amount": "auto"}, {"max_rows_per_partition": "auto"}, {"max_partitions": "auto"}],
    ids=["column", "kappa", "l0"],
)
def test_bounds_chosen_from_histograms_are_refused_on_a_correlated_table(
    worlds: Worlds, tmp_path: Path, bounds: dict[str, object]
) -> None:
    """The same defect class as R8: the histograms and the answer at chosen bounds carry plain noise."""
    query = "SELECT category, SUM(amount) AS s FROM visits GROUP BY category"
    text = refused_alike(
        neighbours(worlds),
        Catalog.from_toml(CORRELATED_TOML),
        lambda s: s.sql(query, epsilon=1, bounds=bounds),
        tmp_path,
    )
    assert "correlated" in text and 'instead of "auto"' in text


# --- R9: every parameter by the planner's rules, before the draw ----------------------------------------


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"epsilon": 1e-30}, "a view's epsilon must lie between 2\\*\\*-40 and 2\\*\\*40, got 1e-30"),
        ({"epsilon": 1e30}, "a view's epsilon must lie between"),
        ({"epsilon": Fraction(1, 2**40)}, "beyond the range of kakeibo's exact samplers"),
        ({"epsilon": 1, "rows_per_person": 2**40}, "beyond the range of kakeibo's exact samplers"),
        ({"epsilon": 1, "rows_per_person": 10**400}, "beyond the range of kakeibo's exact samplers"),
    ],
    ids=["1e-30", "1e30", "2^-40", "rows-2^40", "rows-10^400"],
)
def test_a_view_whose_build_cannot_be_drawn_is_refused_free(
    worlds: Worlds, tmp_path: Path, settings: dict[str, Any], match: str
) -> None:
    text = refused_alike(
        neighbours(worlds),
        Catalog.from_toml(CATALOG_TOML),
        lambda s: s.create_view("v", "SELECT category, amount FROM visits", **settings),
        tmp_path,
    )
    assert re.search(match, text), text


def test_the_view_check_refuses_exactly_the_epsilons_its_build_fails_at() -> None:
    """The check is the build's own calibration, neither stricter nor looser: around the edge of the exact
    samplers' range, ``check_view_epsilon`` refuses an epsilon exactly when ``hdpview.build`` of the same
    domain (6 bins: five public values and the other / NULL bin) raises."""
    definition = parse_view_definition("v", "SELECT category FROM visits", Catalog.from_toml(CATALOG_TOML))
    outcomes = set()
    for power in range(24, 40):
        epsilon = Fraction(1, 2**power)
        try:
            build(np.array([[0]]), np.array([1]), (6,), epsilon=float(epsilon), rng=np.random.default_rng(0))
        except ValueError:
            builds = False
        else:
            builds = True
        try:
            check_view_epsilon(definition, epsilon, 1, None)
        except QueryRefused:
            passes = False
        else:
            passes = True
        assert passes == builds, power
        outcomes.add(builds)
    assert outcomes == {True, False}  # the range holds both sides of the edge


AUTO_TOML = CATALOG_TOML.replace("max_rows_per_partition = 4\n", 'max_rows_per_partition = "auto"\n', 1)


@pytest.mark.parametrize(
    ("toml", "epsilon", "bounds", "match"),
    [
        (AUTO_TOML, 1, {"bounds_share": 1e-300}, "each bounds histogram's epsilon .* got 1e-300"),
        (
            AUTO_TOML.replace("[tables.visits.columns]", "bounds_share = 1e-300\n[tables.visits.columns]"),
            1,
            None,
            "each bounds histogram's epsilon .* got 1e-300",
        ),
        (AUTO_TOML, 1e-3, {"bounds_share": 1 - 1e-12}, "the answer's epsilon .* must lie between"),
        (AUTO_TOML, 1e-6, None, "beyond the range of kakeibo's exact samplers"),
        (CATALOG_TOML, Fraction(1, 2**40), None, "beyond the range of kakeibo's exact samplers"),
        (CATALOG_TOML, 1e-30, None, "^epsilon must lie between 2\\*\\*-40 and 2\\*\\*40, got 1e-30.$"),
    ],
    ids=["share-override", "share-catalog", "share-near-1", "histograms-too-fine", "answer-2^-40", "1e-30"],
)
def test_every_share_of_a_querys_epsilon_is_checked_before_the_draw(
    worlds: Worlds, tmp_path: Path, toml: str, epsilon: object, bounds: dict[str, object] | None, match: str
) -> None:
    query = "SELECT category, SUM(amount) AS s FROM visits GROUP BY category"
    text = refused_alike(
        neighbours(worlds),
        Catalog.from_toml(toml),
        lambda s: s.sql(query, epsilon=epsilon, bounds=bounds),
        tmp_path,
    )
    assert re.search(match, text), text


# --- R9: views over date and bool public-value columns -------------------------------------------------

EVENTS_TOML = """
[tables.events]
privacy_unit = "user_id"
[tables.events.columns]
user_id = "int"
day = { type = "date", public_values = ["2024-01-01", "2024-01-02"] }
flag = { type = "bool", public_values = [true, false] }
"""


def _events(target: bool) -> pa.Table:
    users = list(range(BASE_USERS)) + ([TARGET_ID] if target else [])
    return pa.table(
        {
            "user_id": pa.array(users, pa.int64()),
            "day": [datetime.date(2024, 1, 1 + u % 2) for u in users],
            "flag": [u % 3 == 0 for u in users],
        }
    )


def _date_and_bool_views_are_refused(backends: dict[str, Backend], tmp_path: Path) -> None:
    catalog = Catalog.from_toml(EVENTS_TOML)
    for column, kind in (("day", "date"), ("flag", "bool")):
        (tmp_path / column).mkdir()
        text = refused_alike(
            backends,
            catalog,
            lambda s, c=column: s.create_view("v", f"SELECT {c} FROM events", epsilon=1),
            tmp_path / column,
        )
        assert text == f"a view holds int, float and str columns; '{column}' is a {kind} column."


def test_views_over_date_and_bool_columns_are_refused_free_on_duckdb(tmp_path: Path) -> None:
    backends: dict[str, Backend] = {}
    for world in ("base", "target"):
        backends[world] = DuckDBBackend()
        backends[world].load_table("events", _events(world == "target"))
    _date_and_bool_views_are_refused(backends, tmp_path)


@pytest.mark.xdist_group("postgres")
def test_views_over_date_and_bool_columns_are_refused_free_on_postgres(
    postgres_server: str, tmp_path: Path
) -> None:
    from kakeibo.backends.postgres import PostgresBackend
    from tpch_fixtures import postgres_database_with

    backends: dict[str, Backend] = {
        world: PostgresBackend(
            postgres_database_with(postgres_server, {"events": _events(world == "target")})
        )
        for world in ("base", "target")
    }
    try:
        _date_and_bool_views_are_refused(backends, tmp_path)
    finally:
        for backend in backends.values():
            backend.close()
