"""Loading trained runs and encoding store samples: shared by the analysis (local alignment) and the
report (NMI heatmaps, latent traversals). Thin wrappers over ``probe.train.load_run`` and
``Store.read``; models see float images [B, C, H, W] in [0, 1] (the model protocol)."""

from __future__ import annotations

import numpy as np


def load_model(run_dir, device: str = "cpu"):
    """(model in eval mode, config) of a complete run directory; UserError when it cannot be loaded."""
    from probe.train import RunFolder, load_run

    RunFolder(run_dir).require_checkpoint()
    model, config = load_run(run_dir, device=device)
    model.eval()
    return model, config


def to_model_input(images_uint8: np.ndarray):
    """uint8 [n, H, W, C] -> float tensor [n, C, H, W] in [0, 1]."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(images_uint8)).permute(0, 3, 1, 2).float().div_(255.0)


def encode_sample(model, store, n: int, *, seed: int = 0, batch_size: int = 256) -> dict:
    """Encode ``n`` images drawn uniformly (without replacement when possible) from ``store``.
    Returns indices [n], factors [n, K], images uint8 [n, H, W, C], codes [n, D] (``model.encode``)
    and variances [n, D] (``model.posterior_variance``) or None, both from one encoder pass where the model has one."""
    import torch

    from probe.models.base import representation_of

    rng = np.random.default_rng(seed)
    total = len(store)
    indices = np.sort(rng.choice(total, size=min(n, total), replace=False))
    images = store.read(indices)
    codes, variances = [], []
    with torch.no_grad():
        for start in range(0, len(indices), batch_size):
            out = representation_of(model, to_model_input(images[start:start + batch_size]))
            codes.append(out["codes"].float().cpu().numpy())
            var = out.get("variance")
            variances.append(None if var is None else var.float().cpu().numpy())
    return {
        "indices": indices,
        "factors": store.factors[indices],
        "images": images,
        "codes": np.concatenate(codes).astype(np.float64),
        "variances": None if any(v is None for v in variances) else np.concatenate(variances).astype(np.float64),
    }


def active_latents(variances: np.ndarray | None, num_latent: int, threshold: float = 0.8) -> np.ndarray:
    """Indices of active latents, E[σ_j²] < ``threshold`` (Zietlow §5.3), sorted by mean σ² ascending
    (Eq. 14: the first is the most important). Without variances, all latents in index order."""
    if variances is None:
        return np.arange(num_latent)
    mean_var = variances.mean(0)
    order = np.argsort(mean_var, kind="stable")
    return order[mean_var[order] < threshold]
