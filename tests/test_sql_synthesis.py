"""``Session.synthesize`` (``kakeibo.sql.synthesis``): one ledger entry charged MST's loss, a free replay,
free sampling, a model that saves and loads, synthetic values of the columns' types within their bounds, an
audit with one person of many rows (and the same audit refuting the statement without the person bound),
marginals close to the real table's, and refusals before any charge.

Neighbour relation: add or remove one person. Sensitivity: their at most ``rows_per_person`` bounded rows
move each marginal by at most ``rows_per_person`` in L2 and each selection utility by at most as much
(module docstring of kakeibo.sql.synthesis)."""

from __future__ import annotations

import math
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from kakeibo import Error
from kakeibo.audit import audit
from kakeibo.backends import DuckDBBackend
from kakeibo.noise import resolve_source
from kakeibo.privacy import PureDP, zcdp_epsilon
from kakeibo.sql import Catalog, QueryRefused
from kakeibo.sql import synthesis as synthesis_module
from kakeibo.sql.synthesis import SynthesisModel
from kakeibo.sql.views import NOTE_KEY, cell_counts, cell_counts_sql, read_columns
from kakeibo.synth import mst as mst_module
from kakeibo.synth import rho_for
from kakeibo.synth.pearl import embedding_mechanism
from test_synth_mst import tvd

DELTA = 1e-6
CATALOG = Catalog.from_dict(
    {
        "tables": {
            "shop": {
                "privacy_unit": "uid",
                "max_partitions": 1,
                "max_rows_per_partition": 1,
                "columns": {
                    "uid": "int",
                    "age": {"type": "int", "lower": 18, "upper": 80, "bins": 8},
                    "spend": {"type": "float", "lower": 0, "upper": 500, "bins": 10},
                    "segment": {"type": "str", "public_values": ["a", "b", "c"]},
                    "day": "date",
                    "score": {"type": "float", "lower": 0, "upper": 1},
                },
            },
            "people": {"columns": {"age": {"type": "int", "lower": 18, "upper": 80}}},
            "holdout": {
                "public": True,
                "columns": {
                    "age": {"type": "int", "lower": 18, "upper": 80, "bins": 8},
                    "spend": {"type": "float", "lower": 0, "upper": 500, "bins": 10},
                    "segment": {"type": "str", "public_values": ["a", "b", "c"]},
                },
            },
        }
    }
)
QUERY = "SELECT age, segment, spend FROM shop"


