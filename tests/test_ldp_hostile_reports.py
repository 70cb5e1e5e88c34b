"""Hostile and malformed reports against the LDP servers: a server accepts exactly what an honest client can
send and refuses everything else with one ``ValueError``-family sentence.

* Numeric servers (Duchi, Piecewise, Hybrid; Wang et al. ICDE 2019) refuse every report outside the
  randomizer's exact output space: ``{-B, +B}``, the ``2^16`` Piecewise cell centres, or their union.
* SHE (Wang et al. 2017, Sec. 4.2.1) refuses payloads outside the int32 range an honest client produces and
  sums without overflow.
* :meth:`Reports.from_bytes` refuses every malformed header with :class:`ReportFormatError`, and a fuzzer
  checks that no mutation of a valid payload raises anything else.

Statistical tests are seeded; each states the false-failure rate of its bound.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import ndtr

from kakeibo import ldp
from kakeibo.errors import Error
from kakeibo.ldp import histogram
from kakeibo.ldp.multidim import MultidimensionalSampling
from kakeibo.ldp.numeric import NumericRandomizer
from kakeibo.ldp.reports import FORMAT_VERSION, ReportFormatError, Reports

RANDOMIZERS = [ldp.DuchiMechanism, ldp.PiecewiseMechanism, ldp.HybridMechanism]
EPSILONS = [0.5, 1.0, 4.0]
BETA = float(2 * ndtr(-5.0))  # two-sided normal tail 5.7e-7 per check (z = 5)
FUZZ = settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def one_sentence(exc: BaseException) -> None:
    """A refusal is a kakeibo error (callers catch ``kakeibo.Error``) in one short sentence."""
    assert isinstance(exc, Error), type(exc)
    text = str(exc)
    assert text.endswith(".") and len(text) < 300 and "\n" not in text, text


# --- numeric servers ---------------------------------------------------------------------------------------


def centres(c: float) -> np.ndarray:
    """The Piecewise mechanism's ``2^16`` cell centres of ``[-C, C]``, as its docstring defines them."""
    m = 1 << 16
    return -c + (2 * c / m) * (np.arange(m) + 0.5)


def expected_outputs(randomizer: NumericRandomizer) -> np.ndarray:
    """Every report an honest client of ``randomizer`` can send, derived from the published bounds."""
    if isinstance(randomizer, ldp.DuchiMechanism):
        return np.array([-randomizer.output_bound, randomizer.output_bound])
    if isinstance(randomizer, ldp.PiecewiseMechanism):
        return centres(randomizer.output_bound)
    assert isinstance(randomizer, ldp.HybridMechanism)
    eps = randomizer.epsilon
    duchi = expected_outputs(ldp.DuchiMechanism(epsilon=eps))
    if randomizer.piecewise_share == 0:
        return duchi
    return np.union1d(duchi, expected_outputs(ldp.PiecewiseMechanism(epsilon=eps)))


def not_an_output(randomizer: NumericRandomizer) -> float:
    """A value inside ``[-bound, bound]`` that no honest client sends."""
    if isinstance(randomizer, ldp.DuchiMechanism):
        return float(np.nextafter(randomizer.output_bound, 0))
    c = centres(ldp.PiecewiseMechanism(epsilon=randomizer.epsilon).output_bound)
    return float((c[1000] + c[1001]) / 2)


#: Hostile numeric reports: (label, value for a randomizer).
HOSTILE_NUMBERS: list[tuple[str, Callable[[NumericRandomizer], float]]] = [
    ("1e6", lambda r: 1e6),
    ("-1e6", lambda r: -1e6),
    ("inf", lambda r: math.inf),
    ("-inf", lambda r: -math.inf),
    ("nan", lambda r: math.nan),
    ("just above the bound", lambda r: float(np.nextafter(r.output_bound, math.inf))),
    ("just below minus the bound", lambda r: -float(np.nextafter(r.output_bound, math.inf))),
    ("zero", lambda r: 0.0),
    ("inside the range, not an output", not_an_output),
    ("one ulp above an output", lambda r: float(np.nextafter(expected_outputs(r)[-2], math.inf))),
    ("largest double", lambda r: float(np.finfo(np.float64).max)),
    ("smallest subnormal", lambda r: 5e-324),
]


