"""DIP-VAE I and II (Kumar et al. 2018) as implemented in disentanglement_lib (``vae.py:DIPVAE``).

Loss (minimised)::

    w·recon + KL + λ_od · Σ_{i≠j} C_ij² + λ_d · Σ_i (C_ii − 1)²,      λ_d = lambda_d_factor · λ_od

with w = ``reconstruction_weight`` (default 1; (64·64)/(H·W) restores the balance of the reference sweep's 64×64
images at another resolution, see ``probe.models.base``).

* DIP-VAE-I:  C = Cov_batch[μ(x)]                               (paper Eq. 6)
* DIP-VAE-II: C = Cov_batch[μ(x)] + mean_batch diag(σ²(x))      (paper Eq. 7)

The covariance is the biased batch estimate ``E[μμᵀ] − E[μ]E[μ]ᵀ`` (reference
``compute_covariance_z_mean``). Defaults follow the reference sweep (``unsupervised_study_v1``):
``lambda_d_factor`` = 10 for I and 1 for II; ``lambda_od`` ∈ {1, 2, 5, 10, 20, 50} there (Cheng et al.
Table 1: {2, 5, 10, 20, 50}); the default 10 is a member of both sweeps, not a tuned value. Zietlow et al.
do not use DIP-VAE, so there are no per-dataset presets.
"""

from __future__ import annotations

import torch

from probe.models.base import GaussianVAE, gaussian_kl


def covariance(mean: torch.Tensor) -> torch.Tensor:
    """Biased batch covariance [D, D] of ``mean`` [B, D] (divides by B, as the reference)."""
    mean = mean.float()
    centred = mean - mean.mean(0, keepdim=True)
    return centred.T @ centred / mean.shape[0]


def dip_regularizer(cov: torch.Tensor, lambda_od: float, lambda_d: float) -> torch.Tensor:
    """λ_od·Σ_{i≠j} C_ij² + λ_d·Σ_i (C_ii − 1)² (reference ``regularize_diag_off_diag_dip``)."""
    diag = torch.diagonal(cov)
    off = cov - torch.diag_embed(diag)
    return lambda_od * off.pow(2).sum() + lambda_d * (diag - 1).pow(2).sum()


class DIPVAEI(GaussianVAE):
    name = "dip-vae-i"
    dip_type = "i"

    @classmethod
    def default_config(cls) -> dict:
        return {**super().default_config(), "lambda_od": 10.0, "lambda_d_factor": 10.0}

    def regularizer(self, mean, logvar, z, batch, step):
        kl = gaussian_kl(mean, logvar)
        cov = covariance(mean)
        if self.dip_type == "ii":
            cov = cov + torch.diag_embed(torch.exp(logvar.float()).mean(0))
        lambda_od = float(self.config["lambda_od"])
        penalty = dip_regularizer(cov, lambda_od, float(self.config["lambda_d_factor"]) * lambda_od)
        return kl + penalty, {"kl": kl.detach(), "dip": penalty.detach()}


class DIPVAEII(DIPVAEI):
    name = "dip-vae-ii"
    dip_type = "ii"

    @classmethod
    def default_config(cls) -> dict:
        return {**super().default_config(), "lambda_d_factor": 1.0}
