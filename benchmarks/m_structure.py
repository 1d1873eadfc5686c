"""What a perturbation is as a function of the factors: m_eff(w) = x'(w) - x(w), read from the perturbed store and the
original at the same factor rows (MIG's sample: ``draw_train_test`` with the evaluation seed).

Appendix B's m(w) is a decoder of the one-hot factors, so it may be anything from one fixed pattern with a
w-dependent sign (what a random, saturated ψ tends to give: m ≈ ±P) to a pattern that changes smoothly with every
factor. Three readings tell these apart and tell m from pixel noise of the same ε:

- the size: median ‖m_eff(w)‖∞ (= ε when saturated) and the RMS over pixels;
- the dimension across w: the share of m_eff's variance across rows on its first principal component, and on the
  first three (noise spreads over every direction: a few percent on PC1);
- what decides the first component: its score's sign balance and the coefficient of variation of |score| (≈ 0 for
  ±P), and the R² of the score explained by each factor alone (the score's mean per level of that factor).

On binary images (dSprites) the fold makes x' = x + ε|m|(1 − 2x) whatever m's sign, so only |m| reaches the data,
and a saturated m (|m| = 1 everywhere) is the one affine map ε + (1 − 2ε)x for every image — a contrast change, no
pattern. For such stores a fourth reading: the share of pixels changed by the largest amount (saturated) and the
variance of x' over x ((1 − 2ε)² for the affine map; docs/notes/presets.md, thirty-fifth leg).

Usage (stores of one workdir; ``--perturbed`` repeatable):
    python benchmarks/m_structure.py --orig ORIG.zarr --perturbed "learned m=MOD.zarr" \
        --perturbed "random m=RANDOM.zarr" --perturbed noise=NOISE.zarr [--num-train 5000] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np

from alignment_match import named, pca_scores
from probe.data import open_store
from probe.metrics.sampler import draw_train_test


def unit_images(store, factors: np.ndarray) -> np.ndarray:
    """The store's images at these factor rows as float64 in [0, 1], flattened per row."""
    images = store.read(store.index_of(factors)).astype(np.float64) / 255.0
    return images.reshape(len(images), -1)


def factor_r2(score: np.ndarray, levels: np.ndarray) -> float:
    """Share of ``score``'s variance explained by its mean per level of one factor (a one-hot regression)."""
    fit = np.zeros(len(score))
    for level in np.unique(levels):
        fit[levels == level] = score[levels == level].mean()
    return float(1.0 - ((score - fit) ** 2).sum() / ((score - score.mean()) ** 2).sum())


def structure(m_eff: np.ndarray, factors: np.ndarray) -> dict:
    """The readings of the module's docstring for one perturbation m_eff [N, pixels] at factor rows [N, K]."""
    scores, values, share3 = pca_scores(m_eff, 3)
    share1 = float(share3 * values[0] / values.sum())
    first = np.abs(scores[:, 0])
    return {
        "linf_median": float(np.median(np.abs(m_eff).max(1))),
        "rms": float(np.sqrt((m_eff ** 2).mean())),
        "pc1_share": share1,
        "pc1_3_share": share3,
        "pc1_positive": float(np.mean(scores[:, 0] > 0)),
        "pc1_abs_cv": float(first.std() / first.mean()),
        "pc1_r2": [factor_r2(scores[:, 0], factors[:, j]) for j in range(factors.shape[1])],
    }


def binary_reading(x: np.ndarray, m_eff: np.ndarray) -> dict | None:
    """For binary originals: the share of pixels at the largest |change| (to uint8 rounding) and var(x')/var(x)."""
    if not np.all((x == 0) | (x == 1)):
        return None
    change = np.abs(m_eff)
    top = float(change.max())
    return {"saturated": float(np.mean(change >= top - 1.5 / 255)), "largest": top,
            "variance_ratio": float((x + m_eff).var(0).sum() / x.var(0).sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orig", required=True, help="the original store")
    parser.add_argument("--perturbed", action="append", required=True, help="LABEL=STORE (a perturbed copy of --orig)")
    parser.add_argument("--num-train", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0, help="the evaluation seed (MIG's sample)")
    args = parser.parse_args()

    orig = open_store(args.orig)
    factors, _ = draw_train_test(np.asarray(orig.factor_sizes), args.num_train, 1, args.seed, 16)
    x = unit_images(orig, factors)
    for label, path in named(args.perturbed):
        perturbed = open_store(path)
        if list(perturbed.factor_sizes) != list(orig.factor_sizes):
            raise SystemExit(f"{label}: factor sizes {perturbed.factor_sizes} differ from the original's {orig.factor_sizes}")
        m_eff = unit_images(perturbed, factors) - x
        r = structure(m_eff, factors)
        print(f"{label}: |m_eff|∞ median {r['linf_median']:.3f}, RMS {r['rms']:.4f}; PC1 {r['pc1_share']:.1%}, "
              f"PC1-3 {r['pc1_3_share']:.1%} of m_eff's variance across w; PC1 score: fraction > 0 "
              f"{r['pc1_positive']:.2f}, |score| CV {r['pc1_abs_cv']:.2f}")
        print("   R² of PC1's score on each factor alone: "
              + ", ".join(f"{n} {v:.2f}" for n, v in zip(orig.factor_names, r["pc1_r2"])))
        binary = binary_reading(x, m_eff)
        if binary:
            print(f"   binary originals (only |m| reaches them): {binary['saturated']:.1%} of pixels changed by the "
                  f"largest amount ({binary['largest']:.3f}; all: one affine contrast map for every image), "
                  f"var(x')/var(x) {binary['variance_ratio']:.3f}")


if __name__ == "__main__":
    main()
