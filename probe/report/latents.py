"""What the report computes from trained restart models: 2-D latent traversals (Zietlow et al. 2021, Fig. 10/11).
The NMI heatmaps' values are ``probe.metrics.information.histogram_nmi`` (the metrics' one histogram MI)."""

from __future__ import annotations

import numpy as np


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
