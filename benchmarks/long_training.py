"""Learning curves to long step counts on one GPU, seeds trained together: the training-length hypothesis of issue 24.

On the 2-core VM every β-VAE curve plateaus by 6,000-20,000 steps with only the hues encoded (docs/notes/presets.md);
the paper trains 300,000 steps at lr 1e-4. This trains all ``--seeds`` of one model as one batched job
(``probe.train.batched.train_runs``: vmapped on CUDA) and extends them leg by leg through ``--steps``, evaluating
every run after each leg (MIG, reconstruction, active latents with the quick sample sizes, and each factor's MI gap
and carrying latent as ``benchmarks/factor_capture.py``). It stops starting legs when the next one, at the rate
measured so far, would end after ``--deadline-at`` (a Unix time): the leg that would not fit is shortened to the
steps that do (in ``--min-leg`` units) and is the last, so a fixed device lease gives the longest curve that fits.
``--precision fp32`` (the default here) keeps the CPU curves' arithmetic; the trainer's CUDA default is
bf16. One JSON line per (seed, steps) in ``--rows`` (default ``--out/curves.jsonl``), flushed as written; run folders
carried in from an earlier lease resume from their checkpoints (``benchmarks/gpu_long_training.sh``).

usage: python benchmarks/long_training.py --store S.zarr --model beta-vae --seeds 0,1,2,3,4 \
           --steps 5000,10000,20000,40000 --out DIR [--set KEY=VALUE] [--device cuda] [--deadline-at UNIX_TIME]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

T0 = time.perf_counter()


def main(argv=None) -> None:
    from factor_capture import factor_row  # this folder is sys.path[0] when run as a script
    from learning_curves import flat_scalars, parse_sets

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--model", default="beta-vae")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--steps", default="2000,10000,25000,50000,80000,120000,170000,230000,300000")
    ap.add_argument("--set", action="append", default=[], help="model hyperparameter KEY=VALUE (JSON value)")
    ap.add_argument("--batch-size", type=int, default=None, help="default: the trainer's (64, the paper's)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default=None, help="cpu, cuda (default: cuda if present)")
    ap.add_argument("--engine", default="auto", help="auto, vmap or loop (probe.train.batched)")
    ap.add_argument("--deadline-at", type=float, default=None, help="start no leg that would end after this Unix time")
    ap.add_argument("--precision", default="fp32", help="fp32, bf16 or auto (the trainer's: bf16 on CUDA)")
    ap.add_argument("--tag", default="")
    ap.add_argument("--rows", default=None, help="the JSON-lines file (default: OUT/curves.jsonl)")
    ap.add_argument("--min-leg", type=int, default=1000,
                    help="the shortest leg worth training before the deadline (a shortened last leg is a multiple)")
    ap.add_argument("--checkpoint-every", type=int, default=None,
                    help="also checkpoint inside a leg (default: at its end only); a leg cut short resumes from here")
    args = ap.parse_args(argv)

    import torch

    from probe.data import open_store
    from probe.metrics import evaluate_run, small_settings
    from probe.train.batched import train_runs
    from probe.train.run_folder import RunFolder

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = open_store(args.store)
    model_config = parse_sets(args.set)
    seeds = [int(s) for s in args.seeds.split(",")]
    run_dirs = [out / f"{args.model}{'-' + args.tag if args.tag else ''}-s{seed}" for seed in seeds]
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    eval_settings = {**small_settings(), "device": device}
    # where the runs stand (a folder carried in from an earlier lease resumes from its checkpoint): the slowest member
    done_steps = min((RunFolder(d).load_checkpoint()["step"] if RunFolder(d).has_checkpoint else 0) for d in run_dirs)
    rate = None  # training steps per second of the whole batched job, measured
    schedule = [int(s) for s in args.steps.split(",")]
    if done_steps and args.deadline_at is not None:
        schedule.append(done_steps + 2000)  # a short first leg measures this device's rate before a long one starts
    for steps in sorted(set(schedule)):
        if steps <= done_steps:
            continue
        last_leg = False
        if args.deadline_at is not None and rate is not None:
            # the steps that fit before the deadline at the rate measured so far, in whole --min-leg units: a planned
            # leg that does not fit is shortened to them, so a lease's last minutes train rather than idle (session
            # 21's first call stopped before a 15k-step leg and idled 150 s of its 530)
            left_s = args.deadline_at - time.time() - last_eval_s
            fits = done_steps + int(left_s * rate) // args.min_leg * args.min_leg
            if fits < steps:
                if fits <= done_steps:
                    print(json.dumps({"stopped_before": steps, "elapsed_s": round(time.perf_counter() - T0, 1),
                                      "steps_per_s": round(rate, 1)}), flush=True)
                    break
                steps, last_leg = fits, True
        train = {"steps": steps, "checkpoint_every": min(steps, args.checkpoint_every or steps), "log_every": 1000,
                 "precision": args.precision}
        if args.batch_size:
            train["batch_size"] = args.batch_size
        configs = [{"model": args.model, "seed": seed, "model_config": model_config, "train": dict(train)}
                   for seed in seeds]
        t0 = time.perf_counter()
        outcomes = train_runs(configs, args.store, run_dirs, engine=args.engine, device=device, resume=True)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        train_s = time.perf_counter() - t0
        rate = (steps - done_steps) / train_s
        t0 = time.perf_counter()
        for seed, run_dir, outcome in zip(seeds, run_dirs, outcomes):
            row = {"model": args.model, "tag": args.tag, "model_config": model_config, "seed": seed, "steps": steps,
                   "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
                   "members": len(seeds), "engine": args.engine, "precision": args.precision,
                   "train_leg_s": round(train_s, 1),
                   "member_steps_per_s": round(rate, 1), "elapsed_s": round(time.perf_counter() - T0, 1)}
            if isinstance(outcome, BaseException):
                row["error"] = str(outcome)
            else:
                res = evaluate_run(run_dir, args.store, metrics="mig,reconstruction,active_units", seed=0,
                                   **eval_settings)
                row["metrics"] = flat_scalars(res["metrics"])
                row["factors"] = factor_row(run_dir, store, eval_settings["num_train"])
            print(json.dumps(row), flush=True)
            with open(args.rows or out / "curves.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
        last_eval_s = time.perf_counter() - t0
        done_steps = steps
        if last_leg:
            print(json.dumps({"stopped_at": steps, "elapsed_s": round(time.perf_counter() - T0, 1),
                              "steps_per_s": round(rate, 1)}), flush=True)
            break


if __name__ == "__main__":
    main()
