"""Step (iii) of Zietlow et al. §4.2: write the modified store, and the uniform-noise baseline (§5.2).

Both read the original store in shard-aligned blocks, transform the blocks in a thread pool (numpy,
torch and zarr's codecs release the GIL) and hand them to the store writer in index order, so the
content digest is computed on the fly. Both record the achieved max-norm distance to the parent; it
cannot exceed ε + 0.5/255 (folding never moves a pixel further than ε, rounding to uint8 adds at
most half a level), and a larger value is treated as a bug.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from probe.errors import UserError
from probe.perturb.manipulation import fold_numpy, manipulate, normalised_factors, to_uint8

ROUNDING_SLACK = 1.0 / 255.0  # acceptance bound: ‖x' − x‖∞ ≤ ε + 1/255


def _workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _transform_store(parent, out_store, origin: dict, transform: Callable[[int, np.ndarray, np.ndarray], np.ndarray],
                     epsilon: float, *, overwrite: bool = False):
    """Write ``transform(start, images_u8, factors) -> uint8 images`` of every block of ``parent`` to ``out_store``."""
    from probe.data import open_store
    from probe.data.store import create_store

    out_store = Path(out_store)
    origin = dict(origin)
    ctx = create_store(out_store, num_images=parent.num_images, image_shape=parent.image_shape, factors=parent.factors,
                       name=parent.name, factor_names=parent.factor_names, factor_sizes=parent.factor_sizes,
                       factor_values=parent.factor_values, origin=origin, grid=parent.grid, overwrite=overwrite)
    max_diff = 0
    with ctx as writer:
        block = writer.shard_size
        starts = list(range(0, parent.num_images, block))

        def work(start):
            stop = min(start + block, parent.num_images)
            x = np.asarray(parent.images[start:stop])
            y = transform(start, x, parent.factors[start:stop])
            return start, y, int(np.abs(y.astype(np.int16) - x.astype(np.int16)).max(initial=0))

        with ThreadPoolExecutor(max_workers=_workers()) as pool:
            pending: deque = deque()
            for start in starts:
                pending.append(pool.submit(work, start))
                if len(pending) >= 2 * _workers():  # bounded window: memory stays O(workers × shard)
                    s, y, d = pending.popleft().result()
                    writer.write(s, y)
                    max_diff = max(max_diff, d)
            while pending:
                s, y, d = pending.popleft().result()
                writer.write(s, y)
                max_diff = max(max_diff, d)
        distance = max_diff / 255.0
        if distance > epsilon + ROUNDING_SLACK + 1e-12:
            raise RuntimeError(f"bug: max-norm distance {distance:.5f} exceeds epsilon {epsilon} + 1/255")
        # recorded in the store's attrs, which create_store writes when the block exits
        ctx.meta["origin"]["max_abs_diff"] = distance
        ctx.meta["origin"]["max_abs_diff_levels"] = max_diff
    return open_store(out_store)


def _parent_record(parent) -> dict:
    return {"path": str(parent.path), "digest": parent.digest}


def apply_manipulation(store_path, manipulation_dir, out_store, *, epsilon: float | None = None,
                       device: str = "cpu", overwrite: bool = False):
    """Write x' = fold(x + ε·m_ψ(w)) for every image of ``store_path`` as a new store at ``out_store``.

    ``epsilon`` defaults to the one the manipulation was trained with. The new store has the same
    factors and metadata, origin.kind "perturbed", the parent's path and digest, ε, the manipulation
    checkpoint's sha256 and the achieved max-norm distance (``origin["max_abs_diff"]``).
    """
    from probe.data import open_store
    from probe.perturb.adversarial import load_manipulation

    parent = open_store(store_path, verify=True)
    net, info = load_manipulation(manipulation_dir, device=device)
    if info["store"]["digest"] != parent.digest:
        raise UserError(f"the manipulation in {manipulation_dir} was trained on {info['store']['path']} "
                        f"(digest {info['store']['digest'][:12]}…), not on {parent.path} ({parent.digest[:12]}…)")
    eps = info["epsilon"] if epsilon is None else float(epsilon)
    if not 0 < eps <= 1:
        raise UserError(f"epsilon must be in (0, 1], got {eps}")
    sizes = parent.factor_sizes

    def transform(start, x, factors):
        return _manipulated(net, x, factors, sizes, eps, device)

    origin = {"kind": "perturbed", "parent": _parent_record(parent), "seed": info["config"].get("seed"),
              "config": {"epsilon": eps, "trained_epsilon": info["epsilon"],
                         "manipulation": {"dir": info["dir"], "checkpoint_sha256": info["checkpoint_sha256"],
                                          "identity_digest": info["identity_digest"], "config": info["config"],
                                          "entangled": info["entangled"], "disentangled": info["disentangled"]},
                         "formula": "x' = round(255 * fold(x + eps * m(w))) / 255, fold(v) = v - 2 relu(v - 1) + 2 relu(-v)"}}
    return _transform_store(parent, out_store, origin, transform, eps, overwrite=overwrite)


@torch.no_grad()
def _manipulated(net, x_u8: np.ndarray, factors: np.ndarray, factor_sizes, epsilon: float, device) -> np.ndarray:
    """uint8 images [N, H, W, C] -> round(255·fold(x + ε·m(w))) / 255 as uint8: what a perturbed store holds."""
    w = normalised_factors(factors, factor_sizes).to(device)
    xt = torch.from_numpy(np.asarray(x_u8)).to(device).permute(0, 3, 1, 2).float() / 255.0
    return to_uint8(manipulate(xt, net(w), epsilon).permute(0, 2, 3, 1).cpu().numpy())


def manipulated_images(store_path, manipulation_dir, index, *, epsilon: float | None = None,
                       device: str = "cpu") -> np.ndarray:
    """The images ``apply_manipulation`` would write at ``index`` of ``store_path`` (uint8 [N, H, W, C]), without
    writing a store: e.g. x' of the frozen random-ψ control, which gets no store of its own."""
    from probe.data import open_store
    from probe.perturb.adversarial import load_manipulation

    parent = open_store(store_path)
    net, info = load_manipulation(manipulation_dir, device=device)
    if info["store"]["digest"] != parent.digest:
        raise UserError(f"the manipulation in {manipulation_dir} was trained on another store than {parent.path}")
    index = np.asarray(index)
    eps = info["epsilon"] if epsilon is None else float(epsilon)
    return _manipulated(net, parent.read(index), parent.factors[index], parent.factor_sizes, eps, device)