@pytest.mark.parametrize("label,hostile", HOSTILE_NUMBERS, ids=[h[0] for h in HOSTILE_NUMBERS])
@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("cls", RANDOMIZERS, ids=lambda c: c.__name__)
def test_numeric_server_refuses_reports_outside_the_output_space(
    cls: type[NumericRandomizer], epsilon: float, label: str, hostile: Callable[[NumericRandomizer], float]
) -> None:
    randomizer = cls(epsilon=epsilon)
    honest = randomizer.randomize(np.zeros(1000), rng=np.random.default_rng(0))
    value = hostile(randomizer)
    assert not np.isin(value, expected_outputs(randomizer))  # the corpus really is hostile
    forged = np.concatenate([honest, [value, value]])
    with pytest.raises(ValueError, match="2 of the 1002 reports lie outside") as info:
        randomizer.estimate(forged)
    one_sentence(info.value)
    with pytest.raises(ValueError, match="outside"):
        randomizer.estimate([value])


def test_hybrid_below_the_threshold_refuses_piecewise_outputs() -> None:
    """At eps <= 0.61 the Hybrid mechanism is Duchi's alone, so a Piecewise cell is not an honest report."""
    hm = ldp.HybridMechanism(epsilon=0.5)
    assert hm.piecewise_share == 0
    cell = float(centres(ldp.PiecewiseMechanism(epsilon=0.5).output_bound)[123])
    with pytest.raises(ValueError, match="outside"):
        hm.estimate([hm.output_bound, cell])


@pytest.mark.parametrize(
    "reports",
    [np.array(["1.0"]), np.array([True, False]), np.array([10**30], dtype=object), np.array([1 + 1j])],
    ids=["strings", "bools", "huge ints", "complex"],
)
def test_numeric_server_refuses_non_real_reports(reports: np.ndarray) -> None:
    with pytest.raises(ValueError, match="real numbers") as info:
        ldp.PiecewiseMechanism(epsilon=1).estimate(reports)
    one_sentence(info.value)


@pytest.mark.parametrize("epsilon", [*EPSILONS, 0.1, 16.0, 64.0])
@pytest.mark.parametrize("cls", RANDOMIZERS, ids=lambda c: c.__name__)
def test_every_honest_output_is_accepted(cls: type[NumericRandomizer], epsilon: float) -> None:
    """The output space is exactly the finite set the client draws from (the discretisation of numeric.py),
    and every value of it passes the server's check."""
    randomizer = cls(epsilon=epsilon)
    expected = expected_outputs(randomizer)
    np.testing.assert_array_equal(randomizer.outputs, expected)
    assert not randomizer.outputs.flags.writeable
    randomizer.estimate(expected)  # no refusal
    np.testing.assert_array_equal(randomizer.check_reports(expected[::-1]), expected[::-1])
    assert float(np.max(np.abs(expected))) <= randomizer.output_bound


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("cls", RANDOMIZERS, ids=lambda c: c.__name__)
def test_honest_reports_pass_and_estimate_within_their_interval(
    cls: type[NumericRandomizer], epsilon: float
) -> None:
    """n = 100,000 honest clients at the extremes and inside: the server accepts them all, and its
    worst-case-variance interval covers the true mean (coverage >= 1 - 5.7e-7)."""
    randomizer = cls(epsilon=epsilon)
    rng = np.random.default_rng(17)
    values = np.concatenate([np.full(20_000, -1.0), np.full(20_000, 1.0), rng.uniform(-1, 1, 60_000)])
    estimate = randomizer.estimate(randomizer.randomize(values, rng=rng))
    low, high = estimate.confidence_interval(beta=BETA)
    assert estimate.n == 100_000 and low <= values.mean() <= high


