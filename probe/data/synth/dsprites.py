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

from probe.errors import UserError

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


def _inside(shape_id: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Membership in the canonical sprite (unit = half the square side); u right, v up."""
    if shape_id == 0:  # square
        return (np.abs(u) <= 1.0) & (np.abs(v) <= 1.0)
    if shape_id == 1:  # ellipse, 2:1
        return (u / 1.35) ** 2 + (v / 0.68) ** 2 <= 1.0
    # classic implicit heart (x²+y²-1)³ - x²y³ <= 0, spans x∈[-1.14,1.14], y∈[-1,1.24]; centred to fit the box
    hx, hy = u * 1.12, v * 1.12 + 0.12
    return (hx * hx + hy * hy - 1.0) ** 3 - hx * hx * hy ** 3 <= 0.0


def render(values: np.ndarray, resolution: int = 64, *, sprite_side: float = SQUARE_SIDE_AT_SCALE_1 / OFFICIAL_RESOLUTION,
           position_span: float = (POSITION_RANGE[1] - POSITION_RANGE[0]) / OFFICIAL_RESOLUTION) -> np.ndarray:
    """Physical factor values [n, 5] (shape 1..3, scale, angle, posX, posY) -> uint8 images [n, R, R, 1].

    ``sprite_side`` (a scale-1 square's side as a fraction of the image, default 18/64) and ``position_span`` (the
    fraction of the image the sprite's centre moves over, centred; default 48/64) are deviations from the official
    geometry, for the regime calibration. With the official geometry a 32×32 β-VAE codes position in a folded basis
    (MIG ≤ 0.07 in every measured run): images of one sprite more than a few positions apart share no pixel, so nothing
    orders far positions, and position is worth 3× scale to the decoder. With ``sprite_side=0.5, position_span=0.5``
    87 % of position pairs overlap (44 % officially) and scale is worth half of position. There β-VAEs with 4× Table 2's
    KL weight (β 8, w 1 at 32×32) aligned position and scale in 4 of 5 runs at 6k steps, while at Table 2's balance
    (w 4) they reach MIG 0.16 by 20k with scale in no latent, at 2× (w 2, the dSprites cpu preset's) 0.24 by 30k with
    4 of 5 factors, and PCL 0.22 (docs/notes/presets.md, thirty-second to thirty-fourth legs). The defaults render
    the official geometry bit for bit as before these options existed.

    Only a window around each sprite (it never reaches further than 1.5 half-sides from its centre) is
    evaluated, per shape, in float32; the window is pasted into a padded canvas and cropped.
    """
    if not 0.05 <= float(sprite_side) <= 0.6:
        raise UserError(f"sprite_side must be in [0.05, 0.6] (a fraction of the image), got {sprite_side!r}")
    if not 0.0 < float(position_span) <= 1.0:
        raise UserError(f"position_span must be in (0, 1] (a fraction of the image), got {position_span!r}")
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[0]
    f = resolution / OFFICIAL_RESOLUTION
    side = float(sprite_side) * OFFICIAL_RESOLUTION  # px at 64 px
    centre, half_span = OFFICIAL_RESOLUTION / 2, float(position_span) * OFFICIAL_RESOLUTION / 2
    reach = int(np.ceil(1.5 * (side / 2) * f)) + 1
    win = 2 * reach
    lo, hi = (centre - half_span) * f, (centre + half_span) * f
    cx = lo + (hi - lo) * values[:, 3]
    cy = lo + (hi - lo) * values[:, 4]
    x0 = np.floor(cx).astype(np.int64) - reach + 1  # first window column (may be negative: canvas is padded)
    y0 = np.floor(cy).astype(np.int64) - reach + 1
    offs = np.arange(win, dtype=np.float64)
    x = (x0[:, None] + offs[None, :] + 0.5 - cx[:, None])[:, None, :]      # [n, 1, win]
    y = (cy[:, None] - (y0[:, None] + offs[None, :] + 0.5))[:, :, None]    # [n, win, 1]; sprite y points up
    half = ((side / 2) * f * values[:, 1])[:, None, None]
    theta = values[:, 2][:, None, None]
    cos, sin = np.cos(theta), np.sin(theta)
    # rotate the pixel back by -theta (the sprite turns counter-clockwise as the angle grows)
    u = ((cos * x + sin * y) / half).astype(np.float32)
    v = ((-sin * x + cos * y) / half).astype(np.float32)
    shape = np.rint(values[:, 0]).astype(np.int64) - 1
    mask = np.zeros((n, win, win), dtype=bool)
    for sid in range(3):
        m = np.flatnonzero(shape == sid)
        if m.size:
            mask[m] = _inside(sid, u[m], v[m])
    pad = reach + 1
    canvas = np.zeros((n, resolution + 2 * pad, resolution + 2 * pad), dtype=np.uint8)
    rows = (y0 + pad)[:, None, None] + np.arange(win)[None, :, None]
    cols = (x0 + pad)[:, None, None] + np.arange(win)[None, None, :]
    canvas[np.arange(n)[:, None, None], rows, cols] = mask * np.uint8(255)
    return np.ascontiguousarray(canvas[:, pad:pad + resolution, pad:pad + resolution, None])
