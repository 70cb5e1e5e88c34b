"""DP SQL on a table whose users are correlated along a declared graph (seed 001 in the SQL engine).

Expected leakage coefficients are computed here from a precision matrix assembled by hand and inverted with
``np.linalg.inv``; expected sensitivities are written out from the catalog's bounds. One test is
statistical: a grouped release audited against the replace neighbour of Bayesian DP.
"""

from __future__ import annotations

import gzip
import itertools
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import kakeibo
from correlated_fixtures import STAR, star_centre_conditional
from kakeibo.audit import audit
from kakeibo.backends import DuckDBBackend
from kakeibo.correlated import GaussianCorrelationModel
from kakeibo.mechanisms import Laplace
from kakeibo.privacy import PureDP
from kakeibo.sql import Catalog, CorrelationSpec, QueryRefused
from kakeibo.sql.plan import epsilon_for_accuracy, plan_query

TAU = 0.5
# A star around user 0, a path 10-11-12-13, a weighted edge to a unit that has no rows (1000).
EDGES = [(0, k) for k in range(1, 8)] + [(10, 11), (11, 12), (12, 13), (13, 1000, 2.5)]
TABLE = """
[tables.visits]
privacy_unit = "user_id"
max_partitions = 2
max_rows_per_partition = 3
[tables.visits.columns]
user_id = {{ type = "int" }}
city = {{ type = "str", public_values = ["kyoto", "osaka", "nara"], user_constant = true }}
amount = {{ type = "float", lower = 0, upper = 100 }}
change = {{ type = "float", lower = -10, upper = 30 }}
age = {{ type = "int", lower = 0, upper = 120, user_constant = true }}
channel = {{ type = "str" }}
{correlation}
"""
CORRELATED = TABLE.format(correlation=f'[tables.visits.correlation]\nedges = "friends.csv"\ntau = {TAU}')
INDEPENDENT = TABLE.format(correlation="")


def expected_max_leakage(edges: list[tuple[Any, ...]], tau: float) -> float:
    """``max_i 1 / (tau S_ii) - 1`` with ``S = (L + tau I)^-1`` assembled from the edge list by hand."""
    labels = sorted({e[0] for e in edges} | {e[1] for e in edges})
    index = {label: k for k, label in enumerate(labels)}
    q = tau * np.eye(len(labels))
    for edge in edges:
        u, v, w = index[edge[0]], index[edge[1]], (edge[2] if len(edge) == 3 else 1.0)
        q[u, v] -= w
        q[v, u] -= w
        q[u, u] += w
        q[v, v] += w
    return float(np.max(1 / (tau * np.diag(np.linalg.inv(q))) - 1))


def write_edges(path: Path, edges: list[tuple[Any, ...]], separator: str = ",") -> None:
    lines = ["# user_id, user_id, weight"] + [separator.join(str(x) for x in e) for e in edges]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def catalog_dir(tmp_path: Path) -> Path:
    write_edges(tmp_path / "friends.csv", EDGES)
    (tmp_path / "catalog.toml").write_text(CORRELATED)
    (tmp_path / "independent.toml").write_text(INDEPENDENT)
    return tmp_path


def visits(seed: int = 0) -> pa.Table:
    """Users 0..39 (30..39 outside the graph), 1-4 rows each, one city and age per user."""
    rng = np.random.default_rng(seed)
    users = np.repeat(np.arange(40), rng.integers(1, 5, 40))
    cities = np.array(["kyoto", "osaka", "nara"])[rng.integers(0, 3, 40)][users]
    return pa.table(
        {
            "user_id": users,
            "city": cities,
            "amount": rng.uniform(0, 120, users.size),
            "change": rng.uniform(-20, 40, users.size),
            "age": rng.integers(10, 90, 40)[users],
            "channel": np.array(["web", "shop"])[rng.integers(0, 2, users.size)],
        }
    )


