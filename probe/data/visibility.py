"""How much of each factor a store's images determine: the ceiling on any encoder's normalised MI.

The regime gate counts a factor as encoded when some latent holds ≥ 0.2 of its entropy (normalised MI). A latent is
a function of the image, so it cannot hold more of a factor than the image does, and where several values of a factor
render the same image (a square turned by 90°) the image does not determine it. Over the store's grid (every row one
image, uniform, as the metrics draw them), with x the image:

    ceiling_k = I(w_k; x) / H(w_k) = 1 − H(w_k | x) / H(w_k),    H(w_k | x) = H(x, w_k) − H(x),

where images are identified by a hash of their bytes. 1: the images tell every value of the factor apart.
"""

from __future__ import annotations

import hashlib

import numpy as np


def image_ids(store, block: int = 8192) -> np.ndarray:
    """One integer per grid row of ``store`` (``read(indices)``, ``num_images``); equal where the rows' images are
    byte-identical."""
    seen: dict[bytes, int] = {}
    n = int(store.num_images)
    ids = np.empty(n, dtype=np.int64)
    for start in range(0, n, block):
        images = np.ascontiguousarray(store.read(np.arange(start, min(start + block, n))))
        rows = images.reshape(images.shape[0], -1)
        for i in range(rows.shape[0]):
            ids[start + i] = seen.setdefault(hashlib.blake2b(rows[i].tobytes(), digest_size=16).digest(), len(seen))
    return ids


def _entropy(labels: np.ndarray) -> float:
    """Entropy (nats) of the empirical distribution of ``labels`` [n] or of the rows of ``labels`` [n, m]."""
    counts = np.unique(labels, axis=0 if labels.ndim > 1 else None, return_counts=True)[1]
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def ceilings(ids: np.ndarray, factors: np.ndarray) -> list[float | None]:
    """``1 − H(w_k | x) / H(w_k)`` per factor column of ``factors`` [n, K] over the rows; None for a factor with one
    value among them (no entropy to determine)."""
    h_x = _entropy(ids)
    out: list[float | None] = []
    for k in range(factors.shape[1]):
        h_k = _entropy(factors[:, k])
        out.append(None if h_k == 0 else round(1.0 - (_entropy(np.stack([ids, factors[:, k]], 1)) - h_x) / h_k, 4))
    return out


def factor_ceilings(store) -> list[float | None]:
    """The ceiling of every factor of ``store`` over its whole grid (``factors`` [N, K] and the images)."""
    return ceilings(image_ids(store), np.asarray(store.factors, dtype=np.int64))