def test_one_outlier_cannot_move_the_mean() -> None:
    """The review's exploit: one report of 1e6 among 100,000 honest ones moved the mean from 0 to 9.99."""
    pm = ldp.PiecewiseMechanism(epsilon=1)
    honest = pm.randomize(np.zeros(100_000), rng=np.random.default_rng(3))
    for value in (1e6, math.inf, math.nan):
        with pytest.raises(ValueError, match="1 of the 100001 reports"):
            pm.estimate(np.append(honest, value))


MECHANISMS = {"hybrid": ldp.HybridMechanism, "piecewise": ldp.PiecewiseMechanism, "duchi": ldp.DuchiMechanism}


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_multidimensional_server_shares_the_numeric_check(mechanism: str) -> None:
    protocol = MultidimensionalSampling(epsilon=5, dimensions=3, categorical={2: 3}, mechanism=mechanism)
    records = np.array([[0.5, -1.0, 2], [0.0, 0.25, 1], [1.0, 1.0, 0], [-0.5, 0.0, 1]] * 50)
    reports = protocol.randomize(records, rng=np.random.default_rng(0))
    attributes, values = reports["attributes"], reports["values"]
    numeric_slot = attributes != 2
    inner = MECHANISMS[mechanism](epsilon=protocol.attribute_epsilon)
    row, slot = np.argwhere(numeric_slot)[0]
    for _, hostile in HOSTILE_NUMBERS:
        forged = values.copy()
        forged[row, slot] = hostile(inner)
        with pytest.raises(
            ValueError, match=r"1 of the \d+ MultidimensionalSampling report values lie outside"
        ) as info:
            protocol.estimate(Reports(reports.protocol, reports.params, {**reports.arrays, "values": forged}))
        one_sentence(info.value)
    forged = values.copy()
    forged[~numeric_slot] = 0.5  # a categorical slot carries no numeric value
    with pytest.raises(ValueError, match="categorical"):
        protocol.estimate(Reports(reports.protocol, reports.params, {**reports.arrays, "values": forged}))
    protocol.estimate(reports)  # the honest batch passes


# --- SHE ---------------------------------------------------------------------------------------------------

INT32 = np.iinfo(np.int32)
INT64 = np.iinfo(np.int64)

#: Hostile SHE payloads: (label, array of two reports over a domain of 4 values).
HOSTILE_SHE: list[tuple[str, np.ndarray]] = [
    ("2**62 twice", np.full((2, 4), 2**62, dtype=np.int64)),
    ("int64 max", np.full((2, 4), INT64.max, dtype=np.int64)),
    ("int64 min", np.full((2, 4), INT64.min, dtype=np.int64)),
    ("2**31 in int64", np.full((2, 4), 2**31, dtype=np.int64)),
    ("-2**31 - 1 in int64", np.full((2, 4), -(2**31) - 1, dtype=np.int64)),
    ("small values in int64", np.zeros((2, 4), dtype=np.int64)),
    ("uint32", np.zeros((2, 4), dtype=np.uint32)),
    ("uint64 max", np.full((2, 4), np.iinfo(np.uint64).max, dtype=np.uint64)),
    ("float", np.zeros((2, 4), dtype=np.float64)),
    ("bool", np.zeros((2, 4), dtype=np.bool_)),
    ("int32 max (the client never sends it)", np.full((2, 4), INT32.max, dtype=np.int32)),
    ("int32 min (the client never sends it)", np.full((2, 4), INT32.min, dtype=np.int32)),
    ("wrong width", np.zeros((2, 5), dtype=np.int32)),
    ("1-d", np.zeros(2, dtype=np.int32)),
]


