"""Quick-preset check: a β-VAE trained by probe's trainer on a generated dSprites-like store disentangles.

Generates (or reuses) a 32×32 dSprites-like store (shape 3 × scale 6 × orientation 10 × posX 16 × posY 16
= 46,080 images, as in ../shared/reference/cpu-feasibility.md), trains ``beta-vae`` with the given
settings through ``probe.train.train_run``, then reports on 10,000 random images:

* reconstruction (Bernoulli, summed over pixels, mean over images) at step 0 (same seed, same init)
  and after training;
* MIG from a local 20-bin-histogram + ``sklearn.metrics.mutual_info_score`` helper (disentanglement_lib's
  recipe), and from ``probe.metrics.mig`` when it is installed.

Usage: ``python benchmarks/train_quick_check.py --steps 6000 --beta 8 --lr 5e-4 --seeds 0,1 [--store S] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def local_mig(codes: np.ndarray, factors: np.ndarray, num_bins: int = 20) -> float:
    """disentanglement_lib's MIG: histogram-discretise each code (20 equal-width bins), plug-in MI in nats."""
    from sklearn.metrics import mutual_info_score

    binned = np.stack([np.digitize(c, np.histogram(c, num_bins)[1][:-1]) for c in codes.T])
    keep = [k for k in range(factors.shape[1]) if len(np.unique(factors[:, k])) > 1]
    mi = np.array([[mutual_info_score(factors[:, k], b) for k in keep] for b in binned])
    entropy = np.array([mutual_info_score(factors[:, k], factors[:, k]) for k in keep])
    top = np.sort(mi, axis=0)[::-1]
    return float(np.mean((top[0] - top[1]) / entropy))


@torch.no_grad()
def evaluate(model, store, n: int, seed: int):
    from probe.models.base import bernoulli_reconstruction

    idx = np.sort(np.random.default_rng(seed).choice(store.num_images, n, replace=False))
    images = torch.from_numpy(store.read(idx)).permute(0, 3, 1, 2).float() / 255
    codes, recon = [], 0.0
    for s in range(0, n, 1000):
        x = images[s:s + 1000]
        mean = model.encode(x)
        codes.append(mean.numpy())
        logits = model.decode(mean) if hasattr(model, "decode") else torch.logit(model.reconstruct(x).clamp(1e-6, 1 - 1e-6))
        recon += bernoulli_reconstruction(logits, x).item() * x.shape[0]
    return np.concatenate(codes), store.factors[idx], recon / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=None, help="existing store (default: generate the 32×32 grid into --out)")
    ap.add_argument("--out", default=None, help="folder for the store and runs (default: a temporary folder)")
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--beta", type=float, default=8.0)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--eval-n", type=int, default=10_000)
    ap.add_argument("--num-latent", type=int, default=None, help="latent size (default: the number of factors)")
    args = ap.parse_args(argv)

    from probe.data import open_store
    from probe.train import load_run, resolve_run_config, train_run
    from probe.train.trainer import _build_model

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        if args.store:
            store = open_store(args.store)
        elif (out / "dsprites32.zarr").exists():
            store = open_store(out / "dsprites32.zarr")
        else:
            from probe.data.synth import generate

            t = time.perf_counter()
            store = generate("dsprites", out / "dsprites32.zarr", resolution=32, factor_sizes=[3, 6, 10, 16, 16], progress=False)
            print(f"generated {store} in {time.perf_counter() - t:.1f} s", flush=True)
        results = []
        for seed in [int(s) for s in args.seeds.split(",")]:
            config = {"model": "beta-vae", "seed": seed, "model_config": {"beta": args.beta, "lr": args.lr, "num_latent": args.num_latent},
                      "train": {"steps": args.steps, "batch_size": args.batch, "log_every": 500, "checkpoint_every": 2000}}
            torch.manual_seed(seed)  # the trainer's initialisation for this seed
            init_model = _build_model(resolve_run_config(config, store)).eval()
            _, _, recon0 = evaluate(init_model, store, args.eval_n, 0)
            t = time.perf_counter()
            run = train_run(config, store, out / f"beta{args.beta:g}-lr{args.lr:g}-d{args.num_latent or 0}-s{seed}-{args.steps}", progress=False)
            wall = time.perf_counter() - t
            model, _ = load_run(run)
            codes, factors, recon = evaluate(model, store, args.eval_n, 0)
            row = {"seed": seed, "steps": args.steps, "beta": args.beta, "lr": args.lr, "num_latent": model.num_latent, "wall_s": round(wall, 1),
                   "recon_step0": round(recon0, 2), "recon_final": round(recon, 2), "mig_local": round(local_mig(codes, factors), 4)}
            try:
                from probe.metrics import mig

                row["mig_probe"] = round(mig(codes, factors)["mig"], 4)
            except ImportError:
                pass
            rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            row["img_per_s_median"] = round(float(np.median([r["img_per_s"] for r in rows])), 1)
            print(json.dumps(row), flush=True)
            results.append(row)
    return results


if __name__ == "__main__":
    main()
