"""Which factors each retrained run captures, per latent: the per-factor MI gap behind MIG.

MIG averages over factors the gap (largest − second-largest normalised MI between one factor and any latent). Two runs
with equal MIG can capture different factors, or the same factors in other latents; this script tells them apart. For
every run of a pipeline workdir (report_inputs.json) and every restart, on the store the run was trained on, it
prints the per-factor normalised gap, the latent that carries the factor, and the number of active latents, using
MIG's own sample (``draw_train_test`` with the evaluation seed, 20-bin histograms).

usage: python benchmarks/factor_capture.py WORKDIR [--model beta-vae] [--num-train 2000] [--seed 0] [--json OUT]
       [--order FACTOR_NAME]
       python benchmarks/factor_capture.py --run RUN_DIR [--run RUN_DIR ...] --store STORE [--num-train ...]
  (``--run``: run folders on one store, finished or not: an unfinished one is measured at its latest checkpoint,
  e.g. a learning curve's run between legs or a pipeline's retrained run before its evaluate stage)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from probe.data import open_store
from probe.metrics.information import discrete_entropy, discrete_mutual_info, histogram_discretize
from probe.metrics.sampler import draw_train_test
from probe.report.schema import load_inputs, resolve_path


def encode_draws(run_dir, store, num_train: int, num_test: int, seed: int, allow_incomplete: bool = False
                 ) -> tuple[np.ndarray, dict, np.ndarray, dict]:
    """(train factors, the encoder's output on them, test factors, its output on them) of one run on the metrics'
    train and test draws (``draw_train_test``, evaluation seed; the train draw does not depend on ``num_test``)."""
    from probe.train import load_run, model_encoder

    train, test = draw_train_test(np.asarray(store.factor_sizes), num_train, num_test, seed, 16)
    model, config = load_run(run_dir, allow_incomplete=allow_incomplete)
    encoder = model_encoder(model, "cpu", 2048, config)
    return (train, encoder.encode(store.read(store.index_of(train))),
            test, encoder.encode(store.read(store.index_of(test))) if len(test) else {})


def encode_sample(run_dir, store, num_train: int, seed: int, allow_incomplete: bool = False) -> tuple[np.ndarray, dict]:
    """(factors [N, K], the encoder's output) of one run on MIG's sample (``draw_train_test``, evaluation seed)."""
    factors, out, _, _ = encode_draws(run_dir, store, num_train, 0, seed, allow_incomplete)
    return factors, out


def latent_factor_mi(run_dir, store, num_train: int, seed: int, allow_incomplete: bool = False
                     ) -> tuple[np.ndarray, dict, np.ndarray]:
    """(factors, the encoder's output, normalised MI [latents, factors]) of one run on MIG's sample and binning."""
    factors, out = encode_sample(run_dir, store, num_train, seed, allow_incomplete)
    mi = discrete_mutual_info(histogram_discretize(out["codes"], 20), factors) / discrete_entropy(factors)[None, :]
    return factors, out, mi


def factor_capture(run_dir, store, num_train: int, seed: int, allow_incomplete: bool = False) -> dict:
    """Per-factor normalised MI gap, best normalised MI and carrying latent of one run (MIG's sample and binning:
    ``probe.metrics.mig.factor_capture``), with its active latents and each factor's class order."""
    from probe.metrics.mig import factor_capture as capture

    factors, out = encode_sample(run_dir, store, num_train, seed, allow_incomplete)
    codes = out["codes"]
    held = capture(codes, factors)
    # the order of the factor's classes along the latent that carries it (class means of that latent): a circular
    # factor such as hue is laid on a line cut somewhere, and two runs cutting in different places correlate weakly
    # (Pearson) although each captures the factor (docs/notes/presets.md)
    order_of = [None if z is None else
                np.argsort([codes[factors[:, k] == v, z].mean() if np.any(factors[:, k] == v) else np.inf
                            for v in range(int(factors[:, k].max()) + 1)]).tolist()
                for k, z in enumerate(held["latent"])]
    variance = out.get("variance")
    active = int((variance.mean(axis=0) < 0.8).sum()) if variance is not None else None
    rounded = lambda values: [None if v is None else round(v, 3) for v in values]  # noqa: E731
    return {"gap": rounded(held["gap"]), "best_nmi": rounded(held["best_nmi"]), "latent": held["latent"],
            "mig": held["mig"], "active": active, "class_order": order_of}


def factor_row(run_dir, store, num_train: int, seed: int = 0) -> dict:
    """``factor_capture`` as the curve scripts record it in a row's ``factors`` (learning_curves.py, long_training.py:
    one shape for both), with the sample it was measured on."""
    return {**factor_capture(run_dir, store, num_train, seed),
            "sample": f"factor_capture.py --num-train {num_train} --seed {seed}, at this leg's checkpoint"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", nargs="?", help="a pipeline workdir with report_inputs.json")
    parser.add_argument("--run", action="append", default=[], help="a run folder (instead of WORKDIR; repeatable)")
    parser.add_argument("--store", default=None, help="the store the --run folders trained on")
    parser.add_argument("--model", default="beta-vae")
    parser.add_argument("--num-train", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the rows as JSON lines here")
    parser.add_argument("--order", default=None, help="also print, for this factor name, the order of its classes "
                                                      "along the latent that carries it")
    args = parser.parse_args()
    if args.run:
        if not args.store or args.workdir:
            parser.error("--run needs --store and no WORKDIR")
        store = open_store(args.store)
        for run_dir in args.run:
            row = {"run": run_dir, **factor_capture(run_dir, store, args.num_train, args.seed, allow_incomplete=True)}
            print(json.dumps({k: row[k] for k in ("run", "mig", "active", "gap", "best_nmi", "latent")}), flush=True)
        return
    if not args.workdir:
        parser.error("give a WORKDIR or --run ... --store")
    inputs = load_inputs(args.workdir)
    stores = {v: open_store(resolve_path(inputs, s["path"])) for v, s in inputs["stores"].items()}
    names = stores["orig"].factor_names
    rows = []
    for r in inputs["restarts"]:
        rows.append({"model": "restart", "variant": "orig", "seed": r["seed"], "selected": r.get("selected"),
                     **factor_capture(resolve_path(inputs, r["run_dir"]), stores["orig"], args.num_train, args.seed)})
    for r in inputs["runs"]:
        if r["model"] != args.model:
            continue
        rows.append({"model": r["model"], "variant": r["variant"], "seed": r["seed"],
                     **factor_capture(resolve_path(inputs, r["run_dir"]), stores[r["variant"]], args.num_train,
                                      args.seed)})
    print(f"| run | variant | seed | MIG | active | " + " | ".join(f"{n} gap (latent)" for n in names) + " |")
    print("|---" * (5 + len(names)) + "|")
    for row in rows:
        tag = row["model"] + (f" ({row['selected']})" if row.get("selected") else "")
        cells = " | ".join(f"{g:.2f} ({z})" for g, z in zip(row["gap"], row["latent"]))
        order = (f" {row['class_order'][names.index(args.order)]} |" if args.order else "")
        print(f"| {tag} | {row['variant']} | {row['seed']} | {row['mig']:.3f} | {row['active']} | {cells} |{order}")
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
