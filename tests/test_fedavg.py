"""DP-FedAvg (kakeibo.ml.fedavg): its user-level privacy claim audited on one round, the fixed local work of
every client, the one ledger charge, and refusals.

Neighbour relation: add or remove one client with all of its records, with the client sampling rate q and
the normaliser q N fixed (the roster size N is public). Sensitivity: one client's clipped update adds at
most clip_norm (L2) to a round's sum, however many records it holds. Each round is the Poisson-subsampled
Gaussian mechanism over clients; a run is ``rounds`` of them.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import optax
import pytest

from kakeibo.accounting import Ledger
from kakeibo.audit import audit
from kakeibo.ml.dpsgd import train
from kakeibo.ml.fedavg import (
    CLIENT_CHUNK,
    DPFedAvgClassifier,
    client_contributions,
    client_pools,
    client_rows,
)
from kakeibo.noise import resolve_source
from training_fixtures import canary_loss, claimed_epsilon, one_step_plan

pytestmark = pytest.mark.statistical


def one_round(noise_multiplier: float, rate: float, clip: float, canary_records: int):  # type: ignore[no-untyped-def]
    """A sampler for :func:`kakeibo.audit.audit`: ``d`` is 0 (20 clients of 3 silent records) or 1 (the same
    and a canary client holding ``canary_records`` canary records). Each output is the parameter after one
    round from 0 (3 local steps at rate 0.5: the canary's update is 7.5 before clipping; server SGD at
    rate 1)."""
    plan = one_step_plan(noise_multiplier, rate)

    def sampler(d: int, n: int, rng: np.random.Generator) -> np.ndarray:
        silent = 60
        records = silent + d * canary_records
        features = np.zeros((records, 1))
        labels = np.zeros(records, dtype=np.int32)
        features[silent:, 0], labels[silent:] = 1.0, 5
        members = [np.arange(3 * c, 3 * c + 3) for c in range(20)]
        if d:
            members.append(np.arange(silent, records))
        source = resolve_source(rng)
        contributions = client_contributions(
            canary_loss,
            features,
            labels,
            np.ones(records),
            members,
            width=8,
            rng=rng,
            local_steps=3,
            local_learning_rate=0.5,
        )
        out = np.empty(n)
        for i in range(n):
            out[i] = train(
                contributions,
                np.zeros(1),
                np.ones(len(members)),
                plan=plan,
                clip_norm=clip,
                normaliser=rate * 20,
                optimizer=optax.sgd(1.0),
                source=source,
                chunk=CLIENT_CHUNK,
            )[0]
        return out

    return sampler


@pytest.mark.parametrize(("rate", "canary_records", "trials"), [(1.0, 1, 2_000), (0.5, 40, 4_000)])
def test_one_round_audited_finds_no_epsilon_above_the_claim(
    rate: float, canary_records: int, trials: int
) -> None:
    """``trials`` rounds per federation (events chosen on 1,000 more), 95% confidence: the lower bound on
    epsilon stays below the accountant's, for a canary client of 1 record and of 40 (user level: its many
    records still count once). q = 0.5 hides the canary half the time, so its audit needs more rounds to
    see it."""
    claim = claimed_epsilon(1.0, rate, 1e-5)
    result = audit(
        one_round(1.0, rate, 1.0, canary_records),
        0,
        1,
        trials=trials,
        selection_trials=1_000,
        rng=np.random.default_rng(17),
        delta=1e-5,
    )
    assert not result.refutes(claim), result
    assert result.epsilon_lower_bound > 0.5  # the audit sees the canary client: this test can fail


def test_the_audit_catches_noise_calibrated_for_a_smaller_clip() -> None:
    """A mis-wired server: noise for clip 1, but updates clipped at 8 (the canary's 7.5 passes whole)."""
    claim = claimed_epsilon(1.0, 1.0, 1e-5)
    result = audit(
        one_round(1 / 8, 1.0, 8.0, 1),
        0,
        1,
        trials=1_000,
        selection_trials=1_000,
        rng=np.random.default_rng(18),
        delta=1e-5,
    )
    assert result.refutes(claim), result


def test_every_client_trains_on_the_same_number_of_rows() -> None:
    """Local work is fixed: a client of 500 records trains on a fresh random 8 of them each round, a client
    of 1 on its record and 7 silent rows; over many rounds each of the big client's records is used about
    8/500 of the time."""
    pools = client_pools([np.arange(500), np.array([500]), np.array([], dtype=np.int64)], 8, 501)
    rng = np.random.default_rng(0)
    kept = np.zeros(502)
    for _ in range(2_000):
        rows = client_rows(pools, 8, rng)
        assert rows.shape == (3, 8)
        assert len(set(rows[0].tolist())) == 8 and set(rows[0].tolist()) <= set(range(500))
        assert sorted(rows[1].tolist()) == [500] + [501] * 7 and rows[2].tolist() == [501] * 8
        kept += np.bincount(rows[0], minlength=502)
    # each count is Binomial(2,000, 0.016): mean 32, sd 5.6; the extremes of 500 stay within 6 sd
    assert kept[:500].sum() == 16_000
    assert np.all(np.abs(kept[:500] - 32) < 6 * 5.6)


def test_a_client_of_extreme_values_leaves_the_model_finite() -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] > 0).astype(int)
    X[11] = 1e308
    X[12] = -np.finfo(np.float64).max
    model = DPFedAvgClassifier(
        4.0,
        hidden_layer_sizes=(4,),
        rounds=5,
        clients_per_round=20,
        classes=(0, 1),
        ledger=False,
        random_state=0,
    ).fit(X, y, clients=np.arange(200) % 40)
    assert all(np.all(np.isfinite(w)) and np.all(np.isfinite(b)) for w, b in model.coefs_)


