"""Cryptography with DP (seed 002 p.99-103, "秘密計算+DP"): releases whose inputs no single server sees.

* **Encrypted range counts** (:func:`encrypted_summary`): data owners encrypt their bounded histograms
  under a crypto service provider's BFV key (:mod:`kakeibo.crypto.he`, TenSEAL); an analytics server
  builds a DP summary over the ciphertexts, by HE-friendly partitioning (Ushiyama et al., IEEE BigData
  2022) or Crypto-epsilon's equi-width index (SIGMOD 2020); the provider decrypts only noisy values and
  charges the summary to its ledger through :func:`kakeibo.release.run`
  (:mod:`~kakeibo.crypto.partition`, :mod:`~kakeibo.crypto.parties`, :mod:`~kakeibo.crypto.protocol`).
  :class:`Summary` builds the same summary in plaintext.
* **A private join of two organisations** (:func:`private_join`, :mod:`~kakeibo.crypto.join`): persons
  matched on doubly blinded X25519 pseudonyms (each organisation's key never leaves it), a DP contingency
  table of the joined persons' attributes, cells below ``k`` suppressed after the noise; neither organisation
  learns the intersection.

>>> import numpy as np
>>> from kakeibo.accounting import Ledger
>>> plan = SummaryPlan.of("he-friendly", 0.5, 7, split=0.25)   # the slide: epsilon_1 0.125, epsilon_2 0.375
>>> float(plan.gap_epsilon), float(plan.cut_threshold)
(0.125, 2.6666666666666665)
>>> summary = Summary.build(np.array([3, 4, 9, 8, 10, 2, 1]), plan, Ledger(":memory:", budget=1),
...                         rng=np.random.default_rng(0))
>>> summary.ledger_entry.loss
PureDP(epsilon=Fraction(1, 2))
"""

from .join import JoinPlan, JoinTable, Matcher, Organisation, private_join
from .parties import AnalyticsServer, CryptoServiceProvider, DataOwner, Domain, Grid, ProtocolError, Upload
from .partition import METHODS, Partition, RangeCount, Summary, SummaryPlan
from .protocol import EncryptedSummary, OwnerData, Party, encrypted_summary

__all__ = [
    "METHODS",
    "AnalyticsServer",
    "CryptoServiceProvider",
    "DataOwner",
    "Domain",
    "EncryptedSummary",
    "Grid",
    "JoinPlan",
    "JoinTable",
    "Matcher",
    "Organisation",
    "OwnerData",
    "Partition",
    "Party",
    "ProtocolError",
    "RangeCount",
    "Summary",
    "SummaryPlan",
    "Upload",
    "encrypted_summary",
    "private_join",
]
