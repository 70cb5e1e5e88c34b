"""No engine statement fails for a person's rows, by construction (issue 29).

An engine error that happens only in one world is a deterministic answer, whatever it was charged. Each
query here runs on the neighbouring databases of :mod:`adversarial_harness` (the target user 999999 holds
1e308, -1e308, NaN, the infinities, 5e-324 and -0.0) and the two worlds' outcomes must be equal: same
acceptance, error class and text, charge and schema.

* The review's shapes (R1: a literal divisor the analysis placed an ulp above ``TINY`` while the engine's
  own quotient flushed to 0; R5: a bucket width of 0 from ``bounds=(0, 5e-324)``; R6: a per-person sum
  beyond the double range from ``bounds=(1e308, 1.7e308)``; the subnormal products of a sum scaled to
  ``kappa`` rows and of a centred square) on DuckDB, PostgreSQL and Spark.
* The class test: the numeric fuzzer (``adversarial_harness.numeric_query``) finds each of R1, R5 and R6
  when its guard is taken away (the pre-fix code, patched back in), so the fuzzer run by
  ``test_adversarial_fuzz.py`` would have caught them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlglot import exp

from adversarial_harness import (
    CATALOG_TOML,
    WORLDS,
    Worlds,
    assert_indistinguishable,
    compare,
    duckdb_worlds,
    numeric_query,
    postgres_worlds,
    world_tables,
)
from kakeibo.sql import catalog, quantiles, values

pytestmark = pytest.mark.xdist_group("spark")

# R1 (3.1235316588560124e-31 / 4.156973258475554e+36 / 7.513956584848165e+32 lies within an ulp of TINY)
R1 = (
    "SELECT SUM(1e-60 / (CASE WHEN amount <= 50 THEN 3.1235316588560124e-31 / 4.156973258475554e+36 "
    "/ 7.513956584848165e+32 ELSE 1 END)) AS s FROM visits WHERE user_id = 999999"
)
R5 = "SELECT MEDIAN(amount) AS m FROM visits WHERE user_id = 999999"
R6 = "SELECT COUNT(amount) AS n FROM visits WHERE user_id = 999999"
SHAPES = [
    pytest.param(R1, None, True, id="R1-literal-quotient-at-tiny"),
    pytest.param(R5, {"amount": (0, 5e-324)}, True, id="R5-zero-bucket-width"),
    pytest.param(R5, {"amount": (0, 1e-100)}, False, id="R5-tiny-bucket-width"),
    pytest.param(R6, {"amount": (1e308, 1.7e308)}, True, id="R6-per-person-sum-overflow"),
    pytest.param(
        "SELECT SUM(x) AS s FROM visits WHERE user_id = 999999 AND x < 1e-200",
        {"max_rows_per_partition": 1},
        False,
        id="subnormal-sum-scaled-to-kappa",
    ),
    pytest.param(
        "SELECT VARIANCE(amount) AS v FROM visits WHERE user_id = 999999",
        {"amount": (-100, 100)},
        False,
        id="subnormal-centred-square",
    ),
    pytest.param(
        "SELECT MAX(amount) AS m FROM visits WHERE user_id = 999999",
        {"amount": (0, 5000)},
        False,
        id="subnormal-bucket-offset",
    ),
]


@pytest.fixture(scope="module")
def worlds(engine_worlds: Worlds) -> Worlds:
    """The neighbouring databases of one engine (``conftest.engine_worlds``)."""
    return engine_worlds


@pytest.mark.parametrize(("query", "bounds", "refused"), SHAPES)
def test_the_review_shapes_are_total(
    worlds: Worlds, query: str, bounds: dict[str, object] | None, refused: bool, tmp_path: Path
) -> None:
    """Each shape is answered in both worlds, or refused in both before anything is charged."""
    outcomes = assert_indistinguishable(worlds, query, 1e-3, ledger_dir=tmp_path, bounds=bounds)
    for world in WORLDS:
        if refused:
            assert outcomes[world].refusal and outcomes[world].charges == 0, outcomes[world].short()
        else:
            assert outcomes[world].accepted, outcomes[world].short()


# ------------------------------------------------------------------ the guards, taken away one at a time


def _without_magnitude_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounds of any finite magnitude pass :class:`ColumnSpec` (before: no check)."""
    monkeypatch.setattr(catalog, "TINY", 0.0)
    monkeypatch.setattr(catalog, "HUGE", math.inf)