def _shop(persons: int, seed: int, rows_per: int = 3) -> pa.Table:
    """``rows_per`` rows per person; segment follows age (older: a), spend follows segment."""
    rng = np.random.default_rng(seed)
    n = persons * rows_per
    age = rng.integers(18, 81, n)
    segment = np.where(rng.random(n) < 0.8, np.where(age > 50, "a", np.where(age > 30, "b", "c")), "c")
    spend = np.clip(rng.gamma(2.0, np.select([segment == "a", segment == "b"], [120.0, 40.0], 10.0)), 0, 700)
    return pa.table({"uid": np.arange(n) // rows_per, "age": age, "segment": segment, "spend": spend})


def _session(
    table: pa.Table, ledger: Path, budget: Any = (20, 1e-4), holdout: pa.Table | None = None
) -> kakeibo.sql.Session:
    backend = DuckDBBackend()
    backend.load_table("shop", table)
    backend.load_table("holdout", (table if holdout is None else holdout).drop(["uid"]))
    backend.load_table("people", pa.table({"age": np.arange(18, 81)}))
    return kakeibo.connect(backend, catalog=CATALOG, ledger=ledger, budget=budget, source="shop-test")


def test_a_synthesis_is_one_ledger_entry_replayed_free_and_sampled_free(tmp_path: Path) -> None:
    session = _session(_shop(2_000, 1), tmp_path / "ledger.sqlite")
    out = session.synthesize(QUERY, epsilon=1, delta=DELTA, rows_per_person=3, rng=np.random.default_rng(2))
    [entry] = session.ledger.entries()
    assert out.ledger_entry == entry and entry.loss == out.privacy_loss
    rho = rho_for(1, DELTA)
    assert entry.loss.curve.rho == rho  # the accountant's rho for the request
    assert float(entry.loss.declared.epsilon) == zcdp_epsilon(float(rho), DELTA) <= 1
    assert entry.label == f"SYNTHESIZE MST FROM ({QUERY}) WITH 3 ROWS PER PERSON"
    again = session.synthesize(QUERY, epsilon=1, delta=DELTA, rows_per_person=3)
    assert again.replayed and len(session.ledger.entries()) == 1
    assert again.model.model.edges == out.model.model.edges
    for n in (0, 1, 10_000):
        assert out.model.sample(n, random_state=3).num_rows == n
    assert len(session.ledger.entries()) == 1 and session.ledger.spent() == entry.loss.declared


def test_the_model_saves_and_loads_to_the_same_samples(tmp_path: Path) -> None:
    session = _session(_shop(500, 4), tmp_path / "ledger.sqlite")
    out = session.synthesize(QUERY, epsilon=2, delta=DELTA, rows_per_person=3, rng=np.random.default_rng(5))
    out.model.save(tmp_path / "model.kakeibo")
    loaded = SynthesisModel.load(tmp_path / "model.kakeibo")
    assert loaded.sample(2_000, random_state=6).equals(out.model.sample(2_000, random_state=6))
    assert loaded.note() == out.note and loaded.axes == out.model.axes


def test_synthetic_values_have_the_columns_types_and_lie_within_their_bounds(tmp_path: Path) -> None:
    session = _session(_shop(1_000, 7), tmp_path / "ledger.sqlite")
    out = session.synthesize(QUERY, epsilon=1, delta=DELTA, rows_per_person=3, random_state=8)
    table = out.model.sample(20_000, random_state=9)
    assert table.schema.types == [pa.int64(), pa.string(), pa.float64()]
    assert table.schema.metadata[NOTE_KEY].decode() == out.note
    age = table.column("age").drop_null().to_numpy()
    spend = table.column("spend").drop_null().to_numpy()
    assert age.min() >= 18 and age.max() <= 80 and len(np.unique(age)) > 40  # whole numbers across the bins
    assert spend.min() >= 0 and spend.max() <= 500 and len(np.unique(spend)) > 10_000  # spread in the bins
    assert set(table.column("segment").drop_null().to_pylist()) <= {"a", "b", "c"}
    # 700 is beyond the upper bound: those rows were counted in the top bin and come back within it
    assert (spend >= 450).mean() > 0.005


def _binned(table: pa.Table) -> np.ndarray:
    """A table's rows as the synthesis' bin codes (the engine's statement, each person's rows all kept)."""
    backend = DuckDBBackend()
    backend.load_table("shop", table.append_column("uid", pa.array(np.arange(table.num_rows))))
    source, axes, _ = read_columns(QUERY, CATALOG, None, "a synthesis")
    cells, counts = cell_counts(backend.execute(cell_counts_sql(source, axes, 1)), len(axes))
    return np.repeat(cells, counts, axis=0)


def test_marginals_are_close_at_a_large_epsilon_and_the_pairs_are_kept(tmp_path: Path) -> None:
    """At epsilon 10 on 20,000 persons (3 rows each), every 1- and 2-way marginal of the synthetic rows
    is within 0.05 of the real rows' in total variation; a table with each column drawn alone is not."""
    real = _shop(20_000, 10)
    session = _session(real, tmp_path / "ledger.sqlite")
    out = session.synthesize(QUERY, epsilon=10, delta=DELTA, rows_per_person=3, random_state=11)
    sizes = (9, 4, 11)
    codes, synthetic = _binned(real.drop(["uid"])), _binned(out.table)
    for columns in ((0,), (1,), (2,), (0, 1), (1, 2), (0, 2)):
        assert tvd(codes, synthetic, columns, sizes) < 0.05, columns
    shuffle = np.random.default_rng(12)
    independent = np.column_stack([shuffle.permutation(codes[:, j]) for j in range(3)])
    assert tvd(codes, independent, (0, 1), sizes) > 0.2 and tvd(codes, independent, (1, 2), sizes) > 0.2


def test_the_default_row_count_estimates_the_bounded_rows(tmp_path: Path) -> None:
    """5,000 persons of 4 rows bounded to 2: 10,000 rows modelled; the estimate (the mean total of the noisy
    1-way marginals) is within 5 of its standard deviations."""
    session = _session(_shop(5_000, 13, rows_per=4), tmp_path / "ledger.sqlite")
    out = session.synthesize(QUERY, epsilon=1, delta=DELTA, rows_per_person=2, random_state=14)
    sizes, d = (9, 4, 11), 3
    sigma2 = 2**2 / (2 * float(rho_for(1, DELTA)) / (3 * d))  # each 1-way cell's variance
    sd = math.sqrt(sum(size * sigma2 for size in sizes)) / d
    assert abs(out.table.num_rows - 10_000) <= 5 * sd and out.model.rows == out.table.num_rows


def test_every_mechanism_is_calibrated_to_the_person_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calibration behind the person-level claim: with rows_per_person=3 every discrete Gaussian the fit
    draws from has sensitivity 3 and every pick utility sensitivity 3, and their zCDP sums to the charged
    rho (permute-and-flip at e counted as e^2 / 2)."""
    built: list[tuple[float, float]] = []  # (sensitivity, rho)
    gaussian, exponential = mst_module.DiscreteGaussian, mst_module.Exponential

    class CountedGaussian(gaussian):  # type: ignore[misc, valid-type]
        def __init__(self, *, sensitivity: Any, rho: Any) -> None:
            super().__init__(sensitivity=sensitivity, rho=rho)
            built.append((float(sensitivity), float(rho)))

    class CountedExponential(exponential):  # type: ignore[misc, valid-type]
        def __init__(self, *, utility_sensitivity: Any, epsilon: Any) -> None:
            super().__init__(utility_sensitivity=utility_sensitivity, epsilon=epsilon)
            built.append((float(utility_sensitivity), float(epsilon) ** 2 / 2))

    session = _session(_shop(300, 20), tmp_path / "ledger.sqlite")
    monkeypatch.setattr(mst_module, "DiscreteGaussian", CountedGaussian)
    monkeypatch.setattr(mst_module, "Exponential", CountedExponential)
    out = session.synthesize(QUERY, epsilon=1, delta=DELTA, rows_per_person=3, rng=np.random.default_rng(21))
    # one of each kind (1-way Gaussian, pick, 2-way Gaussian) for the range check before the charge, and the
    # same three again for the draw, each then used once per marginal or pick
    assert len(built) == 6 and built[:3] == built[3:]
    assert {sensitivity for sensitivity, _ in built} == {3.0}
    rho = float(out.privacy_loss.curve.rho)
    d = 3  # one 1-way marginal per column; d - 1 picks and 2-way marginals
    spent = d * built[3][1] + (d - 1) * (built[4][1] + built[5][1])
    assert spent <= rho * (1 + 1e-12) and spent >= rho * (1 - 1e-9)


# --- the audit: one person of many rows --------------------------------------------------------------------

#: the audits' claim; the canary's count moves by rows_per_person against 2-way noise of sigma about 2.6
AUDITED = 8.0


def _worlds(canary_rows: int) -> list[DuckDBBackend]:
    """Two engines: 30 persons of one row each in the cell (age 18, segment a), and the same plus one person
    of ``canary_rows`` rows in the cell (age 80, segment c)."""
    base = pa.table(
        {"uid": np.arange(30), "age": np.full(30, 18), "segment": ["a"] * 30, "spend": np.zeros(30)}
    )
    canary = pa.table(
        {
            "uid": np.full(canary_rows, 10**6),
            "age": np.full(canary_rows, 80),
            "segment": ["c"] * canary_rows,
            "spend": np.zeros(canary_rows),
        }
    )
    backends = []
    for table in (base, pa.concat_tables([base, canary])):
        backend = DuckDBBackend()
        backend.load_table("shop", table)
        backends.append(backend)
    return backends


def _sampler(statement_rows: int, epsilon: float = AUDITED) -> Any:
    """Each release: MST's measurements of a world's count tensor (the engine's statement, each person
    bounded to ``statement_rows`` rows), calibrated to 2 rows per person as ``Session.synthesize(...,
    rows_per_person=2)`` does; released as the noisy 2-way count of the canary's cell (age bin 7, segment
    c) on the edge of age and segment. The canary's rows share one cell, so whichever of them the
    statement keeps, each world's tensor is the same: it is counted once per world."""
    source_table, axes, _ = read_columns("SELECT age, segment FROM shop", CATALOG, None, "a synthesis")
    statement = cell_counts_sql(source_table, axes, statement_rows, random_order=True)
    tensors = [cell_counts(world.execute(statement), len(axes)) for world in _worlds(canary_rows=60)]
    sizes = tuple(axis.size for axis in axes)
    rho = rho_for(epsilon, DELTA)

    def sample(index: int, n: int, rng: np.random.Generator) -> np.ndarray:
        source = resolve_source(rng)
        cells, counts = tensors[index]
        out = np.empty(n, dtype=np.int64)
        for i in range(n):
            _, edges, pairs = mst_module._measure(cells, counts, sizes, rho, 2, source)
            out[i] = int(np.clip(pairs[edges[0]][7, 2], -49_999, 49_999))
        return out

    return sample


@pytest.mark.statistical
def test_an_audit_with_a_person_of_many_rows_finds_no_epsilon_above_the_claim() -> None:
    """A person of 60 rows, bounded to 2: 1,000 releases per neighbour (events chosen on 300 more), 95%
    confidence: the audit sees the person (a lower bound above 0.1) and stays below the claim."""
    result = audit(
        _sampler(2), 0, 1, trials=1_000, selection_trials=300, rng=np.random.default_rng(35), delta=DELTA
    )
    assert result.epsilon_lower_bound > 0.1 and not result.refutes(AUDITED), result


@pytest.mark.statistical
def test_the_audit_refutes_a_statement_without_the_person_bound() -> None:
    """The negative control: the same measurements at epsilon 1, calibrated to 2 rows while the statement
    keeps all 60 of the person's rows (a bound of 60), are refuted by 300 releases per neighbour."""
    result = audit(
        _sampler(60, epsilon=1.0),
        0,
        1,
        trials=300,
        selection_trials=300,
        rng=np.random.default_rng(36),
        delta=DELTA,
    )
    assert result.refutes(1.0), result


# --- refusals ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "kwargs", "fragment"),
    [
        ("SELECT age FROM shop WHERE age > 3", {}, "a synthesis is defined by SELECT col"),
        ("SELECT age, day FROM shop", {}, "a synthesis holds int, float and str columns"),
        ("SELECT uid FROM shop", {}, "is not a column a synthesis can hold"),
        ("SELECT age FROM people", {"rows_per_person": 2}, "each row of people is a person"),
        (QUERY, {"rows_per_person": 0}, "rows_per_person must be a whole number of at least 1"),
        (QUERY, {"rows_per_person": "auto"}, "rows_per_person must be a whole number of at least 1, got"),
        (QUERY, {"rows_per_person": True}, "rows_per_person is a whole number"),
        (QUERY, {"method": "gan"}, "method must be one of 'mst'"),
        ("SELECT spend, score FROM shop", {"bins": {"score": 2**21}}, "11 x 2097153 value pairs, more than"),
        (QUERY, {"epsilon": 0}, "epsilon"),
        (QUERY, {"delta": 0}, "delta in"),
        (QUERY, {"delta": 1}, "delta in"),
        (QUERY, {"epsilon": 2**41}, "must lie between 2\\*\\*-40 and 2\\*\\*40"),
        (QUERY, {"epsilon": 1e300}, "must lie between"),
        (QUERY, {"delta": 5e-324}, "beyond the range of kakeibo's accounting or exact samplers"),
        (QUERY, {"epsilon": 1e-3, "rows_per_person": 1_000}, "too large for the exact samplers"),
        (QUERY, {"method": "aim", "delta": 0}, "delta in"),
        (QUERY, {"method": "privbayes"}, "pure epsilon-DP: pass delta=0"),
        (QUERY, {"method": "privbayes", "delta": 0, "epsilon": 2**-41}, "must lie between"),
        (QUERY, {"method": "privbayes", "delta": 0, "rows_per_person": 0}, "rows_per_person must be"),
        (
            QUERY,
            {"method": "aim", "epsilon": 1e-3, "rows_per_person": 1_000},
            "too large for the exact samplers",
        ),
        (QUERY, {"method": "pearl", "delta": 0}, "the Gaussian mechanism needs delta > 0"),
        (QUERY, {"method": "pearl", "delta": 1}, "delta must lie in"),
        (QUERY, {"method": "pearl", "epsilon": 1e-12}, "too large for the exact Gaussian sampler"),
        (QUERY, {"method": "pearl", "rows_per_person": 0}, "rows_per_person must be a whole number"),
    ],
)
def test_bad_requests_are_refused_before_any_charge(
    tmp_path: Path, query: str, kwargs: dict[str, Any], fragment: str
) -> None:
    session = _session(_shop(50, 15), tmp_path / "ledger.sqlite")
    arguments = {"epsilon": 1, "delta": DELTA, **kwargs}
    with pytest.raises(Error, match=fragment):
        session.synthesize(query, **arguments)
    assert session.ledger.entries() == []


