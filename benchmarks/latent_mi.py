"""The whole latent × factor MI matrix of trained runs, on MIG's own sample and binning.

benchmarks/factor_capture.py gives each factor's gap and carrying latent for a pipeline workdir; this prints, for any
run folders, the normalised MI of every latent with every factor, the per-factor gaps, MIG and each latent's mean
posterior variance — enough to see a factor split over two latents (two large entries in one column) or one latent
mixing two factors (two large entries in one row).

usage: python benchmarks/latent_mi.py STORE RUN_DIR [RUN_DIR ...] [--num-train 2000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np

from probe.data import open_store
from probe.metrics.information import discrete_entropy, discrete_mutual_info, histogram_discretize
from probe.metrics.sampler import draw_train_test


def latent_factor_mi(run_dir, store, num_train: int = 2000, seed: int = 0) -> dict:
    from probe.train import run_encoder

    factors, _ = draw_train_test(np.asarray(store.factor_sizes), num_train, 1, seed, 16)
    out = run_encoder(run_dir).encode(store.read(store.index_of(factors)))
    mi = discrete_mutual_info(histogram_discretize(out["codes"], 20), factors) / discrete_entropy(factors)[None, :]
    top = np.sort(mi, axis=0)[::-1]
    gaps = top[0] - top[1]
    return {"mi": mi, "gaps": gaps, "mig": float(gaps.mean()), "variance": out["variance"].mean(0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--num-train", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    store = open_store(args.store)
    np.set_printoptions(precision=2, suppress=True)
    for run in args.runs:
        r = latent_factor_mi(run, store, args.num_train, args.seed)
        print(f"{run}\nrows: latents; columns: {', '.join(store.factor_names)}\n{r['mi']}")
        print(f"gaps {r['gaps']}  MIG {r['mig']:.3f}\nmean posterior variance {r['variance']}\n")


if __name__ == "__main__":
    main()