@pytest.mark.parametrize("label,payload", HOSTILE_SHE, ids=[h[0] for h in HOSTILE_SHE])
def test_she_server_refuses_payloads_an_honest_client_cannot_send(label: str, payload: np.ndarray) -> None:
    she = ldp.SHE(epsilon=1, domain_size=4)
    forged = Reports("SHE", she.params, {"noisy": payload})
    with pytest.raises(ValueError, match="SHE reports need") as info:
        she.estimate(forged)
    one_sentence(info.value)
    with pytest.raises(ValueError, match="SHE reports need"):
        she.estimate(forged, [0, 1])
    if payload.dtype.str in ("<i8", "<u4", "<u8", "<f8", "|b1", "<i4"):  # through the wire as well
        with pytest.raises(ValueError, match="SHE reports need"):
            she.estimate(Reports.from_bytes(forged.to_bytes()))


def test_she_accepts_the_whole_honest_range_and_sums_exactly() -> None:
    she = ldp.SHE(epsilon=1, domain_size=3)
    top = 2**31 - 2  # the client refuses |coordinate| >= 2**31 - 1
    noisy = np.array([[top, -top, 0], [top, -top, 5]], dtype=np.int32)
    counts = she.estimate(Reports("SHE", she.params, {"noisy": noisy})).counts
    np.testing.assert_array_equal(counts, [2.0 * top, -2.0 * top, 5.0])
    narrow = np.array([[-5, 0, 7]], dtype=np.int16)  # a narrower signed type holds honest values too
    np.testing.assert_array_equal(
        she.estimate(Reports("SHE", she.params, {"noisy": narrow})).counts, [-5, 0, 7]
    )


def test_she_sum_has_no_overflow_at_two_to_the_31_reports() -> None:
    """2^31 reports all at the honest extreme: |sum| = 2^31 (2^31 - 2) < 2^63, exact in int64 (a zero-stride
    view stands in for the 8 GiB batch)."""
    top = 2**31 - 2
    for value in (top, -top):
        rows = np.broadcast_to(np.array([[value]], dtype=np.int32), (2**31, 1))
        assert histogram.column_sums(rows).tolist() == [float(2**31 * value)]