def test_a_pure_epsilon_budget_refuses_the_charge_with_a_sentence(tmp_path: Path) -> None:
    session = _session(_shop(50, 16), tmp_path / "ledger.sqlite", budget=10.0)
    with pytest.raises(Error, match="cannot be counted against a pure epsilon-DP budget"):
        session.synthesize(QUERY, epsilon=1, delta=DELTA)
    assert session.ledger.entries() == []


def test_bad_sample_sizes_are_refused(tmp_path: Path) -> None:
    session = _session(_shop(50, 17), tmp_path / "ledger.sqlite")
    out = session.synthesize(QUERY, epsilon=1, delta=DELTA, rows=0)
    assert out.table.num_rows == 0
    for n in (-1, 2.5, True, "3"):
        with pytest.raises(Error, match="n must be a whole number"):
            out.model.sample(n)  # type: ignore[arg-type]
    with pytest.raises(QueryRefused):
        session.synthesize("SELECT nothing FROM shop", epsilon=1, delta=DELTA)


# --- AIM ------------------------------------------------------------------------------------------------


def test_an_aim_synthesis_is_one_entry_charged_its_rho_replayed_and_saved(tmp_path: Path) -> None:
    session = _session(_shop(1_000, 30), tmp_path / "ledger.sqlite")
    out = session.synthesize(
        QUERY, epsilon=1, delta=DELTA, method="aim", rows_per_person=3, rng=np.random.default_rng(31)
    )
    [entry] = session.ledger.entries()
    assert entry.loss == out.privacy_loss and entry.loss.curve.rho == rho_for(1, DELTA)
    assert entry.label == f"SYNTHESIZE AIM FROM ({QUERY}) WITH 3 ROWS PER PERSON"
    assert "fitted by AIM at epsilon 1" in out.note
    again = session.synthesize(QUERY, epsilon=1, delta=DELTA, method="aim", rows_per_person=3)
    assert again.replayed and len(session.ledger.entries()) == 1
    out.model.save(tmp_path / "model.kakeibo")
    loaded = SynthesisModel.load(tmp_path / "model.kakeibo")
    assert loaded.sample(2_000, random_state=6).equals(out.model.sample(2_000, random_state=6))
    assert again.model.sample(500, random_state=7).equals(out.model.sample(500, random_state=7))


