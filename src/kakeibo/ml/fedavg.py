"""User-level DP federated averaging, DP-FedAvg (McMahan, Ramage, Talwar and Zhang, ICLR 2018, Algorithm 1
with the fixed-denominator estimator), on simulated clients, charged to a ledger once per training run
(seed 002, p. 4: federated learning with DP; seed 004 cites it).

**The algorithm.** ``rounds`` times: draw a Poisson sample of clients (each independently with
probability ``q = clients_per_round / N``); each sampled client starts from the global model, takes
``local_steps`` steps of gradient descent on the mean cross-entropy of its own records (at most
``client_records`` of them, see Records), and reports its update ``theta - theta_local``; the server clips
each update to L2 norm ``clip_norm`` (``S``), sums them, adds Gaussian noise of standard deviation
``noise_multiplier * S`` to every coordinate, rounds to a lattice, divides by the expected number of
clients ``q N`` (a constant) and hands the result to the server's optax optimizer (SGD with momentum) as
its gradient. Rounds, sampling, clipping, noise and lattice are :func:`~kakeibo.ml.dpsgd.train`'s, with
clients for records.

**Neighbour relation**: add or remove one client with all of its records (user-level DP), with ``q`` and
``q N`` fixed: the roster size ``N`` is public, as the record count is for DP-SGD. **Sensitivity**: one
client adds at most ``S`` (L2) to a round's clipped sum, whatever its records. Each round is therefore
the Poisson-subsampled Gaussian mechanism over clients, and the run is ``rounds`` of them:
:func:`~kakeibo.ml.dpsgd.calibrate` finds the noise and states the curve the ledger composes.

**Records.** Every client trains on exactly ``client_records`` rows in every round: all of its records when
it holds that many or fewer (padded with silent rows), otherwise that many drawn afresh each round without
replacement (from a generator seeded by kakeibo's source), so each record is used in a round its client
takes part in with probability client_records / the client's count. A client's local work, and the time of a
round, depend on the number of clients sampled only, not on how many records any client holds (every
client's rows are one draw from its pool, its records padded to ``client_records``). A record
whose label is not declared is a silent row too. A client whose local model overflows float32 (records of
extreme values) reports NaN or infinities, which the clipping counts as a zero update.

**Client ids** are the federation's roster, public like ``N``: any hashable values, one per record.

>>> from sklearn.datasets import load_digits
>>> digits = load_digits()
>>> clients = np.arange(digits.target.size) % 50
>>> model = DPFedAvgClassifier(8.0, hidden_layer_sizes=(), rounds=5, clients_per_round=10,
...                            classes=range(10), ledger=False, random_state=0)
>>> model.fit(digits.data / 16, digits.target, clients=clients).plan_.steps, model.n_clients_
(5, 50)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..accounting import Ledger
from ..errors import ArgumentError
from ..mechanisms.base import check_positive
from ..noise import RandomSource
from ._common import FloatMatrix, FloatVector, RandomState, check_count, check_features, noise_generator
from .dpsgd import Contributions, Loss, NetworkClassifier, calibrate, train

__all__ = [
    "CLIENT_CHUNK",
    "DPFedAvgClassifier",
    "client_contributions",
    "client_pools",
    "client_rows",
    "client_updates",
]

#: Clients per jitted call of their local training (each client's work is ``local_steps`` gradient steps on
#: ``client_records`` rows, so fewer than DP-SGD's records per call).
CLIENT_CHUNK = 32


@functools.lru_cache(maxsize=32)
def client_updates(loss: Loss, local_steps: int, local_learning_rate: float) -> Callable[..., Any]:
    """A jitted ``(global parameters, features, labels, weights) -> one update per client``: ``jax.vmap``
    over clients of ``local_steps`` steps of gradient descent on the weighted mean of ``loss`` over the
    client's rows (weights 0 silence padding and undeclared labels); the update is ``theta - theta_local``,
    the direction the server's optimizer descends."""
    import jax
    import jax.numpy as jnp

    per_row = jax.vmap(loss, in_axes=(None, 0, 0))

    def mean_loss(params: Any, x: Any, y: Any, w: Any) -> Any:
        return jnp.sum(per_row(params, x, y) * w) / jnp.maximum(1.0, jnp.sum(w))

    gradient = jax.grad(mean_loss)

    def update(params: Any, x: Any, y: Any, w: Any) -> Any:
        def step(_: Any, local: Any) -> Any:
            return local - local_learning_rate * gradient(local, x, y, w)

        return params - jax.lax.fori_loop(0, local_steps, step, params)

    return jax.jit(jax.vmap(update, in_axes=(None, 0, 0, 0)))


