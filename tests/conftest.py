"""Shared fixtures: small generated stores (no downloads)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
# One intra-op thread for the whole suite: its models and tensors are tiny, so a second thread only adds fork/join and
# spin-waiting (the sampled linear-VAE fit in test_analysis took ~20x the CPU time on 2 threads), and every test
# after test_analysis's local-alignment test already ran on one (it set 1 and nothing set it back). Subprocesses
# that must match this process's numbers take the count from torch.get_num_threads() (test_pipeline_smoke).
torch.set_num_threads(1)


def pytest_collection_modifyitems(session, config, items):
    """Modules with a test marked ``slow`` run first, in their collected order; the rest follow unchanged.

    The suite runs on two pytest-xdist workers with whole files as work units (pyproject's addopts): the heavy
    integration files (the smoke pipeline, the control's L1, the audit) must start at once on their own worker, or one
    of them starting last makes the wall time its length plus everything before it. Stable, so module-scoped fixtures
    keep their tests together."""
    slow_modules = {item.module.__name__ for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.module.__name__ not in slow_modules)


def render_toy_images(factors: np.ndarray, factor_sizes, resolution: int = 16, channels: int = 1) -> np.ndarray:
    """Deterministic toy renderer: a filled square whose side follows factor 0 (+1) and whose top-left
    corner follows the last two factors; extra factors (if any) set the intensity of channel k % C.
    Enough structure for model/trainer tests; the real generators live in probe.data.synth."""
    n = factors.shape[0]
    images = np.zeros((n, resolution, resolution, channels), dtype=np.uint8)
    sizes = np.asarray(factor_sizes)
    side = 2 + (factors[:, 0] * (resolution // 4)) // max(sizes[0], 1)
    max_pos = resolution - side
    px = (factors[:, -2] * max_pos) // max(sizes[-2] - 1, 1)
    py = (factors[:, -1] * max_pos) // max(sizes[-1] - 1, 1)
    yy, xx = np.mgrid[:resolution, :resolution]
    mask = ((xx[None] >= px[:, None, None]) & (xx[None] < (px + side)[:, None, None])
            & (yy[None] >= py[:, None, None]) & (yy[None] < (py + side)[:, None, None]))
    for c in range(channels):
        level = np.full(n, 255)
        for k in range(1, len(sizes) - 2):
            if k % channels == c:
                level = 80 + (factors[:, k] * 175) // max(sizes[k] - 1, 1)
        images[..., c] = (mask * level[:, None, None]).astype(np.uint8)
    return images


def toy_encoder(images):
    """Codes read off the toy renderer: square size, intensity and position (a disentangled 'model')."""
    x = images.astype(np.float64)[..., 0]
    mask = x > 0
    area = mask.sum((1, 2))
    yy, xx = np.mgrid[: x.shape[1], : x.shape[2]]
    cx = (mask * xx).sum((1, 2)) / np.maximum(area, 1)
    cy = (mask * yy).sum((1, 2)) / np.maximum(area, 1)
    level = x.max((1, 2))
    codes = np.stack([np.sqrt(area), level, cx, cy], 1)
    return {"codes": codes, "variance": np.full_like(codes, 0.1)}


@pytest.fixture
def make_toy_store(tmp_path):
    """Factory: ``make_toy_store(factor_sizes=(2, 3, 4, 4), resolution=16, channels=1, name="toy")``."""
    from probe.data import StateSpace, write_store

    counter = {"n": 0}

    def make(factor_sizes=(2, 3, 4, 4), resolution=16, channels=1, name="toy"):
        counter["n"] += 1
        space = StateSpace(factor_sizes)
        factors = space.all_factors()
        images = render_toy_images(factors, factor_sizes, resolution, channels)
        path = tmp_path / f"{name}-{counter['n']}.zarr"
        return write_store(
            path, images, factors, name=name,
            factor_names=[f"f{k}" for k in range(len(factor_sizes))],
            factor_sizes=list(factor_sizes),
            factor_values=[np.linspace(0, 1, s).tolist() for s in factor_sizes],
            origin={"kind": "synthetic", "config": {"generator": "toy"}, "seed": 0},
        )

    return make


def run_probe(argv, capsys):
    """(exit code, stdout, stderr) of ``probe ARGV`` run in-process."""
    from probe.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def toy_dsprites_restarts(root, steps: int, count: int = 2):
    """A 16×16 toy store named "dsprites" (so ε defaults to 0.1) and ``count`` briefly trained β-VAEs on it."""
    from probe.data import StateSpace, write_store
    from probe.train import train_run

    torch.set_num_threads(1)
    sizes = (2, 3, 4, 4)
    factors = StateSpace(sizes).all_factors()
    store = write_store(root / "orig.zarr", render_toy_images(factors, sizes, 16, 1), factors, name="dsprites",
                        factor_names=["shape", "level", "x", "y"], factor_sizes=list(sizes),
                        factor_values=[np.linspace(0, 1, s).tolist() for s in sizes],
                        origin={"kind": "synthetic", "config": {"generator": "toy"}, "seed": 0})
    runs = [train_run({"model": "beta-vae", "seed": seed, "model_config": {"beta": 4.0, "lr": 1e-3},
                       "train": {"steps": steps, "batch_size": 16, "log_every": steps // 2, "checkpoint_every": steps}},
                      store.path, root / f"r{seed}", progress=False) for seed in range(count)]
    return store, runs


@pytest.fixture(scope="session")
def toy_restarts_20(tmp_path_factory):
    """``toy_dsprites_restarts(root, steps=20)``, trained once for the session: (store, [run r0, run r1]).
    Shared by tests/test_report.py and tests/test_report_purity.py, which only read it; a test that moves, edits or
    writes into the store or the run folders must work on a copy (``shutil.copytree``)."""
    return toy_dsprites_restarts(tmp_path_factory.mktemp("toy-restarts-20"), steps=20)


STORE_DAMAGES = ("flip", "delete", "truncate", "factor_sizes")


def damage_store(store_path, damage: str) -> None:
    """Corrupt a store the ways issue 17 found training went on silently: a flipped bit in a shard, a deleted or
    truncated shard, or ``factor_sizes`` edited in the store's attributes."""
    import json
    from pathlib import Path

    root = Path(store_path)
    shard = sorted(p for p in (root / "images").rglob("*") if p.is_file() and p.name != "zarr.json")[0]
    if damage == "flip":
        data = bytearray(shard.read_bytes())
        data[10] ^= 0x01
        shard.write_bytes(bytes(data))
    elif damage == "delete":
        shard.unlink()
    elif damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:100])
    elif damage == "factor_sizes":
        meta = json.loads((root / "zarr.json").read_text())
        sizes = meta["attributes"]["probe"]["factor_sizes"]
        sizes[0], sizes[1] = sizes[1], sizes[0]
        (root / "zarr.json").write_text(json.dumps(meta))
    else:
        raise ValueError(damage)
