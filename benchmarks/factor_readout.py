"""Is a factor MIG misses absent from the code, or present but spread over latents? A non-linear read-out per factor.

MIG (and ``factor_capture.py``'s per-factor best normalised MI) asks whether one latent carries a factor. A run can
fail that in two ways with different causes: the encoder keeps no information about the factor (the reconstruction
does not pay for it: pixel worth, KL weight), or it keeps it spread over several latents (an alignment failure, which
more steps or another KL weight might turn). This script tells them apart. For each run it encodes a train and a test
sample drawn as the metrics draw them (``draw_train_test``, evaluation seed), fits Tripod's DCI random forest per
factor on the mean codes (``probe.metrics.dci.dci_importance``, predictor ``rf``) and prints, per factor, the test
accuracy against chance (the share of the most frequent class in the test sample), the largest share of the forest's
importance held by one latent, and which latent that is.

``--explain`` asks the converse for each latent: which factors its mean code is a function of. A random-forest
regression of the latent on the factors (the same samples) gives the test R² from all factors, from each ``--subset``
of them, and the forest's importance per factor. A latent that is a function of several factors at once (an
interaction) reads a high R² from all of them and a low one from any subset that leaves one out.

usage: python benchmarks/factor_readout.py --store STORE --run RUN_DIR [--run RUN_DIR ...]
       [--num-train 5000] [--num-test 2000] [--seed 0] [--json OUT]
       [--explain [--subset scale,shape ...]]
  (an unfinished run is read at its latest checkpoint, e.g. a learning curve's run between legs)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from probe.data import open_store
from probe.metrics.dci import dci_importance


def readout(train_codes, train_factors, test_codes, test_factors, seed: int = 0, n_estimators: int | None = None
            ) -> dict:
    """Per-factor read-out accuracy on the test sample, chance (its most frequent class's share), and the largest
    share of the forest's importance held by one latent, with that latent's index (None for a factor constant in the
    train sample, which the DCI forest leaves out as every metric does)."""
    from probe.metrics._common import varying_factors

    importance, _, test_acc = dci_importance(train_codes, train_factors, test_codes, test_factors, predictor="rf",
                                             seed=seed, n_estimators=n_estimators, n_jobs=1)
    share = importance / np.maximum(importance.sum(axis=0, keepdims=True), 1e-12)
    test_factors = np.asarray(test_factors)
    num_factors = test_factors.shape[1]
    row = {"accuracy": [None] * num_factors, "top_share": [None] * num_factors, "top_latent": [None] * num_factors,
           "chance": [round(float(np.bincount(test_factors[:, k]).max() / len(test_factors)), 3)
                      for k in range(num_factors)]}
    for column, k in enumerate(varying_factors(np.asarray(train_factors))):
        row["accuracy"][k] = round(float(test_acc[column]), 3)
        row["top_share"][k] = round(float(share[:, column].max()), 3)
        row["top_latent"][k] = int(share[:, column].argmax())
    return row


def latent_explained(train_codes, train_factors, test_codes, test_factors, subsets=(), seed: int = 0,
                     n_estimators: int = 100) -> list[dict]:
    """Per latent: its spread, the test R² of a random-forest regression on all factors and on each subset (tuples
    of factor indices), and the all-factor forest's importance per factor."""
    from sklearn.ensemble import RandomForestRegressor

    def fit(columns, z):
        model = RandomForestRegressor(n_estimators, max_depth=12, random_state=seed, n_jobs=1)
        model.fit(train_factors[:, columns], train_codes[:, z])
        residual = test_codes[:, z] - model.predict(test_factors[:, columns])
        return model, float(1.0 - np.mean(residual ** 2) / max(float(np.var(test_codes[:, z])), 1e-12))

    train_factors, test_factors = np.asarray(train_factors), np.asarray(test_factors)
    everything = list(range(train_factors.shape[1]))
    rows = []
    for z in range(train_codes.shape[1]):
        model, r2 = fit(everything, z)
        rows.append({"latent": z, "sd": round(float(np.std(test_codes[:, z])), 3), "r2_all": round(r2, 3),
                     "r2_subsets": [round(fit(list(sub), z)[1], 3) for sub in subsets],
                     "importance": [round(float(v), 3) for v in model.feature_importances_]})
    return rows


def encoded_samples(run_dir, store, num_train: int, num_test: int, seed: int):
    """(train factors, train mean codes, test factors, test mean codes) of one run on the metrics' draws; an
    unfinished run is read at its latest checkpoint."""
    from factor_capture import encode_draws  # this folder is sys.path[0] when run as a script

    train, train_out, test, test_out = encode_draws(run_dir, store, num_train, num_test, seed, allow_incomplete=True)
    return train, train_out["codes"], test, test_out["codes"]


def factor_readout(run_dir, store, num_train: int, num_test: int, seed: int) -> dict:
    """``readout`` of one run's mean codes on the metrics' train and test draws (evaluation seed)."""
    train, train_codes, test, test_codes = encoded_samples(run_dir, store, num_train, num_test, seed)
    return readout(train_codes, train, test_codes, test, seed)


def run_label(run_dir) -> str:
    """A run folder's name, or its job's for a pipeline run (``.../jobs/seed3/run`` reads ``seed3/run``)."""
    path = Path(run_dir)
    return path.name if path.name != "run" else f"{path.parent.name}/{path.name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="the store the runs trained on")
    parser.add_argument("--run", action="append", required=True, help="a run folder (repeatable)")
    parser.add_argument("--num-train", type=int, default=5000)
    parser.add_argument("--num-test", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the rows as JSON lines here")
    parser.add_argument("--explain", action="store_true", help="per latent: which factors its code is a function of")
    parser.add_argument("--subset", action="append", default=[],
                        help="with --explain: factor names, comma-separated, to regress each latent on (repeatable)")
    args = parser.parse_args()
    store = open_store(args.store)
    names = store.factor_names
    if args.subset and not args.explain:
        parser.error("--subset goes with --explain")
    unknown = sorted({n for sub in args.subset for n in sub.split(",")} - set(names))
    if unknown:
        parser.error(f"--subset: no factor {', '.join(unknown)} (the store's: {', '.join(names)})")
    rows = explain_rows(args, store) if args.explain else readout_rows(args, store)
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in rows))