def session_on(catalog: Path, ledger: Path) -> kakeibo.sql.session.Session:
    db = DuckDBBackend()
    db.load_table("visits", visits())
    return kakeibo.connect(db, catalog=catalog, ledger=ledger, budget=100)


def test_the_catalog_reads_the_graph_relative_to_the_toml_file(catalog_dir: Path) -> None:
    catalog = Catalog.from_toml(catalog_dir / "catalog.toml")
    spec = catalog.table("visits").correlation
    assert spec == CorrelationSpec(str(catalog_dir / "friends.csv"), tau=TAU)
    bound = spec.bound("int")
    assert (bound.units, bound.edges, bound.tau) == (13, len(EDGES), TAU)
    truth = expected_max_leakage(EDGES, TAU)
    assert truth <= bound.max_leakage <= truth * (1 + 1e-9)  # certified: never below the truth
    assert Catalog.from_dict(catalog.to_dict()) == catalog


@pytest.mark.parametrize("separator", [",", "\t", "  ", ", "])
@pytest.mark.parametrize("compress", [False, True])
def test_edge_file_formats_give_one_graph(tmp_path: Path, separator: str, compress: bool) -> None:
    plain = tmp_path / "plain.csv"
    write_edges(plain, EDGES)
    path = tmp_path / ("edges.txt.gz" if compress else "edges.txt")
    write_edges(tmp_path / "edges.txt", EDGES, separator)
    if compress:
        path.write_bytes(gzip.compress((tmp_path / "edges.txt").read_bytes()))
    inline = CorrelationSpec(tuple(EDGES), tau=TAU).bound("int")
    assert CorrelationSpec(str(path), tau=TAU).bound("int") == inline
    assert CorrelationSpec(str(plain), tau=TAU).bound("int") == inline


def test_text_units_inline_in_toml() -> None:
    catalog = Catalog.from_toml(
        """
        [tables.reviews]
        privacy_unit = "name"
        [tables.reviews.columns]
        name = "str"
        rating = { type = "int", lower = 1, upper = 5 }
        [tables.reviews.correlation]
        edges = [["alice", "bob"], ["bob", "carol", 0.5]]
        tau = 2
        """
    )
    bound = catalog.table("reviews").correlation.bound("str")
    truth = expected_max_leakage([("alice", "bob"), ("bob", "carol", 0.5)], 2.0)
    assert (bound.units, bound.edges) == (3, 2)
    assert truth <= bound.max_leakage <= truth * (1 + 1e-9)


BAD_EDGES = [
    ("1,2\n2,1\n", r"edge 2: \(2, 1\) repeats edge 1"),
    ("1,2\n3,3\n", "edge 2: unit 3 cannot be correlated with itself"),
    ("1,2\n3\n", "edge 2: expected u, v and an optional weight"),
    ("1,2,1,4\n", "edge 1: expected u, v and an optional weight"),
    ("1,x\n", "edge 1: the int privacy unit needs integer labels, got 'x'"),
    ("1,2,-1\n", "edge 1: the weight must be a finite number >= 0, got '-1'"),
    ("1,2,nan\n", "the weight must be a finite number >= 0"),
    ("# nothing\n\n", "no edges; drop the correlation declaration"),
    ("1,99999999999999999999\n", "needs integer labels"),
    # labels and weights are ASCII decimals: int() and float() alone also read these
    ("1,\u0661\n", "edge 1: the int privacy unit needs integer labels, got '\u0661'"),
    ("1,1_0\n", "edge 1: the int privacy unit needs integer labels, got '1_0'"),
    ("1,2,1_0\n", "edge 1: the weight must be a finite number >= 0, got '1_0'"),
    ("1,2,\u0661\n", "the weight must be a finite number >= 0"),
]


@pytest.mark.parametrize(("content", "match"), BAD_EDGES)
def test_bad_edge_files_fail_when_the_catalog_loads(tmp_path: Path, content: str, match: str) -> None:
    (tmp_path / "friends.csv").write_text(content)
    (tmp_path / "catalog.toml").write_text(CORRELATED)
    with pytest.raises(ValueError, match=f"table 'visits': correlation edge file .*friends.csv.*{match}"):
        Catalog.from_toml(tmp_path / "catalog.toml")


