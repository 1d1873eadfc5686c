"""Quick check: do QLAE and Tripod disentangle (MIG) better than a plain AE on a generated
Shapes3D-like store? Trains each model once through ``probe.train.train_run`` and prints MIG
(``probe.metrics.mig``, 20-bin histogram) on every image of the store.

    nice python benchmarks/quantized_mig.py --workdir /tmp/qmig [--steps 2000] [--seed 0]

Store: generated Shapes3D-like, factor sizes 4^6 = 4096 images at --resolution (default 32).
Models (all with 12 latents = 2 × 6 factors, --batch-size, --steps):
  ae               probe/models/ae.py on the locatello architecture (Bernoulli loss, Adam 1e-4)
  qlae-locatello   QLAE objective (shapes3d preset), locatello architecture
  tripod-locatello Tripod objective (shapes3d preset), locatello architecture
  qlae             QLAE objective on its own architecture, widths reduced for the CPU
  tripod           Tripod objective on its own architecture, widths reduced for the CPU
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

SMALL_OWN = {
    "qlae": {"enc_widths": [16, 32, 64], "dec_widths": [64, 32, 16], "dense_width": 128},
    "tripod": {"enc_widths": [16, 32, 64, 128], "enc_hidden": 128, "dec_widths": [128, 64, 32], "cond_dim": 128},
}


def main() -> None:
    from probe.data import open_store
    from probe.data.synth import generate
    from probe.metrics import mig
    from probe.train import load_run, train_run

    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default="/tmp/qmig")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="ae,qlae-locatello,tripod-locatello,qlae,tripod")
    parser.add_argument("--resolution", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(2)
    work = Path(args.workdir)
    store_path = work / f"shapes3d-{args.resolution}.zarr"
    store = open_store(store_path) if store_path.exists() else generate(
        "shapes3d", store_path, resolution=args.resolution, factor_sizes=[4, 4, 4, 4, 4, 4], progress=False)

    runs = {
        "ae": {"model": "ae", "model_config": {"num_latent": 12}},
        "qlae-locatello": {"model": "qlae", "model_config": {"arch": "locatello"}},
        "tripod-locatello": {"model": "tripod", "model_config": {"arch": "locatello"}},
        "qlae": {"model": "qlae", "model_config": SMALL_OWN["qlae"]},
        "tripod": {"model": "tripod", "model_config": SMALL_OWN["tripod"]},
    }
    images = torch.from_numpy(store.load_numpy()).permute(0, 3, 1, 2).float() / 255
    factors = np.asarray(store.factors)
    results = {}
    for name in args.only.split(","):
        cfg = {**runs[name], "seed": args.seed,
               "train": {"steps": args.steps, "batch_size": args.batch_size, "log_every": 100, "checkpoint_every": args.steps}}
        t0 = time.perf_counter()
        run = train_run(cfg, store, work / f"{name}-r{args.resolution}-s{args.seed}-{args.steps}", progress=False)
        model, _ = load_run(run)
        with torch.no_grad():
            codes = torch.cat([model.encode(images[i:i + 512]) for i in range(0, len(images), 512)]).numpy()
            recon = torch.cat([model.reconstruct(images[i:i + 512]) for i in range(0, len(images), 512)])
        mse = float((recon - images).pow(2).mean())
        results[name] = {"mig": mig(codes, factors)["mig"], "mse": mse, "train_s": time.perf_counter() - t0,
                         "distinct_codes_per_dim": [int(len(np.unique(codes[:, j]))) for j in range(codes.shape[1])]}
        print(name, json.dumps(results[name]), flush=True)
    (work / f"results-r{args.resolution}-s{args.seed}-{args.steps}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
