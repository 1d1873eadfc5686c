"""What the report computes from trained restart models: normalised mutual information between
factors and latents (heatmaps) and 2-D latent traversals (Zietlow et al. 2021, Fig. 10/11)."""

from __future__ import annotations

import numpy as np


def discretize(codes: np.ndarray, bins: int = 20) -> np.ndarray:
    """Equal-width histogram bins per latent (disentanglement_lib's ``_histogram_discretize``)."""
    codes = np.asarray(codes, dtype=np.float64)
    out = np.zeros(codes.shape, dtype=np.int64)
    for j in range(codes.shape[1]):
        edges = np.histogram(codes[:, j], bins)[1]
        out[:, j] = np.digitize(codes[:, j], edges[:-1])
    return out


def normalized_mutual_information(codes: np.ndarray, factors: np.ndarray, bins: int = 20) -> np.ndarray:
    """NMI[k, j] = I(w_k; z_j) / H(w_k) with z_j histogram-discretised (the normalisation of MIG, Eq. 1).
    Returns [K factors, D latents]; a factor with a single value gets a row of zeros."""
    from sklearn.metrics import mutual_info_score

    z = discretize(codes, bins)
    factors = np.asarray(factors)
    nmi = np.zeros((factors.shape[1], z.shape[1]))
    for k in range(factors.shape[1]):
        h = mutual_info_score(factors[:, k], factors[:, k])
        if h <= 0:
            continue
        for j in range(z.shape[1]):
            nmi[k, j] = mutual_info_score(factors[:, k], z[:, j]) / h
    return nmi


def traversal_grid(model, base_code: np.ndarray, dims: tuple[int, int], *, steps: int = 7,
                   limit: float = 2.0) -> np.ndarray:
    """Decode a steps×steps grid over latents ``dims`` (values in [−limit, limit], others fixed at
    ``base_code``) -> images float [steps, steps, H, W, C] in [0, 1]."""
    import torch

    values = np.linspace(-limit, limit, steps)
    codes = np.repeat(np.asarray(base_code, dtype=np.float32)[None], steps * steps, 0)
    rows, cols = np.meshgrid(values, values, indexing="ij")
    codes[:, dims[0]] = rows.ravel()
    codes[:, dims[1]] = cols.ravel()
    with torch.no_grad():
        z = torch.from_numpy(codes)
        if hasattr(model, "decode"):
            images = torch.sigmoid(model.decode(z))
        else:  # pragma: no cover - models without a decode() of logits
            raise TypeError("model has no decode(z)")
    images = images.permute(0, 2, 3, 1).float().cpu().numpy()
    return images.reshape(steps, steps, *images.shape[1:])