def test_she_sums_blocks_of_rows_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond 2^32 rows the int64 block sums are added as Python integers: checked with tiny blocks."""
    monkeypatch.setattr(histogram, "_SUM_ROWS", 3)
    rng = np.random.default_rng(0)
    rows = rng.integers(-(2**31) + 2, 2**31 - 1, size=(10, 4)).astype(np.int32)
    exact = [float(sum(int(v) for v in rows[:, j])) for j in range(4)]
    assert histogram.column_sums(rows).tolist() == exact


@pytest.mark.statistical
def test_she_honest_reports_estimate_within_their_interval() -> None:
    she = ldp.SHE(epsilon=1, domain_size=5)
    rng = np.random.default_rng(4)
    values = rng.integers(0, 5, size=100_000)
    estimate = she.estimate(she.randomize(values, rng=rng))
    low, high = estimate.confidence_interval(beta=1e-6)
    truth = np.bincount(values, minlength=5)
    assert np.all((low <= truth) & (truth <= high))


# --- Reports.from_bytes ------------------------------------------------------------------------------------


def valid_header() -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "protocol": "GRR",
        "params": {"domain_size": 4, "epsilon": "1"},
        "n": 3,
        "arrays": [["values", "|u1", [3]]],
    }


def framed(head: bytes, body: bytes = b"\0\1\2") -> bytes:
    return b"KKBLDP" + struct.pack("<I", len(head)) + head + body


def with_header(change: Callable[[dict[str, Any]], object], body: bytes = b"\0\1\2") -> bytes:
    header = valid_header()
    change(header)
    return framed(json.dumps(header).encode(), body)


def setter(key: str, value: object) -> Callable[[dict[str, Any]], object]:
    return lambda h: h.__setitem__(key, value)


def array_spec(spec: object) -> Callable[[dict[str, Any]], object]:
    return setter("arrays", [spec])


#: Malformed batches, one per class of defect: (label, bytes).
MALFORMED: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("bad magic", b"XXXXXX" + framed(b"{}")[6:]),
    ("no length", b"KKBLDP\1\0"),
    ("header length beyond the data", b"KKBLDP" + struct.pack("<I", 2**32 - 1) + b"{}"),
    ("header not UTF-8", framed(b'{"format": 1, "protocol": "\xff"}')),
    ("header in UTF-16", framed(json.dumps(valid_header()).encode("utf-16"))),
    ("header not JSON", framed(b"{not json")),
    ("header a list", framed(b"[1]")),
    ("header a string", framed(b'"GRR"')),
    ("header a number", framed(b"1")),
    ("NaN constant", framed(json.dumps(valid_header()).replace('"n": 3', '"n": NaN').encode())),
    ("Infinity constant", framed(json.dumps(valid_header()).replace('"n": 3', '"n": Infinity').encode())),
    ("duplicate header key", framed(json.dumps(valid_header()).replace('"n": 3', '"n": 3, "n": 3').encode())),
    (
        "duplicate params key",
        framed(
            json.dumps(valid_header()).replace('"epsilon": "1"', '"epsilon": "1", "epsilon": "2"').encode()
        ),
    ),
    ("deep nesting", framed(b'{"format": 1, "params": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")),
    ("moderate nesting", framed(b'{"format": 1, "params": ' + b"[" * 50 + b"]" * 50 + b"}")),
    ("format true", with_header(setter("format", True))),
    ("format 1.0", with_header(setter("format", 1.0))),
    ("format '1'", with_header(setter("format", "1"))),
    ("format 2", with_header(setter("format", 2))),
    ("format huge", with_header(setter("format", 10**1000))),
    ("format missing", with_header(lambda h: h.pop("format"))),
    ("unknown key", with_header(setter("extra", 0))),
    ("protocol missing", with_header(lambda h: h.pop("protocol"))),
    ("protocol a number", with_header(setter("protocol", 5))),
    ("params a list", with_header(setter("params", [1]))),
    ("params missing", with_header(lambda h: h.pop("params"))),
    ("param true", with_header(lambda h: h["params"].__setitem__("domain_size", True))),
    ("param a float", with_header(lambda h: h["params"].__setitem__("domain_size", 4.0))),
    ("param null", with_header(lambda h: h["params"].__setitem__("domain_size", None))),
    ("param nested", with_header(lambda h: h["params"].__setitem__("domain_size", {"a": 1}))),
    ("n true", with_header(setter("n", True))),
    ("n 3.0", with_header(setter("n", 3.0))),
    ("n a string", with_header(setter("n", "3"))),
    ("n negative", with_header(setter("n", -1))),
    ("n disagrees", with_header(setter("n", 2))),
    ("n missing", with_header(lambda h: h.pop("n"))),
    ("n true, one report", with_header(lambda h: h.update(n=True, arrays=[["values", "|u1", [1]]]), b"\0")),
    ("n 1.0, one report", with_header(lambda h: h.update(n=1.0, arrays=[["values", "|u1", [1]]]), b"\0")),
    (
        "format true, n true",
        with_header(lambda h: h.update(format=True, n=True, arrays=[["v", "|u1", [1]]]), b"\0"),
    ),
    ("n 1e400", framed(json.dumps(valid_header()).replace('"n": 3', '"n": 1e400').encode())),
    (
        "n with 5000 digits",
        framed(json.dumps(valid_header()).replace('"n": 3', '"n": ' + "9" * 5000).encode()),
    ),
    ("arrays not a list", with_header(setter("arrays", {"values": "|u1"}))),
    ("arrays empty", with_header(setter("arrays", []), body=b"")),
    ("array spec not a list", with_header(array_spec("values"))),
    ("array spec too short", with_header(array_spec(["values", "|u1"]))),
    ("array spec too long", with_header(array_spec(["values", "|u1", [3], 0]))),
    ("array name a number", with_header(array_spec([0, "|u1", [3]]))),
    ("dtype a number", with_header(array_spec(["values", 1, [3]]))),
    ("dtype object", with_header(array_spec(["values", "|O", [3]]))),
    ("dtype unicode", with_header(array_spec(["values", "<U1", [3]]))),
    ("dtype big-endian", with_header(array_spec(["values", ">i4", [3]]), body=bytes(12))),
    ("dtype float32", with_header(array_spec(["values", "<f4", [3]]), body=bytes(12))),
    ("dtype void", with_header(array_spec(["values", "|V1", [3]]))),
    ("shape not a list", with_header(array_spec(["values", "|u1", 3]))),
    ("shape empty", with_header(array_spec(["values", "|u1", []]), body=b"\0")),
    ("shape with true", with_header(array_spec(["values", "|u1", [True, 3]]))),
    ("shape with a float", with_header(array_spec(["values", "|u1", [3.0]]))),
    ("shape negative", with_header(array_spec(["values", "|u1", [3, -1]]), body=b"")),
    ("shape negative twice", with_header(array_spec(["values", "|u1", [-3, -1]]))),
    ("shape -1", with_header(array_spec(["values", "|u1", [-1]]))),
    ("shape -1 with n -1", with_header(lambda h: h.update(n=-1, arrays=[["values", "|u1", [-1]]]))),
    ("shape huge", with_header(array_spec(["values", "|u1", [3, 2**70]]))),
    (
        "shape huge with zero rows",
        with_header(lambda h: h.update(n=0, arrays=[["v", "|u1", [0, 2**63]]]), b""),
    ),
    (
        "shape too many bytes",
        with_header(lambda h: h.update(n=0, arrays=[["v", "<u8", [0, 2**40, 2**40]]]), b""),
    ),
    ("shape of 100 dimensions", with_header(array_spec(["values", "|u1", [3] + [1] * 99]))),
    ("shape beyond the data", with_header(array_spec(["values", "|u1", [3, 1000]]))),
    ("duplicate array names", with_header(setter("arrays", [["values", "|u1", [3]]] * 2), body=bytes(6))),
    (
        "arrays of other lengths",
        with_header(setter("arrays", [["a", "|u1", [3]], ["b", "|u1", [2]]]), bytes(5)),
    ),
    ("truncated", with_header(lambda h: None, body=b"\0\1")),
    ("trailing bytes", with_header(lambda h: None, body=b"\0\1\2\3")),
]


def test_the_corpus_frame_is_valid() -> None:
    """The unmodified frame decodes, so every refusal below is about its one defect."""
    decoded = Reports.from_bytes(with_header(lambda h: None))
    assert decoded.protocol == "GRR" and decoded["values"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("label,data", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_from_bytes_refuses_malformed_batches(label: str, data: bytes) -> None:
    with pytest.raises(ReportFormatError) as info:
        Reports.from_bytes(data)
    one_sentence(info.value)
    assert isinstance(info.value, ValueError)
    assert len(str(info.value)) < 200  # no hostile payload echoed back


def sample_batches() -> list[bytes]:
    rng = np.random.default_rng(0)
    multidim = MultidimensionalSampling(epsilon=5, dimensions=3, categorical={2: 3})
    return [
        ldp.GRR(epsilon=1, domain_size=4).randomize(np.array([0, 1, 3]), rng=rng).to_bytes(),
        ldp.SHE(epsilon=1, domain_size=3).randomize(np.array([0, 2]), rng=rng).to_bytes(),
        multidim.randomize(np.array([[0.5, -1.0, 2], [0.0, 0.25, 1]]), rng=rng).to_bytes(),
    ]


SAMPLES = sample_batches()
SERVERS: list[Callable[[Reports], object]] = [
    ldp.GRR(epsilon=1, domain_size=4).estimate,
    ldp.SHE(epsilon=1, domain_size=3).estimate,
    MultidimensionalSampling(epsilon=5, dimensions=3, categorical={2: 3}).estimate,
]


def decode_and_estimate(which: int, data: bytes) -> None:
    """Decode a (possibly mutated) batch and hand it to its server: only ValueError-family refusals."""
    try:
        reports = Reports.from_bytes(data)
    except ReportFormatError as exc:
        one_sentence(exc)
        return
    try:
        SERVERS[which](reports)
    except ValueError as exc:
        one_sentence(exc)


@FUZZ
@given(
    which=st.integers(0, len(SAMPLES) - 1),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_fuzzed_byte_mutations_raise_only_value_errors(
    which: int, edits: list[tuple[int, int]], cut: int | None
) -> None:
    data = bytearray(SAMPLES[which])
    for position, byte in edits:
        data[position % len(data)] = byte
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    decode_and_estimate(which, bytes(data))


def header_region(data: bytes) -> tuple[int, int]:
    (length,) = struct.unpack_from("<I", data, 6)
    return 10, 10 + length


@FUZZ
@given(
    which=st.integers(0, len(SAMPLES) - 1),
    edits=st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from(list(b'{}[]",:0123456789-+.eE truefalsnNI\\u\xff'))),
        min_size=1,
        max_size=4,
    ),
)
def test_fuzzed_header_mutations_raise_only_value_errors(which: int, edits: list[tuple[int, int]]) -> None:
    """Mutations aimed at the JSON header, with JSON's own punctuation (the length prefix kept valid)."""
    data = bytearray(SAMPLES[which])
    start, end = header_region(bytes(data))
    for position, byte in edits:
        data[start + position % (end - start)] = byte
    decode_and_estimate(which, bytes(data))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@FUZZ