def test_an_edge_file_that_is_not_utf8_fails_with_a_sentence(tmp_path: Path) -> None:
    (tmp_path / "friends.csv").write_bytes(b"1,2\n\xff\xfe,3\n")
    (tmp_path / "catalog.toml").write_text(CORRELATED)
    with pytest.raises(ValueError, match=r"friends\.csv, edge 2: the line is not UTF-8 text"):
        Catalog.from_toml(tmp_path / "catalog.toml")


BAD_DECLARATIONS = [
    ('edges = "friends.csv"', ValueError, "correlation of table 'visits' needs tau"),
    ("tau = 1", ValueError, "correlation of table 'visits' needs edges"),
    ('edges = "friends.csv"\ntau = 0', ValueError, "tau must be a positive finite number"),
    ('edges = "friends.csv"\ntau = true', TypeError, "tau must be a positive number"),
    ('edges = "friends.csv"\ntau = 1\nweight = 2', ValueError, r"unknown key\(s\) weight"),
    ('edges = "missing.csv"\ntau = 1', ValueError, "missing.csv' does not exist"),
    ("edges = 5\ntau = 1", TypeError, "must be a file path or a list"),
    ("edges = [1, 2]\ntau = 1", TypeError, "each correlation edge must be"),
]


@pytest.mark.parametrize(("section", "error", "match"), BAD_DECLARATIONS)
def test_bad_declarations_are_refused(catalog_dir: Path, section: str, error: type, match: str) -> None:
    path = catalog_dir / "bad.toml"
    path.write_text(TABLE.format(correlation=f"[tables.visits.correlation]\n{section}"))
    with pytest.raises(error, match=match):
        Catalog.from_toml(path)


def test_a_graph_needs_an_int_or_str_privacy_unit() -> None:
    with pytest.raises(ValueError, match="correlation graph but no privacy_unit"):
        Catalog.from_dict(
            {"tables": {"t": {"columns": {"x": "int"}, "correlation": {"edges": [[1, 2]], "tau": 1}}}}
        )
    with pytest.raises(ValueError, match="needs an int or str privacy unit, not date"):
        Catalog.from_dict(
            {
                "tables": {
                    "t": {
                        "privacy_unit": "day",
                        "columns": {"day": "date"},
                        "correlation": {"edges": [["2024-01-01", "2024-01-02"]], "tau": 1},
                    }
                }
            }
        )


# (query, statistic, replace range Delta by hand, statistics in the query): kappa = 3, L0 = 2.
SCALES = [
    ("SELECT COUNT(*) FROM visits", "rows", 3.0, 1),
    ("SELECT COUNT(DISTINCT user_id) FROM visits", "users", 1.0, 1),
    ("SELECT SUM(amount) FROM visits", "s_amount", 3 * 100.0, 1),
    ("SELECT SUM(change) FROM visits", "s_change", 3 * (30.0 + 10.0), 1),  # lower < 0: [-30, 90]
    ("SELECT AVG(amount) FROM visits", "sc_amount", 3 * 100.0, 2),  # centred: 3 * 50 * [-1, 1]
    ("SELECT AVG(amount) FROM visits", "n_amount", 3.0, 2),
    ("SELECT city, COUNT(*) FROM visits GROUP BY city", "rows", 2 * 2 * 3.0, 1),  # 2 L0 max(-lo, hi)
    ("SELECT city, SUM(change) FROM visits GROUP BY city", "s_change", 2 * 2 * 90.0, 1),
    ("SELECT city, AVG(change) FROM visits GROUP BY city", "sc_change", 2 * 2 * 60.0, 2),
]


