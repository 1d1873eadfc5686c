"""Whose alignment does a retrained run take? Each run's latents against each reference run's latents (the
restarts the manipulation was learned against), as functions of the factors.

The paper's mechanism (Zietlow et al. 2021 §4.4): m(w) makes the entangled restarts' alignment cheaper, so a β-VAE
retrained on the modified data should land in it. MIG says only that a run is entangled, not in *whose* way. Here
every run is encoded on its own store (orig runs and the restarts on orig, mod runs on mod) at the same factor rows
(MIG's sample: ``draw_train_test`` with the evaluation seed), so codes of two runs on different stores are compared
as functions of the same w. For a reference latent z_ref (active: E[σ²] < 0.8) and a run's latents z_1..z_d:

    match(z_ref) = max_i I(z_ref; z_i) / H(z_ref)       (20 equal-count bins per code; code_alignment's best_match_nmi)

1 when one latent of the run carries z_ref exactly, up to any monotone map (equal-count bins are ranks, so a latent
squashed or flipped matches in full; MIG's equal-width bins would not: exp(z) against z reads 0.33 with them), low
when z_ref is spread over several latents of the run (two latents rotated by 45° read 0.12-0.13). A circular factor
(hue) cut at another place on its circle reads 0.77-1 (its bins shift by a fraction of a bin: at worst each splits in
two, 1 - ln 2 / ln 20). A run's match to a reference is the mean over the
reference's active latents. The binned MI of independent codes reads ≈ 0.013 at N = 5,000 (its bias), the same for
every pair, so compare rows with each other.

``--pca-reference K`` adds one more reference, ``pcaK``: the scores of the reference store's images at the same rows
on their top K principal components (PCA of that sample, ``probe.analysis.verify.top_principal_directions``), every one counted active.
It asks whether an alignment some runs share is the global PCA's — what a linear VAE would find (the paper's
Theorem 1), and what is left to a β-VAE whose local structure a perturbation has scrambled.

One-PC-per-latent NMI cannot see that alignment when PCA's eigenvalues come in near-equal groups (Shapes3D's hues
are circles: each gives two PCs of almost equal variance, cos and sin), because inside such a block any rotation of
the directions is as good (the linear VAE's solution is judged per block for the same reason,
``probe.analysis.alignment.spectral_blocks``). So ``--pca-reference`` also prints, per run, linear readings that are
invariant to those rotations (``probe.metrics.block_capture``): ``span``, the mean R² of the K standardised PC
scores regressed on the run's active mean codes (does the code hold the PCA subspace linearly?), and per block of s
PCs the R² of the block's scores on the best s latents (is each block held by as many latents as it has
directions?). A run in the PCA's alignment reads high on both; a run that holds a hue circle as one latent (its
angle) reads ≈ 0.25-0.30 on that block's pair (3/π² for a uniform angle).

The evaluate stage records the same numbers per run (``alignment``: averaged over each ensemble's members, on its own
5,000 grid points) since best_match_nmi was added; this script reads every reference on its own, and serves the
workdirs whose evaluate stage predates it.

Usage:
    python benchmarks/alignment_match.py --reference ent5=RUN --reference dis1=RUN ... --reference-store ORIG \
        --run orig-s100=RUN:ORIG --run mod-s100=RUN:MOD ... [--pca-reference 6] [--num-train 5000] [--json OUT]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from probe.analysis.runs import active_latents
from probe.data import open_store
from probe.metrics import block_capture, code_alignment
from probe.metrics.sampler import draw_train_test


def encode(run_dir: str, store, factors: np.ndarray) -> dict:
    from probe.train import run_encoder

    return run_encoder(run_dir).encode(store.read(store.index_of(factors)))


def pca_scores(images: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, float]:
    """The images' scores on their top ``k`` principal components [N, k], their eigenvalues [k] and the share of the
    sample's variance they carry (``probe.analysis.verify.principal_scores``, in float64)."""
    from probe.analysis.verify import principal_scores

    scores, values, total = principal_scores(np.asarray(images, dtype=np.float64), k)
    return scores, values, float(values.sum() / total)


