"""One server language (issue 30): every LDP server answers ``estimate(reports, ...)`` with a member of the
result family of :mod:`kakeibo.ldp.estimates`; the old method names and the ``alpha=`` keyword of the interval
methods warn for one release and give exactly what the new names give."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any

import numpy as np
import pytest

from kakeibo import ldp
from kakeibo.errors import ArgumentError, ArgumentTypeError, Error
from kakeibo.ldp.estimates import Estimate

KEYS = np.repeat([7, 1000, 99, 5], [3000, 1500, 800, 200])
SETS = [[int(v) for v in np.random.default_rng(i).choice(12, i % 4, replace=False)] for i in range(2000)]
WORDS = [f"w{v}" for v in np.random.default_rng(2).integers(0, 12, 3000)]
HIERARCHY = ldp.LocationHierarchy.grid(levels=2)


def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def same(a: Any, b: Any) -> bool:
    """Whether two results hold the same values, field by field (NaN equals NaN; arrays by dtype and
    bytes)."""
    if type(a) is not type(b):
        return False
    if is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b) or (a != a and b != b)


# -- each server, seeded reports and its estimate ------------------------------------------------------------
def _oracle(cls: type[ldp.FrequencyOracle]) -> Callable[[], Estimate]:
    def run() -> Estimate:
        oracle = cls(epsilon=2, domain_size=12)
        return oracle.estimate(oracle.randomize(np.arange(600) % 12, rng=rng()))

    return run


def _keys(cls: type, **kw: Any) -> Callable[[], Estimate]:
    def run() -> Estimate:
        proto = cls(epsilon=4, bits=12, **kw)
        return proto.estimate(proto.randomize(np.tile(KEYS, 2), rng=rng()))  # type: ignore[no-any-return]

    return run


def _hashtogram() -> Estimate:
    oracle = ldp.Hashtogram(epsilon=2, bits=12, buckets=64, repetitions=4)
    return oracle.estimate(oracle.randomize(KEYS, rng=rng()), [7, 99])


def _sketch(cls: type) -> Callable[[], Estimate]:
    def run() -> Estimate:
        sketch = cls(epsilon=4, hashes=4, buckets=32, seed=1)
        return sketch.estimate(sketch.randomize(WORDS, rng=rng()), ["w1", "w2"])  # type: ignore[no-any-return]

    return run


def _rappor(cls: type) -> Callable[[], Estimate]:
    def run() -> Estimate:
        rappor = cls(k=32, h=2, m=4)
        return rappor.estimate(rappor.randomize(WORDS, rng=rng()), [f"w{i}" for i in range(12)])  # type: ignore[no-any-return]

    return run


def _numeric(cls: type) -> Callable[[], Estimate]:
    def run() -> Estimate:
        mech = cls(epsilon=1)
        return mech.estimate(mech.randomize(np.linspace(-1, 1, 500), rng=rng()))  # type: ignore[no-any-return]

    return run


def _multidim() -> Estimate:
    proto = ldp.MultidimensionalSampling(epsilon=2, dimensions=3, categorical={2: 3})
    records = np.column_stack([np.linspace(-1, 1, 600), np.linspace(1, -1, 600), np.arange(600) % 3])
    return proto.estimate(proto.randomize(records, rng=rng()))


def _padding() -> Estimate:
    psfo = ldp.PaddingSamplingOracle(epsilon=2, domain_size=12, length=2)
    return psfo.estimate(psfo.randomize(SETS, rng=rng()))


def _pcep() -> Estimate:
    pcep = ldp.PCEP(epsilon=2, hierarchy=HIERARCHY, region=HIERARCHY.root)
    return pcep.estimate(pcep.randomize_locations(np.arange(800) % HIERARCHY.n_locations, rng=rng()))


def _psda() -> Estimate:
    locations = np.arange(800) % HIERARCHY.n_locations
    psda = ldp.PSDA(HIERARCHY, np.full(800, HIERARCHY.root), np.where(locations % 2, 1.0, 2.0))
    return psda.estimate(psda.randomize(locations, rng=rng()))


def _svim_steps() -> tuple[ldp.SVIM, tuple[Any, ...]]:
    svim, source = ldp.SVIM(epsilon=2, domain_size=12, k=2), rng()
    found = svim.find_candidates(svim.discovery.randomize(SETS, rng=source))
    choice = svim.choose_length(svim.report_sizes(SETS, found, rng=source), found)
    return svim, (svim.report_items(SETS, found, choice.length, rng=source), found, choice, len(SETS))


def _svsm_steps() -> tuple[ldp.SVSM, tuple[Any, ...]]:
    svsm = ldp.SVSM(epsilon=2, domain_size=12, k=3)
    items, source = svsm.svim.run(SETS, rng=rng()), rng()
    itemsets = svsm.candidate_itemsets(items)
    choice = svsm.choose_length(svsm.report_sizes(SETS, itemsets, rng=source), itemsets)
    return svsm, (
        svsm.report_itemsets(SETS, itemsets, choice.length, rng=source),
        itemsets,
        choice,
        items,
        len(SETS),
    )


def _miner_steps() -> tuple[ldp.LDPMiner, tuple[Any, ...]]:
    miner, source = ldp.LDPMiner(epsilon=2, domain_size=12, k=2, length=2), rng()
    found = miner.find_candidates(miner.report_items(SETS, rng=source))
    return miner, (miner.report_candidates(SETS, found, rng=source), found)


def _sampling_rappor() -> Estimate:
    proto = ldp.SamplingRAPPOR(epsilon=4, domain_size=12, k=2, length=2)
    return proto.estimate(proto.randomize(SETS, rng=rng()))


def _stepped(steps: Callable[[], tuple[Any, tuple[Any, ...]]]) -> Callable[[], Estimate]:
    def run() -> Estimate:
        server, args = steps()
        return server.estimate(*args)  # type: ignore[no-any-return]

    return run


SERVERS: dict[type, Callable[[], Estimate]] = {
    **{cls: _oracle(cls) for cls in (ldp.GRR, ldp.OUE, ldp.SUE, ldp.THE, ldp.BLH, ldp.OLH, ldp.SHE)},
    ldp.HadamardResponse: _oracle(ldp.HadamardResponse),
    ldp.PCEP: _pcep,
    ldp.PSDA: _psda,
    ldp.Hashtogram: _hashtogram,
    ldp.Bitstogram: _keys(ldp.Bitstogram, k=2, buckets=64, count_buckets=64, repetitions=4),
    ldp.SuccinctHistogram: _keys(ldp.SuccinctHistogram, k=2, count_buckets=64, repetitions=4),
    ldp.PrivateExpanderSketch: _keys(ldp.PrivateExpanderSketch, k=2, count_buckets=64, repetitions=4),
    ldp.PrefixExtendingMethod: _keys(ldp.PrefixExtendingMethod, k=2),
    ldp.TreeHist: _keys(ldp.TreeHist, k=2),
    ldp.CountMeanSketch: _sketch(ldp.CountMeanSketch),
    ldp.HadamardCountMeanSketch: _sketch(ldp.HadamardCountMeanSketch),
    ldp.RAPPOR: _rappor(ldp.RAPPOR),
    ldp.OneTimeRAPPOR: _rappor(ldp.OneTimeRAPPOR),
    ldp.DuchiMechanism: _numeric(ldp.DuchiMechanism),
    ldp.PiecewiseMechanism: _numeric(ldp.PiecewiseMechanism),
    ldp.HybridMechanism: _numeric(ldp.HybridMechanism),
    ldp.MultidimensionalSampling: _multidim,
    ldp.PaddingSamplingOracle: _padding,
    ldp.SVIM: _stepped(_svim_steps),
    ldp.SVSM: _stepped(_svsm_steps),
    ldp.LDPMiner: _stepped(_miner_steps),
    ldp.SamplingRAPPOR: _sampling_rappor,
}


def _exported_servers() -> set[type]:
    """The concrete classes kakeibo.ldp exports with a server side (an ``estimate``), bases of others
    left out."""
    exported = {getattr(ldp, name) for name in ldp.__all__}
    classes = {
        c for c in exported if inspect.isclass(c) and hasattr(c, "estimate") and not inspect.isabstract(c)
    }
    return {c for c in classes if not any(o is not c and issubclass(o, c) for o in classes)}


def test_every_exported_server_is_covered() -> None:
    assert _exported_servers() == set(SERVERS)


@pytest.mark.parametrize("cls", sorted(SERVERS, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_estimate_returns_a_member_of_the_family(cls: type) -> None:
    """``estimate`` answers with an Estimate whose interval takes ``beta`` and widens as ``beta`` shrinks."""
    estimate = SERVERS[cls]()
    assert isinstance(estimate, Estimate)
    if isinstance(estimate, ldp.MedianCounts):  # the bound is fixed at the server's beta
        low, high = estimate.confidence_interval(beta=1 - estimate.confidence)
        assert np.all(low <= estimate.counts) and np.all(estimate.counts <= high)
        return
    narrow, wide = estimate.confidence_interval(beta=0.2), estimate.confidence_interval(beta=0.01)
    assert np.all(np.nan_to_num(wide[0] - narrow[0]) <= 0) and np.all(np.nan_to_num(wide[1] - narrow[1]) >= 0)


# -- the deprecated names: each warns and gives what estimate gives ------------------------------------------
def _oracle_pair(old: str, *args: Any) -> Callable[[], tuple[Any, Any]]:
    def run() -> tuple[Any, Any]:
        oracle = ldp.OLH(epsilon=2, domain_size=12)
        reports = oracle.randomize(np.arange(600) % 12, rng=rng())
        return getattr(oracle, old)(reports, *args), oracle.estimate(reports, *args)

    return run


def _keys_pair(cls: type, old: str, *args: Any, **kw: Any) -> Callable[[], tuple[Any, Any]]:
    def run() -> tuple[Any, Any]:
        proto = cls(epsilon=4, bits=12, k=2, **kw)
        batches = proto.randomize(np.tile(KEYS, 2), rng=rng())
        return getattr(proto, old)(batches, *args), proto.estimate(batches, *args)

    return run


def _hashtogram_pair() -> tuple[Any, Any]:
    oracle = ldp.Hashtogram(epsilon=2, bits=12, buckets=64, repetitions=4)
    reports = oracle.randomize(KEYS, rng=rng())
    return oracle.estimate_candidates(reports, [7, 99], 0.1), oracle.estimate(reports, [7, 99], 0.1)


def _sketch_pair(old: str) -> tuple[Any, Any]:
    sketch = ldp.CountMeanSketch(epsilon=4, hashes=4, buckets=32, seed=1)
    reports = sketch.randomize(np.arange(600) % 9, rng=rng())
    if old == "estimate_domain":
        return sketch.estimate_domain(reports, 9), sketch.estimate(reports, domain_size=9)
    return sketch.estimate_candidates(reports, [1, 4]), sketch.estimate(reports, [1, 4])


def _rappor_pair(old: str) -> tuple[Any, Any]:
    rappor = ldp.OneTimeRAPPOR(k=32, h=2, m=4)
    reports = rappor.randomize(WORDS, rng=rng())
    if old == "estimate_bits":
        return rappor.estimate_bits(reports), rappor.estimate(reports)
    candidates = [f"w{i}" for i in range(12)]
    return rappor.decode(reports, candidates, alpha=0.1), rappor.estimate(reports, candidates, beta=0.1)


def _mean_pair() -> tuple[Any, Any]:
    mech = ldp.PiecewiseMechanism(epsilon=1)
    reports = mech.randomize(np.linspace(-1, 1, 500), rng=rng())
    return mech.estimate_mean(reports), mech.estimate(reports)


def _multidim_pair() -> tuple[Any, Any]:
    proto = ldp.MultidimensionalSampling(epsilon=2, dimensions=3, categorical={2: 3})
    records = np.column_stack([np.linspace(-1, 1, 600), np.linspace(1, -1, 600), np.arange(600) % 3])
    reports = proto.randomize(records, rng=rng())
    return proto.estimate_means(reports), proto.estimate(reports)


def _padding_pair() -> tuple[Any, Any]:
    psfo = ldp.PaddingSamplingOracle(epsilon=2, domain_size=12, length=2)
    reports = psfo.randomize(SETS, rng=rng())
    return psfo.estimate_candidates(reports, [3, 0]), psfo.estimate(reports, [3, 0])


def _stepped_pair(
    steps: Callable[[], tuple[Any, tuple[Any, ...]]], old: str
) -> Callable[[], tuple[Any, Any]]:
    def run() -> tuple[Any, Any]:
        server, args = steps()
        return getattr(server, old)(*args), server.estimate(*args)

    return run


ALIASES: dict[str, Callable[[], tuple[Any, Any]]] = {
    "FrequencyOracle.estimate_with_variance": _oracle_pair("estimate_with_variance"),
    "FrequencyOracle.estimate_candidates": _oracle_pair("estimate_candidates", [5, 1, 5]),
    "Hashtogram.estimate_candidates": _hashtogram_pair,
    "CountedHeavyHitters.identify": _keys_pair(
        ldp.Bitstogram, "identify", 0.1, buckets=64, count_buckets=64, repetitions=4
    ),
    "PrefixExtendingMethod.identify": _keys_pair(ldp.PrefixExtendingMethod, "identify"),
    "PrefixExtendingMethod.estimate_candidates": _keys_pair(ldp.TreeHist, "estimate_candidates", [7, 99]),
    "CountMeanSketch.estimate_candidates": lambda: _sketch_pair("estimate_candidates"),
    "CountMeanSketch.estimate_domain": lambda: _sketch_pair("estimate_domain"),
    "RAPPOR.estimate_bits": lambda: _rappor_pair("estimate_bits"),
    "RAPPOR.decode": lambda: _rappor_pair("decode"),
    "NumericRandomizer.estimate_mean": _mean_pair,
    "MultidimensionalSampling.estimate_means": _multidim_pair,
    "PaddingSamplingOracle.estimate_candidates": _padding_pair,
    "SVIM.estimate_items": _stepped_pair(_svim_steps, "estimate_items"),
    "SVSM.estimate_itemsets": _stepped_pair(_svsm_steps, "estimate_itemsets"),
    "LDPMiner.estimate_candidates": _stepped_pair(_miner_steps, "estimate_candidates"),
}


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_old_names_warn_and_give_what_estimate_gives(name: str) -> None:
    """Same seed, same reports: the old name's result equals the new one's, field by field, and the warning
    points at the caller (this file)."""
    with pytest.warns(DeprecationWarning, match=r"is deprecated; use estimate") as caught:
        old, new = ALIASES[name]()
    assert {w.filename for w in caught if "is deprecated; use" in str(w.message)} == {__file__}
    assert same(old, new)


# -- intervals: beta everywhere, alpha its deprecated name ---------------------------------------------------
def test_alpha_keyword_warns_and_means_beta() -> None:
    oracle = ldp.OUE(epsilon=2, domain_size=8)
    estimate = oracle.estimate(oracle.randomize(np.arange(400) % 8, rng=rng()))
    multidim = _multidim()
    for result in (estimate, multidim):
        with pytest.warns(DeprecationWarning, match="alpha= is deprecated"):
            old = result.confidence_interval(alpha=0.1)
        assert same(old, result.confidence_interval(beta=0.1))
        assert same(result.confidence_interval(0.1), result.confidence_interval(beta=0.1))
        with pytest.raises(ArgumentTypeError, match="give beta"):
            result.confidence_interval(beta=0.1, alpha=0.1)
        with (
            pytest.raises(ArgumentError, match="alpha must be a probability"),
            pytest.warns(DeprecationWarning),
        ):
            result.confidence_interval(alpha=1.5)
    with pytest.warns(DeprecationWarning, match="confidence_intervals is deprecated"):
        assert same(multidim.confidence_intervals(), multidim.confidence_interval())  # type: ignore[attr-defined]
    proto = ldp.SamplingRAPPOR(epsilon=4, domain_size=12, k=2, length=2)
    reports = proto.randomize(SETS, rng=rng())
    with pytest.warns(DeprecationWarning, match="alpha= is deprecated"):
        old_estimate = proto.estimate(reports, alpha=0.2)
    assert same(old_estimate, proto.estimate(reports, beta=0.2))


def test_the_default_interval_misses_with_probability_0_05() -> None:
    estimate = _padding()
    assert same(estimate.confidence_interval(), estimate.confidence_interval(beta=0.05))


def test_a_median_bound_only_answers_the_beta_it_was_computed_at() -> None:
    estimate = _hashtogram()
    assert isinstance(estimate, ldp.MedianCounts)
    assert same(
        estimate.confidence_interval(), (estimate.counts - estimate.bound, estimate.counts + estimate.bound)
    )
    assert same(estimate.confidence_interval(beta=0.05), estimate.confidence_interval())
    with pytest.raises(ArgumentError, match=r"estimate again with beta=0\.1"):
        estimate.confidence_interval(beta=0.1)
    with pytest.warns(DeprecationWarning, match="interval is deprecated"):
        assert same(estimate.interval(), estimate.confidence_interval())  # type: ignore[attr-defined]


def test_a_mean_interval_takes_beta_and_z_is_deprecated() -> None:
    estimate = _numeric(ldp.DuchiMechanism)()
    assert isinstance(estimate, ldp.MeanEstimate)
    low, high = estimate.confidence_interval(beta=0.05)
    assert high - low == pytest.approx(2 * 1.959963984540054 * np.sqrt(estimate.variance))
    with pytest.warns(DeprecationWarning, match="z= is deprecated"):
        z_low, z_high = estimate.confidence_interval(z=3.0)
    assert z_high - z_low == pytest.approx(6.0 * np.sqrt(estimate.variance))


def test_a_decoding_keeps_alpha_as_a_deprecated_name_of_beta() -> None:
    decoding = _rappor(ldp.RAPPOR)()
    assert isinstance(decoding, ldp.RapporDecoding)
    with pytest.warns(DeprecationWarning, match="alpha is deprecated"):
        assert decoding.alpha == decoding.beta == 0.05  # type: ignore[attr-defined]
    assert decoding.threshold == decoding.beta / len(decoding.candidates)


# -- bad input: a kakeibo.Error on both sides ---------------------------------------------------------------
def _oue_reports() -> Any:
    return ldp.OUE(epsilon=1, domain_size=4).randomize([1, 2], rng=rng())


def _oue_estimate() -> ldp.CountEstimate:
    return ldp.OUE(epsilon=1, domain_size=4).estimate(_oue_reports())


BAD_INPUT: dict[str, Callable[[], object]] = {
    "oracle epsilon": lambda: ldp.OUE(epsilon=-1, domain_size=8),
    "client value": lambda: ldp.OUE(epsilon=1, domain_size=4).randomize([9]),
    "server candidates": lambda: ldp.OUE(epsilon=1, domain_size=4).estimate(_oue_reports(), [11]),
    "foreign reports": lambda: ldp.GRR(epsilon=1, domain_size=4).estimate(_oue_reports()),
    "interval beta": lambda: _oue_estimate().confidence_interval(2.0),
    "rappor": lambda: ldp.RAPPOR(k=0, h=2, m=4),
    "numeric client": lambda: ldp.PiecewiseMechanism(epsilon=1).randomize([2.0]),
    "numeric server": lambda: ldp.PiecewiseMechanism(epsilon=1).estimate(np.array(["a"])),
    "sketch": lambda: ldp.CountMeanSketch(epsilon=1, hashes=0, buckets=8),
    "hashtogram": lambda: ldp.Hashtogram(epsilon=1, bits=0, buckets=8, repetitions=1),
    "itemsets": lambda: ldp.SVIM(epsilon=1, domain_size=10, k=0),
    "padding": lambda: ldp.PaddingSamplingOracle(epsilon=1, domain_size=8, length=0),
    "multidim": lambda: ldp.MultidimensionalSampling(epsilon=1, dimensions=0),
    "spatial type": lambda: ldp.PCEP(epsilon=1, hierarchy="grid", region=[0]),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_to_a_client_or_server_is_a_kakeibo_error(case: str) -> None:
    """Callers catch one base class: kakeibo.Error (an ArgumentError is also the ValueError it replaced)."""
    with pytest.raises(Error) as info:
        BAD_INPUT[case]()
    assert isinstance(info.value, ValueError | TypeError)
