"""Local differential privacy: each client randomizes its own value; an untrusted server estimates.

Seed 003 ("Local Differential Privacy: a Tutorial"). Every frequency oracle follows the pure-LDP framework
of Wang et al. 2017 (:mod:`.framework`): a client side (:meth:`~FrequencyOracle.randomize`, exact coins,
one report per client), a versioned wire format (:class:`Reports`, parameters included) and a vectorised
server side (:meth:`~FrequencyOracle.estimate`, with variances). Every server of the package answers through
one method, ``estimate(reports, ...)``, with a member of one result family (:mod:`.estimates`: counts with
variances, means with variances, heavy hitters with their estimates); intervals take ``beta``, the
probability they miss.

>>> import numpy as np
>>> from kakeibo.ldp import OUE
>>> oue = OUE(epsilon=2, domain_size=8)
>>> reports = oue.randomize(np.array([1, 1, 3, 7]), rng=np.random.default_rng(0))
>>> oue.estimate(reports).counts.shape
(8,)
"""

from __future__ import annotations

from . import postprocess
from .advisor import Recommendation, recommend_oracle
from .bitstogram import Bitstogram
from .campaign import Ask, Campaign
from .client import ClientBudgetExceeded, ClientLedger, ClientLedgerIntegrityError, SentReport
from .direct import GRR
from .estimates import (
    CountEstimate,
    Estimate,
    FrequentItems,
    FrequentItemsets,
    HeavyHitters,
    MeanEstimate,
    MedianCounts,
    MedianHeavyHitters,
    MultidimensionalEstimate,
    RapporDecoding,
    SpatialCounts,
    TopItems,
)
from .expander_sketch import PrivateExpanderSketch
from .framework import FrequencyOracle
from .hadamard import HadamardResponse
from .hashing import BLH, OLH, LocalHashing
from .hashtogram import Hashtogram
from .heavy_hitters import PEM, PrefixExtendingMethod, TreeHist
from .histogram import SHE
from .itemset_baselines import LDPMiner, SamplingRAPPOR
from .itemsets import SVIM, SVSM, LengthChoice
from .multidim import MultidimensionalSampling
from .numeric import DuchiMechanism, HybridMechanism, PiecewiseMechanism
from .padding import PaddingSamplingOracle, UserSets
from .rappor import RAPPOR, OneTimeRAPPOR, RapporClient
from .reports import FORMAT_VERSION, ReportFormatError, Reports
from .sketch import CountMeanSketch, HadamardCountMeanSketch
from .spatial import PCEP, PSDA, LocationHierarchy
from .succinct import SuccinctHistogram
from .unary import OUE, SUE, THE, UnaryEncoding

__all__ = [
    "BLH",
    "FORMAT_VERSION",
    "GRR",
    "OLH",
    "OUE",
    "PCEP",
    "PEM",
    "PSDA",
    "RAPPOR",
    "SHE",
    "SUE",
    "SVIM",
    "SVSM",
    "THE",
    "Ask",
    "Bitstogram",
    "Campaign",
    "ClientBudgetExceeded",
    "ClientLedger",
    "ClientLedgerIntegrityError",
    "CountEstimate",
    "CountMeanSketch",
    "DuchiMechanism",
    "Estimate",
    "FrequencyOracle",
    "FrequentItems",
    "FrequentItemsets",
    "HadamardCountMeanSketch",
    "HadamardResponse",
    "Hashtogram",
    "HeavyHitters",
    "HybridMechanism",
    "LDPMiner",
    "LengthChoice",
    "LocalHashing",
    "LocationHierarchy",
    "MeanEstimate",
    "MedianCounts",
    "MedianHeavyHitters",
    "MultidimensionalEstimate",
    "MultidimensionalSampling",
    "OneTimeRAPPOR",
    "PaddingSamplingOracle",
    "PiecewiseMechanism",
    "PrefixExtendingMethod",
    "PrivateExpanderSketch",
    "RapporClient",
    "RapporDecoding",
    "Recommendation",
    "ReportFormatError",
    "Reports",
    "SamplingRAPPOR",
    "SentReport",
    "SpatialCounts",
    "SuccinctHistogram",
    "TopItems",
    "TreeHist",
    "UnaryEncoding",
    "UserSets",
    "postprocess",
    "recommend_oracle",
]
