"""Procedural dSprites: a white square / ellipse / heart on black, 64×64, binary pixels.

Factors (official order, C-order grid): shape 3, scale 6 in [0.5, 1], orientation 40 in [0, 2π),
posX 32 in [0, 1], posY 32 in [0, 1]. The official file also has a constant colour factor; it is dropped,
as disentanglement_lib's ``dsprites_full`` does.

Geometry, chosen to match the official images (dSprites README / the released file):
- a scale-1 square is 18 px wide at 64 px (so the half-size unit is 9 px × scale);
- the sprite centre moves over pixels 8..56 as the position factor goes 0..1 (x to the right, y down);
- the ellipse is elongated 2:1 (long axis ≈ the square's diagonal), the heart fits the same box as the square.
Orientation: the official ``latents_values`` repeat 0 at 2π (40 values *including* both ends); we follow the
issue and the README wording instead and use 40 values in [0, 2π) so that no two orientations coincide.
Pixels are 0/255 (the official 0/1, scaled), decided at the pixel centre.
"""

from __future__ import annotations

import numpy as np

NAME = "dsprites"
FACTOR_NAMES = ["shape", "scale", "orientation", "posX", "posY"]
FULL_SIZES = [3, 6, 40, 32, 32]
SHAPE_NAMES = ["square", "ellipse", "heart"]
CHANNELS = 1
OFFICIAL_RESOLUTION = 64
SQUARE_SIDE_AT_SCALE_1 = 18.0  # px at 64 px
POSITION_RANGE = (8.0, 56.0)  # px at 64 px: sprite centre for pos 0 and pos 1


def factor_values(sizes) -> list[list[float]]:
    """Physical values of each factor for a (sub-)grid with the official ranges."""
    shape, scale, orient, px, py = (int(s) for s in sizes)
    return [
        [1.0, 2.0, 3.0][:shape],  # square, ellipse, heart: the official latents_values 1, 2, 3
        np.linspace(0.5, 1.0, scale).tolist(),
        np.linspace(0.0, 2 * np.pi, orient, endpoint=False).tolist(),
        np.linspace(0.0, 1.0, px).tolist(),
        np.linspace(0.0, 1.0, py).tolist(),
    ]


def _inside(shape: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Membership in the canonical sprite (unit = half the square side); u right, v up."""
    square = (np.abs(u) <= 1.0) & (np.abs(v) <= 1.0)
    ellipse = (u / 1.35) ** 2 + (v / 0.68) ** 2 <= 1.0
    # classic implicit heart (x²+y²-1)³ - x²y³ <= 0, spans x∈[-1.14,1.14], y∈[-1,1.24]; centre it and fit the box
    hx, hy = u * 1.12, v * 1.12 + 0.12
    heart = (hx * hx + hy * hy - 1.0) ** 3 - hx * hx * hy ** 3 <= 0.0
    return np.where(shape == 0, square, np.where(shape == 1, ellipse, heart))


def render(values: np.ndarray, resolution: int = 64) -> np.ndarray:
    """Physical factor values [n, 5] (shape 1..3, scale, angle, posX, posY) -> uint8 images [n, R, R, 1]."""
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[0]
    f = resolution / OFFICIAL_RESOLUTION
    shape = (np.rint(values[:, 0]).astype(np.int64) - 1)[:, None, None]
    half = (SQUARE_SIDE_AT_SCALE_1 / 2) * f * values[:, 1][:, None, None]
    theta = values[:, 2][:, None, None]
    lo, hi = POSITION_RANGE[0] * f, POSITION_RANGE[1] * f
    cx = (lo + (hi - lo) * values[:, 3])[:, None, None]
    cy = (lo + (hi - lo) * values[:, 4])[:, None, None]
    centres = np.arange(resolution, dtype=np.float64) + 0.5
    x = centres[None, None, :] - cx
    y = cy - centres[None, :, None]  # image rows grow downwards; sprite coordinates point up
    cos, sin = np.cos(theta), np.sin(theta)
    # rotate the pixel back by -theta (sprite turns counter-clockwise as the angle grows)
    u = (cos * x + sin * y) / half
    v = (-sin * x + cos * y) / half
    mask = _inside(shape, u, v)
    out = np.zeros((n, resolution, resolution, 1), dtype=np.uint8)
    out[..., 0] = mask * np.uint8(255)
    return out
