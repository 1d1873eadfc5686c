"""Procedural Shapes3D: a ray-cast 3D room with one object, 64×64 RGB (vectorised numpy, deterministic).

Factors (official order, C-order grid, same label values as ``3dshapes.h5``):
floor_hue 10, wall_hue 10, object_hue 10 (hues 0, 0.1, …, 0.9), scale 8 in [0.75, 1.25],
shape 4 (0 cube, 1 cylinder, 2 sphere, 3 capsule), orientation 15 in [-30°, 30°].

Scene: floor y = 0, walls of a square room around the origin (one back wall and, at the larger
orientations, a side wall), the object standing on the floor at the origin. ``orientation`` is the camera's
azimuth around the object (the official file name calls it "view-azi"): the object and the room turn
together, as in the official images. Colours are fully saturated HSV hues; shading is Lambertian from one
directional light plus ambient, with a hard shadow of the object. Each pixel averages 2×2 rays (anti-aliasing).
"""

from __future__ import annotations

import numpy as np

from probe.errors import UserError

NAME = "shapes3d"
FACTOR_NAMES = ["floor_hue", "wall_hue", "object_hue", "scale", "shape", "orientation"]
FULL_SIZES = [10, 10, 10, 8, 4, 15]
SHAPE_NAMES = ["cube", "cylinder", "sphere", "capsule"]
CHANNELS = 3

ROOM_HALF = 4.0          # walls at x = ±4, z = -4 (and z = +4 behind the camera)
CAMERA_DISTANCE = 3.3
CAMERA_HEIGHT = 1.55
TARGET_HEIGHT = 0.55
FOV_DEG = 46.0
LIGHT = np.array([-0.45, 0.85, 0.55]) / np.linalg.norm([-0.45, 0.85, 0.55])
AMBIENT, DIFFUSE = 0.45, 0.6
SUPERSAMPLE = 2


def factor_values(sizes) -> list[list[float]]:
    fh, wh, oh, sc, sh, orient = (int(s) for s in sizes)
    return [
        np.linspace(0.0, 1.0, fh, endpoint=False).tolist(),
        np.linspace(0.0, 1.0, wh, endpoint=False).tolist(),
        np.linspace(0.0, 1.0, oh, endpoint=False).tolist(),
        np.linspace(0.75, 1.25, sc).tolist(),
        [float(k) for k in range(sh)],
        np.linspace(-30.0, 30.0, orient).tolist(),
    ]


def hsv_to_rgb(h: np.ndarray) -> np.ndarray:
    """Fully saturated, full-value hue in [0, 1) -> RGB [..., 3] in [0, 1]."""
    h6 = (np.asarray(h, dtype=np.float32) % 1.0) * 6.0
    k = (np.array([5.0, 3.0, 1.0], dtype=np.float32) + h6[..., None]) % 6.0
    return 1.0 - np.clip(np.minimum(k, 4.0 - k), 0.0, 1.0)


# -- ray / primitive intersections: rays o [n,3], d [n,3] (unit); return t [n] (inf if missed), normal [n,3] --
def _sphere(o, d, centre, r):
    oc = o - centre
    b = np.einsum("ij,ij->i", oc, d)
    c = np.einsum("ij,ij->i", oc, oc) - r * r
    disc = b * b - c
    sq = np.sqrt(np.maximum(disc, 0.0))
    t = -b - sq
    t = np.where((disc > 0) & (t > 1e-4), t, np.inf)
    p = o + d * np.where(np.isfinite(t), t, 0.0)[:, None]
    return t, (p - centre) / r[:, None]


def _vertical_cylinder(o, d, r, y0, y1, cap):
    a = d[:, 0] ** 2 + d[:, 2] ** 2
    b = o[:, 0] * d[:, 0] + o[:, 2] * d[:, 2]
    c = o[:, 0] ** 2 + o[:, 2] ** 2 - r * r
    disc = b * b - a * c
    t = (-b - np.sqrt(np.maximum(disc, 0.0))) / np.maximum(a, 1e-12)
    y = o[:, 1] + t * d[:, 1]
    t = np.where((disc > 0) & (t > 1e-4) & (y >= y0) & (y <= y1), t, np.inf)
    p = o + d * np.where(np.isfinite(t), t, 0.0)[:, None]
    normal = np.stack([p[:, 0] / r, np.zeros_like(r), p[:, 2] / r], axis=1)
    if cap:
        with np.errstate(divide="ignore", invalid="ignore"):
            tc = (y1 - o[:, 1]) / d[:, 1]
        pc = o + d * np.where(np.isfinite(tc), tc, 0.0)[:, None]
        hit = (tc > 1e-4) & (pc[:, 0] ** 2 + pc[:, 2] ** 2 <= r * r) & (tc < t)
        t = np.where(hit, tc, t)
        normal = np.where(hit[:, None], np.array([0.0, 1.0, 0.0], dtype=o.dtype), normal)
    return t, normal