@pytest.mark.parametrize(("query", "name", "replace", "k"), SCALES)
def test_noise_is_eq_26_with_the_replace_range(
    catalog_dir: Path, query: str, name: str, replace: float, k: int
) -> None:
    """Each statistic's Laplace scale is ``GaussianCorrelationModel.laplace_scale(epsilon=eps/k, M=Delta)``
    of the declared graph, and never below the independent table's DP scale."""
    catalog = Catalog.from_toml(catalog_dir / "catalog.toml")
    session = kakeibo.connect(DuckDBBackend(), catalog=catalog, ledger=catalog_dir / "l.sqlite", budget=10)
    plan = session.plan(query, epsilon=Fraction(1, 2))
    mechanism = plan.statistic(name).mechanism
    assert isinstance(mechanism, Laplace)
    model = GaussianCorrelationModel.from_edges(
        [(0, k) for k in range(1, 8)] + [(10, 11), (11, 12), (12, 13), (13, 14)],
        n=15,
        weights=[1.0] * 10 + [2.5],
        tau=TAU,
    )
    assert plan.correlation is not None
    assert mechanism.sensitivity == pytest.approx(replace * plan.correlation.factor, rel=1e-12)
    assert mechanism.scale == pytest.approx(model.laplace_scale(epsilon=0.5 / k, M=replace), rel=1e-5)
    assert mechanism.epsilon == pytest.approx(0.5 / k)
    independent = kakeibo.connect(
        DuckDBBackend(), catalog=catalog_dir / "independent.toml", ledger=catalog_dir / "i.sqlite", budget=10
    )
    dp_scale = independent.plan(query, epsilon=Fraction(1, 2)).statistic(name).mechanism.scale
    assert mechanism.scale >= dp_scale * plan.correlation.factor * (1 - 1e-12)


REFUSED = [
    ("SELECT VARIANCE(amount) FROM visits", "not the sum of squares a variance needs"),
    ("SELECT STDDEV(amount) FROM visits", "not the sum of squares a variance needs"),
    ("SELECT MEDIAN(amount) FROM visits", "not the exponential mechanism of quantiles"),
    ("SELECT MIN(amount) FROM visits", "not the exponential mechanism of quantiles"),
    ("SELECT MAX(change) FROM visits", "not the exponential mechanism of quantiles"),
    ("SELECT QUANTILE_CONT(amount, 0.9) FROM visits", "not the exponential mechanism of quantiles"),
    ("SELECT channel, COUNT(*) FROM visits GROUP BY channel", "bounds delta for independent users only"),
]


@pytest.mark.parametrize(("query", "match"), REFUSED)
def test_what_the_model_does_not_cover_is_refused_free(catalog_dir: Path, query: str, match: str) -> None:
    session = session_on(catalog_dir / "catalog.toml", catalog_dir / "l.sqlite")
    with pytest.raises(QueryRefused, match=match):
        session.sql(query, epsilon=1)
    assert session.ledger.spent() == PureDP(0)
    independent = session_on(catalog_dir / "independent.toml", catalog_dir / "i.sqlite")
    independent.plan(query, epsilon=1, delta=1e-6)  # the same query is answerable without the graph


def test_no_parallel_composition_across_where_regions(catalog_dir: Path) -> None:
    """Disjoint WHERE boxes on a user-constant column compose in parallel on independent users (cost eps)
    but sequentially on correlated ones (cost 2 eps): a friend under 40 is evidence about a user over 40."""
    queries = [
        "SELECT SUM(amount) FROM visits WHERE age < 40",
        "SELECT SUM(amount) FROM visits WHERE age >= 40",
    ]
    spent = {}
    for name in ("catalog", "independent"):
        session = session_on(catalog_dir / f"{name}.toml", catalog_dir / f"{name}.sqlite")
        assert (session.plan(queries[0], epsilon=1).region is None) == (name == "catalog")
        for query in queries:
            session.sql(query, epsilon=1, rng=np.random.default_rng(1))
        spent[name] = session.ledger.spent()
    assert spent == {"catalog": PureDP(2), "independent": PureDP(1)}