def client_contributions(
    loss: Loss,
    features: FloatMatrix,
    labels: NDArray[np.int32],
    weights: FloatVector,
    members: Sequence[NDArray[np.int64]],
    *,
    width: int,
    rng: np.random.Generator,
    local_steps: int,
    local_learning_rate: float,
) -> Contributions:
    """DP-FedAvg's units are clients: the contribution of client ``c`` is its update from ``width`` of its
    records ``members[c]``, drawn afresh for every round by :func:`client_rows` from its pool (index
    ``len(features)`` is a silent padding row)."""
    with np.errstate(over="ignore"):  # beyond float32: infinities, then a zero update (module docstring)
        padded_x = np.vstack([features, np.zeros((1, features.shape[1]))]).astype(np.float32)
    padded_y = np.append(labels, 0).astype(np.int32)
    padded_w = np.append(weights, 0.0).astype(np.float32)
    updates = client_updates(loss, local_steps, local_learning_rate)
    pools = client_pools(members, width, features.shape[0])

    def contributions(params: Any, index: NDArray[np.int64]) -> Any:
        rows = client_rows([pools[c] for c in index.tolist()], width, rng)
        return updates(params, padded_x[rows], padded_y[rows], padded_w[rows])

    return contributions


class DPFedAvgClassifier(NetworkClassifier):
    """A :class:`~kakeibo.ml.dpsgd.NetworkClassifier` trained by DP-FedAvg over simulated clients (module
    docstring), scikit-learn style: ``fit(X, y, clients=ids)``.

    ``learning_rate`` and ``momentum`` are the server optimizer's (McMahan et al. 2018 use 1 and 0.9); the
    clients run plain gradient descent at ``local_learning_rate``.
    """

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        *,
        hidden_layer_sizes: Sequence[int] = (64,),
        rounds: int = 100,
        clients_per_round: int = 50,
        local_steps: int = 10,
        local_learning_rate: float = 0.5,
        client_records: int = 64,
        learning_rate: float = 1.0,
        momentum: float = 0.9,
        clip_norm: float = 1.0,
        classes: Any = None,
        ledger: Ledger | Literal[False] | None = None,
        dataset: str | None = None,
        label: str | None = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.hidden_layer_sizes = hidden_layer_sizes
        self.rounds = rounds
        self.clients_per_round = clients_per_round
        self.local_steps = local_steps
        self.local_learning_rate = local_learning_rate
        self.client_records = client_records
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.clip_norm = clip_norm
        self.classes = classes
        self.ledger = ledger
        self.dataset = dataset
        self.label = label
        self.random_state = random_state

    def fit(self, X: ArrayLike, y: ArrayLike, *, clients: ArrayLike) -> DPFedAvgClassifier:
        """Train with DP-FedAvg as one run of :func:`kakeibo.release.run`: every check and the noise
        calibration first (free), then the budget check, then the training (the draw), then the charge."""
        features = check_features(X)
        targets, known = self._labels(y, features.shape[0])
        members = _roster(clients, features.shape[0])
        self._check_common()
        rounds = check_count(self.rounds, "rounds")
        per_round = check_count(self.clients_per_round, "clients_per_round")
        local_steps = check_count(self.local_steps, "local_steps")
        width = check_count(self.client_records, "client_records")
        local_rate = check_positive(self.local_learning_rate, "local_learning_rate")
        n_clients = len(members)
        rate = Fraction(min(per_round, n_clients), n_clients)
        plan = calibrate(epsilon=self.epsilon, delta=self.delta, sampling_rate=rate, steps=rounds)

        def run(loss: Loss, start: FloatVector, source: RandomSource) -> FloatVector:
            contributions = client_contributions(
                loss,
                features,
                targets,
                known,
                members,
                width=width,
                rng=noise_generator(source),
                local_steps=local_steps,
                local_learning_rate=local_rate,
            )
            return train(
                contributions,
                start,
                np.ones(n_clients),
                plan=plan,
                clip_norm=float(self.clip_norm),
                normaliser=float(rate) * n_clients,
                optimizer=self._optimizer(),
                source=source,
                chunk=CLIENT_CHUNK,
            )

        self._fit_run(features.shape[1], plan, run, "DP-FedAvg")
        self.n_clients_ = n_clients
        return self


def _roster(clients: ArrayLike, n_records: int) -> list[NDArray[np.int64]]:
    """The records of each client, clients in order of first appearance."""
    ids = np.asarray(clients, dtype=object)
    if ids.shape != (n_records,):
        raise ArgumentError(f"clients must be a 1-d array of {n_records} client ids, got shape {ids.shape}.")
    members: dict[Any, list[int]] = {}
    for record, client in enumerate(ids.tolist()):
        try:
            members.setdefault(client, []).append(record)
        except TypeError:
            raise ArgumentError(f"client ids must be hashable, got {type(client).__name__}.") from None
    return [np.asarray(records, dtype=np.int64) for records in members.values()]


def client_rows(
    pools: Sequence[NDArray[np.int64]], width: int, rng: np.random.Generator
) -> NDArray[np.int64]:
    """A ``(clients, width)`` table of record indices, ``width`` drawn uniformly without replacement from
    each client's pool (:func:`client_pools`): the same call for every client, whatever it holds."""
    return np.stack([rng.choice(pool, width, replace=False) for pool in pools])


def client_pools(members: Sequence[NDArray[np.int64]], width: int, pad: int) -> list[NDArray[np.int64]]:
    """Each client's records, padded with ``pad`` (a silent row) to at least ``width``."""
    return [
        np.concatenate([records, np.full(max(0, width - records.size), pad, dtype=np.int64)])
        for records in members
    ]
