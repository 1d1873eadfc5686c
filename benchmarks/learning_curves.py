"""Learning curves for sizing presets: a metric (MIG by default) against training steps, per model and seed.

Trains each run with probe's trainer and extends it step count by step count (a finished run extended to
more steps equals a run trained to that many steps from the start, bit-identically on CPU), evaluating
``probe.metrics.evaluate_run`` after each leg with the quick presets' sample sizes. Prints one JSON line per
(model, seed, steps) and appends it to ``--out/curves.jsonl``; the wall time of each leg is recorded, so the
same file sizes a preset's budget. ``--factors N`` also records, per leg, which factors the run encodes on N images
(``benchmarks/factor_capture.py``: per-factor gap, best normalised MI — the regime gate's measure — and carrying
latent), measured at that leg's checkpoint before the next leg overwrites it.

Stopped and run again with the same arguments, it goes on where it stopped: a leg whose row is already in
``--out/curves.jsonl`` (same run folder and steps) is skipped, and the leg in progress continues from the previous
leg's checkpoint (the trainer refuses to shorten a run, so it could not be trained again from its first leg).

Usage::

    python benchmarks/learning_curves.py --store S.zarr --model beta-vae --seeds 0,1,2 \
        --steps 500,1000,2000,3000 --set lr=5e-4 --out runs/curves [--threads 1] [--factors 5000]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def parse_sets(pairs):
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def flat_scalars(metrics: dict) -> dict:
    """{"mig": {"mig": 0.3, ...}, ...} -> {"mig": 0.3, ...}: every scalar, keyed by its innermost name."""
    out = {}
    for name, value in metrics.items():
        if isinstance(value, dict):
            out.update({k: float(v) for k, v in value.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        elif isinstance(value, (int, float)):
            out[name] = float(value)
    return out


def legs_written(rows_path: Path) -> set:
    """{(run folder, steps)} of the legs whose rows ``rows_path`` already holds (empty when there is none)."""
    if not rows_path.exists():
        return set()
    rows = (json.loads(line) for line in rows_path.read_text().splitlines() if line.strip())
    return {(row["run_dir"], int(row["steps"])) for row in rows}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--steps", default="500,1000,2000")
    ap.add_argument("--set", action="append", default=[], help="model hyperparameter KEY=VALUE (JSON value)")
    ap.add_argument("--metrics", default="mig,reconstruction,active_units")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tag", default="", help="label written with every row (e.g. the variant)")
    ap.add_argument("--factors", type=int, default=0, metavar="N",
                    help="also record per leg the factors encoded on N images (factor_capture.py; 0: off)")
    args = ap.parse_args(argv)

    import torch

    from probe.metrics import small_settings
    from probe.metrics import evaluate_run
    from probe.train import train_run
    from probe.data import open_store
    from factor_capture import factor_row  # this folder is sys.path[0] when run as a script

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_config = parse_sets(args.set)
    store = open_store(args.store) if args.factors else None  # opened once, read at every leg
    tag = "-".join(f"{k}{v}" for k, v in sorted(model_config.items()))
    done = legs_written(out / "curves.jsonl")
    for seed in [int(s) for s in args.seeds.split(",")]:
        run_dir = out / f"{args.model}{'-' + args.tag if args.tag else ''}{'-' + tag if tag else ''}-s{seed}"
        for steps in [int(s) for s in args.steps.split(",")]:
            if (str(run_dir), steps) in done:
                continue
            t0 = time.perf_counter()
            train_run({"model": args.model, "seed": seed, "model_config": model_config,
                       "train": {"steps": steps, "checkpoint_every": steps, "log_every": 100}},
                      args.store, run_dir, progress=False)
            train_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            res = evaluate_run(run_dir, args.store, metrics=args.metrics, seed=0, **small_settings(), n_jobs=1)
            row = {"model": args.model, "tag": args.tag, "model_config": model_config, "seed": seed, "steps": steps,
                   "train_leg_s": round(train_s, 1), "eval_s": round(time.perf_counter() - t0, 1),
                   "metrics": flat_scalars(res["metrics"]),
                   "run_dir": str(run_dir)}
            if args.factors:
                row["factors"] = factor_row(run_dir, store, args.factors)
            print(json.dumps(row), flush=True)
            with open(out / "curves.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