def _box(o, d, half):
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / d
    lo = np.stack([-half, np.zeros_like(half), -half], axis=1)
    hi = np.stack([half, 2 * half, half], axis=1)
    t1, t2 = (lo - o) * inv, (hi - o) * inv
    tmin_axis = np.minimum(t1, t2)
    tmin = tmin_axis.max(axis=1)
    tmax = np.maximum(t1, t2).min(axis=1)
    t = np.where((tmax >= tmin) & (tmin > 1e-4), tmin, np.inf)
    axis = tmin_axis.argmax(axis=1)
    normal = np.zeros_like(o)
    normal[np.arange(o.shape[0]), axis] = -np.sign(d[np.arange(o.shape[0]), axis])
    return t, normal


def _object(o, d, shape, scale):
    """Nearest hit with each ray's object (shape id and scale per ray)."""
    n = o.shape[0]
    t = np.full(n, np.inf, dtype=o.dtype)
    normal = np.zeros_like(o)
    # cheap bounding-sphere test first: only rays that pass it get the exact intersection
    centre_y = 0.55 * scale
    oc = o.copy()
    oc[:, 1] -= centre_y
    b = np.einsum("ij,ij->i", oc, d)
    disc = b * b - (np.einsum("ij,ij->i", oc, oc) - (0.9 * scale) ** 2)
    near = (disc > 0) & (-b + np.sqrt(np.maximum(disc, 0)) > 0)
    for sid in range(4):
        m = np.flatnonzero(near & (shape == sid))
        if m.size == 0:
            continue
        om, dm, s = o[m], d[m], scale[m]
        if sid == 0:  # cube
            tt, nn = _box(om, dm, 0.42 * s)
        elif sid == 1:  # cylinder
            r = 0.42 * s
            tt, nn = _vertical_cylinder(om, dm, r, np.zeros_like(r), 0.9 * s, cap=True)
        elif sid == 2:  # sphere
            r = 0.48 * s
            tt, nn = _sphere(om, dm, np.stack([np.zeros_like(r), r, np.zeros_like(r)], 1), r)
        else:  # capsule: upright pill
            r = 0.3 * s
            y0, y1 = r, 1.15 * s - r
            tt, nn = _vertical_cylinder(om, dm, r, y0, y1, cap=False)
            z = np.zeros_like(r)
            for yc in (y0, y1):
                ts, ns = _sphere(om, dm, np.stack([z, yc, z], 1), r)
                closer = ts < tt
                tt = np.where(closer, ts, tt)
                nn = np.where(closer[:, None], ns, nn)
        t[m], normal[m] = tt, nn
    return t, normal


