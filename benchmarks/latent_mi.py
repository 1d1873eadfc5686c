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

from factor_capture import latent_factor_mi  # noqa: E402  (this folder is sys.path[0] when run as a script)
from probe.data import open_store


def latent_mi_summary(run_dir, store, num_train: int = 2000, seed: int = 0) -> dict:
    _, out, mi = latent_factor_mi(run_dir, store, num_train, seed)
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
        r = latent_mi_summary(run, store, args.num_train, args.seed)
        print(f"{run}\nrows: latents; columns: {', '.join(store.factor_names)}\n{r['mi']}")
        print(f"gaps {r['gaps']}  MIG {r['mig']:.3f}\nmean posterior variance {r['variance']}\n")


if __name__ == "__main__":
    main()
