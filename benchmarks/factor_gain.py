"""What each factor is worth to a Bernoulli decoder: the reconstruction cost (nats per image) of forgetting it.

For a store's full grid and each factor k: the loss of predicting every image by the mean over k's classes (all other
factors kept) minus the loss of predicting it exactly (the targets' own entropy). A β-VAE keeps a latent for factor k
only if this gain exceeds what the latent costs, about β × its KL (a few nats for a factor of 4-10 classes), so the
numbers say which factors a given β can afford, and how far apart the factors are (the paper's argument needs distinct
local variances for the latents to align with the factors).

With ``--epsilon``: the same on the paper's noise baseline x' = fold(x + u), u ~ U[-ε, ε] (probe.perturb.apply). The
Bernoulli loss is linear in its target, so the expected loss on noisy targets is the loss on E[fold(x + u)], computed
per pixel value: for x < ε, E = (x² + ε²)/(2ε), symmetric near 1, x elsewhere. Noise thus lowers every gain by pulling
the saturated pixels towards the middle, without any training.

usage: python benchmarks/factor_gain.py STORE [--epsilon 0.175]
"""

from __future__ import annotations

import argparse

import numpy as np

from probe.data import open_store


def expected_fold(x: np.ndarray, epsilon: float) -> np.ndarray:
    """E[fold(x + u)], u ~ U[-ε, ε], per pixel value x in [0, 1] (ε ≤ 0.5)."""
    out = x.copy()
    low, high = x < epsilon, x > 1 - epsilon
    out[low] = (x[low] ** 2 + epsilon ** 2) / (2 * epsilon)
    out[high] = 1 - ((1 - x[high]) ** 2 + epsilon ** 2) / (2 * epsilon)
    return out


def bernoulli_loss(target: np.ndarray, prediction: np.ndarray, clip: float = 1e-4) -> np.ndarray:
    p = np.clip(prediction, clip, 1 - clip)
    return -(target * np.log(p) + (1 - target) * np.log(1 - p))


def factor_gains(targets: np.ndarray) -> tuple[float, list[float]]:
    """targets [*factor_sizes, pixels] in [0, 1] -> (the targets' entropy per image, gain of each factor)."""
    floor = float(bernoulli_loss(targets, targets).sum(-1).mean())
    gains = [float(bernoulli_loss(targets, targets.mean(axis=k, keepdims=True)).sum(-1).mean()) - floor
             for k in range(targets.ndim - 1)]
    return floor, gains


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--epsilon", type=float, default=None, help="also the paper's uniform-noise baseline at this ε")
    args = parser.parse_args()
    store = open_store(args.store)
    x = (store.load_numpy().astype(np.float32) / 255.0).reshape(*store.factor_sizes, -1)
    cases = [("clean", x)] + ([(f"noise ε={args.epsilon:g}", expected_fold(x, args.epsilon))] if args.epsilon else [])
    print(f"| targets | entropy (nats/image) | " + " | ".join(store.factor_names) + " |")
    print("|---" * (2 + len(store.factor_names)) + "|")
    for label, targets in cases:
        floor, gains = factor_gains(targets)
        print(f"| {label} | {floor:.0f} | " + " | ".join(f"{g:.1f}" for g in gains) + " |")


if __name__ == "__main__":
    main()