def _room(o, d):
    """Nearest room surface: floor (0), back/front walls (1), side walls (1). Returns t, normal, is_wall."""
    n = o.shape[0]
    best = np.full(n, np.inf, dtype=o.dtype)
    normal = np.zeros_like(o)
    wall = np.zeros(n, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        planes = [(1, 0.0, (0, 1, 0), False),
                  (2, -ROOM_HALF, (0, 0, 1), True), (2, ROOM_HALF, (0, 0, -1), True),
                  (0, -ROOM_HALF, (1, 0, 0), True), (0, ROOM_HALF, (-1, 0, 0), True)]
        for axis, pos, nrm, is_wall in planes:
            t = (pos - o[:, axis]) / d[:, axis]
            closer = (t > 1e-4) & (t < best)
            best = np.where(closer, t, best)
            normal[closer] = np.asarray(nrm, dtype=o.dtype)
            wall = np.where(closer, is_wall, wall)
    return best, normal, wall


def _camera_rays(azimuth_deg: np.ndarray, resolution: int, distance: float = CAMERA_DISTANCE, fov_deg: float = FOV_DEG):
    """Origins and unit directions [B, R*R, 3] for cameras orbiting the origin."""
    phi = np.deg2rad(azimuth_deg.astype(np.float32))
    b = phi.shape[0]
    cam = np.stack([distance * np.sin(phi), np.full(b, CAMERA_HEIGHT, np.float32),
                    distance * np.cos(phi)], axis=1).astype(np.float32)
    target = np.array([0.0, TARGET_HEIGHT, 0.0], dtype=np.float32)
    fwd = target - cam
    fwd /= np.linalg.norm(fwd, axis=1, keepdims=True)
    right = np.cross(fwd, np.array([0.0, 1.0, 0.0], dtype=np.float32))
    right /= np.linalg.norm(right, axis=1, keepdims=True)
    up = np.cross(right, fwd)
    tan = np.float32(np.tan(np.deg2rad(fov_deg) / 2))
    coords = (np.arange(resolution, dtype=np.float32) + 0.5) / resolution * 2 - 1
    sx = coords[None, :].repeat(resolution, 0).reshape(-1) * tan          # columns: left -> right
    sy = -coords[:, None].repeat(resolution, 1).reshape(-1) * tan         # rows: top -> bottom
    d = fwd[:, None, :] + sx[None, :, None] * right[:, None, :] + sy[None, :, None] * up[:, None, :]
    d /= np.linalg.norm(d, axis=2, keepdims=True)
    o = np.broadcast_to(cam[:, None, :], d.shape)
    return o, d


def render(values: np.ndarray, resolution: int = 64, *, hue_span: float = 1.0,
           camera_distance: float = CAMERA_DISTANCE, fov_deg: float = FOV_DEG) -> np.ndarray:
    """Physical factor values [n, 6] (hues, scale, shape id, azimuth°) -> uint8 images [n, R, R, 3].

    ``hue_span`` < 1 (a deviation from the official images, for calibration experiments only) renders the hue label h
    as the colour of hue ``h * hue_span``: the official hues 0, 0.1, …, 0.9 close a loop in RGB (0.9 is next to 0),
    which a single Gaussian latent can hold only by cutting it; with 0.8 the rendered hues run from red to violet and
    the loop stays open. The factor labels are the official ones either way. Measured: opening the loop did not help
    the β-VAE's MIG (docs/notes/presets.md, fourth leg); no preset uses it.

    ``camera_distance`` (from the object, default 3.3) and ``fov_deg`` (default 46°), also deviations for calibration
    only: a closer camera makes the object — its hue, scale and shape — a larger share of the image (2.6 units at 40°:
    about twice the pixel variance of those factors, docs/notes/presets.md). The camera must stay inside the room."""
    if not 0.0 < float(hue_span) <= 1.0:
        raise UserError(f"hue_span must be in (0, 1], got {hue_span!r}")
    if not 1.0 <= float(camera_distance) <= ROOM_HALF - 0.5:
        raise UserError(f"camera_distance must be in [1, {ROOM_HALF - 0.5}] (inside the room, outside the object), "
                        f"got {camera_distance!r}")
    if not 10.0 <= float(fov_deg) <= 120.0:
        raise UserError(f"fov_deg must be in [10, 120], got {fov_deg!r}")
    values = np.asarray(values, dtype=np.float64).copy()
    values[:, :3] *= float(hue_span)
    n = values.shape[0]
    hi = resolution * SUPERSAMPLE
    o, d = _camera_rays(values[:, 5], hi, float(camera_distance), float(fov_deg))
    p = hi * hi
    o = np.ascontiguousarray(o.reshape(-1, 3))
    d = np.ascontiguousarray(d.reshape(-1, 3))
    per_ray = lambda col: np.repeat(values[:, col].astype(np.float32), p)  # noqa: E731
    shape = np.repeat(values[:, 4].astype(np.int64), p)
    scale = per_ray(3)

    t_room, n_room, is_wall = _room(o, d)
    t_obj, n_obj = _object(o, d, shape, scale)
    hit_obj = t_obj < t_room
    t = np.where(hit_obj, t_obj, t_room)
    normal = np.where(hit_obj[:, None], n_obj, n_room)
    point = o + d * t[:, None]

    floor_rgb = hsv_to_rgb(values[:, 0])
    wall_rgb = hsv_to_rgb(values[:, 1])
    obj_rgb = hsv_to_rgb(values[:, 2])
    albedo = np.where(hit_obj.reshape(n, p, 1), obj_rgb[:, None, :],
                      np.where(is_wall.reshape(n, p, 1), wall_rgb[:, None, :], floor_rgb[:, None, :])).reshape(-1, 3)
    light = LIGHT.astype(np.float32)
    lambert = np.clip(normal @ light, 0.0, 1.0)
    # hard shadow: room points whose ray towards the light hits the object
    cand = np.flatnonzero(~hit_obj & (point[:, 0] ** 2 + point[:, 2] ** 2 < 9.0) & (point[:, 1] < 2.0))
    t_sh, _ = _object(point[cand] + normal[cand] * 1e-3, np.broadcast_to(light, (cand.size, 3)).copy(),
                      shape[cand], scale[cand])
    lambert[cand[np.isfinite(t_sh)]] = 0.0
    shade = AMBIENT + DIFFUSE * lambert
    rgb = np.clip(albedo * shade[:, None], 0.0, 1.0)
    rgb = rgb.reshape(n, resolution, SUPERSAMPLE, resolution, SUPERSAMPLE, 3).mean(axis=(2, 4))
    return np.round(rgb * 255.0).astype(np.uint8)
