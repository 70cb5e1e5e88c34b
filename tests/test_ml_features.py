"""kakeibo.ml.features.ImageDCT: a fixed, record-by-record map (so it costs no budget), total on extreme
pixels, equal to the DCT written out from its definition, and refusing bad parameters with a sentence."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kakeibo import Error
from kakeibo.ml import ImageDCT


def _dct_matrix(size: int) -> np.ndarray:
    """The orthonormal DCT-II matrix from its definition: ``c_k cos(pi (2 n + 1) k / (2 size))``."""
    n = np.arange(size)
    weights = np.where(n == 0, math.sqrt(1 / size), math.sqrt(2 / size))
    return np.array([weights[k] * np.cos(math.pi * (2 * n + 1) * k / (2 * size)) for k in n])


def test_the_features_are_the_low_frequencies_without_the_mean_scaled_to_the_norm() -> None:
    rng = np.random.default_rng(7)
    images = rng.uniform(0, 16, size=(5, 6 * 4))
    features = ImageDCT(shape=(6, 4), keep=3, scale=2.0).fit_transform(images)
    rows, columns = _dct_matrix(6), _dct_matrix(4)
    for image, got in zip(images, features, strict=True):
        full = rows @ image.reshape(6, 4) @ columns.T
        expected = full[:3, :3].reshape(-1)[1:]
        np.testing.assert_allclose(got, 2.0 * expected / np.linalg.norm(expected), rtol=1e-12, atol=1e-15)
    assert features.shape == (5, 8)


def test_each_row_is_mapped_alone_whatever_the_data_fitted() -> None:
    """The privacy property: the map of one record depends on that record only (and on public
    parameters), so a neighbouring dataset changes no other record's features and fit learns nothing."""
    rng = np.random.default_rng(8)
    data, other = rng.uniform(0, 1, size=(40, 64)), rng.uniform(-1e6, 1e6, size=(3, 64))
    probe = rng.uniform(0, 1, size=(4, 64))
    first = ImageDCT().fit(data).transform(probe)
    second = ImageDCT().fit(other).transform(probe)
    assert np.array_equal(first, second)
    alone = np.vstack([ImageDCT().fit(data).transform(row[None, :]) for row in probe])
    assert np.array_equal(first, alone)


@pytest.mark.parametrize("value", [1e308, -1e308, 5e-324, 0.0, 1.0])
def test_extreme_pixels_give_finite_features_of_the_stated_norm_or_zero(value: float) -> None:
    images = np.zeros((3, 64))
    images[0, :] = value
    images[1, ::3] = value
    images[2, 5] = value
    images[2, 60] = -value
    features = ImageDCT(scale=3.0).fit(images).transform(images)
    assert np.all(np.isfinite(features))
    norms = np.linalg.norm(features, axis=1)
    # a constant image has nothing but its mean: all its kept coefficients are zero
    assert norms[0] == 0.0
    for norm in norms[1:]:
        assert norm == 0.0 if value == 0.0 else math.isclose(norm, 3.0, rel_tol=1e-12)


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [
        ({"shape": (8,)}, "shape must be (height, width)"),
        ({"shape": (8, 0)}, "each side of shape"),
        ({"keep": 9}, "keep must be from 2 to 8"),
        ({"keep": 1}, "keep must be from 2 to 8"),
        ({"keep": 2.5}, "keep must be a positive whole number"),
        ({"scale": 0.0}, "scale must be a positive finite number"),
        ({"scale": float("inf")}, "scale must be a positive finite number"),
    ],
)
def test_bad_parameters_are_refused_with_a_sentence(parameters: dict[str, Any], fragment: str) -> None:
    with pytest.raises(Error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        ImageDCT(**parameters).fit(np.zeros((2, 64)))


def test_images_of_another_width_and_non_finite_pixels_are_refused() -> None:
    with pytest.raises(Error, match="X has 63 columns, but images of"):
        ImageDCT().fit(np.zeros((2, 63)))
    fitted = ImageDCT().fit(np.zeros((2, 64)))
    with pytest.raises(Error, match="NaN or infinite"):
        fitted.transform(np.full((1, 64), np.nan))
    with pytest.raises(Error, match="fitted with 64"):
        fitted.transform(np.zeros((1, 16)))
