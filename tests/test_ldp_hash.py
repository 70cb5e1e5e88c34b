"""The public hash families of the sketching protocols (kakeibo.ldp._hash)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from kakeibo.ldp._hash import HashFamily, value_keys


def test_keys_of_integers_are_the_integers_and_strings_are_stable() -> None:
    assert value_keys(np.array([0, 7, 2**40])).tolist() == [0, 7, 2**40]
    words = value_keys(["a", "b", "a", "é"])
    assert words[0] == words[2] and len(set(words.tolist())) == 3
    assert value_keys([b"a"])[0] == words[0]  # the UTF-8 bytes of a string key as the string does
    with pytest.raises(ValueError, match="non-negative"):
        value_keys(np.array([-1]))
    with pytest.raises(TypeError, match="integers, strings or bytes"):
        value_keys(np.array([0.5]))
    with pytest.raises(TypeError, match="all strings or all bytes"):
        value_keys(np.array(["a", 1], dtype=object))


@pytest.mark.statistical
def test_each_function_spreads_keys_uniformly_and_functions_are_independent() -> None:
    """Chi-square goodness of fit of 2*10^5 consecutive keys over 64 buckets for each of 4 functions, and of
    the pair (h_0, h_1) over 64^2 cells; each p-value above 1e-6 (false-failure rate 1e-6 per check)."""
    family = HashFamily(seed=3, count=4, buckets=64)
    hashed = family.hash_all(np.arange(200_000, dtype=np.uint64))
    for j in range(4):
        assert stats.chisquare(np.bincount(hashed[:, j], minlength=64)).pvalue > 1e-6
    pair = np.bincount(hashed[:, 0] * 64 + hashed[:, 1], minlength=64 * 64)
    assert stats.chisquare(pair).pvalue > 1e-6


@pytest.mark.statistical
def test_collision_rate_of_two_keys_over_functions_is_one_over_m() -> None:
    """For a fixed key pair, the share of 20,000 functions that collide is Binomial(20000, ~1/m): within
    the two-sided 1e-6 binomial interval around 1/m for m = 16."""
    family = HashFamily(seed=11, count=20_000, buckets=16)
    j = np.arange(20_000)
    collisions = int(np.sum(family.hash(j, np.uint64(5)) == family.hash(j, np.uint64(6))))
    low, high = stats.binom.ppf([5e-7, 1 - 5e-7], 20_000, 1 / 16)
    assert low <= collisions <= high


def test_family_is_fixed_by_its_seed_and_refuses_bad_parameters() -> None:
    keys = value_keys(np.arange(100))
    a, b = HashFamily(seed=1, count=3, buckets=100), HashFamily(seed=1, count=3, buckets=100)
    np.testing.assert_array_equal(a.hash_all(keys), b.hash_all(keys))
    assert not np.array_equal(a.hash_all(keys), HashFamily(seed=2, count=3, buckets=100).hash_all(keys))
    assert a.hash_all(keys).min() >= 0 and a.hash_all(keys).max() < 100
    with pytest.raises(ValueError, match="buckets"):
        HashFamily(seed=1, count=1, buckets=1)
    with pytest.raises(TypeError, match="seed"):
        HashFamily(seed=1.5, count=1, buckets=4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="indices"):
        a.hash(np.array([3]), keys[:1])