def noise_block(seed: int, start: int, shape, epsilon: float) -> np.ndarray:
    """The uniform noise U[−ε, ε] (float64, one draw per pixel and channel) of the block beginning at image ``start``.

    Seeded per block by ``SeedSequence([seed, start])`` so that the noise of an image does not depend
    on which thread computes it.
    """
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(start)]))
    return rng.uniform(-epsilon, epsilon, size=tuple(shape))


def make_noise_store(store_path, out_store, *, epsilon: float, seed: int, overwrite: bool = False):
    """The §5.2 baseline: x'' = fold(x + u), u ~ U[−ε, ε] i.i.d. per pixel and channel, as a store (origin.kind "noise")."""
    from probe.data import open_store

    parent = open_store(store_path, verify=True)
    eps = float(epsilon)
    if not 0 < eps <= 1:
        raise UserError(f"epsilon must be in (0, 1], got {eps}")
    seed = int(seed)

    def transform(start, x, factors):
        u = noise_block(seed, start, x.shape, eps)
        return to_uint8(fold_numpy(x / 255.0 + u))

    from probe.data.store import images_per_shard

    origin = {"kind": "noise", "parent": _parent_record(parent), "seed": seed,
              "config": {"epsilon": eps, "distribution": "uniform[-epsilon, epsilon], i.i.d. per pixel and channel",
                         "rng": "numpy PCG64 seeded with SeedSequence([seed, first image of block])",
                         "block_images": min(max(parent.num_images, 1), images_per_shard(parent.image_shape)),
                         "formula": "x' = round(255 * fold(x + u)) / 255, fold(v) = v - 2 relu(v - 1) + 2 relu(-v)"}}
    return _transform_store(parent, out_store, origin, transform, eps, overwrite=overwrite)
