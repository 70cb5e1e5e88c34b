"""Private data synthesis (seed 002, p. 82-85): fit a model of the data under DP once, then hand out
synthetic rows; sampling more rows is post-processing and costs nothing.

* :mod:`.mst` -- :class:`MST` (McKenna, Miklau and Sheldon 2021): noisy 1-way marginals, a maximum spanning
  tree of attribute pairs chosen privately, noisy 2-way marginals on its edges, and a tree-structured model
  fitted to them; one ledger entry per fit.
* :mod:`.aim` -- :class:`AIM` (McKenna, Mullins, Sheldon and Miklau 2022): workload marginals picked and
  measured in rounds until the budget is spent exactly, a graphical model fitted to them by :mod:`.pgm`
  (kakeibo's Private-PGM inference); one ledger entry per fit.
* :mod:`.privbayes` -- :class:`PrivBayes` (Zhang et al. 2017): a Bayesian network whose structure is
  picked privately and whose conditional tables are noisy marginals; pure epsilon-DP, one ledger entry per
  fit.
* :mod:`.pearl` -- :class:`PEARL` (Liew, Takahashi and Ueno 2022): one Gaussian release of the data's
  characteristic function at random frequencies, then a generator trained against it (post-processing);
  one ledger entry per fit.
* :mod:`.dpvae` -- :class:`DPVAE`: a variational autoencoder with P3GM's network trained end to end by
  DP-SGD, the naive baseline the seed says degrades at practical budgets; one ledger entry per fit.
* :mod:`.p3gm` -- :class:`P3GM` (Takagi, Takahashi, Cao and Yoshikawa 2021): DP-PCA for the encoder's
  mean, DP-EM for a mixture prior, then DP-SGD for the rest of the same network; one ledger entry per fit.
"""

from __future__ import annotations

from .aim import AIM
from .dpvae import DPVAE
from .mst import MST, rho_for
from .p3gm import P3GM
from .pearl import PEARL
from .privbayes import PrivBayes

__all__ = ["AIM", "DPVAE", "MST", "P3GM", "PEARL", "PrivBayes", "rho_for"]