@given(
    which=st.integers(0, len(SAMPLES) - 1),
    key=st.sampled_from(["format", "protocol", "params", "n", "arrays", "extra"]),
    value=JSON,
)
def test_fuzzed_header_values_raise_only_value_errors(which: int, key: str, value: object) -> None:
    """Any JSON value in place of one header field, the arrays' bytes kept."""
    data = SAMPLES[which]
    start, end = header_region(data)
    header = json.loads(data[start:end])
    header[key] = value
    decode_and_estimate(which, framed(json.dumps(header).encode(), data[end:]))


@FUZZ
@given(
    which=st.integers(0, len(SAMPLES) - 1),
    position=st.integers(0, 100),
    spec=st.tuples(JSON, JSON, JSON) | st.lists(JSON, max_size=4),
)
def test_fuzzed_array_specs_raise_only_value_errors(which: int, position: int, spec: object) -> None:
    data = SAMPLES[which]
    start, end = header_region(data)
    header = json.loads(data[start:end])
    header["arrays"][position % len(header["arrays"])] = list(spec)
    decode_and_estimate(which, framed(json.dumps(header).encode(), data[end:]))


def test_every_sample_batch_round_trips() -> None:
    for which, data in enumerate(SAMPLES):
        SERVERS[which](Reports.from_bytes(data))


def test_refusals_do_not_echo_hostile_headers() -> None:
    """A batch of a megabyte-long protocol name or a thousand foreign parameters decodes (it is well-formed)
    but the server's refusal stays one short sentence."""
    grr = ldp.GRR(epsilon=1, domain_size=4)
    values = {"value": np.zeros(3, dtype=np.uint8)}
    long_name = Reports.from_bytes(Reports("G" * 10**6, grr.params, values).to_bytes())
    foreign = Reports.from_bytes(
        Reports("GRR", {f"k{i}": "x" * 1000 for i in range(1000)}, values).to_bytes()
    )
    for batch, match in ((long_name, "made by GGG"), (foreign, r"and \d+ more")):
        with pytest.raises(ValueError, match=match) as info:
            grr.estimate(batch)
        one_sentence(info.value)