def test_every_aim_mechanism_is_calibrated_to_the_person_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rows_per_person=3: every measurement the AIM fit draws has sensitivity 3, every pick 3 max w_r (the
    largest workload weight: a pair of 3 columns shares 2 columns with itself and 1 with each other pair, 4),
    and their zCDP sums to the charged rho."""
    from kakeibo.synth import aim as aim_module

    drawn: list[tuple[float, float]] = []  # (sensitivity, rho)
    gaussian, exponential = aim_module.DiscreteGaussian, aim_module.Exponential

    class CountedGaussian(gaussian):  # type: ignore[misc, valid-type]
        def release(self, value: Any, rng: Any = None) -> Any:
            drawn.append((self.sensitivity, self.rho))
            return super().release(value, rng)

    class CountedExponential(exponential):  # type: ignore[misc, valid-type]
        def release(self, value: Any, rng: Any = None) -> int:
            drawn.append((float(self.utility_sensitivity), self.epsilon**2 / 2))
            return int(super().release(value, rng))

    session = _session(_shop(300, 20), tmp_path / "ledger.sqlite")
    monkeypatch.setattr(aim_module, "DiscreteGaussian", CountedGaussian)
    monkeypatch.setattr(aim_module, "Exponential", CountedExponential)
    out = session.synthesize(
        QUERY, epsilon=1, delta=DELTA, method="aim", rows_per_person=3, rng=np.random.default_rng(21)
    )
    weights = aim_module.workload((9, 4, 11), None, 2, aim_module.MAX_CELLS).weights
    assert max(weights) == 4.0
    assert {sensitivity for sensitivity, _ in drawn} == {3.0, 3.0 * 4.0}
    rho = float(out.privacy_loss.curve.rho)
    spent = sum(r for _, r in drawn)
    assert spent <= rho * (1 + 1e-12) and spent >= rho * (1 - 1e-9)


def test_aim_marginals_are_close_at_a_large_epsilon(tmp_path: Path) -> None:
    """As for MST: at epsilon 10 on 20,000 persons every 1- and 2-way marginal within 0.05."""
    real = _shop(20_000, 10)
    session = _session(real, tmp_path / "ledger.sqlite")
    out = session.synthesize(QUERY, epsilon=10, delta=DELTA, method="aim", rows_per_person=3, random_state=11)
    sizes = (9, 4, 11)
    codes, synthetic = _binned(real.drop(["uid"])), _binned(out.table)
    for columns in ((0,), (1,), (2,), (0, 1), (1, 2), (0, 2)):
        assert tvd(codes, synthetic, columns, sizes) < 0.05, columns


# --- PrivBayes ------------------------------------------------------------------------------------------


def test_a_privbayes_synthesis_is_pure_and_a_pure_budget_pays_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """method="privbayes" (delta 0): one ledger entry charged PureDP(epsilon) on a pure-epsilon budget (which
    refuses MST); with rows_per_person=3 every discrete Laplace release is at sensitivity 3 and every pick at
    4 x 3, their epsilons summing to exactly the charge; replay and save/load."""
    from fractions import Fraction

    from kakeibo.synth import privbayes as privbayes_module

    drawn: list[tuple[float, Fraction]] = []
    geometric, exponential = privbayes_module.Geometric, privbayes_module.Exponential

    class CountedGeometric(geometric):  # type: ignore[misc, valid-type]
        def release(self, value: Any, rng: Any = None) -> Any:
            drawn.append((float(self.sensitivity), self.privacy_loss.epsilon))
            return super().release(value, rng)

    class CountedExponential(exponential):  # type: ignore[misc, valid-type]
        def release(self, value: Any, rng: Any = None) -> int:
            drawn.append((float(self.utility_sensitivity), self.privacy_loss.epsilon))
            return int(super().release(value, rng))

    monkeypatch.setattr(privbayes_module, "Geometric", CountedGeometric)
    monkeypatch.setattr(privbayes_module, "Exponential", CountedExponential)
    session = _session(_shop(2_000, 50), tmp_path / "ledger.sqlite", budget=10.0)
    out = session.synthesize(
        QUERY, epsilon=2, delta=0, method="privbayes", rows_per_person=3, rng=np.random.default_rng(51)
    )
    [entry] = session.ledger.entries()
    assert entry.loss == out.privacy_loss == PureDP(2)
    assert entry.label == f"SYNTHESIZE PRIVBAYES FROM ({QUERY}) WITH 3 ROWS PER PERSON"
    assert {sensitivity for sensitivity, _ in drawn} == {3.0, 12.0}
    assert sum(epsilon for _, epsilon in drawn) == 2
    assert "fitted by PRIVBAYES at epsilon 2, delta 0" in out.note
    again = session.synthesize(QUERY, epsilon=2, delta=0, method="privbayes", rows_per_person=3)
    assert again.replayed and len(session.ledger.entries()) == 1
    out.model.save(tmp_path / "model.kakeibo")
    loaded = SynthesisModel.load(tmp_path / "model.kakeibo")
    assert loaded.sample(1_000, random_state=6).equals(out.model.sample(1_000, random_state=6))
    with pytest.raises(Error, match="pure epsilon-DP budget"):
        session.synthesize(QUERY, epsilon=1, delta=DELTA)  # MST needs delta
    assert len(session.ledger.entries()) == 1


# --- fidelity -------------------------------------------------------------------------------------------


def _mean_tvds(real: np.ndarray, synthetic: np.ndarray, sizes: tuple[int, ...]) -> list[float]:
    """The mean total-variation distance over every 1-, 2- and 3-way marginal, computed here directly."""
    return [
        float(
            np.mean(
                [tvd(real, synthetic, columns, sizes) for columns in combinations(range(len(sizes)), order)]
            )
        )
        for order in (1, 2, 3)
    ]


def test_a_charged_fidelity_report_is_one_pure_entry_near_the_exact_distances(tmp_path: Path) -> None:
    """At epsilon 5 on 3,000 persons of 3 rows (all kept at rows_per_person=3): one ledger entry charged
    PureDP(5) with the Laplace mechanism at sensitivity 3 x 3 orders; each reported mean within 5 standard
    deviations (and the model's row-estimate gap) of the exact mean TVD of the same synthetic rows."""
    real = _shop(3_000, 40)
    session = _session(real, tmp_path / "ledger.sqlite")
    out = session.synthesize(QUERY, epsilon=2, delta=DELTA, rows_per_person=3, rng=np.random.default_rng(41))
    report = session.fidelity(out, epsilon=5, random_state=42, rng=np.random.default_rng(43))
    entries = session.ledger.entries()
    assert len(entries) == 2 and entries[1] == report.ledger_entry
    assert report.privacy_loss == PureDP(5) == entries[1].loss
    assert entries[1].label == f"FIDELITY OF SYNTHESIZE MST FROM ({QUERY})"
    mechanism = synthesis_module.fidelity_mechanism(5, 3, 3)
    assert mechanism.sensitivity == 9 and report.deviations[0] == pytest.approx(
        math.sqrt(2) * mechanism.scale / (2 * out.model.rows)
    )
    sizes = (9, 4, 11)
    codes = out.model.sample_codes(None, 42)
    exact = _mean_tvds(_binned(real.drop(["uid"])), codes, sizes)
    slack = abs(out.model.rows - real.num_rows) / (2 * out.model.rows)
    for reported, truth, sd in zip(report.distances, exact, report.deviations, strict=True):
        assert abs(reported - truth) <= 5 * sd + slack, (reported, truth, sd)
    assert report.marginals == (3, 3, 1) and report.rows == len(codes)
    assert "3-way" in str(report)


def test_the_fidelity_statistic_moves_by_at_most_the_person_bound() -> None:
    """Adding a person's k rows (k = 1..4) to random count tensors moves each order's mean of
    ||c_r - N s_r||_1 by at most k: the sensitivity the report is calibrated to, per order."""
    rng = np.random.default_rng(44)
    sizes = (3, 4, 2, 5)
    for _ in range(200):
        rows = rng.integers(0, 2, (int(rng.integers(0, 40)), 4)) * np.array([2, 3, 1, 4])
        person = rng.integers(0, 2, (int(rng.integers(1, 5)), 4)) * np.array([2, 3, 1, 4])
        codes = rng.integers(0, 2, (30, 4)) * np.array([1, 2, 1, 3])
        ones = np.ones(len(rows), dtype=np.int64)
        both = np.vstack([rows, person]).astype(np.int64)
        before, _ = synthesis_module.fidelity_gaps(rows.astype(np.int64), ones, codes, sizes, 25.0)
        after, _ = synthesis_module.fidelity_gaps(
            both, np.ones(len(both), dtype=np.int64), codes, sizes, 25.0
        )
        assert all(abs(a - b) <= len(person) + 1e-9 for a, b in zip(after, before, strict=True))


def _fidelity_sampler(mechanism: Any) -> Any:
    """Releases of the 1-way mean of a charged report (``fidelity_gaps`` then ``mechanism``) on two count
    tensors: 30 rows in cell (0, 0), and the same plus a person's 2 rows there too (which moves the 1-way
    mean by the whole bound, 2); fixed synthetic rows and row estimate (the model's, public)."""
    sizes = (3, 2)
    base = (np.array([[0, 0]]), np.array([30]))
    worlds = [base, (np.array([[0, 0]]), np.array([32]))]
    codes = np.array([[0, 0]] * 28 + [[1, 1]] * 4)
    gaps = [synthesis_module.fidelity_gaps(c, n, codes, sizes, 32.0)[0] for c, n in worlds]

    def sample(index: int, n: int, rng: np.random.Generator) -> np.ndarray:
        source = resolve_source(rng)
        return np.array([float(mechanism.release(np.array(gaps[index]), rng=source)[0]) for _ in range(n)])

    return sample


@pytest.mark.statistical
def test_an_audit_of_a_charged_report_finds_no_epsilon_above_the_claim() -> None:
    """A person of 2 rows (rows_per_person=2, two orders): 2,000 releases per world (events on 500 more),
    95% confidence: the audit sees the person and stays below the claim 2; the negative control, the same
    statistic released without its noise, is refuted at 1 from 300 releases."""
    honest = synthesis_module.fidelity_mechanism(2, 2, 2)
    result = audit(
        _fidelity_sampler(honest), 0, 1, trials=2_000, selection_trials=500, rng=np.random.default_rng(52)
    )
    assert result.epsilon_lower_bound > 0.1 and not result.refutes(2.0), result

    class Exact:
        def release(self, value: Any, rng: Any = None) -> Any:
            return np.asarray(value)

    refuted = audit(
        _fidelity_sampler(Exact()), 0, 1, trials=300, selection_trials=300, rng=np.random.default_rng(53)
    )
    assert refuted.refutes(1.0), refuted


def test_a_fidelity_report_on_a_public_holdout_is_exact_and_free(tmp_path: Path) -> None:
    real, holdout = _shop(2_000, 45), _shop(1_000, 46)
    session = _session(real, tmp_path / "ledger.sqlite", holdout=holdout)
    out = session.synthesize(QUERY, epsilon=2, delta=DELTA, rows_per_person=3, rng=np.random.default_rng(47))
    report = session.fidelity(out.model, holdout="holdout", rows=5_000, random_state=48)
    assert len(session.ledger.entries()) == 1 and report.ledger_entry is None and report.privacy_loss is None
    assert report.deviations == (0.0, 0.0, 0.0) and report.rows == 5_000
    exact = _mean_tvds(_binned(holdout.drop(["uid"])), out.model.sample_codes(5_000, 48), (9, 4, 11))
    assert report.distances == pytest.approx(exact, abs=1e-12)
    assert report.against == "public holdout holdout"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({}, "give one"),
        ({"epsilon": 1, "holdout": "holdout"}, "give one"),
        ({"holdout": "shop"}, "declares public"),
        ({"holdout": "people"}, "declares public"),
        ({"holdout": "nowhere"}, "nowhere"),
        ({"epsilon": 0}, "epsilon"),
        ({"epsilon": 2**41}, "must lie between"),
        ({"epsilon": 1, "rows": -1}, "n must be a whole number"),
    ],
)
def test_bad_fidelity_requests_are_refused_before_any_charge(
    tmp_path: Path, kwargs: dict[str, Any], fragment: str
) -> None:
    session = _session(_shop(50, 49), tmp_path / "ledger.sqlite")
    out = session.synthesize(QUERY, epsilon=1, delta=DELTA)
    with pytest.raises(Error, match=fragment):
        session.fidelity(out, **kwargs)
    assert len(session.ledger.entries()) == 1
    with pytest.raises(Error, match="a Synthesis or a SynthesisModel"):
        session.fidelity("model", epsilon=1)  # type: ignore[arg-type]