def _without_r1_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    """No folding of literals, no NULLIF on divisors, no outward rounding, and quotients bounded as the
    product with the reciprocal of the divisor, rounded to nearest (the pre-fix analysis)."""

    def reciprocal_ends(
        kind: type[exp.Expression], a: float, b: float, c: float, d: float
    ) -> tuple[float, float]:
        if kind is exp.Div:
            kind, c, d = exp.Mul, 1 / d, 1 / c
        ends = [values._OPERATORS[kind](x, y) for x in (a, b) for y in (c, d)]
        return min(ends), max(ends)

    monkeypatch.setattr(values, "_fold", lambda kind, x, y: None)
    monkeypatch.setattr(values, "_divisor", lambda node: node)
    monkeypatch.setattr(values, "_ends", reciprocal_ends)


def _without_r5_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any finite bounds, and the bucket index as the division of the offset by the width (pre-fix)."""
    _without_magnitude_check(monkeypatch)

    def divided(self: quantiles.Buckets, value: str) -> str:
        index = f"CAST(FLOOR(({value} - {self.lower!r}) / {self.step!r}) AS BIGINT)"
        return f"LEAST(GREATEST({index}, 0), {self.count - 1})"

    monkeypatch.setattr(quantiles.Buckets, "sql", divided)


#: seeds of numeric_query tried before giving up (each takes about 0.1 s on DuckDB and PostgreSQL)
FUZZ_SEEDS = 400


@pytest.mark.parametrize(
    ("engine", "take_away"),
    [
        pytest.param("postgres", _without_r1_guards, id="R1-postgres"),
        pytest.param("duckdb", _without_r5_guards, id="R5-duckdb"),
        pytest.param("postgres", _without_r5_guards, id="R5-postgres"),
        pytest.param("postgres", _without_magnitude_check, id="R6-postgres"),
    ],
)
def test_the_numeric_fuzzer_finds_each_defect_without_its_guard(
    engine: str,
    take_away: Callable[[pytest.MonkeyPatch], None],
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """With the guard taken away, some seed below ``FUZZ_SEEDS`` gives a pair of worlds that differ (the
    fuzzer stops at the first); with every guard in place, ``test_adversarial_fuzz.py`` runs the same
    draws and finds none."""
    take_away(monkeypatch)
    worlds = (
        duckdb_worlds() if engine == "duckdb" else postgres_worlds(request.getfixturevalue("postgres_server"))
    )
    try:
        for seed in range(FUZZ_SEEDS):
            drawn = numeric_query(random.Random(seed))
            _, problems = compare(worlds, drawn.query, drawn.epsilon, ledger_dir=tmp_path, **drawn.options())
            if problems:
                return
    finally:
        worlds.close()
    pytest.fail(f"no difference between the worlds in {FUZZ_SEEDS} draws with the guard taken away")


# ------------------------------------------------------------------------------------ through the service


@pytest.mark.xdist_group("postgres")
def test_the_service_answers_the_review_shapes_alike_on_both_worlds(
    postgres_server: str, tmp_path: Path
) -> None:
    """The review's R1, R5 and R6 through ``POST /v1/query`` on PostgreSQL datasets of the base and the
    target world (each its own service): the same status code and body shape in both (the review saw 200
    against 500)."""
    from fastapi.testclient import TestClient

    from kakeibo.service import ServiceConfig, create_app
    from test_service import bearer, make_analyst
    from test_service_engines import write_config
    from tpch_fixtures import postgres_database_with

    seen: dict[str, list[tuple[int, object]]] = {}
    for world in WORLDS:
        folder = tmp_path / world
        folder.mkdir()
        conninfo = postgres_database_with(postgres_server, {"visits": world_tables(world)["visits"]})
        params = dict(part.split("=", 1) for part in conninfo.split())
        url = f"postgresql://{params['user']}@{params['host']}:{params['port']}/{params['dbname']}"
        (folder / "catalog.toml").write_text(CATALOG_TOML)
        admin = write_config(folder, f'engine = "postgres"\ndatabase = "{url}"\ncatalog = "catalog.toml"')
        with TestClient(create_app(ServiceConfig.from_toml(folder / "service.toml"))) as client:
            key = make_analyst(client, admin, "alice", budget=10)
            answers = []
            for query, bounds, _ in (shape.values for shape in SHAPES):
                body: dict[str, object] = {"dataset": "shop", "sql": query, "epsilon": 1e-3}
                if bounds is not None:
                    body["bounds"] = {k: list(v) if isinstance(v, tuple) else v for k, v in bounds.items()}
                answer = client.post("/v1/query", json=body, headers=bearer(key))
                shape_of = sorted(answer.json()) if answer.status_code == 200 else answer.json()["detail"]
                answers.append((answer.status_code, shape_of))
        seen[world] = answers
    assert seen["base"] == seen["target"]
    assert {status for status, _ in seen["base"]} <= {200, 400}, seen["base"]
