"""The wire format between LDP clients and the server: a versioned batch of reports with their parameters.

A :class:`Reports` batch names the protocol, the format version and every parameter the server needs to
decode it (epsilon as an exact fraction, domain size, the rounded coin probabilities...), next to the
payload arrays. A server refuses a batch whose parameters differ from its own oracle's, so reports made
under one epsilon are never decoded as if made under another.

Bytes layout (:meth:`Reports.to_bytes`): the magic ``b"KKBLDP"``, a 4-byte little-endian header length, a
UTF-8 JSON header ``{"format": 1, "protocol": ..., "params": {...}, "n": ..., "arrays": [[name, dtype,
shape], ...]}``, then each array's raw little-endian bytes in that order. No pickle, so decoding a
hostile file can only fail, never run code.

>>> import numpy as np
>>> r = Reports("GRR", {"epsilon": "1", "domain_size": 4}, {"values": np.array([0, 3, 1])})
>>> Reports.from_bytes(r.to_bytes()) == r
True
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["FORMAT_VERSION", "Reports"]

#: Version of the byte layout; bumped whenever it changes incompatibly.
FORMAT_VERSION = 1
_MAGIC = b"KKBLDP"
_ALLOWED_DTYPES = {"|u1", "<u2", "<u4", "<u8", "|i1", "<i2", "<i4", "<i8", "<f8", "|b1"}

Param = str | int


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
            raise ValueError(f"every report array needs one entry per report; got lengths {lengths}.")
        for key, value in self.params.items():
            if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, (str, int)):
                raise TypeError(f"report parameter {key!r} must be a string or an integer, got {value!r}.")

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
            raise ValueError(f"these reports were made by {self.protocol}, not {protocol}.")
        if dict(self.params) != dict(params):
            diff = sorted(k for k in set(self.params) | set(params) if self.params.get(k) != params.get(k))
            shown = ", ".join(
                f"{k}: reports {self.params.get(k)!r} vs server {params.get(k)!r}" for k in diff
            )
            raise ValueError(f"these {protocol} reports were made with other parameters ({shown}).")

    @classmethod
    def concatenate(cls, batches: Sequence[Reports]) -> Reports:
        """One batch from several batches of the same protocol and parameters (e.g. one per client)."""
        if not batches:
            raise ValueError("concatenate needs at least one batch of reports.")
        first = batches[0]
        for b in batches[1:]:
            b.check(first.protocol, first.params)
            if b.arrays.keys() != first.arrays.keys():
                raise ValueError("report batches carry different arrays and cannot be concatenated.")
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
                raise TypeError(f"report array {name!r} has unsupported dtype {a.dtype}.")
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
        """Decode :meth:`to_bytes` output, refusing anything malformed or of another format version."""
        view = memoryview(data)
        if bytes(view[: len(_MAGIC)]) != _MAGIC or len(view) < len(_MAGIC) + 4:
            raise ValueError("not a kakeibo LDP report batch (bad magic bytes).")
        (head_len,) = struct.unpack_from("<I", view, len(_MAGIC))
        start = len(_MAGIC) + 4
        try:
            header = json.loads(bytes(view[start : start + head_len]))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError("the report batch has a corrupt header.") from exc
        if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
            raise ValueError(
                f"report format {header.get('format') if isinstance(header, dict) else '?'} is not "
                f"supported (this kakeibo reads format {FORMAT_VERSION})."
            )
        offset = start + head_len
        arrays: dict[str, NDArray[Any]] = {}
        for name, dtype, shape in header["arrays"]:
            if dtype not in _ALLOWED_DTYPES:
                raise ValueError(f"report array {name!r} has unsupported dtype {dtype}.")
            dt = np.dtype(dtype)
            size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            if offset + size > len(view):
                raise ValueError("the report batch is truncated.")
            arrays[name] = (
                np.frombuffer(view[offset : offset + size], dtype=dt)
                .reshape(shape)
                .astype(dt.newbyteorder("="))
            )
            offset += size
        if offset != len(view):
            raise ValueError("the report batch has trailing bytes.")
        reports = cls(str(header["protocol"]), header["params"], arrays)
        if reports.n != header["n"]:
            raise ValueError("the report batch's header and arrays disagree on the number of reports.")
        return reports