# --- PEARL ----------------------------------------------------------------------------------------------


@pytest.fixture
def few_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generator's training is post-processing of the release; 200 steps keep these fits to seconds."""
    monkeypatch.setattr(synthesis_module, "PEARL_STEPS", 200)


@pytest.mark.usefixtures("few_steps")
def test_a_pearl_synthesis_is_one_entry_charged_the_embeddings_gaussian_at_the_person_bound(
    tmp_path: Path,
) -> None:
    """method="pearl": one ledger entry charged the Gaussian mechanism calibrated to 3 rows (3 sqrt(2)), a
    free replay, free sampling, a model that saves and loads, values of the columns' types within their
    bounds, and the default row count near the bounded rows (5,000 persons of 4 rows bounded to 3)."""
    session = _session(_shop(5_000, 40, rows_per=4), tmp_path / "ledger.sqlite")
    out = session.synthesize(
        QUERY, epsilon=1, delta=DELTA, method="pearl", rows_per_person=3, rng=np.random.default_rng(41)
    )
    [entry] = session.ledger.entries()
    mechanism = embedding_mechanism(1, DELTA, 3)
    assert entry.loss == out.privacy_loss == mechanism.ledger_loss
    assert mechanism.sensitivity >= 3 * math.sqrt(2)
    assert entry.label == f"SYNTHESIZE PEARL FROM ({QUERY}) WITH 3 ROWS PER PERSON"
    assert "fitted by PEARL at epsilon 1" in out.note
    again = session.synthesize(QUERY, epsilon=1, delta=DELTA, method="pearl", rows_per_person=3)
    assert again.replayed and len(session.ledger.entries()) == 1
    out.model.save(tmp_path / "model.kakeibo")
    loaded = SynthesisModel.load(tmp_path / "model.kakeibo")
    assert loaded.sample(500, random_state=42).equals(out.model.sample(500, random_state=42))
    table = out.model.sample(5_000, random_state=43)
    assert table.schema.types == [pa.int64(), pa.string(), pa.float64()]
    age, spend = (table.column(name).drop_null().to_numpy() for name in ("age", "spend"))
    assert age.min() >= 18 and age.max() <= 80 and spend.min() >= 0 and spend.max() <= 500
    assert set(table.column("segment").drop_null().to_pylist()) <= {"a", "b", "c"}
    sd = math.sqrt(mechanism.variance)  # the count is one noisy coordinate
    assert abs(out.table.num_rows - 15_000) <= 5 * sd and len(session.ledger.entries()) == 1


