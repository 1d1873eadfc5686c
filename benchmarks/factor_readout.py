"""Is a factor MIG misses absent from the code, or present but spread over latents? A non-linear read-out per factor.

MIG (and ``factor_capture.py``'s per-factor best normalised MI) asks whether one latent carries a factor. A run can
fail that in two ways with different causes: the encoder keeps no information about the factor (the reconstruction
does not pay for it: pixel worth, KL weight), or it keeps it spread over several latents (an alignment failure, which
more steps or another KL weight might turn). This script tells them apart. For each run it encodes a train and a test
sample drawn as the metrics draw them (``draw_train_test``, evaluation seed), fits Tripod's DCI random forest per
factor on the mean codes (``probe.metrics.dci.dci_importance``, predictor ``rf``) and prints, per factor, the test
accuracy against chance (the share of the most frequent class in the test sample), the largest share of the forest's
importance held by one latent, and which latent that is.

usage: python benchmarks/factor_readout.py --store STORE --run RUN_DIR [--run RUN_DIR ...]
       [--num-train 5000] [--num-test 2000] [--seed 0] [--json OUT]
  (an unfinished run is read at its latest checkpoint, e.g. a learning curve's run between legs)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from probe.data import open_store
from probe.metrics.dci import dci_importance
from probe.metrics.sampler import draw_train_test


def readout(train_codes, train_factors, test_codes, test_factors, seed: int = 0, n_estimators: int | None = None
            ) -> dict:
    """Per-factor read-out accuracy on the test sample, chance (its most frequent class's share), and the largest
    share of the forest's importance held by one latent, with that latent's index."""
    importance, _, test_acc = dci_importance(train_codes, train_factors, test_codes, test_factors, predictor="rf",
                                             seed=seed, n_estimators=n_estimators, n_jobs=1)
    share = importance / np.maximum(importance.sum(axis=0, keepdims=True), 1e-12)
    test_factors = np.asarray(test_factors)
    chance = [float(np.bincount(test_factors[:, k]).max() / len(test_factors)) for k in range(test_factors.shape[1])]
    return {"accuracy": [round(float(a), 3) for a in test_acc], "chance": [round(c, 3) for c in chance],
            "top_share": [round(float(s), 3) for s in share.max(axis=0)],
            "top_latent": [int(i) for i in share.argmax(axis=0)]}


def factor_readout(run_dir, store, num_train: int, num_test: int, seed: int) -> dict:
    """``readout`` of one run's mean codes on the metrics' train and test draws (evaluation seed)."""
    from probe.train import load_run, model_encoder

    train, test = draw_train_test(np.asarray(store.factor_sizes), num_train, num_test, seed, 16)
    model, config = load_run(run_dir, allow_incomplete=True)
    encoder = model_encoder(model, "cpu", 2048, config)
    codes = [encoder.encode(store.read(store.index_of(f)))["codes"] for f in (train, test)]
    return readout(codes[0], train, codes[1], test, seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="the store the runs trained on")
    parser.add_argument("--run", action="append", required=True, help="a run folder (repeatable)")
    parser.add_argument("--num-train", type=int, default=5000)
    parser.add_argument("--num-test", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the rows as JSON lines here")
    args = parser.parse_args()
    store = open_store(args.store)
    names = store.factor_names
    print("| run | " + " | ".join(f"{n}: acc (chance) top share @latent" for n in names) + " |")
    print("|---" * (1 + len(names)) + "|")
    rows = []
    for run_dir in args.run:
        row = {"run": run_dir, **factor_readout(run_dir, store, args.num_train, args.num_test, args.seed)}
        rows.append(row)
        cells = " | ".join(f"{a:.2f} ({c:.2f}) {s:.2f} @{z}" for a, c, s, z in
                           zip(row["accuracy"], row["chance"], row["top_share"], row["top_latent"]))
        print(f"| {Path(run_dir).name} | {cells} |", flush=True)
    if args.json:
        Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
