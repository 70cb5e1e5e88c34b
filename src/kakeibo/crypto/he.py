"""Additively homomorphic integer vectors: BFV (Brakerski; Fan and Vercauteren 2012) through TenSEAL
(Microsoft SEAL underneath), the one scheme kakeibo's encrypted summaries compute with.

What the protocols need is exact integer addition of encrypted vectors and multiplication of an encrypted
vector by a public integer vector, slot by slot (SIMD "batching": one ciphertext carries :data:`SLOTS`
integers). Nothing needs a ciphertext-by-ciphertext product, a rotation or a bootstrap, so the evaluation key
a server receives is the public key alone: no Galois or relinearisation keys (which would be 54 MB).

**Parameters.** Polynomial degree 8192 with SEAL's default coefficient modulus for it (218 bits: 128-bit
security by the HE standard's table) and the plaintext modulus :data:`PLAIN_MODULUS`, a 40-bit prime
``= 1 (mod 2 * 8192)`` (batching needs that). Decryption returns each slot's value modulo the plaintext
modulus, read in ``(-p/2, p/2)``: BFV wraps silently, so every protocol keeps its values far inside that
range *by construction* (:data:`CAPACITY`), and every value it decrypts is a noisy one, so a wrap could
only lose accuracy, never privacy (a function of a DP value is DP).

Why TenSEAL, measured on this machine's Python 3.11 (``benchmarks/bench_crypto.py`` times every operation
against numpy in the same run): its wheel installs 11 MB and imports; the ``openfhe`` wheels on the
registry ship a CPython 3.10 extension only and fail to import on 3.11 (re-checked 2026-11-30).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tenseal as ts
from numpy.typing import ArrayLike, NDArray

from ..errors import ArgumentError

__all__ = ["CAPACITY", "PLAIN_MODULUS", "SLOTS", "Ciphertexts", "KeyPair", "PublicKey"]

#: the ring degree: 8192 slots per ciphertext
SLOTS = 8192
#: a 40-bit prime = 1 (mod 16384) (``tests/test_crypto_he.py`` checks both)
PLAIN_MODULUS = 1_099_511_480_321
#: every value a protocol encrypts or computes stays within +-CAPACITY: 2^37, below a quarter of the
#: plaintext modulus, so that a noisy value (a sum of two within it) is still read without a wrap
CAPACITY = 2**37

IntArray = NDArray[np.int64]


def _context(public_only: bytes | None = None) -> ts.Context:
    if public_only is not None:
        return ts.context_from(public_only)
    return ts.context(ts.SCHEME_TYPE.BFV, poly_modulus_degree=SLOTS, plain_modulus=PLAIN_MODULUS)


class PublicKey:
    """What a data owner or the analytics server holds: it encrypts and computes, and cannot decrypt.

    Built from the bytes :meth:`KeyPair.public` gives; bytes that carry a secret key are refused, so a server
    constructed this way provably holds none."""

    def __init__(self, serialized: bytes) -> None:
        if not isinstance(serialized, bytes):
            raise ArgumentError("a public key is the bytes KeyPair.public() gives.")
        self._context = _context(serialized)
        if self._context.has_secret_key() or self._context.is_private():
            raise ArgumentError(
                "these key bytes carry the secret key: a server must hold the public key only."
            )
        self.serialized = serialized

    @property
    def holds_secret_key(self) -> bool:
        return bool(self._context.has_secret_key())

    def encrypt(self, values: ArrayLike) -> Ciphertexts:
        """``values`` (integers within +-:data:`CAPACITY`), :data:`SLOTS` to a ciphertext."""
        array = np.asarray(values)
        if array.ndim != 1 or array.size == 0 or not np.issubdtype(array.dtype, np.integer):
            raise ArgumentError("only a non-empty vector of integers is encrypted.")
        if int(np.abs(array.astype(np.int64)).max()) > CAPACITY:
            raise ArgumentError(f"every encrypted value must lie within +-2^{CAPACITY.bit_length() - 1}.")
        parts = [
            ts.bfv_vector(self._context, array[i : i + SLOTS].astype(np.int64).tolist())
            for i in range(0, array.size, SLOTS)
        ]
        return Ciphertexts(parts, array.size)

    def load(self, data: Sequence[bytes], size: int) -> Ciphertexts:
        """Ciphertexts sent as :meth:`Ciphertexts.serialize` gave them, under this key."""
        parts = [ts.bfv_vector_from(self._context, part) for part in data]
        if len(parts) != -(-size // SLOTS) or any(
            p.size() != min(SLOTS, size - i * SLOTS) for i, p in enumerate(parts)
        ):
            raise ArgumentError("these ciphertexts do not hold a vector of the stated size.")
        return Ciphertexts(parts, size)


class Ciphertexts:
    """An encrypted integer vector of ``size`` slots (as many ciphertexts as it needs)."""

    def __init__(self, parts: list[ts.BFVVector], size: int) -> None:
        self._parts = parts
        self.size = size

    def _check(self, other_size: int) -> None:
        if other_size != self.size:
            raise ArgumentError(f"vectors of {self.size} and {other_size} slots do not combine.")

    def __add__(self, other: Ciphertexts) -> Ciphertexts:
        self._check(other.size)
        return Ciphertexts([a + b for a, b in zip(self._parts, other._parts, strict=True)], self.size)

    def times(self, weights: ArrayLike) -> Ciphertexts:
        """Slot-wise product with a public integer vector (a mask of 0s and 1s, in the protocols)."""
        w = np.asarray(weights, np.int64)
        self._check(w.size)
        parts = [p * w[i * SLOTS : (i + 1) * SLOTS].tolist() for i, p in enumerate(self._parts)]
        return Ciphertexts(parts, self.size)

    def plus(self, values: ArrayLike) -> Ciphertexts:
        """Slot-wise sum with a public integer vector."""
        v = np.asarray(values, np.int64)
        self._check(v.size)
        parts = [p + v[i * SLOTS : (i + 1) * SLOTS].tolist() for i, p in enumerate(self._parts)]
        return Ciphertexts(parts, self.size)

    def serialize(self) -> list[bytes]:
        return [bytes(p.serialize()) for p in self._parts]

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.serialize())


class KeyPair:
    """The crypto service provider's keys: the only object that decrypts."""

    def __init__(self) -> None:
        self._context = _context()

    def public(self) -> bytes:
        """The public key (the context without its secret key), to hand to owners and the analytics server."""
        public = self._context.copy()
        public.make_context_public()
        return bytes(public.serialize(save_public_key=True, save_secret_key=False))

    def decrypt(self, data: Sequence[bytes], size: int) -> IntArray:
        """The integers in ciphertexts serialised under this key pair's public key."""
        parts = [ts.bfv_vector_from(self._context, part) for part in data]
        if sum(p.size() for p in parts) != size:
            raise ArgumentError("these ciphertexts do not hold a vector of the stated size.")
        return np.concatenate([np.asarray(p.decrypt(), np.int64) for p in parts])