@pytest.mark.usefixtures("few_steps")
def test_a_pearl_synthesis_keeps_the_marginals_at_a_large_epsilon(tmp_path: Path) -> None:
    """At epsilon 10 on 20,000 persons the 1-way marginals of segment and of age are within 0.1 of the real
    rows' and age x segment within 0.2 (a characteristic-function fit is looser than MST's marginals: over
    five release seeds, 0.05-0.08 for age and 0.11-0.18 for age x segment); a table with each column drawn
    alone is over 0.2 away on age x segment."""
    real = _shop(20_000, 44)
    session = _session(real, tmp_path / "ledger.sqlite")
    out = session.synthesize(
        QUERY,
        epsilon=10,
        delta=DELTA,
        method="pearl",
        rows_per_person=3,
        random_state=45,
        rng=np.random.default_rng(0),
    )
    sizes = (9, 4, 11)
    codes, synthetic = _binned(real.drop(["uid"])), _binned(out.table)
    assert tvd(codes, synthetic, (0,), sizes) < 0.1 and tvd(codes, synthetic, (1,), sizes) < 0.1
    assert tvd(codes, synthetic, (0, 1), sizes) < 0.2
    shuffle = np.random.default_rng(46)
    independent = np.column_stack([shuffle.permutation(codes[:, j]) for j in range(3)])
    assert tvd(codes, independent, (0, 1), sizes) > 0.2
