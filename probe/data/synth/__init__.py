"""Procedural generators that produce stores of the same kind as the official datasets.

    generate("dsprites", "dsprites.zarr", factor_sizes=[3, 2, 4, 8, 8])   # a small sub-grid, same ranges

Generation is deterministic (no random draws); ``seed`` is recorded for provenance only. The full grid is
rendered in shard-aligned blocks, in parallel with dask's threaded scheduler (the renderers are numpy-bound
and release the GIL), and written in index order so the content digest is computed on the fly.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Sequence

import numpy as np

from probe.data.state_space import StateSpace
from probe.data.store import Store, create_store, open_store
from probe.errors import UserError

from . import control, dsprites, shapes3d

GENERATORS: dict[str, ModuleType] = {"dsprites": dsprites, "shapes3d": shapes3d, "control": control}
RENDER_BATCH = {"dsprites": 1024, "shapes3d": 24, "control": 4096}  # images per vectorised render call (bounds memory)


def parse_factor_sizes(name: str, factor_sizes: Sequence[int] | str | None) -> list[int]:
    gen = _generator(name)
    if factor_sizes is None:
        return list(gen.FULL_SIZES)
    if isinstance(factor_sizes, str):
        try:
            factor_sizes = [int(s) for s in factor_sizes.replace(" ", "").split(",") if s]
        except ValueError:
            raise UserError(f"--factor-sizes must be comma-separated integers, got {factor_sizes!r}") from None
    sizes = [int(s) for s in factor_sizes]
    if len(sizes) != len(gen.FULL_SIZES):
        raise UserError(f"{name} has {len(gen.FULL_SIZES)} factors {gen.FACTOR_NAMES}; got {len(sizes)} sizes {sizes}")
    for fname, size, full in zip(gen.FACTOR_NAMES, sizes, gen.FULL_SIZES):
        if size < 1 or size > full:
            raise UserError(f"{name}: factor {fname!r} size must be in 1..{full} (a sub-grid of the official one), got {size}")
    return sizes


def _generator(name: str) -> ModuleType:
    if name not in GENERATORS:
        raise UserError(f"unknown generator {name!r}; choose one of {sorted(GENERATORS)}")
    return GENERATORS[name]


def render_indices(name: str, indices: np.ndarray, factor_sizes: Sequence[int], resolution: int = 64,
                   options: dict | None = None) -> np.ndarray:
    """Render the images at grid ``indices`` of a (sub-)grid (no store involved); ``options`` are the generator's
    own rendering keywords (the control generator's ``rotation_deg``)."""
    gen = _generator(name)
    space = StateSpace(factor_sizes)
    factors = space.unravel(np.asarray(indices))
    values = np.stack([np.asarray(v)[factors[:, k]] for k, v in enumerate(gen.factor_values(factor_sizes))], axis=1)
    batch = RENDER_BATCH[name] * max(1, (64 // max(resolution, 1)) ** 2)
    parts = [gen.render(values[s:s + batch], resolution, **(options or {})) for s in range(0, len(values), batch)]
    return np.concatenate(parts) if parts else np.empty((0, resolution, resolution, gen.CHANNELS), np.uint8)


def generate(name: str, out: str | os.PathLike, *, resolution: int = 64, factor_sizes: Sequence[int] | None = None,
             seed: int = 0, progress: bool = True, workers: int | None = None, options: dict | None = None,
             processes: bool = False) -> Store:
    """Render the complete C-order grid of ``name`` into a new store at ``out``; returns the opened store.
    ``options``: the generator's rendering keywords (recorded in the store's origin). ``processes``: render in
    worker processes instead of threads, for many cores: the Shapes3D ray caster is many small numpy operations per
    block, and the GIL is held between them (64,000 images at 64×64 took ≈ 170 s in 16 processes on a device
    machine; threads there were not measured). The images are the same either way."""
    gen = _generator(name)
    options = _check_options(gen, name, options)
    sizes = parse_factor_sizes(name, factor_sizes)
    resolution = int(resolution)
    if not 8 <= resolution <= 512:
        raise UserError(f"--resolution must be between 8 and 512, got {resolution}")
    space = StateSpace(sizes)
    workers = workers or os.cpu_count() or 1
    config = {"generator": name, "resolution": resolution, "factor_sizes": sizes, **({"options": options} if options else {})}
    try:
        return _generate(gen, name, Path(out), sizes, resolution, seed, progress, workers, space, config, options,
                         "processes" if processes else "threads")
    except OSError as exc:  # disk full, permission, I/O error while writing: nothing is left at `out`
        raise UserError(f"writing {out} failed ({exc}); nothing was written") from None


def _check_options(gen, name: str, options: dict | None) -> dict:
    """The generator's rendering keywords: each must be a keyword-only parameter of its ``render``."""
    import inspect

    options = dict(options or {})
    known = [p.name for p in inspect.signature(gen.render).parameters.values() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UserError(f"generator {name!r} has no rendering option {', '.join(map(repr, unknown))} "
                        f"(known: {', '.join(known) or 'none'})")
    return options


def check_options(name: str, options: dict | None, factor_sizes: Sequence[int] | None = None,
                  resolution: int = 16) -> dict:
    """The rendering ``options`` of generator ``name``, checked before any work: the keys (keyword-only parameters
    of its ``render``) and the values (one image rendered with them; ``render`` raises the UserError of a value
    outside its range). Returns the options as a dict."""
    gen = _generator(name)
    options = _check_options(gen, name, options)
    if options:
        render_indices(name, np.zeros(1, dtype=np.int64), parse_factor_sizes(name, factor_sizes), resolution, options)
    return options


def _generate(gen, name, out, sizes, resolution, seed, progress, workers, space, config, options, scheduler) -> Store:
    import dask
    from tqdm import tqdm

    n = space.num_states
    with create_store(
        Path(out), num_images=n, image_shape=(resolution, resolution, gen.CHANNELS), factors=space.all_factors(),
        name=name, factor_names=gen.FACTOR_NAMES, factor_sizes=sizes, factor_values=gen.factor_values(sizes),
        origin={"kind": "synthetic", "config": config, "seed": int(seed)},
    ) as writer:
        block = writer.shard_size
        starts = list(range(0, n, block))
        window = max(1, 2 * workers)  # blocks in flight: bounds memory while keeping every worker busy
        with tqdm(total=n, desc=f"generate {name}", unit="img", disable=not progress) as bar:
            for w0 in range(0, len(starts), window):
                tasks = [dask.delayed(render_indices)(name, np.arange(s, min(s + block, n)), sizes, resolution, options)
                         for s in starts[w0:w0 + window]]
                blocks = dask.compute(*tasks, scheduler=scheduler, num_workers=workers)
                for s, images in zip(starts[w0:w0 + window], blocks):
                    writer.write(s, images)
                    bar.update(len(images))
    return open_store(out)


__all__ = ["GENERATORS", "check_options", "generate", "parse_factor_sizes", "render_indices"]
