"""Alignment of one code space to a reference code space (numpy only).

``code_alignment(codes, reference_codes)`` compares two encoders on the SAME N inputs (row i of
``codes`` and row i of ``reference_codes`` encode the same image / factor point). The pipeline uses it
to say how close each retrained run's codes are to the selected entangled and disentangled β-VAE
restarts (why MIG moved: on the modified data a VAE should land nearer the entangled restart; PCL
should not).

Definitions (x = the run's latents, i = 1..D; y = the reference's used latents, j ∈ J):

* ``best_match_corr`` = mean_j max_i |corr(x_i, y_j)| (Pearson, over the N rows). **Axis-level**
  alignment: 1 when every reference axis is reproduced (up to sign, scale and permutation) by one of
  the run's axes. For two independent unit-variance latents rotated by θ it is max(|cos θ|, |sin θ|)
  (1/√2 at 45°): a rotated copy carries the same information but not the same axes.
* ``best_match_nmi`` = mean_j max_i I(x_i; y_j) / H(y_j), both sides in equal-count (rank) bins
  (``probe.metrics.information.latent_match``, 20 bins). **Axis-level**, like ``best_match_corr``, but
  blind to the order in which a latent lays a factor out: a circular factor (hue) cut at another place
  on its circle, or any monotone squashing, keeps 0.77-1 where its Pearson correlation can fall to 0.
  Two latents rotated by 45° read ≈ 0.13 and independent codes ≈ 0.013 (the plug-in bias) at N = 5,000.
  Its scale is steep: a latent equal to the reference's plus Gaussian noise reads 0.80 at correlation
  0.999, 0.59 at 0.99, 0.28 at 0.9, 0.12 at 0.7 (N = 5,000), so compare it across runs, not with |corr|.
* ``linear_r2`` = mean_j R²_j, where R²_j is the (in-sample) coefficient of determination of the
  least-squares linear map with intercept from all of the run's latents to y_j. **Subspace-level**
  information: 1 for any invertible linear transform of the reference (a rotated copy included).
  It is in-sample, so independent codes score about D/N rather than exactly 0 (0.002 for D=10,
  N=5,000).

Both numbers are reported because they separate two stories: a run that spans the reference's
subspace but with rotated axes has high ``linear_r2`` and low ``best_match_corr`` (the reference's
axes, which MIG rewards, are lost); a run with neither has learnt a different representation.

Conventions: correlations with a constant column (std 0, relative to the column's scale) are 0, so a
collapsed run latent never matches anything and never yields NaN; constant reference latents are
dropped (there is nothing to explain). ``reference_active`` (boolean [D_ref]) restricts the reference
latents, e.g. to the restart's active units (mean posterior variance < 0.8, Zietlow et al. §5.3); if
it leaves no non-constant latent, all non-constant reference latents are used and ``note`` says so. If
the reference has no non-constant latent at all, both numbers are ``None`` with a ``note``.
"""

from __future__ import annotations

import numpy as np

from probe.errors import UserError
from probe.metrics._common import as_codes
from probe.metrics.information import latent_match

_RELATIVE_STD_EPS = 1e-12
# the summary numbers of ``code_alignment`` (the pipeline averages them over an ensemble, the report reads them)
ALIGNMENT_NUMBERS = ("best_match_corr", "best_match_nmi", "linear_r2")
# the pipeline's third alignment target: the original images' top principal components (``block_capture``)
GLOBAL_PCA = "global_pca"
GLOBAL_PCA_NUMBERS = ("span_r2", "mean_block_r2")


def _non_constant(x: np.ndarray) -> np.ndarray:
    """Columns whose std is not zero relative to their magnitude (float64 round-off)."""
    std = x.std(axis=0)
    scale = np.maximum(np.abs(x).max(axis=0), np.finfo(np.float64).tiny)
    return std > _RELATIVE_STD_EPS * scale