def explain_rows(args, store) -> list[dict]:
    """``--explain``: per run and latent, print and return ``latent_explained``'s row."""
    names = store.factor_names
    subsets = [tuple(names.index(n) for n in sub.split(",")) for sub in args.subset]
    rows = []
    for run_dir in args.run:
        train, train_codes, test, test_codes = encoded_samples(run_dir, store, args.num_train, args.num_test,
                                                               args.seed)
        for row in latent_explained(train_codes, train, test_codes, test, subsets, args.seed):
            rows.append({"run": run_dir, **row, "subsets": args.subset})
            fits = "  ".join(f"R² from {sub} {r2:.2f}" for sub, r2 in zip(args.subset, row["r2_subsets"]))
            shares = " ".join(f"{n} {v:.2f}" for n, v in zip(names, row["importance"]))
            print(f"{run_label(run_dir)} latent {row['latent']}: sd {row['sd']:.2f}  R² from all "
                  f"{row['r2_all']:.2f}  {fits}  importance: {shares}", flush=True)
    return rows


def readout_rows(args, store) -> list[dict]:
    """Per run, print (a markdown table row) and return ``factor_readout``'s row."""
    names = store.factor_names
    print("| run | " + " | ".join(f"{n}: acc (chance) top share @latent" for n in names) + " |")
    print("|---" * (1 + len(names)) + "|")
    rows = []
    for run_dir in args.run:
        row = {"run": run_dir, **factor_readout(run_dir, store, args.num_train, args.num_test, args.seed)}
        rows.append(row)
        cells = " | ".join("constant" if a is None else f"{a:.2f} ({c:.2f}) {s:.2f} @{z}" for a, c, s, z in
                           zip(row["accuracy"], row["chance"], row["top_share"], row["top_latent"]))
        print(f"| {run_label(run_dir)} | {cells} |", flush=True)
    return rows


if __name__ == "__main__":
    import sys

    from probe.errors import UserError

    try:
        main()
    except UserError as error:  # a wrong path or store: one line and exit 2, as the CLI does
        print(f"factor_readout.py: {error}", file=sys.stderr)
        sys.exit(2)