def test_fit_is_one_ledger_entry_charged_the_run_over_clients() -> None:
    from sklearn.datasets import load_digits

    digits = load_digits()
    ids = np.arange(digits.target.size) % 400  # IID: every client a few records of mixed digits
    ledger = Ledger(":memory:", budget=(10, 1e-5), composition="pld")
    model = DPFedAvgClassifier(
        4.0,
        1e-5,
        hidden_layer_sizes=(),
        rounds=20,
        clients_per_round=100,
        classes=range(10),
        ledger=ledger,
        random_state=1,
    ).fit(digits.data / 16, digits.target, clients=ids)
    [entry] = ledger.entries()
    assert entry.loss == model.privacy_loss_ == model.plan_.loss
    assert (model.plan_.sampling_rate, model.plan_.steps, model.n_clients_) == (Fraction(1, 4), 20, 400)
    assert ledger.spent().epsilon <= 4 * (1 + 1e-9)
    assert np.mean(model.predict(digits.data / 16) == digits.target) > 0.5  # it learned something


@pytest.mark.parametrize(
    ("kwargs", "clients", "message"),
    [
        ({"classes": None}, np.zeros(10), "classes must be declared"),
        ({}, np.zeros(9), "clients must be a 1-d array of 10"),
        ({}, np.frompyfunc(lambda i: [i], 1, 1)(np.arange(10)), "client ids must be hashable"),
        ({"rounds": 0}, np.zeros(10), "rounds must be a positive whole number"),
        ({"client_records": 2.5}, np.zeros(10), "client_records must be a positive whole number"),
        ({"momentum": 1.0}, np.zeros(10), "momentum must be a number in"),
        ({"local_learning_rate": 0}, np.zeros(10), "local_learning_rate must be positive"),
        ({"ledger": "ledger.sqlite"}, np.zeros(10), "ledger must be a kakeibo.accounting.Ledger"),
    ],
)
def test_bad_parameters_are_refused_before_anything_is_charged(
    kwargs: dict[str, object], clients: np.ndarray, message: str
) -> None:
    ledger = Ledger(":memory:", budget=(10, 1e-5), composition="pld")
    params = {"classes": (0, 1), "ledger": ledger, **kwargs}
    with pytest.raises((ValueError, TypeError), match=message):
        DPFedAvgClassifier(1.0, random_state=0, **params).fit(
            np.zeros((10, 2)), np.zeros(10), clients=clients
        )
    assert ledger.entries() == []
