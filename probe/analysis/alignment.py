"""Comparing a learned linear map with PCA: subspace match, matched alignment, σ-ordering, signed
permutations. Pure numpy/scipy functions over arrays; column-vector convention throughout
(a decoder matrix is [D, d]: column j is the image-space direction of latent j).

Zietlow et al. 2021 write the PCA decoder as ``V_Xᵀ Σ_X² P`` with row-vector data; here the PCA
directions are the columns of ``pca_directions`` (eigenvectors of the data covariance, largest
eigenvalue first), so "U = V_Xᵀ" in the paper reads "decoder columns = PCA eigenvectors" here.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment


def pca(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition of the covariance of ``data`` [N, D] -> (eigenvalues [D] descending,
    eigenvectors [D, D] as columns, same order). Each eigenvector's sign is fixed so that its
    largest-magnitude entry is positive (PCA directions are only defined up to sign)."""
    data = np.asarray(data, dtype=np.float64)
    centred = data - data.mean(0, keepdims=True)
    cov = centred.T @ centred / max(len(data) - 1, 1)
    return eig_descending(cov)


def eig_descending(cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values, vectors = np.linalg.eigh(np.asarray(cov, dtype=np.float64))
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    signs = np.sign(vectors[np.abs(vectors).argmax(0), np.arange(vectors.shape[1])])
    signs[signs == 0] = 1.0
    return values, vectors * signs


def unit_columns(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=0, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def subspace_match(a: np.ndarray, b: np.ndarray) -> dict:
    """How well span(a) matches span(b) (both [D, d]): cosines of the principal angles.
    ``mean_cos2`` = ||Q_aᵀ Q_b||_F² / d is 1 for identical subspaces, d/D on average for random ones."""
    qa, _ = np.linalg.qr(np.asarray(a, dtype=np.float64))
    qb, _ = np.linalg.qr(np.asarray(b, dtype=np.float64))
    cosines = np.clip(np.linalg.svd(qa.T @ qb, compute_uv=False), 0.0, 1.0)
    return {"mean_cos2": float(np.mean(cosines ** 2)), "min_cos": float(cosines.min()),
            "cosines": cosines.tolist()}


def match_columns(columns: np.ndarray, references: np.ndarray) -> dict:
    """Hungarian matching of the unit columns of ``columns`` [D, d] to ``references`` [D, r] (r ≥ d)
    maximising the summed |cos|. Returns ``assignment[j]`` = reference index matched to column j,
    the matched |cos| values, their mean, and the full |cos| matrix [d, r]."""
    cos = np.abs(unit_columns(columns).T @ unit_columns(references))
    rows, cols = linear_sum_assignment(-cos)
    assignment = np.empty(cos.shape[0], dtype=np.int64)
    assignment[rows] = cols
    matched = cos[np.arange(cos.shape[0]), assignment]
    return {"assignment": assignment.tolist(), "matched_abs_cos": matched.tolist(),
            "mean_abs_cos": float(matched.mean()), "abs_cos": cos.tolist()}


def sigma_order_matches(assignment, sigma) -> dict:
    """Eq. (14): latents ordered by increasing noise σ should follow PCA's order by decreasing
    eigenvalue. ``assignment[j]`` is the eigen-rank (0 = largest eigenvalue) matched to latent j.
    Correct iff sorting the latents by σ ascending gives increasing eigen-ranks."""
    assignment = np.asarray(assignment)
    sigma = np.asarray(sigma, dtype=np.float64)
    by_sigma = np.argsort(sigma, kind="stable")
    ranks_in_sigma_order = assignment[by_sigma]
    from scipy.stats import spearmanr

    rho = float(spearmanr(sigma, assignment).statistic) if len(sigma) > 1 else 1.0
    return {"correct": bool(np.all(np.diff(ranks_in_sigma_order) > 0)),
            "eigen_rank_by_sigma": ranks_in_sigma_order.tolist(), "spearman_sigma_vs_rank": rho}


def signed_permutation_error(matrix: np.ndarray) -> dict:
    """Distance of a square (orthogonal) matrix from the nearest signed permutation:
    max |entry − signed-permutation entry| after Hungarian matching on |entries|. 0 iff it is one."""
    m = np.asarray(matrix, dtype=np.float64)
    rows, cols = linear_sum_assignment(-np.abs(m))
    perm = np.zeros_like(m)
    perm[rows, cols] = np.sign(m[rows, cols])
    return {"max_abs_error": float(np.abs(m - perm).max()),
            "min_matched_abs": float(np.abs(m[rows, cols]).min()),
            "permutation": cols.tolist()}


def decoder_svd(decoder: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``decoder = U diag(s) Vᵀ`` (thin SVD): U [D, d], s [d], V [d, d]."""
    u, s, vt = np.linalg.svd(np.asarray(decoder, dtype=np.float64), full_matrices=False)
    return u, s, vt.T


def compare_with_pca(decoder: np.ndarray, sigma: np.ndarray, eigenvalues: np.ndarray,
                     eigenvectors: np.ndarray, *, degenerate_ratio: float | None = None) -> dict:
    """The four checks of issue 8 for one decoder [D, d] against PCA of the data it was trained on:
    (a) subspace match of span(decoder) with the top-d PCA directions, (b) mean |cos| between the
    decoder columns and the PCA eigenvectors after Hungarian matching, (c) whether ordering the
    latents by σ reproduces PCA's eigenvalue order, (d) whether the decoder's right singular
    vectors V form a signed permutation (equivalently: its columns are orthogonal).

    Also the spectrum's gaps (``spectral_blocks``, threshold ``degenerate_ratio``, default
    ``DEGENERATE_RATIO``) and the same checks per block (``block_alignment``, ``block_sigma_order``,
    ``column_orthogonality``), which stay meaningful when eigenvalues are (nearly) equal."""
    d = decoder.shape[1]
    top = eigenvectors[:, :d]
    match = match_columns(decoder, top)
    order = sigma_order_matches(match["assignment"], sigma)
    _, s, v = decoder_svd(decoder)
    perm = signed_permutation_error(v)
    gaps = eigenvalues[: d + 1]
    return {
        "subspace": subspace_match(decoder, top),
        "alignment_mean_abs_cos": match["mean_abs_cos"],
        "alignment_min_abs_cos": float(min(match["matched_abs_cos"])),
        "assignment": match["assignment"],
        "sigma": np.asarray(sigma, dtype=np.float64).tolist(),
        "sigma_order": order,
        "v_signed_permutation": perm,
        "decoder_singular_values": s.tolist(),
        "eigenvalues": np.asarray(gaps, dtype=np.float64).tolist(),
        "min_relative_eigengap": float(np.min(-np.diff(gaps) / np.maximum(gaps[:-1], 1e-300))) if len(gaps) > 1 else None,
        **_block_checks(decoder, sigma, eigenvalues, eigenvectors,
                        DEGENERATE_RATIO if degenerate_ratio is None else degenerate_ratio),
    }


def _block_checks(decoder, sigma, eigenvalues, eigenvectors, ratio) -> dict:
    d = decoder.shape[1]
    spectrum = spectral_blocks(eigenvalues, d, ratio)
    blocks = block_alignment(decoder, eigenvectors, spectrum["blocks"])
    spectrum["blocks"] = blocks.pop("blocks")
    return {"spectrum": spectrum, "block_alignment": blocks,
            "block_sigma_order": block_sigma_order(blocks["latent_block"], sigma),
            "column_orthogonality": column_orthogonality(decoder)}


# -- spectral gaps: which PCA directions are identifiable (Theorem 1 assumes distinct eigenvalues) ----------

# Default for "well separated": adjacent eigenvalues with λ_{i+1}/λ_i ≥ 0.9 (relative gap < 10%) form one
# near-degenerate block. Why 0.9 (docs/notes/analysis.md): by Davis–Kahan, a perturbation of the covariance
# of relative size δ (sampling: the standard error of an eigenvalue of n = 5000 images is ≈ √(2/n) = 2%;
# optimisation slack of the fit) turns an eigenvector by an angle up to ≈ δ / (relative gap). The
# alignment criterion asks |cos| ≥ 0.99, i.e. an angle ≤ 0.14 rad; with δ = 1–2% that needs a relative
# gap ≥ 0.07–0.14. Below a 10% gap the PCA direction itself is not determined to the precision the check
# demands, so only the block's span is a meaningful target. Fixed a priori, not fitted to any store.
DEGENERATE_RATIO = 0.9


def spectral_blocks(eigenvalues, num_latent: int, ratio: float = DEGENERATE_RATIO) -> dict:
    """Group eigenvalues (descending) into blocks of near-equal values: i and i+1 share a block when
    λ_{i+1}/λ_i ≥ ``ratio``. Returns the blocks that intersect the top ``num_latent`` components
    (a block may run past ``num_latent``: then the top-d subspace itself is not identifiable), the
    adjacent ratios, and for each block its index range (0-based, inclusive) and the ratio of its
    last to its first eigenvalue."""
    lam = np.asarray(eigenvalues, dtype=np.float64)
    d = int(num_latent)
    ratios = lam[1:] / np.maximum(lam[:-1], 1e-300)
    blocks, start = [], 0
    for i in range(1, len(lam) + 1):
        if i == len(lam) or ratios[i - 1] < ratio:
            if start < d:
                blocks.append({"start": start, "end": i - 1, "size": i - start,
                               "eigenvalues": lam[start:i].tolist(),
                               "ratio_last_first": float(lam[i - 1] / max(lam[start], 1e-300)),
                               # the grouping rule's number: every adjacent ratio in the block is at least this
                               "min_adjacent_ratio": float(ratios[start:i - 1].min()) if i - start > 1 else None,
                               "degenerate": i - start > 1,
                               "beyond_latents": i > d})
            start = i
    boundary = float(ratios[d - 1]) if d - 1 < len(ratios) else None
    return {"ratio_threshold": float(ratio), "adjacent_ratios": ratios[: d + 1].tolist(),
            "boundary_ratio": boundary, "blocks": blocks,
            "subspace_identifiable": not any(b["beyond_latents"] for b in blocks)}


def block_columns(eigenvalues, num_latent: int, ratio: float = DEGENERATE_RATIO) -> list[list[int]]:
    """The top ``num_latent`` components as lists of column indices, one list per block of near-equal eigenvalues
    (``spectral_blocks``), a block that runs past ``num_latent`` cut there: the groups inside which a rotation of the
    components is not identified (``probe.metrics.block_capture`` reads each one invariantly to it)."""
    last = int(num_latent) - 1
    blocks = spectral_blocks(eigenvalues, num_latent, ratio)["blocks"]
    return [list(range(b["start"], min(b["end"], last) + 1)) for b in blocks]


def block_alignment(decoder: np.ndarray, eigenvectors: np.ndarray, blocks: list[dict]) -> dict:
    """Alignment of the decoder columns [D, d] with the PCA directions, judged per block: column j's
    score in block B is ||P_B u_j|| (u_j the unit column, P_B the projection onto span of B's
    eigenvectors), i.e. |cos| for a one-direction block and the cosine to the block's span for a
    near-degenerate one (any rotation inside it is (almost) optimal). Columns are assigned to block
    slots by Hungarian matching on these scores, so each block receives as many columns as it has
    directions (a block running past d receives the columns left). Per block: its columns, their
    scores, mean and min."""
    u = unit_columns(decoder)
    d = u.shape[1]
    last = max(b["end"] for b in blocks) + 1
    slots, energy = [], []
    for bi, b in enumerate(blocks):
        basis = eigenvectors[:, b["start"]: b["end"] + 1]
        score = np.sqrt(np.clip(((basis.T @ u) ** 2).sum(0), 0.0, 1.0))  # [d]
        for _ in range(b["size"]):
            slots.append(bi)
            energy.append(score)
    scores = np.stack(energy, 1)                       # [d, slots]
    rows, cols = linear_sum_assignment(-scores)
    out = []
    for bi, b in enumerate(blocks):
        members = [int(r) for r, c in zip(rows, cols) if slots[c] == bi]
        vals = [float(scores[r, [k for k, s in enumerate(slots) if s == bi][0]]) for r in members]
        out.append({**b, "latents": members, "scores": vals,
                    "mean_score": float(np.mean(vals)) if vals else None,
                    "min_score": float(np.min(vals)) if vals else None})
    matched = np.array([scores[r, c] for r, c in zip(rows, cols)])
    latent_block = np.empty(d, dtype=np.int64)
    for r, c in zip(rows, cols):
        latent_block[r] = slots[c]
    return {"blocks": out, "mean_score": float(matched.mean()), "min_score": float(matched.min()),
            "latent_block": latent_block.tolist(), "reference_dims": int(last)}


def block_sigma_order(latent_block, sigma) -> dict:
    """σ-ordering up to blocks: sorting latents by σ ascending must give non-decreasing block indices
    (inside a near-degenerate block the order is not determined)."""
    lb = np.asarray(latent_block)
    by_sigma = np.argsort(np.asarray(sigma, dtype=np.float64), kind="stable")
    seq = lb[by_sigma]
    return {"correct": bool(np.all(np.diff(seq) >= 0)), "block_by_sigma": seq.tolist()}


def column_orthogonality(decoder: np.ndarray) -> dict:
    """Max |cos| between two distinct decoder columns. Columns orthogonal ⇔ DᵀD diagonal ⇔ (for
    distinct singular values) V a signed permutation; with (near-)equal singular values the SVD's V
    is not determined and its signed-permutation error says nothing, while this stays well defined."""
    u = unit_columns(decoder)
    g = np.abs(u.T @ u)
    np.fill_diagonal(g, 0.0)
    return {"max_abs_cos": float(g.max()) if g.size > 1 else 0.0}
