"""code_alignment on constructed codes: identical → 1 and 1; a 45° rotation of two independent latents
→ best match 1/√2 exactly (exactly decorrelated construction) and R² 1; permutation, sign flips and
scaling → 1 and 1; independent codes → near 0; constant columns → no NaN."""

from __future__ import annotations

import math

import numpy as np
import pytest

from probe.errors import UserError
from probe.metrics import block_capture, code_alignment


def _white(n, d, seed=0):
    """[n, d] codes with sample mean exactly 0 and sample covariance exactly I (population normalisation)."""
    z = np.random.RandomState(seed).randn(n, d)
    z -= z.mean(axis=0)
    cov = z.T @ z / n
    return z @ np.linalg.inv(np.linalg.cholesky(cov)).T


def _finite(result):
    for key in ("best_match_corr", "linear_r2"):
        assert result[key] is not None and math.isfinite(result[key])
    assert all(math.isfinite(v) for v in result["best_match_per_latent"] + result["linear_r2_per_latent"])


def test_identical_codes_score_one():
    z = np.random.RandomState(1).randn(1000, 5)
    out = code_alignment(z, z)
    assert out["best_match_corr"] == pytest.approx(1.0, abs=1e-12)
    assert out["linear_r2"] == pytest.approx(1.0, abs=1e-12)
    assert out["best_match_index"] == [0, 1, 2, 3, 4]
    assert out["reference_latents"] == [0, 1, 2, 3, 4] and out["note"] is None


@pytest.mark.parametrize("theta", [math.pi / 4, math.pi / 6, -math.pi / 3])
def test_rotation_best_match_is_max_abs_cos_sin_and_r2_is_one(theta):
    z = _white(2000, 2)
    rot = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    out = code_alignment(z @ rot.T, z)
    expected = max(abs(math.cos(theta)), abs(math.sin(theta)))
    assert out["best_match_corr"] == pytest.approx(expected, abs=1e-9)
    np.testing.assert_allclose(out["best_match_per_latent"], [expected, expected], atol=1e-9)
    assert out["linear_r2"] == pytest.approx(1.0, abs=1e-9)


def test_rotation_45_degrees_with_sampling_only():
    z = np.random.RandomState(3).randn(200_000, 2)
    c = 1 / math.sqrt(2)
    out = code_alignment(z @ np.array([[c, -c], [c, c]]).T, z)
    assert out["best_match_corr"] == pytest.approx(1 / math.sqrt(2), abs=0.005)
    assert out["linear_r2"] == pytest.approx(1.0, abs=1e-9)


def test_permutation_sign_flip_and_scaling_score_one():
    z = np.random.RandomState(4).randn(3000, 4)
    codes = z[:, [2, 0, 3, 1]] * np.array([-3.0, 0.5, 7.0, -0.01]) + np.array([1.0, -2.0, 0.0, 5.0])
    out = code_alignment(codes, z)
    assert out["best_match_corr"] == pytest.approx(1.0, abs=1e-12)
    assert out["linear_r2"] == pytest.approx(1.0, abs=1e-12)
    assert out["best_match_index"] == [1, 3, 0, 2]


def test_independent_codes_score_near_zero():
    rng = np.random.RandomState(5)
    n, d = 5000, 10
    out = code_alignment(rng.randn(n, d), rng.randn(n, d))
    assert out["best_match_corr"] < 0.05                 # max of 10 |corr| each ~ N(0, 1/n)
    assert out["linear_r2"] < 5 * d / n                   # in-sample R² ≈ d/n


def test_constant_columns_give_no_nan():
    rng = np.random.RandomState(6)
    z = rng.randn(500, 3)
    codes = np.concatenate([z, np.full((500, 1), 2.5)], axis=1)    # a collapsed run latent
    ref = np.concatenate([np.zeros((500, 1)), z], axis=1)         # a constant reference latent
    out = code_alignment(codes, ref)
    _finite(out)
    assert out["reference_latents"] == [1, 2, 3]
    assert out["best_match_corr"] == pytest.approx(1.0, abs=1e-12)
    assert out["linear_r2"] == pytest.approx(1.0, abs=1e-12)
    # an all-constant run: correlation 0, R² 0, no NaN
    out = code_alignment(np.ones((500, 2)), z)
    _finite(out)
    assert out["best_match_corr"] == 0.0 and out["linear_r2"] == 0.0 and out["best_match_index"] == [-1, -1, -1]
    # an all-constant reference: nothing to compare, stated
    out = code_alignment(z, np.ones((500, 2)))
    assert out["best_match_corr"] is None and out["linear_r2"] is None and "no non-constant" in out["note"]


def test_reference_active_mask_and_fallback():
    rng = np.random.RandomState(7)
    z = rng.randn(1000, 3)
    codes = z[:, :1]                                   # reproduces reference latent 0 only
    out = code_alignment(codes, z, reference_active=[True, False, False])
    assert out["reference_latents"] == [0] and out["best_match_corr"] == pytest.approx(1.0, abs=1e-12)
    out = code_alignment(codes, z, reference_active=[False, False, False])
    assert out["reference_latents"] == [0, 1, 2] and "using all 3 non-constant" in out["note"]
    assert out["best_match_corr"] < 0.5
    with pytest.raises(UserError):
        code_alignment(codes, z, reference_active=[True])
    with pytest.raises(UserError):
        code_alignment(codes[:10], z)