def test_release_explain_and_the_graph_in_the_release_identity(catalog_dir: Path) -> None:
    session = session_on(catalog_dir / "catalog.toml", catalog_dir / "l.sqlite")
    query = "SELECT city, SUM(amount) AS total FROM visits GROUP BY city"
    plan = session.plan(query, epsilon=1)
    assert plan.correlation is not None
    text = session.explain(query, epsilon=1)
    assert f"correlated users: Gaussian correlation model over 13 units ({len(EDGES)} edges, tau=0.5)" in text
    assert f"l*={plan.correlation.max_leakage:.6g}" in text
    result = session.sql(query, epsilon=1, rng=np.random.default_rng(3)).to_arrow()
    half = plan.statistic("s_amount").mechanism.error_bound(0.05)
    width = np.asarray(result["total_ci_high"]) - np.asarray(result["total_ci_low"])
    assert result.column("city").to_pylist() == ["kyoto", "osaka", "nara"]
    assert np.allclose(width, 2 * half)
    session.sql(query, epsilon=1)  # the same graph: served from the ledger, no charge
    assert session.ledger.spent() == PureDP(1)
    session.close()
    retuned = catalog_dir / "retuned.toml"
    retuned.write_text(CORRELATED.replace(f"tau = {TAU}", "tau = 2.0"))
    other = session_on(retuned, catalog_dir / "l.sqlite")
    other.sql(query, epsilon=1)  # another graph means another release
    assert other.ledger.spent() == PureDP(2)


def test_accuracy_requests_pay_for_the_correlation(catalog_dir: Path) -> None:
    query = "SELECT SUM(amount) FROM visits"
    epsilons = {}
    for name in ("catalog", "independent"):
        session = session_on(catalog_dir / f"{name}.toml", catalog_dir / f"{name}.sqlite")
        analysed = session.plan(query, epsilon=1).query
        epsilons[name] = epsilon_for_accuracy(analysed, alpha=500.0, beta=0.05)
        plan = plan_query(analysed, epsilon=epsilons[name])
        assert plan.statistic("s_amount").mechanism.error_bound(0.05) <= 500.0
    factor = CorrelationSpec(tuple(EDGES), tau=TAU).bound("int").factor
    # Same sensitivity (lower = 0), scale x factor; each epsilon is rounded up to two significant digits.
    assert epsilons["catalog"] / epsilons["independent"] == pytest.approx(factor, rel=0.1)


def test_a_sub_population_never_shifts_more_than_the_maximum_coefficient() -> None:
    """The lemma behind WHERE filters and groups: for ``Q = L + diag(tau)`` every regression coefficient
    ``S_ji / S_ii`` is >= 0, so over all subsets ``T`` of the other users the shift of ``sum_T x`` per unit
    of ``x_i`` is largest for all of them, ``l_i <= l*``. Brute force over all subsets, n = 7."""
    rng = np.random.default_rng(11)
    for _ in range(20):
        n = 7
        pairs = [p for p in itertools.combinations(range(n), 2) if rng.random() < 0.5]
        q = np.diag(rng.uniform(0.05, 3.0, n))
        for u, v in pairs:
            w = rng.uniform(0.1, 2.0)
            q[u, v] -= w
            q[v, u] -= w
            q[u, u] += w
            q[v, v] += w
        cov = np.linalg.inv(q)
        coefficients = cov / np.diag(cov)[None, :]  # [j, i] = S_ji / S_ii
        assert coefficients.min() >= -1e-12
        weak = coefficients.sum(axis=0) - 1
        for i in range(n):
            others = [j for j in range(n) if j != i]
            shifts = [
                coefficients[list(t), i].sum() for r in range(n) for t in itertools.combinations(others, r)
            ]
            assert max(shifts) <= weak[i] + 1e-12


