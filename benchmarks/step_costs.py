"""Seconds per training step of each model on one store and one thread: the numbers presets are sized from.

Each model trains ``--warmup`` steps, then is extended by ``--steps`` more (the trainer resumes a finished run
bit-identically); the second leg's wall time over its steps is the cost per step, so model construction, store
loading and the first iterations are not counted. Prints one line per model and a projection of the retrain
stage for a preset: ``--seeds`` × ``--variants`` runs of ``--run-steps`` steps per model on ``--workers`` cores,
next to the single-model β-VAE reference measured in the same run.

Usage::

    python benchmarks/step_costs.py --store S.zarr --models ae,beta-vae,pcl --run-steps 4000 --seeds 5
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--models", default="ae,beta-vae,beta-tcvae,factor-vae,slow-vae,pcl,qlae,tripod")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--run-steps", type=int, default=4000, help="steps per run of the preset being sized")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--variants", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="MODEL.KEY=VALUE model setting (JSON value)")
    args = ap.parse_args(argv)

    import torch

    from probe.train import train_run

    torch.set_num_threads(args.threads)
    overrides: dict = {}
    for item in args.set:
        key, _, value = item.partition("=")
        model, _, name = key.partition(".")
        try:
            overrides.setdefault(model, {})[name] = json.loads(value)
        except json.JSONDecodeError:
            overrides.setdefault(model, {})[name] = value
    costs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in [m.strip() for m in args.models.split(",") if m.strip()]:
            run = Path(tmp) / model
            cfg = {"model": model, "seed": 0, "model_config": overrides.get(model, {})}
            train_run({**cfg, "train": {"steps": args.warmup, "checkpoint_every": args.warmup, "log_every": args.warmup}},
                      args.store, run, progress=False)
            t0 = time.perf_counter()
            total = args.warmup + args.steps
            train_run({**cfg, "train": {"steps": total, "checkpoint_every": total, "log_every": total}},
                      args.store, run, progress=False)
            costs[model] = (time.perf_counter() - t0) / args.steps
            print(json.dumps({"model": model, "s_per_step": round(costs[model], 4), "model_config": cfg["model_config"]}),
                  flush=True)
    runs = args.seeds * args.variants
    total = sum(c * args.run_steps * runs for c in costs.values())
    reference = costs.get("beta-vae")
    print(f"retrain projection: {len(costs)} models × {runs} runs × {args.run_steps} steps = {total:.0f} core-s "
          f"= {total / args.workers / 3600:.2f} h on {args.workers} workers")
    if reference:
        print("cost per step relative to beta-vae (measured in this run): "
              + ", ".join(f"{m} {c / reference:.2f}×" for m, c in costs.items()))


if __name__ == "__main__":
    main()
