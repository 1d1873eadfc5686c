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
                     eigenvectors: np.ndarray) -> dict:
    """The four checks of issue 8 for one decoder [D, d] against PCA of the data it was trained on:
    (a) subspace match of span(decoder) with the top-d PCA directions, (b) mean |cos| between the
    decoder columns and the PCA eigenvectors after Hungarian matching, (c) whether ordering the
    latents by σ reproduces PCA's eigenvalue order, (d) whether the decoder's right singular
    vectors V form a signed permutation (equivalently: its columns are orthogonal)."""
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
    }