@pytest.mark.statistical
def test_grouped_release_keeps_the_replace_neighbour_within_epsilon(tmp_path: Path) -> None:
    """Users on a star (centre 0, leaves 1..5), one public group key per record, L0 = 1, kappa = 1, COUNT.
    The target (the centre) moves its one row from group a to group b: Bayesian DP's replace neighbour.
    Per group the users' counts follow the model, so given the target's record the two group counts are
    ``(1 + slope) [1, 0] + noise`` vs ``(1 + slope) [0, 1] + noise`` with Gaussian noise of the conditional
    spread (covariance form, ``np.linalg.inv``). The plan's mechanism releases both; the audit tests
    ``r_a - r_b`` at 10^6 releases per record, confidence 1 - 1e-6 per assertion. The planned noise is not
    refuted at eps = 1; the add/remove calibration times (1 + l*) (half the replace range) is."""
    catalog = Catalog.from_dict(
        {
            "tables": {
                "t": {
                    "privacy_unit": "u",
                    "max_partitions": 1,
                    "max_rows_per_partition": 1,
                    "columns": {"u": "int", "g": {"type": "str", "public_values": ["a", "b"]}},
                    "correlation": {"edges": [list(e) for e in STAR], "tau": 1.0},
                }
            }
        }
    )
    session = kakeibo.connect(DuckDBBackend(), catalog=catalog, ledger=tmp_path / "l.sqlite", budget=10)
    plan = session.plan("SELECT g, COUNT(*) FROM t GROUP BY g", epsilon=1)
    planned = plan.statistic("rows").mechanism
    assert isinstance(planned, Laplace)
    slope, spread = star_centre_conditional(1.0)

    def releases(mechanism: Laplace) -> Any:
        def sample(group: int, n: int, rng: np.random.Generator) -> np.ndarray:
            counts = rng.normal(0.0, spread, (n, 2))
            counts[:, group] += 1 + slope
            released = np.asarray(mechanism.release(counts, rng=rng))
            return released[:, 0] - released[:, 1]

        return audit(sample, 0, 1, trials=1_000_000, alpha=1e-6, rng=np.random.default_rng(7))

    result = releases(planned)
    assert not result.refutes(1.0), str(result)
    add_remove = Laplace(sensitivity=planned.sensitivity / 2, epsilon=1)
    assert releases(add_remove).refutes(1.0)


@pytest.mark.parametrize(("tau", "weight"), [(1e-200, 1.0), (1e-15, 1.0), (1.0, 1e300), (1e-150, 1e-3)])
def test_a_tiny_tau_is_never_certified_as_independence(tmp_path: Path, tau: float, weight: float) -> None:
    """Adversarial review F1: a 40-user path at tau = 1e-200 was certified l* = 0 and COUNT(*) got the noise
    of independent users; 1e-15 gave l* = inf and every query failed. The truth is just below 39 (the limit
    of eq. 29: a component of 40 moves together), so the noise must scale by 40."""
    edges = "\n".join(f"{u},{u + 1},{weight!r}" for u in range(39))
    (tmp_path / "friends.csv").write_text(edges + "\n")
    (tmp_path / "catalog.toml").write_text(CORRELATED.replace(f"tau = {TAU}", f"tau = {tau!r}"))
    session = kakeibo.connect(
        DuckDBBackend(), catalog=tmp_path / "catalog.toml", ledger=tmp_path / "l.sqlite", budget=10
    )
    plan = session.plan("SELECT COUNT(*) FROM visits", epsilon=Fraction(1, 2))
    assert plan.correlation is not None and plan.correlation.max_leakage == 39.0
    mechanism = plan.statistic("rows").mechanism
    assert isinstance(mechanism, Laplace) and mechanism.sensitivity == pytest.approx(3.0 * 40, rel=1e-12)


def test_weights_beyond_floating_point_are_refused_when_the_catalog_loads(tmp_path: Path) -> None:
    (tmp_path / "friends.csv").write_text("1,2,1e308\n2,3,1e308\n")
    (tmp_path / "catalog.toml").write_text(CORRELATED)
    with pytest.raises(
        ValueError,
        match=r"table 'visits': tau = 0.5 is out of proportion to the edge weights \(largest 1e\+308\)",
    ):
        Catalog.from_toml(tmp_path / "catalog.toml")
