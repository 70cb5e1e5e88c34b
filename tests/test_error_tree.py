"""One error tree at every public boundary (issue 30): a bad input anywhere a user calls kakeibo raises a
:class:`kakeibo.Error`, and still the built-in (``ValueError``, ``TypeError``) that code written before the
tree catches.

The walk is a table: each case names the call, the bad input, and the built-in the error was before the
tree (``None`` where it was neither). A second test reads the source: no bare ``raise ValueError(...)`` or
``raise TypeError(...)`` is left anywhere in the package (:data:`CHECKED`).
"""

from __future__ import annotations

import ast
import contextlib
import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
import scipy.sparse as sp

import kakeibo
from kakeibo import accounting as acc
from kakeibo import audit as aud
from kakeibo import correlated as cor
from kakeibo import ldp, ml, noise
from kakeibo import mechanisms as mech
from kakeibo.accounting import Ledger
from kakeibo.cli import main
from kakeibo.privacy import ZCDP, ApproxDP, PureDP
from kakeibo.sql import Catalog, ColumnSpec, CorrelationSpec, TableSpec, analyze
from kakeibo.views import hdpview
from test_sql_cli import CATALOG  # visits by user_id, with public categories and bounded amounts

SRC = Path(kakeibo.__file__).parent

#: The files (under ``src/kakeibo``) where no bare ``raise ValueError(``/``raise TypeError(`` may remain;
#: a directory stands for every ``.py`` file below it: the whole package.
CHECKED = ("",)

COUNT = "SELECT COUNT(*) FROM visits"
NAN, INF = math.nan, math.inf
X = np.array([[0.1, 0.2], [0.3, -0.4], [0.5, 0.6], [-0.7, 0.8]])
Y = np.array([0, 1, 0, 1])


