"""The wire format between LDP clients and the server: a versioned batch of reports with their parameters.

A :class:`Reports` batch names the protocol, the format version and every parameter the server needs to
decode it (epsilon as an exact fraction, domain size, the rounded coin probabilities...), next to the
payload arrays. A server refuses a batch whose parameters differ from its own oracle's, so reports made
under one epsilon are never decoded as if made under another.

Bytes layout (:meth:`Reports.to_bytes`): the magic ``b"KKBLDP"``, a 4-byte little-endian header length, a
UTF-8 JSON header ``{"format": 1, "protocol": ..., "params": {...}, "n": ..., "arrays": [[name, dtype,
shape], ...]}``, then each array's raw little-endian bytes in that order. No pickle, so decoding a
hostile file can only fail, never run code; and it fails one way, with a one-sentence
:class:`ReportFormatError` (a ``ValueError``): the header must be strict UTF-8 JSON of exactly that
schema (no duplicate keys, no NaN, integers that are JSON integers and not booleans or floats, distinct
array names, one of the listed dtypes, non-negative shapes that fit the bytes that follow, at most
:data:`_MAX_DEPTH` levels of nesting).

>>> import numpy as np
>>> r = Reports("GRR", {"epsilon": "1", "domain_size": 4}, {"values": np.array([0, 3, 1])})
>>> Reports.from_bytes(r.to_bytes()) == r
True
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import ArgumentError, ArgumentTypeError, Error

__all__ = ["FORMAT_VERSION", "ReportFormatError", "Reports"]

#: Version of the byte layout; bumped whenever it changes incompatibly.
FORMAT_VERSION = 1
_MAGIC = b"KKBLDP"
_ALLOWED_DTYPES = {"|u1", "<u2", "<u4", "<u8", "|i1", "<i2", "<i4", "<i8", "<f8", "|b1"}

#: Deepest nesting of a well-formed header: the header, its "arrays" list, one array's spec, its shape.
_MAX_DEPTH = 4
#: Most dimensions of one array (numpy's own limit is 64; a protocol's arrays are far flatter).
_MAX_NDIM = 8
#: Largest byte count a shape may describe (numpy refuses shapes beyond ``intp``, even with a zero axis).
_MAX_BYTES = 2**62
_HEADER_KEYS = frozenset({"format", "protocol", "params", "n", "arrays"})
#: A JSON string literal (escapes included): stripped before counting the nesting depth.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)

Param = str | int


class ReportFormatError(Error, ValueError):
    """A report batch that is not well-formed :meth:`Reports.to_bytes` output (raised by
    :meth:`Reports.from_bytes`, with one sentence naming the first defect found)."""


def _is_int(value: object) -> bool:
    """Whether ``value`` is a JSON integer: an ``int``, not a ``bool`` (nor a float such as ``1.0``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _cut(text: str) -> str:
    """``text`` cut to 40 characters (and quoted unless printable): a hostile batch's strings are not echoed
    back in full, nor their line breaks."""
    if not text.isprintable():
        text = repr(text)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _shown(value: object) -> str:
    """``repr(value)``, cut to 40 characters."""
    return _cut(repr(value))


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads`: a JSON object, refused if a key repeats."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ReportFormatError("the report batch header repeats a key in one JSON object.")
    return obj


def _no_constant(name: str) -> object:
    """``parse_constant`` for :func:`json.loads`: ``NaN`` and ``Infinity`` are not JSON."""
    raise ReportFormatError(f"the report batch header holds {name}, which is not JSON.")


def _parse_header(head: bytes) -> dict[str, Any]:
    """The JSON header as a dict, checked for encoding, nesting, duplicate keys and constants."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReportFormatError("the report batch header is not UTF-8.") from exc
    punctuation = np.frombuffer(_JSON_STRING.sub(b"", head), dtype=np.uint8)
    opens, closes = np.isin(punctuation, (ord("["), ord("{"))), np.isin(punctuation, (ord("]"), ord("}")))
    steps = opens.astype(np.int64) - closes
    if steps.size and int(np.cumsum(steps).max()) > _MAX_DEPTH:
        raise ReportFormatError(f"the report batch header nests deeper than {_MAX_DEPTH} levels.")
    try:
        header = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except ReportFormatError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or an integer of over 4300 digits
        raise ReportFormatError("the report batch has a corrupt header (not JSON).") from exc
    if not isinstance(header, dict):
        raise ReportFormatError("the report batch header is not a JSON object.")
    return header


#: One array of a batch as its header describes it: name, dtype and shape.
_ArraySpec = tuple[str, "np.dtype[Any]", tuple[int, ...]]


def _check_header(header: dict[str, Any]) -> tuple[str, dict[str, Param], list[_ArraySpec]]:
    """The protocol, params and array specs of a parsed header, each of the exact JSON type and range
    :meth:`Reports.to_bytes` writes (every array holding the header's ``n`` reports), or a
    :class:`ReportFormatError`."""
    fmt = header.get("format")
    if not _is_int(fmt) or fmt != FORMAT_VERSION:
        raise ReportFormatError(
            f"report format {_shown(fmt)} is not supported (this kakeibo reads format {FORMAT_VERSION})."
        )
    if header.keys() != _HEADER_KEYS:
        raise ReportFormatError(f"the report batch header must have exactly the keys {sorted(_HEADER_KEYS)}.")
    protocol, params, n, specs = header["protocol"], header["params"], header["n"], header["arrays"]
    if not isinstance(protocol, str):
        raise ReportFormatError("the report batch header's protocol is not a string.")
    if not isinstance(params, dict) or not all(isinstance(v, str) or _is_int(v) for v in params.values()):
        raise ReportFormatError("the report batch header's params must map names to strings or integers.")
    if not _is_int(n) or n < 0:
        raise ReportFormatError("the report batch header's n is not a non-negative integer.")
    if not isinstance(specs, list) or not specs:
        raise ReportFormatError("the report batch header's arrays must be a non-empty list.")
    arrays: list[_ArraySpec] = []
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str)):
            raise ReportFormatError("every report array must be described as [name, dtype, shape].")
        name, dtype, shape = spec
        if not isinstance(dtype, str) or dtype not in _ALLOWED_DTYPES:
            raise ReportFormatError(f"report array {_shown(name)} has unsupported dtype {_shown(dtype)}.")
        dt = np.dtype(dtype)
        if (
            not isinstance(shape, list)
            or not 1 <= len(shape) <= _MAX_NDIM
            or not all(_is_int(d) and d >= 0 for d in shape)
            or math.prod(max(d, 1) for d in shape) * dt.itemsize > _MAX_BYTES
        ):
            raise ReportFormatError(
                f"report array {_shown(name)} needs a shape of 1 to {_MAX_NDIM} non-negative integers "
                "that numpy can allocate."
            )
        if shape[0] != n:
            raise ReportFormatError(
                f"report array {_shown(name)} holds {_shown(shape[0])} reports, "
                f"but the header says {_shown(n)}."
            )
        if any(name == seen for seen, _, _ in arrays):
            raise ReportFormatError(f"the report batch names two arrays {_shown(name)}.")
        arrays.append((name, dt, tuple(shape)))
    return protocol, params, arrays


@dataclass(frozen=True, eq=False)
class Reports:
    """A batch of reports of one protocol: ``protocol``, its ``params`` and the ``arrays`` (first axis =
    one entry per report, all of the same length ``n``)."""

    protocol: str
    params: Mapping[str, Param]
    arrays: Mapping[str, NDArray[Any]] = field(repr=False)

    def __post_init__(self) -> None:
        lengths = {name: np.shape(a)[0] if np.ndim(a) else -1 for name, a in self.arrays.items()}
        if not lengths or len(set(lengths.values())) != 1 or -1 in lengths.values():
            raise ArgumentError(f"every report array needs one entry per report; got lengths {lengths}.")
        for key, value in self.params.items():
            if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, (str, int)):
                raise ArgumentTypeError(
                    f"report parameter {key!r} must be a string or an integer, got {value!r}."
                )

    @property
    def n(self) -> int:
        """The number of reports (clients) in the batch."""
        return int(np.shape(next(iter(self.arrays.values())))[0])

    def __len__(self) -> int:
        return self.n

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Reports):
            return NotImplemented
        return (
            self.protocol == other.protocol
            and dict(self.params) == dict(other.params)
            and self.arrays.keys() == other.arrays.keys()
            and all(np.array_equal(self.arrays[k], other.arrays[k]) for k in self.arrays)
        )

    __hash__ = None  # type: ignore[assignment]

    def __getitem__(self, name: str) -> NDArray[Any]:
        return self.arrays[name]

    def check(self, protocol: str, params: Mapping[str, Param]) -> None:
        """Raise ``ValueError`` unless these reports were made by ``protocol`` with exactly ``params``."""
        if self.protocol != protocol:
            raise ArgumentError(f"these reports were made by {_cut(self.protocol)}, not {protocol}.")
        if dict(self.params) != dict(params):
            # The server's own parameters first; at most three differences are spelled out.
            diff = sorted(k for k in params if self.params.get(k) != params[k])
            diff += sorted(k for k in self.params if k not in params)
            shown = ", ".join(
                f"{_cut(k)}: reports {_shown(self.params.get(k))} vs server {_shown(params.get(k))}"
                for k in diff[:3]
            )
            more = f" and {len(diff) - 3} more" if len(diff) > 3 else ""
            raise ArgumentError(f"these {protocol} reports were made with other parameters ({shown}{more}).")

    @classmethod
    def concatenate(cls, batches: Sequence[Reports]) -> Reports:
        """One batch from several batches of the same protocol and parameters (e.g. one per client)."""
        if not batches:
            raise ArgumentError("concatenate needs at least one batch of reports.")
        first = batches[0]
        for b in batches[1:]:
            b.check(first.protocol, first.params)
            if b.arrays.keys() != first.arrays.keys():
                raise ArgumentError("report batches carry different arrays and cannot be concatenated.")
        arrays = {k: np.concatenate([b.arrays[k] for b in batches]) for k in first.arrays}
        return cls(first.protocol, dict(first.params), arrays)

    def to_bytes(self) -> bytes:
        """The batch in the versioned byte layout of this module."""
        blobs: list[bytes] = []
        specs: list[list[Any]] = []
        for name, arr in self.arrays.items():
            a = np.ascontiguousarray(arr)
            a = a.astype(a.dtype.newbyteorder("<"), copy=False)
            if a.dtype.str not in _ALLOWED_DTYPES:
                raise ArgumentTypeError(f"report array {name!r} has unsupported dtype {a.dtype}.")
            specs.append([name, a.dtype.str, list(a.shape)])
            blobs.append(a.tobytes())
        header = {
            "format": FORMAT_VERSION,
            "protocol": self.protocol,
            "params": dict(self.params),
            "n": self.n,
            "arrays": specs,
        }
        head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
        return b"".join([_MAGIC, struct.pack("<I", len(head)), head, *blobs])

    @classmethod
    def from_bytes(cls, data: bytes) -> Reports:
        """Decode :meth:`to_bytes` output, refusing anything malformed or of another format version with a
        one-sentence :class:`ReportFormatError` (see the module docstring for what is checked)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ArgumentTypeError(f"reports are decoded from bytes, got {type(data).__name__}.")
        view = memoryview(data)
        start = len(_MAGIC) + 4
        if len(view) < start or bytes(view[: len(_MAGIC)]) != _MAGIC:
            raise ReportFormatError("not a kakeibo LDP report batch (bad magic bytes).")
        (head_len,) = struct.unpack_from("<I", view, len(_MAGIC))
        offset = start + head_len
        if offset > len(view):
            raise ReportFormatError("the report batch is truncated inside its header.")
        protocol, params, specs = _check_header(_parse_header(bytes(view[start:offset])))
        arrays: dict[str, NDArray[Any]] = {}
        for name, dt, shape in specs:
            size = math.prod(shape) * dt.itemsize
            if offset + size > len(view):
                raise ReportFormatError("the report batch is truncated.")
            raw = np.frombuffer(view[offset : offset + size], dtype=np.uint8 if dt.kind == "b" else dt)
            if dt.kind == "b" and np.any(raw > 1):
                raise ReportFormatError(f"report array {_shown(name)} holds booleans other than 0 and 1.")
            arrays[name] = raw.view(dt).reshape(shape).astype(dt.newbyteorder("="))
            offset += size
        if offset != len(view):
            raise ReportFormatError("the report batch has trailing bytes.")
        return cls(protocol, params, arrays)
