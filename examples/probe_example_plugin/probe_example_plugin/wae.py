"""WAE-MMD (Tolstikhin et al. 2018, "Wasserstein Auto-Encoders") as a probe plug-in.

A deterministic auto-encoder whose aggregate posterior is pulled towards N(0, I) by the maximum mean
discrepancy with an inverse multiquadratics kernel k(x, y) = C / (C + ‖x − y‖²), C = 2·D·σ_z² (the
paper's choice, σ_z² = 1), summed over the scales C·{0.1, 0.2, 0.5, 1, 2, 5, 10} as in the authors'
code. Loss = Bernoulli reconstruction + λ·MMD (λ = 10 in the paper's CelebA setting; configurable).

Only probe's public plug-in API is used: ``ProbeModel``, the shared architectures and the
reconstruction loss.
"""

from __future__ import annotations

import torch

from probe.models.base import ProbeModel, bernoulli_reconstruction
from probe.models.nets import build_decoder, build_encoder


def imq_mmd(z: torch.Tensor, prior: torch.Tensor, scales=(0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)) -> torch.Tensor:
    """Unbiased MMD² estimate between samples ``z`` and ``prior`` [B, D] with IMQ kernels."""
    n, d = z.shape
    base = 2.0 * d
    zz, pp, zp = torch.cdist(z, z).pow(2), torch.cdist(prior, prior).pow(2), torch.cdist(z, prior).pow(2)
    off_diag = 1.0 - torch.eye(n, device=z.device, dtype=z.dtype)
    total = z.new_zeros(())
    for s in scales:
        c = base * s
        total = total + ((c / (c + zz)) * off_diag).sum() / (n * (n - 1))
        total = total + ((c / (c + pp)) * off_diag).sum() / (n * (n - 1))
        total = total - 2 * (c / (c + zp)).mean()
    return total


class WAEMMD(ProbeModel):
    name = "wae-mmd"

    @classmethod
    def default_config(cls) -> dict:
        return {**super().default_config(), "mmd_weight": 10.0}

    def __init__(self, config, image_shape, num_factors):
        super().__init__(config, image_shape, num_factors)
        self.encoder = build_encoder(self.config["arch"], image_shape, self.num_latent, gaussian=False)
        self.decoder = build_decoder(self.config["arch"], image_shape, self.num_latent)

    def loss(self, batch, step):
        z = self.encoder(batch.x)
        recon = bernoulli_reconstruction(self.decoder(z), batch.x)
        mmd = imq_mmd(z, torch.randn_like(z))
        return recon + self.config["mmd_weight"] * mmd, {"reconstruction": recon.detach(), "mmd": mmd.detach()}

    def encode(self, x):
        return self.encoder(x)

    def reconstruct(self, x):
        return torch.sigmoid(self.decoder(self.encoder(x)))
