"""BFV through TenSEAL (kakeibo.crypto.he): the parameters, exact arithmetic, and what a public key can do."""

from __future__ import annotations

import numpy as np
import pytest
import tenseal as ts

from kakeibo.crypto.he import CAPACITY, PLAIN_MODULUS, SLOTS, KeyPair, PublicKey
from kakeibo.crypto.parties import MAX_OWNER_ROWS, MAX_OWNERS
from kakeibo.errors import ArgumentError


def _is_prime(n: int) -> bool:
    """Miller-Rabin with the first twelve primes as bases: deterministic below 3.3e24."""
    bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    if n in bases:
        return True
    if n < 2 or any(n % b == 0 for b in bases):
        return False
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in bases:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def test_the_plaintext_modulus_batches_and_leaves_room() -> None:
    assert _is_prime(PLAIN_MODULUS) and PLAIN_MODULUS % (2 * SLOTS) == 1
    assert PLAIN_MODULUS.bit_length() == 40
    assert 4 * CAPACITY <= PLAIN_MODULUS  # a noisy sum of two values within CAPACITY cannot wrap
    assert MAX_OWNER_ROWS * MAX_OWNERS <= CAPACITY  # every prefix sum of every owner fits


@pytest.fixture(scope="module")
def keys() -> KeyPair:
    return KeyPair()


def test_sums_masks_and_shifts_are_exact_across_ciphertexts(keys: KeyPair) -> None:
    """A vector of 10,000 slots (two ciphertexts), 64 copies added, masked and shifted: exact, negative
    values and values near the capacity included."""
    key = PublicKey(keys.public())
    rng = np.random.default_rng(0)
    x = rng.integers(-(2**31), 2**31, size=10_000)
    x[:3] = [CAPACITY // 64, -(CAPACITY // 64), 0]
    encrypted = key.encrypt(x)
    assert len(encrypted.serialize()) == 2 and encrypted.size == 10_000
    total = encrypted
    for _ in range(63):
        total = total + encrypted
    mask = rng.integers(0, 2, size=x.size)
    shift = rng.integers(-1000, 1000, size=x.size)
    out = keys.decrypt(total.times(mask).plus(shift).serialize(), x.size)
    np.testing.assert_array_equal(out, 64 * x * mask + shift)


def test_a_public_key_encrypts_and_cannot_decrypt(keys: KeyPair) -> None:
    key = PublicKey(keys.public())
    assert not key.holds_secret_key
    data = key.encrypt(np.arange(5)).serialize()
    with pytest.raises(ValueError, match="secret_key"):
        ts.bfv_vector_from(key._context, data[0]).decrypt()
    np.testing.assert_array_equal(keys.decrypt(data, 5), np.arange(5))


@pytest.mark.parametrize(
    ("values", "match"),
    [
        (np.array([CAPACITY + 1]), "within"),
        (np.array([-CAPACITY - 1]), "within"),
        (np.array([0.5, 1.0]), "integers"),
        (np.array([], np.int64), "non-empty"),
        (np.zeros((2, 2), np.int64), "vector"),
    ],
)
def test_what_is_not_encrypted(keys: KeyPair, values: np.ndarray, match: str) -> None:
    with pytest.raises(ArgumentError, match=match):
        PublicKey(keys.public()).encrypt(values)


def test_ciphertexts_of_another_size_are_refused(keys: KeyPair) -> None:
    key = PublicKey(keys.public())
    data = key.encrypt(np.arange(10)).serialize()
    with pytest.raises(ArgumentError, match="stated size"):
        key.load(data, 11)
    with pytest.raises(ArgumentError, match="stated size"):
        keys.decrypt(data, 9)
    with pytest.raises(ArgumentError, match="combine"):
        key.encrypt(np.arange(10)) + key.encrypt(np.arange(11))
    with pytest.raises(ArgumentError, match="bytes"):
        PublicKey("not bytes")  # type: ignore[arg-type]
