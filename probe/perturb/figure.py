"""Figure 4 of Zietlow et al.: original images, the manipulation m(w) and the altered images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from probe.errors import UserError
from probe.perturb.manipulation import manipulate, normalised_factors


def _choose_images(net, store, n: int, seed: int) -> np.ndarray:
    """n images whose bottleneck scalars s(w) spread over the observed range (the quantiles of 2048 draws)."""
    rng = np.random.RandomState(seed)
    pool = rng.choice(store.num_images, size=min(2048, store.num_images), replace=False)
    with torch.no_grad():
        s = net.bottleneck(normalised_factors(store.factors[pool], store.factor_sizes)).squeeze(1).numpy()
    order = np.argsort(s, kind="stable")
    picks = order[np.linspace(0, len(order) - 1, n).round().astype(int)]
    return pool[picks]


def figure4(store_path, manipulation_dir, out_png, n: int = 4, *, seed: int = 0, epsilon: float | None = None) -> Path:
    """PNG with three rows (original x, manipulation m(w), altered x') and ``n`` columns of different w.

    The columns are chosen so the bottleneck value s(w) runs from its lowest to its highest value.
    m(w) is shown on its own scale [−1, 1] (the image changes by ε·m): a diverging colour map for
    one-channel images, (m + 1)/2 as RGB for colour images.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from probe.data import open_store
    from probe.perturb.adversarial import load_manipulation
    from probe.provenance import atomic_path

    if n < 1:
        raise UserError(f"n must be at least 1, got {n}")
    store = open_store(store_path)
    net, info = load_manipulation(manipulation_dir)
    eps = info["epsilon"] if epsilon is None else float(epsilon)
    idx = _choose_images(net, store, n, seed)
    x_u8 = store.read(idx)
    with torch.no_grad():
        w = normalised_factors(store.factors[idx], store.factor_sizes)
        s = net.bottleneck(w).squeeze(1).numpy()
        m = net(w)
        x = torch.from_numpy(x_u8).permute(0, 3, 1, 2).float() / 255.0
        x_mod = manipulate(x, m, eps)
    m_np = m.permute(0, 2, 3, 1).numpy()
    x_np = x.permute(0, 2, 3, 1).numpy()
    xm_np = x_mod.permute(0, 2, 3, 1).numpy()
    gray = store.num_channels == 1

    fig, axes = plt.subplots(3, n, figsize=(2.0 * n + 0.8, 6.4), squeeze=False)
    rows = ["original x", f"manipulation m(w)\n(x' − x = {eps:g}·m)", "altered x'"]
    for j in range(n):
        factors_txt = "w = (" + ", ".join(str(int(v)) for v in store.factors[idx[j]]) + ")"
        for i, img in enumerate((x_np[j], m_np[j], xm_np[j])):
            ax = axes[i, j]
            if i == 1:
                if gray:
                    im = ax.imshow(img[..., 0], cmap="RdBu_r", vmin=-1, vmax=1)
                else:
                    ax.imshow(np.clip((img + 1) / 2, 0, 1))
            else:
                ax.imshow(img[..., 0] if gray else np.clip(img, 0, 1), cmap="gray" if gray else None, vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel(rows[i], fontsize=9)
        axes[0, j].set_title(f"s(w) = {s[j]:.2f}\n{factors_txt}", fontsize=8)
    if gray:
        fig.colorbar(im, ax=axes[1, :].tolist(), fraction=0.03, pad=0.02)
    fig.suptitle(f"{store.name}: manipulation (ε = {eps:g}), columns ordered by the bottleneck s(w)\n"
                 f"w = class indices of ({', '.join(store.factor_names)})", fontsize=9)
    out_png = Path(out_png)
    with atomic_path(out_png, overwrite=True) as tmp:
        fig.savefig(tmp, format="png", dpi=130, bbox_inches="tight")
    plt.close(fig)
    return out_png
