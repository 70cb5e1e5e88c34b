"""What kakeibo's synthesisers share (:mod:`kakeibo.synth`): a scikit-learn estimator whose ``fit`` charges
the ledger once and keeps a model (``model_``), and ``sample(n)``, drawn from that model for free."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from sklearn.base import BaseEstimator

from ..ml import charged_run, check_count, check_fitted
from ..noise import RandomSource

__all__ = ["Model", "Synthesizer", "pack", "unpack"]


class Model(Protocol):
    """A fitted synthesiser's model: coded records drawn from it."""

    def sample(self, n: int, rng: np.random.Generator) -> NDArray[np.int64]: ...


class Synthesizer(BaseEstimator):  # type: ignore[misc]
    """The base of :class:`~kakeibo.synth.MST`, :class:`~kakeibo.synth.PEARL`, :class:`~kakeibo.synth.P3GM`
    and :class:`~kakeibo.synth.DPVAE`."""

    model_: Model

    def _charged_fit(self, loss: Any, label: str, draw: Callable[[RandomSource], Any]) -> Any:
        """Run ``draw`` as the fit's one charged release (:func:`~kakeibo.ml.charged_run`), keep its loss,
        ledger entry and model (``privacy_loss_``, ``ledger_entry_``, ``model_``) and return the model."""
        released = charged_run(self, loss, label, draw)
        self.privacy_loss_ = loss
        self.ledger_entry_ = released.ledger_entry
        self.model_ = released.value
        return released.value

    def sample(self, n: int, random_state: int | np.random.Generator | None = None) -> NDArray[np.int64]:
        """``n`` synthetic records drawn from the fitted model (post-processing: no charge)."""
        check_fitted(self)
        check_count(n, "n")
        return self.model_.sample(n, np.random.default_rng(random_state))


def pack(header: Mapping[str, Any], arrays: Mapping[str, Any]) -> bytes:
    """A fitted model as bytes: ``header`` as one JSON line, then ``arrays`` as a NumPy archive (how every
    synthesiser's model is stored beside its ledger entry and saved to a file)."""
    body = io.BytesIO()
    np.savez(body, **arrays)
    return json.dumps(header).encode() + b"\n" + body.getvalue()


def unpack(payload: bytes) -> tuple[dict[str, Any], Mapping[str, NDArray[Any]]]:
    """``(header, arrays)`` of :func:`pack`'s bytes (no pickles are loaded)."""
    head, _, body = payload.partition(b"\n")
    return json.loads(head), np.load(io.BytesIO(body), allow_pickle=False)
