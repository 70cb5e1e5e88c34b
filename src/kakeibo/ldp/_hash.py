"""Public, seeded hash families for the sketching protocols (RAPPOR's Bloom filter, count-mean sketches,
heavy hitters).

A sketching protocol maps a client's value into a few of ``m`` buckets with hash functions that client and
server must agree on, so the functions are *public*: they carry no secret and no privacy rests on them
(privacy comes from the randomized response applied afterwards). What matters is that they are
deterministic across machines and versions, fast on millions of values, and spread distinct values
independently. kakeibo uses:

* :func:`value_keys`: one 64-bit key per value -- a non-negative integer is its own key; a string or
  ``bytes`` is keyed by the first 8 bytes of its BLAKE2b digest (personalised ``"kakeibo-ldp"``), computed
  once per distinct value.
* :class:`HashFamily`: function ``j`` of a family with public ``seed`` maps key ``x`` to
  ``floor(m * hi32(a_j * mix(x) + b_j) / 2^32)`` where ``mix`` is the SplitMix64 finaliser, ``hi32`` takes the
  top 32 bits of the 64-bit wrapped sum and ``(a_j, b_j)`` (``a_j`` odd) come from BLAKE2b of
  ``(seed, j)``: the multiply-add-shift scheme of Dietzfelbinger (1996), whose collision probability for
  two distinct mixed keys is ``O(1/m)``.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError, ArgumentTypeError
from .framework import check_integer

__all__ = ["HashFamily", "value_keys"]

KeyArray = NDArray[np.uint64]

_PERSON = b"kakeibo-ldp"
_MAX_BUCKETS = 1 << 32


def value_keys(values: ArrayLike | Sequence[Any], name: str = "values") -> KeyArray:
    """One 64-bit key per value: non-negative integers as themselves, strings and bytes by BLAKE2b-64.

    >>> value_keys([3, 0]).tolist()
    [3, 0]
    >>> k = value_keys(["apple", "pear", "apple"]); bool(k[0] == k[2]) and bool(k[0] != k[1])
    True
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ArgumentError(f"{name} must be a 1-d array with one value per client, got shape {arr.shape}.")
    if arr.dtype.kind in "iu":
        if arr.size and arr.dtype.kind == "i" and int(arr.min()) < 0:
            raise ArgumentError(f"{name} must be non-negative when they are integers.")
        return arr.astype(np.uint64)
    if arr.dtype.kind == "O" and not (
        all(isinstance(v, str) for v in arr) or all(isinstance(v, bytes) for v in arr)
    ):
        raise ArgumentTypeError(f"{name} must be non-negative integers, or all strings or all bytes.")
    if arr.dtype.kind in "USO":
        if arr.size == 0:
            return np.zeros(0, dtype=np.uint64)
        distinct, inverse = np.unique(arr, return_inverse=True)
        keys = np.fromiter((_text_key(v) for v in distinct), dtype=np.uint64, count=distinct.size)
        return keys[inverse.reshape(-1)]
    raise ArgumentTypeError(
        f"{name} must be non-negative integers, strings or bytes, got an array of {arr.dtype}."
    )


def _text_key(value: str | bytes) -> int:
    data = value.encode("utf-8") if isinstance(value, str) else value
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=_PERSON).digest(), "little")


def _mix(keys: KeyArray) -> KeyArray:
    """The SplitMix64 finaliser (a bijection on 64-bit words that spreads every input bit)."""
    x = keys.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


class HashFamily:
    """``count`` public hash functions into ``buckets`` buckets, fixed by an integer ``seed``.

    >>> family = HashFamily(seed=7, count=2, buckets=16)
    >>> both = family.hash(np.array([0, 1]), value_keys([5, 5])).tolist()
    >>> both == [family.hash_one(0, 5), family.hash_one(1, 5)]
    True
    """

    def __init__(self, *, seed: int, count: int, buckets: int) -> None:
        for name, value, low, high in (
            ("seed", seed, 0, 2**63 - 1),
            ("count", count, 1, 1 << 20),
            ("buckets", buckets, 2, _MAX_BUCKETS),
        ):
            check_integer(value, name, low, high)
        self.seed, self.count, self.buckets = int(seed), int(count), int(buckets)
        coefficients = [self._coefficients(j) for j in range(self.count)]
        self._a = np.array([a for a, _ in coefficients], dtype=np.uint64)
        self._b = np.array([b for _, b in coefficients], dtype=np.uint64)

    def _coefficients(self, j: int) -> tuple[int, int]:
        digest = hashlib.blake2b(struct.pack("<QQ", self.seed, j), digest_size=16, person=_PERSON).digest()
        a, b = struct.unpack("<QQ", digest)
        return a | 1, b

    def hash(self, functions: ArrayLike, keys: KeyArray) -> NDArray[np.int64]:
        """``h_functions[i](keys[i])`` element-wise (``functions`` and ``keys`` broadcast together)."""
        j = np.asarray(functions, dtype=np.int64)
        if j.size and (int(j.min()) < 0 or int(j.max()) >= self.count):
            raise ArgumentError(f"hash function indices must lie in 0..{self.count - 1}.")
        x = _mix(np.asarray(keys, dtype=np.uint64))
        with np.errstate(over="ignore"):
            word = self._a[j] * x + self._b[j]
        high = word >> np.uint64(32)
        return np.asarray((high * np.uint64(self.buckets)) >> np.uint64(32), dtype=np.int64)

    def hash_all(self, keys: KeyArray) -> NDArray[np.int64]:
        """Every function on every key: shape ``(len(keys), count)``."""
        k = np.asarray(keys, dtype=np.uint64)
        return self.hash(np.arange(self.count)[None, :], k[:, None])

    def hash_one(self, function: int, key: int) -> int:
        """One function on one key (a Python ``int`` key, e.g. from :func:`value_keys`)."""
        return int(self.hash(np.array([function]), np.array([key], dtype=np.uint64))[0])

    def __repr__(self) -> str:
        return f"HashFamily(seed={self.seed}, count={self.count}, buckets={self.buckets})"
