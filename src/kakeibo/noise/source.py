"""Sources of uniformly random 64-bit words.

Every sampler in :mod:`kakeibo.noise` consumes randomness only as uniform ``uint64`` words, so the
distribution of its output is exact given a uniform source. Two sources exist:

* :class:`SecureSource` (the default) -- a ChaCha20 keystream keyed with 256 bits from the operating
  system (``os.urandom``), re-keyed from the OS every 64 MiB of output and after ``fork()``. This is the
  construction the Linux kernel itself uses for ``getrandom``; it is about eight times faster than
  reading ``os.urandom`` word by word, which matters for vectorised noise.
* :class:`GeneratorSource` -- the raw output of a seeded :class:`numpy.random.Generator`. For tests and
  reproduction only: its outputs are predictable to anyone who knows the seed.
"""

from __future__ import annotations

import os
import threading
from typing import Protocol, runtime_checkable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from numpy.typing import NDArray

from ..errors import ArgumentTypeError

__all__ = ["GeneratorSource", "KeyedSource", "RandomSource", "SecureSource", "resolve_source"]

_REKEY_BYTES = 64 * 1024 * 1024


@runtime_checkable
class RandomSource(Protocol):
    """Anything that yields independent uniform 64-bit words."""

    #: True only when outputs cannot be predicted (OS-keyed CSPRNG).
    secure: bool

    def words(self, n: int) -> NDArray[np.uint64]:
        """Return ``n`` independent uniform ``uint64`` values."""
        ...


class KeyedSource:
    """The ChaCha20 keystream under a given 32-byte ``key`` (and 16-byte ``nonce``) as 64-bit words:
    deterministic for whoever holds the key, unpredictable to anyone else. :class:`SecureSource` keys it
    from ``os.urandom``; a RAPPOR client keys it from its secret to replay memoised coins."""

    secure = True

    def __init__(self, key: bytes, nonce: bytes = bytes(16)) -> None:
        self._encryptor = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
        self._zeros = b""

    def words(self, n: int) -> NDArray[np.uint64]:
        nbytes = 8 * n
        if len(self._zeros) < nbytes:
            self._zeros = bytes(nbytes)
        stream = self._encryptor.update(memoryview(self._zeros)[:nbytes])
        return np.frombuffer(stream, dtype=np.uint64)


class SecureSource:
    """A :class:`KeyedSource` keyed from ``os.urandom``, re-keyed after a fork and every ``_REKEY_BYTES``;
    one instance per thread (see :func:`resolve_source`)."""

    secure = True

    def __init__(self) -> None:
        self._rekey()

    def _rekey(self) -> None:
        self._stream = KeyedSource(os.urandom(32), os.urandom(16))
        self._emitted = 0
        self._pid = os.getpid()

    def words(self, n: int) -> NDArray[np.uint64]:
        nbytes = 8 * n
        if self._pid != os.getpid() or self._emitted + nbytes > _REKEY_BYTES:
            self._rekey()
        self._emitted += nbytes
        return self._stream.words(n)


class GeneratorSource:
    """Raw 64-bit output of a seeded numpy generator (reproducible, not secure)."""

    secure = False

    def __init__(self, generator: np.random.Generator) -> None:
        self._generator = generator

    def words(self, n: int) -> NDArray[np.uint64]:
        # Not ``bit_generator.random_raw``: 32-bit generators (MT19937) return 32-bit words there.
        return self._generator.integers(0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True)


_local = threading.local()


def resolve_source(rng: np.random.Generator | RandomSource | None) -> RandomSource:
    """Map the public ``rng=`` argument to a word source.

    ``None`` gives this thread's :class:`SecureSource`; a :class:`numpy.random.Generator` is wrapped (the
    release is then reproducible, and therefore not private against someone who knows the seed).

    >>> resolve_source(None).secure
    True
    >>> resolve_source(np.random.default_rng(7)).secure
    False
    """
    if rng is None:
        source = getattr(_local, "source", None)
        if source is None:
            source = SecureSource()
            _local.source = source
        return source
    if isinstance(rng, np.random.Generator):
        return GeneratorSource(rng)
    if isinstance(rng, RandomSource):
        return rng
    raise ArgumentTypeError(
        f"rng must be None, a numpy.random.Generator or a RandomSource, not {type(rng).__name__}."
    )
