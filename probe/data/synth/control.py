"""The positive-control dataset: two non-overlapping grey squares on black whose intensities are the factors.

Why this geometry (Zietlow et al. 2021, §3 and Theorem 1): a VAE aligns its latents with the directions of the
data that carry distinct amounts of variance and keep the decoder's Jacobian columns orthogonal. Here each factor
moves the intensity of its own square, so the two factor directions in pixel space are orthogonal (disjoint
supports) and carry different variance (the large square covers 2.6× the pixels of the small one, same intensity
range). The disentangled alignment is then the unique preferred one: a β-VAE finds it within minutes
(`docs/notes/control.md`, measured).

``rotation_deg`` renders the same grid from the factors rotated in their plane before rendering,
t = R(θ)·w: at 45° each square's intensity is (w₀ ± w₁)/√2, so the preferred (orthogonal, distinct-variance)
directions of the images are the rotated factors and a VAE that follows them is entangled with respect to w by
construction. This is the control pipeline's known effect (L1). Both renderings use the same intensity map
I = 0.5 + 0.35·t, so the rotation is an isometry of factor space and every image stays inside [0, 1].

Factors (C-order grid): ``large_intensity`` and ``small_intensity``, each FULL_SIZE levels in [-1, 1].
Squares, in units of the image side: large [1/16, 9/16]², small [10/16, 15/16] × [1/16, 6/16]; pixels are the
exact area coverage of each square (anti-aliased at resolutions that do not divide 16).
"""

from __future__ import annotations

import numpy as np

NAME = "control"
FACTOR_NAMES = ["large_intensity", "small_intensity"]
FULL_SIZES = [64, 64]
CHANNELS = 1
# (x0, x1, y0, y1) in units of the image side; the large square carries 0.25 of the image, the small 0.098
SQUARES = ((1 / 16, 9 / 16, 1 / 16, 9 / 16), (10 / 16, 15 / 16, 1 / 16, 6 / 16))
MID, GAIN = 0.5, 0.35   # intensity = MID + GAIN · t; |t| ≤ √2 after any rotation keeps it in [0.005, 0.995]


def factor_values(sizes) -> list[list[float]]:
    return [np.linspace(-1.0, 1.0, int(s)).tolist() if int(s) > 1 else [0.0] for s in sizes]


def rotation_matrix(rotation_deg: float) -> np.ndarray:
    a = np.deg2rad(float(rotation_deg))
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])


def _coverage(resolution: int, lo: float, hi: float) -> np.ndarray:
    """Fraction of each pixel [i/R, (i+1)/R) inside [lo, hi] along one axis."""
    edges = np.arange(resolution + 1) / resolution
    return np.clip(np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo), 0.0, None) * resolution


def square_masks(resolution: int) -> np.ndarray:
    """[2, R, R] coverage of each square (rows = y, columns = x)."""
    return np.stack([np.outer(_coverage(resolution, y0, y1), _coverage(resolution, x0, x1))
                     for x0, x1, y0, y1 in SQUARES])


def render(values: np.ndarray, resolution: int = 16, *, rotation_deg: float = 0.0) -> np.ndarray:
    """Factor values [n, 2] in [-1, 1] -> uint8 images [n, R, R, 1]; ``rotation_deg`` rotates the factors first."""
    values = np.asarray(values, dtype=np.float64).reshape(-1, 2)
    t = values @ rotation_matrix(rotation_deg).T
    intensity = np.clip(MID + GAIN * t, 0.0, 1.0)
    images = np.einsum("nk,kyx->nyx", intensity, square_masks(int(resolution)))
    return np.round(images * 255.0).astype(np.uint8)[..., None]