class Files:
    """What the cases read: a directory of files (a catalog, a DuckDB database, files that are not what
    they should be) and fresh objects built from them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.catalog, self.database = root / "catalog.toml", root / "visits.duckdb"
        self.malformed, self.binary = root / "malformed.toml", root / "binary.toml"
        self.text = root / "notes.txt"

    def ledger(self) -> Ledger:
        return Ledger(":memory:", budget=10)

    def session(self) -> Any:
        return kakeibo.connect(self.database, catalog=self.catalog, ledger=":memory:", budget=100)

    def joint(self) -> cor.JointDistribution:
        return cor.JointDistribution(np.array([[0.4, 0.1], [0.1, 0.4]]))

    def adjacency(self) -> Any:
        return sp.csr_array(np.array([[0.0, 1.0], [1.0, 0.0]]))

    def laplace(self) -> mech.Laplace:
        return mech.Laplace(sensitivity=1, epsilon=1)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    made = Files(tmp_path_factory.mktemp("error_tree"))
    made.catalog.write_text(CATALOG)
    made.malformed.write_text("[tables.visits\ncolumns = 3\n")
    made.binary.write_bytes(b"\xff\xfe\x00 not text")
    made.text.write_text("these are notes, not a database\n" * 64)
    con = duckdb.connect(str(made.database))
    con.execute(
        "CREATE TABLE visits AS SELECT i % 50 AS user_id, CASE WHEN i % 3 = 0 THEN 'rent' ELSE 'food' END "
        "AS category, (i % 97)::DOUBLE AS amount FROM range(300) t(i)"
    )
    con.close()
    return made


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


Case = tuple[str, Callable[[Files], object], type[Exception] | None]
V, T = ValueError, TypeError

PRIVACY: list[Case] = [
    ("PureDP epsilon=-1", lambda f: PureDP(-1), V),
    ("PureDP epsilon=nan", lambda f: PureDP(NAN), V),
    ("PureDP epsilon='a'", lambda f: PureDP("a"), V),
    ("PureDP epsilon=True", lambda f: PureDP(True), T),
    ("PureDP epsilon=None", lambda f: PureDP(None), V),
    ("ApproxDP delta=1", lambda f: ApproxDP(1, 1), V),
    ("ApproxDP delta=2", lambda f: ApproxDP(1, 2), V),
    ("ApproxDP epsilon=inf", lambda f: ApproxDP(INF, 0), V),
    ("ZCDP rho=-1", lambda f: ZCDP(-1), V),
    ("ZCDP rho=[1]", lambda f: ZCDP([1]), V),
]

MECHANISMS: list[Case] = [
    ("Laplace epsilon=0", lambda f: mech.Laplace(sensitivity=1, epsilon=0), V),
    ("Laplace epsilon=-1", lambda f: mech.Laplace(sensitivity=1, epsilon=-1), V),
    ("Laplace epsilon=nan", lambda f: mech.Laplace(sensitivity=1, epsilon=NAN), V),
    ("Laplace epsilon=inf", lambda f: mech.Laplace(sensitivity=1, epsilon=INF), V),
    ("Laplace epsilon='a'", lambda f: mech.Laplace(sensitivity=1, epsilon="a"), V),
    ("Laplace epsilon=None", lambda f: mech.Laplace(sensitivity=1, epsilon=None), V),
    ("Laplace sensitivity=-1", lambda f: mech.Laplace(sensitivity=-1, epsilon=1), V),
    ("Laplace sensitivity='x'", lambda f: mech.Laplace(sensitivity="x", epsilon=1), V),
    ("Laplace coordinates=0", lambda f: mech.Laplace(sensitivity=1, epsilon=1, coordinates=0), V),
    ("Laplace coordinates='2'", lambda f: mech.Laplace(sensitivity=1, epsilon=1, coordinates="2"), V),
    ("Laplace.release('a')", lambda f: f.laplace().release("a", rng=_rng()), V),
    ("Laplace.release({})", lambda f: f.laplace().release({}, rng=_rng()), T),
    ("Laplace.release(nan)", lambda f: f.laplace().release(NAN, rng=_rng()), V),
    ("Laplace.release(inf)", lambda f: f.laplace().release(INF, rng=_rng()), V),
    ("Laplace.release(None)", lambda f: f.laplace().release(None, rng=_rng()), V),
    ("Laplace.release rng='x'", lambda f: f.laplace().release(1.0, rng="x"), T),
    ("Laplace.error_bound(2)", lambda f: f.laplace().error_bound(2), V),
    ("Laplace.error_bound('a')", lambda f: f.laplace().error_bound("a"), V),
    ("Gaussian delta=0", lambda f: mech.Gaussian(sensitivity=1, epsilon=1, delta=0), V),
    ("Gaussian delta=1", lambda f: mech.Gaussian(sensitivity=1, epsilon=1, delta=1), V),
    ("Gaussian delta='a'", lambda f: mech.Gaussian(sensitivity=1, epsilon=1, delta="a"), V),
    (
        "Gaussian.release(nan)",
        lambda f: mech.Gaussian(sensitivity=1, epsilon=1, delta=1e-6).release(NAN, rng=_rng()),
        V,
    ),
    ("Geometric sensitivity=0.5", lambda f: mech.Geometric(sensitivity=0.5, epsilon=1), V),
    (
        "Geometric.release(0.5)",
        lambda f: mech.Geometric(sensitivity=1, epsilon=1).release(0.5, rng=_rng()),
        V,
    ),
    (
        "Geometric.release('a')",
        lambda f: mech.Geometric(sensitivity=1, epsilon=1).release("a", rng=_rng()),
        V,
    ),
    ("DiscreteGaussian rho=0", lambda f: mech.DiscreteGaussian(sensitivity=1, rho=0), V),
    ("DiscreteGaussian rho=-1", lambda f: mech.DiscreteGaussian(sensitivity=1, rho=-1), V),
    ("Exponential epsilon=0", lambda f: mech.Exponential(utility_sensitivity=1, epsilon=0), V),
    (
        "Exponential.release([])",
        lambda f: mech.Exponential(utility_sensitivity=1, epsilon=1).release([], rng=_rng()),
        V,
    ),
    (
        "Exponential.release with nan",
        lambda f: mech.Exponential(utility_sensitivity=1, epsilon=1).release([1.0, NAN], rng=_rng()),
        V,
    ),
    ("RandomizedResponse categories=1", lambda f: mech.RandomizedResponse(epsilon=1, categories=1), V),
    ("RandomizedResponse categories=2.5", lambda f: mech.RandomizedResponse(epsilon=1, categories=2.5), T),
    ("RandomizedResponse.release(5)", lambda f: mech.RandomizedResponse(epsilon=1).release(5, rng=_rng()), V),
    (
        "RandomizedResponse.release('a')",
        lambda f: mech.RandomizedResponse(epsilon=1).release("a", rng=_rng()),
        T,
    ),
    ("PartitionSelection delta=0", lambda f: mech.PartitionSelection(epsilon=1, delta=0), V),
    (
        "PartitionSelection max_partitions=0",
        lambda f: mech.PartitionSelection(epsilon=1, delta=1e-6, max_partitions=0),
        V,
    ),
    ("laplace_error beta=0", lambda f: mech.laplace_error(sensitivity=1, epsilon=1, beta=0), V),
    ("laplace_error beta=1.5", lambda f: mech.laplace_error(sensitivity=1, epsilon=1, beta=1.5), V),
    (
        "gaussian_epsilon_for tolerance=-1",
        lambda f: mech.gaussian_epsilon_for(sensitivity=1, delta=1e-6, tolerance=-1, beta=0.05),
        V,
    ),
    ("analytic_gaussian_sigma epsilon='a'", lambda f: mech.analytic_gaussian_sigma("a", 1e-6, 1.0), T),
    ("count_sensitivity neighbour='x'", lambda f: mech.count_sensitivity(neighbour="x"), V),
    (
        "sum_sensitivity lower > upper",
        lambda f: mech.sum_sensitivity(lower=5, upper=1, neighbour="add_remove"),
        V,
    ),
    ("group_privacy k=0", lambda f: mech.group_privacy(PureDP(1), 0), V),
    ("group_privacy of a number", lambda f: mech.group_privacy(1, 2), T),
    ("check_accuracy tolerance=-1", lambda f: mech.check_accuracy(f.laplace(), -1, 0.05), V),
    ("check_accuracy of no mechanism", lambda f: mech.check_accuracy(object(), 1, 0.05), T),
]


def _reused_request(f: Files) -> object:
    ledger = f.ledger()
    ledger.charge(0.1, label="first", request_id="r")
    return ledger.charge(0.2, label="first", request_id="r")


ACCOUNTING: list[Case] = [
    ("Ledger budget=-1", lambda f: Ledger(":memory:", budget=-1), V),
    ("Ledger budget='a'", lambda f: Ledger(":memory:", budget="a"), T),
    ("Ledger budget=(1, 2)", lambda f: Ledger(":memory:", budget=(1, 2)), V),
    ("Ledger composition='nope'", lambda f: Ledger(":memory:", budget=1, composition="nope"), V),
    ("Ledger composition=3", lambda f: Ledger(":memory:", budget=1, composition=3), T),
    (
        "Ledger advanced without delta_slack",
        lambda f: Ledger(":memory:", budget=ApproxDP(1, 1e-6), composition="advanced"),
        V,
    ),
    ("Ledger timeout=-1", lambda f: Ledger(":memory:", budget=1, timeout=-1), V),
    ("Ledger timeout='a'", lambda f: Ledger(":memory:", budget=1, timeout="a"), T),
    ("Ledger path=None", lambda f: Ledger(None, budget=1), T),
    ("Ledger path=3", lambda f: Ledger(3, budget=1), T),
    ("Ledger in a missing directory", lambda f: Ledger(f.root / "no" / "such" / "l.sqlite", budget=1), None),
    ("Ledger on a directory", lambda f: Ledger(f.root, budget=1), None),
    ("Ledger on a text file", lambda f: Ledger(f.text, budget=1), V),
    ("Ledger.charge(-1)", lambda f: f.ledger().charge(-1, label="x"), V),
    ("Ledger.charge(nan)", lambda f: f.ledger().charge(NAN, label="x"), V),
    ("Ledger.charge('a')", lambda f: f.ledger().charge("a", label="x"), T),
    ("Ledger.charge label=''", lambda f: f.ledger().charge(0.1, label=""), V),
    ("Ledger.charge label=3", lambda f: f.ledger().charge(0.1, label=3), T),
    ("Ledger.charge analyst=5", lambda f: f.ledger().charge(0.1, label="x", analyst=5), T),
    (
        "Ledger.charge release without request_id",
        lambda f: f.ledger().charge(0.1, label="x", release=b"x"),
        V,
    ),
    ("Ledger.charge region='x'", lambda f: f.ledger().charge(0.1, label="x", region="x"), T),
    ("Ledger.charge zCDP to a pure budget", lambda f: f.ledger().charge(ZCDP(0.1), label="x"), T),
    ("Ledger.charge a request_id reused", _reused_request, V),
    ("Ledger.set_budget(-1)", lambda f: f.ledger().set_budget(-1), V),
    ("Ledger.check(-1)", lambda f: f.ledger().check(-1), V),
    ("advanced_composition delta_slack=0", lambda f: acc.advanced_composition([PureDP(1)], delta_slack=0), V),
    ("advanced_composition delta_slack=1", lambda f: acc.advanced_composition([PureDP(1)], delta_slack=1), V),
    ("advanced_composition of a number", lambda f: acc.advanced_composition([1.0], delta_slack=1e-6), T),
    ("advanced_composition of zCDP", lambda f: acc.advanced_composition([ZCDP(1)], delta_slack=1e-6), T),
    ("sequential_composition of a string", lambda f: acc.sequential_composition(["a"]), T),
    ("zcdp_composition of approximate DP", lambda f: acc.zcdp_composition([ApproxDP(1, 1e-6)]), T),
    ("parallel_composition lengths differ", lambda f: acc.parallel_composition([PureDP(1)], []), V),
    (
        "parallel_composition method='nope'",
        lambda f: acc.parallel_composition([PureDP(1)], [None], method="nope"),
        V,
    ),
    ("optimal_homogeneous_composition k=0", lambda f: acc.optimal_homogeneous_composition(1, 0, 0, 0), V),
    ("optimal_homogeneous_composition k=1.5", lambda f: acc.optimal_homogeneous_composition(1, 0, 1.5, 0), V),
    (
        "optimal_homogeneous_composition epsilon=-1",
        lambda f: acc.optimal_homogeneous_composition(-1, 0, 2, 0),
        V,
    ),
    ("optimal_homogeneous_composition delta=1", lambda f: acc.optimal_homogeneous_composition(1, 1, 2, 0), V),
    (
        "optimal_homogeneous_composition target=2",
        lambda f: acc.optimal_homogeneous_composition(1, 0, 2, 2),
        V,
    ),
    ("convert zCDP to pure DP", lambda f: acc.convert(ZCDP(1), PureDP), T),
    ("Interval lo > hi", lambda f: acc.Interval(2, 1), V),
    ("Interval lo=nan", lambda f: acc.Interval(NAN, 1), V),
    ("Box of a list", lambda f: acc.Box([1, 2]), T),
    ("Box range='nope'", lambda f: acc.Box({"x": "nope"}), T),
]

CORRELATED: list[Case] = [
    ("GaussianCorrelationModel dense adjacency", lambda f: cor.GaussianCorrelationModel(np.eye(3), tau=1), T),
    ("GaussianCorrelationModel tau=-1", lambda f: cor.GaussianCorrelationModel(f.adjacency(), tau=-1), V),
    ("GaussianCorrelationModel tau='a'", lambda f: cor.GaussianCorrelationModel(f.adjacency(), tau="a"), T),
    ("GaussianCorrelationModel tau=None", lambda f: cor.GaussianCorrelationModel(f.adjacency(), tau=None), T),
    ("GaussianCorrelationModel tau=nan", lambda f: cor.GaussianCorrelationModel(f.adjacency(), tau=NAN), V),
    (
        "GaussianCorrelationModel.from_edges self-loop",
        lambda f: cor.GaussianCorrelationModel.from_edges([[0, 0]], 2, tau=1),
        V,
    ),
    (
        "GaussianCorrelationModel.leakage_of target=9",
        lambda f: cor.GaussianCorrelationModel(f.adjacency(), tau=1).leakage_of(9),
        V,
    ),
    (
        "GaussianCorrelationModel.laplace_scale epsilon=0",
        lambda f: cor.GaussianCorrelationModel(f.adjacency(), tau=1).laplace_scale(epsilon=0, M=1),
        V,
    ),
    ("JointDistribution negative", lambda f: cor.JointDistribution(np.array([[0.5, -0.5], [0.5, 0.5]])), V),
    ("JointDistribution not summing to 1", lambda f: cor.JointDistribution(np.full((2, 2), 0.1)), V),
    ("JointDistribution of a string", lambda f: cor.JointDistribution("a"), T),
    ("JointDistribution with nan", lambda f: cor.JointDistribution(np.array([[NAN, 0.5], [0.25, 0.25]])), V),
    ("JointDistribution empty", lambda f: cor.JointDistribution(np.array([])), V),
    ("LaplaceNoise scale=0", lambda f: cor.LaplaceNoise(0), V),
    ("LaplaceNoise scale='a'", lambda f: cor.LaplaceNoise("a"), V),
    ("GeometricNoise scale=-1", lambda f: cor.GeometricNoise(-1), V),
    ("bdpl epsilon=-1", lambda f: cor.bdpl(f.joint(), epsilon=-1, target=0), V),
    ("bdpl target=5", lambda f: cor.bdpl(f.joint(), epsilon=1, target=5), V),
    ("bdpl target='a'", lambda f: cor.bdpl(f.joint(), epsilon=1, target="a"), T),
    ("bdpl target known", lambda f: cor.bdpl(f.joint(), epsilon=1, target=0, known=[0]), V),
    ("bdpl of a string", lambda f: cor.bdpl("x", epsilon=1, target=0), T),
    ("max_bdpl epsilon=nan", lambda f: cor.max_bdpl(f.joint(), epsilon=NAN), V),
    ("bdp_laplace_scale epsilon=0", lambda f: cor.bdp_laplace_scale(f.joint(), epsilon=0), V),
    ("belief_update mechanism=3", lambda f: cor.belief_update(f.joint(), 3, target=0, output=0.0), T),
    (
        "belief_update output=nan",
        lambda f: cor.belief_update(f.joint(), cor.LaplaceNoise(1.0), target=0, output=NAN),
        V,
    ),
    (
        "adversary_leakage target=-1",
        lambda f: cor.adversary_leakage(f.joint(), cor.LaplaceNoise(1.0), target=-1),
        V,
    ),
]


def _fitted_logistic() -> ml.DPLogisticRegression:
    return ml.DPLogisticRegression(epsilon=1, ledger=False, random_state=0).fit(X, Y)


def _logistic(**settings: Any) -> ml.DPLogisticRegression:
    return ml.DPLogisticRegression(**{"epsilon": 1, "ledger": False, **settings})


ML: list[Case] = [
    ("DPLogisticRegression epsilon=0", lambda f: _logistic(epsilon=0).fit(X, Y), V),
    ("DPLogisticRegression epsilon='a'", lambda f: _logistic(epsilon="a").fit(X, Y), V),
    ("DPLogisticRegression epsilon=nan", lambda f: _logistic(epsilon=NAN).fit(X, Y), V),
    ("DPLogisticRegression method='nope'", lambda f: _logistic(method="nope").fit(X, Y), V),
    ("DPLogisticRegression norm_bound=-1", lambda f: _logistic(norm_bound=-1).fit(X, Y), V),
    ("DPLogisticRegression ledger='x'", lambda f: _logistic(ledger="x").fit(X, Y), T),
    ("DPLogisticRegression random_state='x'", lambda f: _logistic(random_state="x").fit(X, Y), V),
    ("DPLogisticRegression X with nan", lambda f: _logistic().fit(np.array([[NAN, 0], [0, 1]]), [0, 1]), V),
    ("DPLogisticRegression X of strings", lambda f: _logistic().fit([["a", "b"], ["c", "d"]], [0, 1]), V),
    ("DPLogisticRegression X one-dimensional", lambda f: _logistic().fit([1.0, 2.0], [0, 1]), V),
    ("DPLogisticRegression X empty", lambda f: _logistic().fit(np.zeros((0, 2)), []), V),
    ("DPLogisticRegression y too short", lambda f: _logistic().fit(X, [0, 1]), V),
    ("DPLogisticRegression one class", lambda f: _logistic().fit(X, [0, 0, 0, 0]), V),
    ("DPLogisticRegression three classes", lambda f: _logistic().fit(X, [0, 1, 2, 0]), V),
    ("DPLogisticRegression.predict unfitted", lambda f: _logistic().predict(X), V),
    ("DPLogisticRegression.predict wrong width", lambda f: _fitted_logistic().predict(np.zeros((2, 5))), V),
    ("DPLogisticRegression.predict strings", lambda f: _fitted_logistic().predict([["a", "b"]]), V),
    ("DPHuberSVM h=0", lambda f: ml.DPHuberSVM(epsilon=1, h=0, ledger=False).fit(X, Y), V),
    (
        "DPHuberSVM regularization=-1",
        lambda f: ml.DPHuberSVM(epsilon=1, regularization=-1, ledger=False).fit(X, Y),
        V,
    ),
    ("WALDP epsilon=0", lambda f: ml.WALDP(0).fit(X, Y), V),
    ("WALDP n_classes=1", lambda f: ml.WALDP(1, n_classes=1).fit(X, Y), V),
    ("WALDP X of strings", lambda f: ml.WALDP(1).fit([["a", "b"]], [0]), T),
    ("WALDP.transform unfitted", lambda f: ml.WALDP(1).transform(X), V),
    ("SUPML epsilon=-1", lambda f: ml.SUPML(epsilon=-1).fit(X, Y), V),
    ("SUPML training='nope'", lambda f: ml.SUPML(epsilon=1, training="nope").fit(X, Y), V),
    (
        "SUPML dimension_reduction='nope'",
        lambda f: ml.SUPML(epsilon=1, dimension_reduction="nope").fit(X, Y),
        V,
    ),
    ("SUPML n_features_to_select=0", lambda f: ml.SUPML(epsilon=1, n_features_to_select=0).fit(X, Y), V),
    ("SUPML.predict unfitted", lambda f: ml.SUPML(epsilon=1).predict(X), AttributeError),
    ("PiecewiseTransformer epsilon=0", lambda f: ml.PiecewiseTransformer(0).fit(X), V),
    (
        "PiecewiseTransformer feature_range reversed",
        lambda f: ml.PiecewiseTransformer(1, feature_range=(1, -1)).fit(X),
        V,
    ),
    (
        "PiecewiseTransformer X with nan",
        lambda f: ml.PiecewiseTransformer(1).fit_transform(np.array([[NAN, 0.0]])),
        V,
    ),
    (
        "RandomizedResponseTransformer epsilon=-1",
        lambda f: ml.RandomizedResponseTransformer(-1).fit([["a"], ["b"]]),
        V,
    ),
    (
        "RandomizedResponseTransformer unknown category",
        lambda f: ml.RandomizedResponseTransformer(1, categories=[["a", "b"]]).fit([["c"]]),
        V,
    ),
    ("WeakAnonymizer n_classes=0", lambda f: ml.WeakAnonymizer(0).fit(X, Y), V),
    ("DiscreteToOrdered empty", lambda f: ml.DiscreteToOrdered([]), V),
    ("DiscreteToOrdered of a string", lambda f: ml.DiscreteToOrdered("abc"), T),
    ("DiscreteToOrdered unknown value", lambda f: ml.DiscreteToOrdered(["a", "b"]).order_index(["z"]), V),
    ("load_dataset('nope')", lambda f: ml.load_dataset("nope"), V),
    ("load_dataset(3)", lambda f: ml.load_dataset(3), V),
]

AUDIT_NOISE_VIEWS: list[Case] = [
    ("audit trials=0", lambda f: aud.audit(f.laplace(), 0, 1, trials=0), V),
    ("audit alpha=1", lambda f: aud.audit(f.laplace(), 0, 1, alpha=1), V),
    ("audit delta=2", lambda f: aud.audit(f.laplace(), 0, 1, delta=2), V),
    ("audit delta='a'", lambda f: aud.audit(f.laplace(), 0, 1, delta="a"), None),
    ("audit mechanism=3", lambda f: aud.audit(3, 0, 1), T),
    ("audit events=[1]", lambda f: aud.audit(f.laplace(), 0, 1, events=[1], trials=10), T),
    ("clopper_pearson_upper successes > trials", lambda f: aud.clopper_pearson_upper(5, 3, 0.05), V),
    ("clopper_pearson_lower level=2", lambda f: aud.clopper_pearson_lower(1, 3, 2), V),
    ("empirical_epsilon rate=2", lambda f: aud.empirical_epsilon(2, 0.1), V),
    ("empirical_epsilon rate='a'", lambda f: aud.empirical_epsilon("a", 0.1), T),
    ("resolve_source('x')", lambda f: noise.resolve_source("x"), T),
    ("discrete_laplace scale=-1", lambda f: noise.discrete_laplace(-1, rng=_rng()), V),
    ("discrete_laplace scale='a'", lambda f: noise.discrete_laplace("a", rng=_rng()), V),
    ("discrete_laplace size=-1", lambda f: noise.discrete_laplace(1, size=-1, rng=_rng()), V),
    ("discrete_gaussian sigma2=0", lambda f: noise.discrete_gaussian(0, rng=_rng()), V),
    (
        "hdpview.build epsilon=0",
        lambda f: hdpview.build(np.array([[0, 0]]), np.array([1]), (2, 2), epsilon=0, rng=_rng()),
        V,
    ),
    (
        "hdpview.build cell outside the domain",
        lambda f: hdpview.build(np.array([[5, 0]]), np.array([1]), (2, 2), epsilon=1, rng=_rng()),
        V,
    ),
    (
        "hdpview.build count 0",
        lambda f: hdpview.build(np.array([[0, 0]]), np.array([0]), (2, 2), epsilon=1, rng=_rng()),
        V,
    ),
    (
        "hdpview.build no attributes",
        lambda f: hdpview.build(np.zeros((0, 0)), np.array([]), (), epsilon=1),
        V,
    ),
    ("HDPViewParameters ratio=2", lambda f: hdpview.HDPViewParameters(ratio=2.0), V),
    (
        "View.range_counts of mismatched shapes",
        lambda f: hdpview.build(
            np.array([[0, 0]]), np.array([3]), (2, 2), epsilon=1, rng=_rng()
        ).range_counts(np.array([0]), np.array([1])),
        V,
    ),
]


def _private(f: Files, **settings: Any) -> Any:
    return kakeibo.private(**{"mechanism": f.laplace(), "ledger": f.ledger(), **settings})


DECORATOR: list[Case] = [
    ("private mechanism=3", lambda f: kakeibo.private(mechanism=3, ledger=f.ledger()), T),
    ("private ledger=3", lambda f: kakeibo.private(mechanism=f.laplace(), ledger=3), T),
    ("private confidence=2", lambda f: _private(f, confidence=2), V),
    ("private default='a'", lambda f: _private(f, default="a"), V),
    ("private call with too many arguments", lambda f: _private(f)(lambda x: 1.0)(1, 2), T),
    ("private call rng='x'", lambda f: _private(f)(lambda x: 1.0)(1, rng="x"), T),
    ("private call request_id=3", lambda f: _private(f)(lambda x: 1.0)(1, request_id=3), T),
    ("private label=3", lambda f: _private(f, label=3)(lambda x: 1.0)(1), T),
]

CATALOGS: list[Case] = [
    ("Catalog.from_toml malformed text", lambda f: Catalog.from_toml("[tables.x\ncolumns = 3"), V),
    ("Catalog.from_toml malformed file", lambda f: Catalog.from_toml(f.malformed), V),
    ("Catalog.from_toml binary file", lambda f: Catalog.from_toml(f.binary), V),
    ("Catalog.from_toml(3)", lambda f: Catalog.from_toml(3), T),
    (
        "Catalog.from_toml unknown key",
        lambda f: Catalog.from_toml('[tables.v]\nnope = 1\n[tables.v.columns]\na = "int"\n'),
        V,
    ),
    ("Catalog.from_toml no tables", lambda f: Catalog.from_toml(""), V),
    ("Catalog.from_toml unknown type", lambda f: Catalog.from_toml('[tables.v.columns]\na = "complex"\n'), V),
    (
        "Catalog.from_toml bounds reversed",
        lambda f: Catalog.from_toml('[tables.v.columns]\na = { type = "int", lower = 5, upper = 1 }\n'),
        V,
    ),
    (
        "Catalog.from_toml lower=nan",
        lambda f: Catalog.from_toml('[tables.v.columns]\na = { type = "float", lower = nan, upper = 1 }\n'),
        V,
    ),
    ("Catalog.from_dict of a list", lambda f: Catalog.from_dict([1]), T),
    ("Catalog.from_dict key 3", lambda f: Catalog.from_dict({3: {}}), T),
    ("Catalog.table unknown", lambda f: Catalog.from_toml(CATALOG).table("nope"), V),
    ("Catalog(3)", lambda f: Catalog(3), T),
    ("Catalog dialect='nope'", lambda f: Catalog([], dialect="nope"), V),
    ("ColumnSpec type='x'", lambda f: ColumnSpec("a", "x"), V),
    ("ColumnSpec name=3", lambda f: ColumnSpec(3, "int"), T),
    ("TableSpec without columns", lambda f: TableSpec("t", {}), V),
    ("CorrelationSpec edges=3", lambda f: CorrelationSpec(3, tau=1.0), T),
    ("CorrelationSpec edge 'ab'", lambda f: CorrelationSpec(("ab",), tau=1.0), T),
    ("analyze(3)", lambda f: analyze(3, Catalog.from_toml(CATALOG)), T),
    ("analyze catalog='x'", lambda f: analyze("SELECT 1", "x"), T),
    ("analyze dialect='nope'", lambda f: analyze(COUNT, Catalog.from_toml(CATALOG), dialect="nope"), V),
]

SESSION: list[Case] = [
    (
        "connect catalog malformed",
        lambda f: kakeibo.connect(":memory:", catalog=f.malformed, ledger=":memory:", budget=1),
        V,
    ),
    ("connect catalog=3", lambda f: kakeibo.connect(":memory:", catalog=3, ledger=":memory:", budget=1), T),
    ("connect ledger=3", lambda f: kakeibo.connect(":memory:", catalog=f.catalog, ledger=3, budget=1), T),
    ("connect database=3", lambda f: kakeibo.connect(3, catalog=f.catalog, ledger=":memory:", budget=1), T),
    (
        "connect budget=-1",
        lambda f: kakeibo.connect(":memory:", catalog=f.catalog, ledger=":memory:", budget=-1),
        V,
    ),
    (
        "connect dialect='nope'",
        lambda f: kakeibo.connect(":memory:", catalog=f.catalog, ledger=":memory:", budget=1, dialect="nope"),
        V,
    ),
    ("sql without epsilon", lambda f: f.session().sql(COUNT), T),
    ("sql query=3", lambda f: f.session().sql(3, epsilon=1), T),
    ("explain query=3", lambda f: f.session().explain(3), T),
    ("sql epsilon and accuracy", lambda f: f.session().sql(COUNT, epsilon=1, accuracy=(1, 0.05)), T),
    ("sql epsilon='a'", lambda f: f.session().sql(COUNT, epsilon="a"), V),
    ("sql epsilon=-1", lambda f: f.session().sql(COUNT, epsilon=-1), V),
    ("sql epsilon=nan", lambda f: f.session().sql(COUNT, epsilon=NAN), V),
    ("sql epsilon=inf", lambda f: f.session().sql(COUNT, epsilon=INF), V),
    ("sql accuracy beta=2", lambda f: f.session().sql(COUNT, accuracy=(1, 2)), V),
    ("sql accuracy='a'", lambda f: f.session().sql(COUNT, accuracy="a"), T),
    ("sql delta=2", lambda f: f.session().sql(COUNT, epsilon=1, delta=2), V),
    ("sql rng='x'", lambda f: f.session().sql(COUNT, epsilon=1, rng="x"), T),
    ("sql dialect='nope'", lambda f: f.session().sql(COUNT, epsilon=1, dialect="nope"), V),
    ("sql bounds={'nope': (0, 1)}", lambda f: f.session().sql(COUNT, epsilon=1, bounds={"nope": (0, 1)}), V),
    ("sql bounds=3", lambda f: f.session().sql(COUNT, epsilon=1, bounds=3), T),
    ("sql outside_view='x'", lambda f: f.session().sql(COUNT, epsilon=1, outside_view="x"), V),
    ("sql empty query", lambda f: f.session().sql("", epsilon=1), V),
    ("sql unknown table", lambda f: f.session().sql("SELECT COUNT(*) FROM nope", epsilon=1), V),
    ("sql unknown column", lambda f: f.session().sql("SELECT SUM(nope) FROM visits", epsilon=1), V),
    ("plan without epsilon", lambda f: f.session().plan(COUNT), T),
    ("plan epsilon='a'", lambda f: f.session().plan(COUNT, epsilon="a"), V),
    ("plan epsilon and accuracy", lambda f: f.session().plan(COUNT, epsilon=1, accuracy=(1, 0.05)), T),
    ("explain epsilon=-1", lambda f: f.session().explain(COUNT, epsilon=-1), V),
    ("explain dialect='nope'", lambda f: f.session().explain(COUNT, dialect="nope"), V),
    ("explain bounds={'nope': (0, 1)}", lambda f: f.session().explain(COUNT, bounds={"nope": (0, 1)}), V),
    (
        "create_view epsilon=0",
        lambda f: f.session().create_view("v", "SELECT category FROM visits", epsilon=0),
        V,
    ),
    (
        "create_view rows_per_person=0",
        lambda f: f.session().create_view("v", "SELECT category FROM visits", epsilon=1, rows_per_person=0),
        V,
    ),
    ("create_view name=3", lambda f: f.session().create_view(3, "SELECT category FROM visits", epsilon=1), V),
]


def _grr() -> ldp.GRR:
    return ldp.GRR(epsilon=1, domain_size=4)


LDP: list[Case] = [
    ("GRR epsilon=0", lambda f: ldp.GRR(epsilon=0, domain_size=4), V),
    ("GRR estimate of a list", lambda f: _grr().estimate([1, 2]), None),
    ("Reports.from_bytes of a str", lambda f: ldp.Reports.from_bytes("garbage"), T),
    ("GRR epsilon='a'", lambda f: ldp.GRR(epsilon="a", domain_size=4), V),
    ("GRR domain_size=1", lambda f: ldp.GRR(epsilon=1, domain_size=1), V),
    ("GRR domain_size=2.5", lambda f: ldp.GRR(epsilon=1, domain_size=2.5), T),
    ("GRR.randomize outside the domain", lambda f: _grr().randomize([7], rng=_rng()), V),
    ("GRR.randomize strings", lambda f: _grr().randomize(["a"], rng=_rng()), T),
    ("GRR.randomize rng='x'", lambda f: _grr().randomize([1], rng="x"), T),
    (
        "GRR.estimate of OUE reports",
        lambda f: _grr().estimate(ldp.OUE(epsilon=1, domain_size=4).randomize([1], rng=_rng())),
        V,
    ),
    ("OUE domain_size=0", lambda f: ldp.OUE(epsilon=1, domain_size=0), V),
    ("OLH epsilon=nan", lambda f: ldp.OLH(epsilon=NAN, domain_size=4), V),
    ("SUE epsilon=inf", lambda f: ldp.SUE(epsilon=INF, domain_size=4), V),
    ("HadamardResponse domain_size=-1", lambda f: ldp.HadamardResponse(epsilon=1, domain_size=-1), V),
    ("PiecewiseMechanism epsilon=0", lambda f: ldp.PiecewiseMechanism(epsilon=0), V),
    (
        "PiecewiseMechanism.randomize outside [-1, 1]",
        lambda f: ldp.PiecewiseMechanism(epsilon=1).randomize([5.0], rng=_rng()),
        V,
    ),
    (
        "PiecewiseMechanism.randomize nan",
        lambda f: ldp.PiecewiseMechanism(epsilon=1).randomize([NAN], rng=_rng()),
        V,
    ),
    ("PiecewiseMechanism.estimate of nothing", lambda f: ldp.PiecewiseMechanism(epsilon=1).estimate([]), V),
    (
        "PiecewiseMechanism.estimate of strings",
        lambda f: ldp.PiecewiseMechanism(epsilon=1).estimate(["a"]),
        V,
    ),
    ("DuchiMechanism epsilon=-1", lambda f: ldp.DuchiMechanism(epsilon=-1), V),
    ("RAPPOR p=2", lambda f: ldp.RAPPOR(p=2), V),
    ("RAPPOR k=0", lambda f: ldp.RAPPOR(k=0), V),
    ("CountMeanSketch hashes=0", lambda f: ldp.CountMeanSketch(epsilon=1, hashes=0, buckets=4), V),
    ("TreeHist bits=0", lambda f: ldp.TreeHist(epsilon=1, bits=0, k=2), V),
    ("PEM k=0", lambda f: ldp.PEM(epsilon=1, bits=8, k=0), V),
    ("SVIM split not summing to 1", lambda f: ldp.SVIM(epsilon=1, domain_size=8, k=2, split=(1, 1, 1)), V),
    (
        "LDPMiner oracle='nope'",
        lambda f: ldp.LDPMiner(epsilon=1, domain_size=8, k=2, length=2, oracle="nope"),
        V,
    ),
    ("Reports.from_bytes garbage", lambda f: ldp.Reports.from_bytes(b"garbage"), V),
    ("ClientLedger daily_budget=-1", lambda f: ldp.ClientLedger(":memory:", daily_budget=-1), V),
    ("ClientLedger daily_budget='a'", lambda f: ldp.ClientLedger(":memory:", daily_budget="a"), V),
    ("ClientLedger on a text file", lambda f: ldp.ClientLedger(f.text, daily_budget=1), RuntimeError),
    ("Campaign days=0", lambda f: ldp.Campaign("c", [ldp.Ask(_grr(), 1)], days=0), V),
    ("Campaign without asks", lambda f: ldp.Campaign("c", [], days=1), V),
    ("Ask reports_per_day=0", lambda f: ldp.Ask(_grr(), 0), V),
    (
        "ClientLedger.report unknown campaign",
        lambda f: ldp.ClientLedger(":memory:", daily_budget=1).report("nope", _grr(), 1),
        None,
    ),
]


def _service() -> Any:
    return pytest.importorskip("kakeibo.service")


def _empty_config(f: Files) -> object:
    empty = f.root / "empty-service.toml"
    empty.write_text("")
    return _service().ServiceConfig.from_toml(empty)


SERVICE: list[Case] = [
    ("ServiceConfig.from_toml empty", _empty_config, V),
    (
        "ServiceConfig.from_dict ledger=3",
        lambda f: _service().ServiceConfig.from_dict({"ledger": 3}, base=f.root),
        V,
    ),
    ("ServiceConfig.from_dict of a list", lambda f: _service().ServiceConfig.from_dict([1], base=f.root), T),
    ("verify_key of no hash", lambda f: _service().verify_key("k", "nothash"), V),
]

CASES = PRIVACY + MECHANISMS + ACCOUNTING + CORRELATED + ML + AUDIT_NOISE_VIEWS + DECORATOR + CATALOGS
CASES += SESSION + LDP + SERVICE


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(("call", "builtin"), [pytest.param(c, b, id=name) for name, c, b in CASES])
def test_a_bad_input_raises_a_kakeibo_error_that_is_still_its_builtin(
    files: Files, call: Callable[[Files], object], builtin: type[Exception] | None
) -> None:
    with pytest.raises(kakeibo.Error) as caught:
        call(files)
    if builtin is not None:
        assert isinstance(caught.value, builtin), type(caught.value).__mro__
    assert str(caught.value)  # one sentence, never empty


def test_the_walk_covers_every_area() -> None:
    names = [name for name, _, _ in CASES]
    assert len(names) == len(set(names)) >= 150
    for area in (PRIVACY, MECHANISMS, ACCOUNTING, CORRELATED, ML, AUDIT_NOISE_VIEWS, DECORATOR, CATALOGS):
        assert len(area) >= 8
    assert len(SESSION) >= 20 and len(LDP) >= 20 and SERVICE


def _cli(files: Files, *extra: str) -> list[str]:
    return ["--database", str(files.database), "--catalog", str(files.catalog), *extra]


CLI: list[tuple[str, Callable[[Files], list[str]]]] = [
    ("unknown command", lambda f: ["nope"]),
    ("ledger without action", lambda f: ["ledger"]),
    ("ledger show of no ledger", lambda f: ["ledger", "show", str(f.root / "missing.sqlite")]),
    ("ledger show of a text file", lambda f: ["ledger", "show", str(f.text)]),
    ("ledger show of a directory", lambda f: ["ledger", "show", str(f.root)]),
    ("sql --epsilon abc", lambda f: ["sql", *_cli(f, "--ledger", ":memory:", "--epsilon", "abc"), COUNT]),
    ("sql --epsilon -1", lambda f: ["sql", *_cli(f, "--ledger", ":memory:", "--epsilon", "-1"), COUNT]),
    ("sql --epsilon nan", lambda f: ["sql", *_cli(f, "--ledger", ":memory:", "--epsilon", "nan"), COUNT]),
    ("sql without epsilon", lambda f: ["sql", *_cli(f, "--ledger", ":memory:", "--budget", "5"), COUNT]),
    (
        "sql --epsilon and --accuracy",
        lambda f: [
            "sql",
            *_cli(f, "--ledger", ":memory:", "--epsilon", "1", "--accuracy", "1", "0.05"),
            COUNT,
        ],
    ),
    (
        "sql --accuracy beta 2",
        lambda f: ["sql", *_cli(f, "--ledger", ":memory:", "--budget", "5", "--accuracy", "1", "2"), COUNT],
    ),
    (
        "sql --delta 2",
        lambda f: ["sql", *_cli(f, "--ledger", ":memory:", "--epsilon", "1", "--delta", "2"), COUNT],
    ),
    (
        "sql --bounds not JSON",
        lambda f: ["sql", *_cli(f, "--ledger", ":memory:", "--epsilon", "1", "--bounds", "{"), COUNT],
    ),
    (
        "sql --bounds unknown key",
        lambda f: [
            "sql",
            *_cli(f, "--ledger", ":memory:", "--epsilon", "1", "--bounds", '{"nope": [0, 1]}'),
            COUNT,
        ],
    ),
    (
        "sql catalog malformed",
        lambda f: [
            "sql",
            "--database",
            str(f.database),
            "--catalog",
            str(f.malformed),
            "--ledger",
            ":memory:",
            "--epsilon",
            "1",
            COUNT,
        ],
    ),
    (
        "sql catalog missing",
        lambda f: [
            "sql",
            "--database",
            str(f.database),
            "--catalog",
            str(f.root / "missing.toml"),
            "--ledger",
            ":memory:",
            "--epsilon",
            "1",
            COUNT,
        ],
    ),
    (
        "sql ledger in a missing directory",
        lambda f: [
            "sql",
            *_cli(f, "--ledger", str(f.root / "no" / "l.sqlite"), "--budget", "5", "--epsilon", "1"),
            COUNT,
        ],
    ),
    ("sql ledger a text file", lambda f: ["sql", *_cli(f, "--ledger", str(f.text), "--epsilon", "1"), COUNT]),
    (
        "sql unknown table",
        lambda f: ["sql", *_cli(f, "--ledger", ":memory:", "--epsilon", "1"), "SELECT COUNT(*) FROM nope"],
    ),
    ("explain --epsilon -1", lambda f: ["explain", *_cli(f, "--epsilon", "-1"), COUNT]),
    (
        "view create --epsilon 0",
        lambda f: [
            "view",
            "create",
            *_cli(f, "--ledger", ":memory:", "--budget", "5", "--epsilon", "0"),
            "v",
            "SELECT category FROM visits",
        ],
    ),
]


@pytest.mark.parametrize("argv", [pytest.param(a, id=name) for name, a in CLI])
def test_the_cli_refuses_bad_arguments_with_a_message_not_a_traceback(
    files: Files, argv: Callable[[Files], list[str]]
) -> None:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            status = main(argv(files))
        except SystemExit as leaving:  # argparse's own refusals: usage and one line
            status = leaving.code
    assert status in (1, 2)
    said = err.getvalue() + out.getvalue()
    assert "Traceback" not in said
    # one line naming kakeibo last (argparse's usage above its own), or the help for a command left out
    assert said.strip().splitlines()[-1].startswith("kakeibo") or said.startswith("usage: kakeibo")


def _bare_raises(path: Path, root: Path = SRC) -> list[str]:
    """Each ``raise ValueError(...)``/``raise TypeError(...)`` (or of the bare class) in ``path``, in line
    order, named relative to ``root``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(raised, ast.Name) and raised.id in ("ValueError", "TypeError"):
                found.append((node.lineno, raised.id))
    return [f"{path.relative_to(root).as_posix()}:{line} raises {name}" for line, name in sorted(found)]


def test_no_bare_value_or_type_error_is_raised_in_the_checked_files() -> None:
    paths = [
        p
        for entry in CHECKED
        for p in ((SRC / entry).rglob("*.py") if (SRC / entry).is_dir() else [SRC / entry])
    ]
    assert all(p.is_file() for p in paths) and len(paths) > len(CHECKED)
    assert [found for p in paths for found in _bare_raises(p)] == []


def test_the_source_check_finds_a_bare_raise(tmp_path: Path) -> None:
    """The checker itself: each spelling of a bare raise is reported, kakeibo's classes are not."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(x):\n"
        "    if x:\n"
        "        raise ValueError('x')\n"
        "    raise TypeError\n"
        "def g():\n"
        "    raise ArgumentError('fine')\n"
    )
    assert _bare_raises(sample, tmp_path) == ["sample.py:3 raises ValueError", "sample.py:4 raises TypeError"]