def named(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, sep, rest = item.partition("=")
        if not sep:
            raise SystemExit(f"expected NAME=PATH, got {item!r}")
        out.append((name, rest))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", action="append", default=[], help="NAME=RUN_DIR (trained on the reference store)")
    parser.add_argument("--reference-store", required=True)
    parser.add_argument("--run", action="append", required=True, help="NAME=RUN_DIR:STORE (the store it trained on)")
    parser.add_argument("--pca-reference", type=int, default=0, metavar="K",
                        help="also compare with the top K principal-component scores of the reference store's images")
    parser.add_argument("--num-train", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0, help="the evaluation seed (MIG's sample)")
    parser.add_argument("--json", help="also write the table here")
    args = parser.parse_args()
    if not args.reference and args.pca_reference <= 0:
        parser.error("give --reference or --pca-reference")

    reference_store = open_store(args.reference_store)
    factors, _ = draw_train_test(np.asarray(reference_store.factor_sizes), args.num_train, 1, args.seed, 16)
    references = []
    for name, run_dir in named(args.reference):
        out = encode(run_dir, reference_store, factors)
        active = np.zeros(out["codes"].shape[1], dtype=bool)
        active[active_latents(out.get("variance"), out["codes"].shape[1])] = True
        references.append((name, out["codes"], active))
        print(f"reference {name}: {int(active.sum())} active latents")
    blocks = []
    if args.pca_reference > 0:
        from probe.analysis.alignment import block_columns

        scores, values, explained = pca_scores(reference_store.read(reference_store.index_of(factors)),
                                               args.pca_reference)
        references.append((f"pca{args.pca_reference}", scores, np.ones(scores.shape[1], dtype=bool)))
        blocks = block_columns(values, args.pca_reference)
        print(f"reference pca{args.pca_reference}: top {scores.shape[1]} components, "
              f"{explained:.1%} of the sample's variance; blocks of near-equal eigenvalues (PCs): "
              + " ".join("-".join(str(i + 1) for i in b) for b in blocks))
    stores = {}
    rows = []
    print("cells: best-match NMI / best-match |corr| (probe.metrics.code_alignment)")
    print("run".ljust(14) + "".join(name.rjust(14) for name, *_ in references))
    for name, spec in named(args.run):
        run_dir, _, store_path = spec.rpartition(":")
        store = stores.setdefault(store_path, open_store(store_path))
        out = encode(run_dir, store, factors)
        codes = out["codes"]
        per_reference = {ref_name: code_alignment(codes, ref_codes, reference_active=active)
                         for ref_name, ref_codes, active in references}
        rows.append({"run": name, "run_dir": run_dir, "store": store_path,
                     "match": {k: round(v["best_match_nmi"], 4) for k, v in per_reference.items()},
                     "corr": {k: round(v["best_match_corr"], 4) for k, v in per_reference.items()},
                     "per_latent": {k: [round(x, 4) for x in v["best_match_nmi_per_latent"]]
                                    for k, v in per_reference.items()}})
        print(name.ljust(14) + "".join(f"{rows[-1]['match'][k]:8.3f} /{rows[-1]['corr'][k]:.2f}"
                                       for k, *_ in references))
        if blocks:
            capture = block_capture(codes[:, active_latents(out.get("variance"), codes.shape[1])],
                                    references[-1][1], blocks)
            rows[-1]["pca_blocks"] = {"blocks": blocks, **capture}
            print(" " * 14 + f"pca{args.pca_reference} span R² {capture['span_r2']:.2f}; per block, R² on its best "
                  "latents: " + ", ".join(f"PCs {'-'.join(str(i + 1) for i in b)} {r2:.2f}"
                                          for b, r2 in zip(blocks, capture["block_r2"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"num_train": args.num_train, "seed": args.seed, "bins": 20, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