def _standardise(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    z = np.zeros_like(x)
    xc = x[:, keep] - x[:, keep].mean(axis=0)
    z[:, keep] = xc / xc.std(axis=0)
    return z


def code_alignment(codes, reference_codes, *, reference_active=None) -> dict:
    """How well ``codes [N, D]`` reproduce ``reference_codes [N, D_ref]`` (same N rows, row i ↔ row i).

    Returns ``{"best_match_corr": float | None, "best_match_nmi": float | None, "linear_r2": float | None,
    "best_match_per_latent": [float] (per used reference latent), "best_match_nmi_per_latent": [float],
    "best_match_index": [int] (the run latent that matches it best, -1 if the run has no non-constant latent),
    "linear_r2_per_latent": [float],
    "reference_latents": [int] (the reference latents used), "num_samples": N, "num_latents": D,
    "num_reference_latents": D_ref, "note": str | None}``. See the module docstring for definitions.
    """
    x = as_codes(codes, "codes").astype(np.float64)
    y = as_codes(reference_codes, "reference_codes").astype(np.float64)
    n = x.shape[0]
    if y.shape[0] != n:
        raise UserError(f"codes and reference_codes must have the same number of rows (the same inputs), "
                        f"got {n} and {y.shape[0]}")
    y_ok = _non_constant(y)
    note = None
    if reference_active is not None:
        mask = np.asarray(reference_active, dtype=bool).reshape(-1)
        if mask.size != y.shape[1]:
            raise UserError(f"reference_active has {mask.size} entries for {y.shape[1]} reference latents")
        used = mask & y_ok
        if not used.any():
            used = y_ok
            note = (f"reference_active selects no non-constant latent ({int(mask.sum())} active); "
                    f"using all {int(y_ok.sum())} non-constant reference latents")
    else:
        used = y_ok
    ref_idx = np.flatnonzero(used)
    out = {"best_match_corr": None, "best_match_nmi": None, "linear_r2": None, "best_match_per_latent": [],
           "best_match_nmi_per_latent": [], "best_match_index": [],
           "linear_r2_per_latent": [], "reference_latents": ref_idx.tolist(), "num_samples": int(n),
           "num_latents": int(x.shape[1]), "num_reference_latents": int(y.shape[1]), "note": note}
    if ref_idx.size == 0:
        out["note"] = "the reference codes have no non-constant latent"
        return out

    x_ok = _non_constant(x)
    zx = _standardise(x, x_ok)                      # constant run latents are all-zero columns → corr 0
    zy = _standardise(y[:, ref_idx], np.ones(ref_idx.size, dtype=bool))
    corr = np.abs(zx.T @ zy) / n                     # [D, |J|]
    corr = np.minimum(corr, 1.0)
    best = corr.max(axis=0)
    best_index = np.where(x_ok.any(), corr.argmax(axis=0), -1)

    # least squares with intercept from the non-constant run latents (centred) to each used reference latent
    yc = y[:, ref_idx] - y[:, ref_idx].mean(axis=0)
    if x_ok.any():
        xc = x[:, x_ok] - x[:, x_ok].mean(axis=0)
        coef, *_ = np.linalg.lstsq(xc, yc, rcond=None)
        resid = yc - xc @ coef
        r2 = 1.0 - (resid ** 2).sum(axis=0) / (yc ** 2).sum(axis=0)
    else:
        r2 = np.zeros(ref_idx.size)
    r2 = np.clip(r2, 0.0, 1.0)                       # in-sample OLS R² lies in [0, 1] up to round-off

    nmi = latent_match(y[:, ref_idx], x)           # a constant run latent is one bin: it matches nothing
    out.update({"best_match_corr": float(best.mean()), "best_match_nmi": float(nmi.mean()),
                "linear_r2": float(r2.mean()), "best_match_per_latent": best.tolist(),
                "best_match_nmi_per_latent": nmi.tolist(), "best_match_index": [int(i) for i in best_index],
                "linear_r2_per_latent": r2.tolist()})
    return out


def _r2_columns(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """In-sample R² of each column of ``y`` on ``x`` by least squares with intercept, clipped to [0, 1]."""
    yc = y - y.mean(axis=0)
    if x.shape[1] == 0:
        return np.zeros(y.shape[1])
    xc = x - x.mean(axis=0)
    coef, *_ = np.linalg.lstsq(xc, yc, rcond=None)
    resid = yc - xc @ coef
    return np.clip(1.0 - (resid ** 2).sum(axis=0) / (yc ** 2).sum(axis=0), 0.0, 1.0)


def block_capture(codes, reference_codes, blocks) -> dict:
    """How a code holds reference directions that are only defined up to rotation within blocks.

    PCA's directions inside a group of near-equal eigenvalues (``probe.analysis.alignment.spectral_blocks``) are
    arbitrary: a circular factor such as hue gives two PCs of equal variance, its cos and sin. Axis-level numbers
    (``code_alignment``'s best match) cannot see a run that holds such a pair rotated; these readings are invariant
    to any invertible linear map inside each block of ``reference_codes``:

    * ``span_r2`` — mean R² of all used reference columns on all of ``codes`` (linear, with intercept): does the
      code hold the reference subspace?
    * ``block_r2[b]`` — for block b of s columns, the largest mean R² of its columns on s of the code's latents
      (``block_latents[b]``): is the block held by as many latents as it has directions? A circle held as
      (cos, sin) on two latents reads 1; held as its angle on one latent, 3/π² ≈ 0.30 (uniform angle).

    ``codes`` [N, D] (e.g. the active latents only), ``reference_codes`` [N, K], ``blocks`` a list of column index
    lists of ``reference_codes`` (disjoint). Returns ``{"span_r2", "block_r2", "block_latents", "mean_block_r2"}``.
    """
    from itertools import combinations

    x = as_codes(codes, "codes").astype(np.float64)
    y = as_codes(reference_codes, "reference_codes").astype(np.float64)
    if y.shape[0] != x.shape[0]:
        raise UserError(f"codes and reference_codes must have the same number of rows (the same inputs), "
                        f"got {x.shape[0]} and {y.shape[0]}")
    blocks = [[int(i) for i in b] for b in blocks]
    used = sorted({i for b in blocks for i in b})
    if not used or used[0] < 0 or used[-1] >= y.shape[1] or sum(map(len, blocks)) != len(used):
        raise UserError(f"blocks must be disjoint, non-empty lists of reference columns 0..{y.shape[1] - 1}, "
                        f"got {blocks}")
    x = x[:, _non_constant(x)]                       # a collapsed latent holds nothing
    block_r2, block_latents = [], []
    for b in blocks:
        size = min(len(b), x.shape[1])
        best, best_set = 0.0, []
        for subset in combinations(range(x.shape[1]), size):
            value = float(_r2_columns(y[:, b], x[:, list(subset)]).mean())
            if value > best:
                best, best_set = value, list(subset)
        block_r2.append(best)
        block_latents.append(best_set)
    return {"span_r2": float(_r2_columns(y[:, used], x).mean()), "block_r2": block_r2,
            "block_latents": block_latents, "mean_block_r2": float(np.mean(block_r2))}
