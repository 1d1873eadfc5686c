"""β-VAE training throughput (img/s) at batch 64 on 64×64 images: probe's trainer vs a plain PyTorch loop.

Three measurements in the same process, on the same model class (probe's BetaVAE, disentanglement_lib's
conv architecture) and device:

* probe      ``probe.train.train_run``: whole store resident as uint8, batches by index on the device,
             precision "auto" (bf16 autocast on CUDA, fp32 on CPU).
* reference  the data path of the public reference code bases: a ``torch.utils.data.DataLoader`` over an
             h5py file, one ``__getitem__`` (one h5py read, one float conversion) per image, default
             collation, host-to-device copy per batch; fp32.
* compute    the compute-only limit: training steps on one resident batch (no data path at all), fp32
             and, on CUDA, bf16.

Usage: ``python benchmarks/train_throughput.py [--steps 100] [--device auto] [--batch 64] [--compile] [--workers N]``.
Prints one line per measurement and the ratio probe / reference (target ≥ 2×) and probe / compute.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def make_store(tmp: Path, num_images: int):
    """A 64×64×1 dSprites-like store (the data engineer's generator if present, random blobs otherwise)."""
    try:
        from probe.data.synth import generate

        # sub-grid of dSprites' factors: shape 3, scale 6, orientation, posX, posY
        side = max(2, int(round((num_images / 18) ** (1 / 3))))
        return generate("dsprites", tmp / "bench.zarr", resolution=64, factor_sizes=[3, 6, side, side, side], progress=False)
    except ImportError:
        from probe.data import StateSpace, write_store

        sizes = [num_images]
        rng = np.random.default_rng(0)
        images = (rng.random((num_images, 64, 64, 1)) < 0.1).astype(np.uint8) * 255
        return write_store(tmp / "bench.zarr", images, StateSpace(sizes).all_factors(), name="bench", factor_names=["i"],
                           factor_sizes=sizes, factor_values=[list(range(num_images))], origin={"kind": "synthetic"})


def write_h5(store, path: Path) -> Path:
    import h5py

    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=store.load_numpy())  # contiguous, as 3dshapes.h5 / dsprites exports
    return path


class H5Images(torch.utils.data.Dataset):
    """Per-item reads from an h5py file, opened lazily per worker (the reference code bases' pattern)."""

    def __init__(self, path: Path):
        import h5py

        self.path = str(path)
        with h5py.File(self.path, "r") as f:
            self.length = f["images"].shape[0]
        self.file = None

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        import h5py

        if self.file is None:
            self.file = h5py.File(self.path, "r")
        img = self.file["images"][i]                                 # one read per image
        return torch.from_numpy(img.astype(np.float32) / 255.0).permute(2, 0, 1)


def build_model(store, device):
    from probe.models.base import resolve_config
    from probe.models.beta_vae import BetaVAE

    h, w, c = store.image_shape
    torch.manual_seed(0)
    model = BetaVAE(resolve_config(BetaVAE, "dsprites", {"num_latent": 10}), image_shape=(c, h, w),
                    num_factors=store.num_factors).to(device)
    return model, model.configure_optimizers()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def bench_reference(store, h5_path, device, steps, warmup, batch, workers):
    from probe.models.base import Batch

    model, opts = build_model(store, device)
    loader = torch.utils.data.DataLoader(H5Images(h5_path), batch_size=batch, shuffle=True, drop_last=True,
                                         num_workers=workers, pin_memory=device.type == "cuda",
                                         persistent_workers=workers > 0)
    done, t0 = 0, None
    while done < warmup + steps:
        for x in loader:
            if done == warmup:
                sync(device)
                t0 = time.perf_counter()
            x = x.to(device, non_blocking=True)
            model.training_step(Batch(x=x), done, opts)
            done += 1
            if done == warmup + steps:
                break
    sync(device)
    return steps * batch / (time.perf_counter() - t0)


def bench_probe(store, out: Path, device, steps, warmup, batch, compile_loss=False):
    from probe.train import train_run

    # with compile the warm-up interval absorbs the compilation; only the timed steps count
    run = train_run({"model": "beta-vae", "model_config": {"num_latent": 10}, "seed": 0,
                     "train": {"steps": warmup + steps, "batch_size": batch, "log_every": warmup,
                               "checkpoint_every": warmup + steps, "compile": bool(compile_loss)}},
                    store, out, device=str(device), progress=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    first, last = rows[0], rows[-1]  # first row closes the warm-up interval
    return (last["step"] - first["step"]) * batch / (last["wall_time_s"] - first["wall_time_s"]), \
        json.loads((run / "config.json").read_text())["runtime"]["precision"]


def bench_compute(store, device, steps, warmup, batch, precision):
    from probe.models.base import Batch

    model, opts = build_model(store, device)
    idx = np.random.default_rng(0).integers(0, store.num_images, batch)
    x = torch.from_numpy(store.read(idx)).to(device).permute(0, 3, 1, 2).float() / 255
    ctx = torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else torch.autocast(device.type, enabled=False)
    for i in range(warmup + steps):
        if i == warmup:
            sync(device)
            t0 = time.perf_counter()
        with ctx:
            model.training_step(Batch(x=x), i, opts)
    sync(device)
    return steps * batch / (time.perf_counter() - t0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100, help="timed steps per measurement")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--images", type=int, default=9000, help="approximate store size")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--compile", action="store_true", help="torch.compile probe's loss (train.compile; GPU)")
    ap.add_argument("--workers", type=int, default=None,
                    help="DataLoader workers for the reference (default: 0 with ≤ 2 CPUs, else 4)")
    args = ap.parse_args(argv)
    from probe.train import select_device

    device = select_device(args.device)
    workers = args.workers if args.workers is not None else (0 if (os.cpu_count() or 1) <= 2 else 4)
    print(f"device={device} torch={torch.__version__} threads={torch.get_num_threads()} cpus={os.cpu_count()} "
          f"batch={args.batch} steps={args.steps} (+{args.warmup} warm-up) reference workers={workers}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        store = make_store(tmp, args.images)
        h5_path = write_h5(store, tmp / "bench.h5")
        print(f"data: {store.num_images} images {list(store.image_shape)} ({time.perf_counter() - t:.1f} s to build)", flush=True)
        probe_ips, precision = bench_probe(store, tmp / "run", device, args.steps, args.warmup, args.batch, args.compile)
        print(f"probe trainer        {probe_ips:9.1f} img/s  (precision {precision}, compile {args.compile})", flush=True)
        ref_ips = bench_reference(store, h5_path, device, args.steps, args.warmup, args.batch, workers)
        print(f"reference DataLoader {ref_ips:9.1f} img/s  (h5py per-item reads, fp32)", flush=True)
        compute = {"fp32": bench_compute(store, device, args.steps, args.warmup, args.batch, "fp32")}
        if device.type == "cuda":
            compute["bf16"] = bench_compute(store, device, args.steps, args.warmup, args.batch, "bf16")
        for prec, ips in compute.items():
            print(f"compute-only limit   {ips:9.1f} img/s  ({prec}, one resident batch)", flush=True)
    limit = compute.get(precision, compute["fp32"])
    print(f"ratio probe/reference = {probe_ips / ref_ips:.2f}x (target >= 2x); "
          f"probe/compute-only = {probe_ips / limit:.2f} of the {precision} limit; "
          f"reference/compute-only(fp32) = {ref_ips / compute['fp32']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
