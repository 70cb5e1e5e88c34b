"""Private data synthesis (seed 002, p. 82-85): fit a model of the data under DP once, then hand out
synthetic rows; sampling more rows is post-processing and costs nothing.

* :mod:`.mst` -- :class:`MST` (McKenna, Miklau and Sheldon 2021): noisy 1-way marginals, a maximum spanning
  tree of attribute pairs chosen privately, noisy 2-way marginals on its edges, and a tree-structured model
  fitted to them; one ledger entry per fit.
* :mod:`.pearl` -- :class:`PEARL` (Liew, Takahashi and Ueno 2022): one Gaussian release of the data's
  characteristic function at random frequencies, then a generator trained against it (post-processing);
  one ledger entry per fit.
"""

from __future__ import annotations

from .mst import MST, rho_for
from .pearl import PEARL

__all__ = ["MST", "PEARL", "rho_for"]