def test_best_match_nmi_sees_the_alignment_through_a_change_of_order():
    # a circular factor laid out from another point of its circle: the same axis, which |corr| barely sees
    rng = np.random.RandomState(8)
    hue, other = rng.uniform(0, 1, (2, 5000))
    reference = np.c_[hue, other]
    cut_elsewhere = np.c_[(hue + 0.5) % 1.0, other]
    out = code_alignment(cut_elsewhere, reference)
    # |corr| 0.50; the NMI loses at most one bin split in two: 1 − ln 2 / ln 20 = 0.769 (here 0.88)
    assert out["best_match_per_latent"][0] < 0.55 and out["best_match_nmi_per_latent"][0] > 1 - math.log(2) / math.log(20)
    # and it still tells a rotation from the reference's axes, as |corr| does
    c = 1 / math.sqrt(2)
    z = rng.randn(5000, 2)
    rotated = code_alignment(z @ np.array([[c, -c], [c, c]]).T, z)
    assert rotated["best_match_nmi"] < 0.2 and code_alignment(z, z)["best_match_nmi"] == pytest.approx(1.0)
    assert code_alignment(np.ones((5000, 2)), z)["best_match_nmi"] == 0.0       # a collapsed run matches nothing


# block_capture: references defined up to rotation inside blocks (PCA's pairs of near-equal eigenvalues)

def _circles(n=20000, seed=0):
    """Two independent uniform angles on a grid (exactly uniform), their cos/sin as a 4-column reference in two
    blocks, and a third column of independent noise as a one-column block."""
    rng = np.random.RandomState(seed)
    grid = (np.arange(n) + 0.5) * 2 * np.pi / n
    a, b = grid, rng.permutation(grid)
    reference = np.c_[np.cos(a), np.sin(a), np.cos(b), np.sin(b), rng.randn(n)]
    return a, b, reference, [[0, 1], [2, 3], [4]]


def test_block_capture_circles_held_rotated_read_one():
    a, b, reference, blocks = _circles()
    # each circle on two latents, rotated inside its pair and scaled, plus the noise column; latents shuffled
    codes = np.c_[np.cos(b + 1.0) * 3, np.sin(a - 0.4), reference[:, 4] * -2, np.sin(b + 1.0), np.cos(a - 0.4) * 0.5]
    out = block_capture(codes, reference, blocks)
    assert out["span_r2"] == pytest.approx(1.0, abs=1e-9)
    assert out["block_r2"] == pytest.approx([1.0, 1.0, 1.0], abs=1e-9)
    assert [sorted(s) for s in out["block_latents"]] == [[1, 4], [0, 3], [2]]
    # the axis-level best match cannot see the rotation: the same code reads below 1 against the reference
    assert code_alignment(codes, reference[:, :4])["best_match_corr"] < 0.9


def test_block_capture_angle_on_one_latent_reads_three_over_pi_squared():
    a, b, reference, blocks = _circles()
    # each circle held as its angle (one latent, cut at 0): linear R² of (cos, sin) on a uniform angle is 0 and 6/π²
    codes = np.c_[a, b, reference[:, 4]]
    out = block_capture(codes, reference, blocks)
    assert out["block_r2"][0] == pytest.approx(3 / np.pi ** 2, abs=1e-3)
    assert out["block_r2"][1] == pytest.approx(3 / np.pi ** 2, abs=1e-3)
    assert out["block_r2"][2] == pytest.approx(1.0, abs=1e-9)


def test_block_capture_is_invariant_to_rotations_inside_blocks():
    a, b, reference, blocks = _circles()
    codes = np.c_[np.cos(a) + 0.3 * np.sin(b), np.sin(a), a, reference[:, 4] + np.cos(b)]
    t = 0.7
    rotated = reference.copy()
    rotated[:, 0:2] = reference[:, 0:2] @ np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
    one, two = block_capture(codes, reference, blocks), block_capture(codes, rotated, blocks)
    assert two["block_r2"] == pytest.approx(one["block_r2"], abs=1e-9)
    assert two["span_r2"] == pytest.approx(one["span_r2"], abs=1e-9)


def test_block_capture_independent_codes_and_bad_blocks():
    _, _, reference, blocks = _circles(n=5000)
    out = block_capture(np.random.RandomState(1).randn(5000, 4), reference, blocks)
    assert max(out["block_r2"]) < 0.01 and out["span_r2"] < 0.01
    with pytest.raises(UserError):
        block_capture(reference, reference, [[0, 1], [1, 2]])   # overlapping
    with pytest.raises(UserError):
        block_capture(reference, reference, [[0, 5]])           # past the reference's columns
    with pytest.raises(UserError):
        block_capture(reference[:10], reference, blocks)        # different rows
