"""β-TCVAE (Chen et al. 2018) as implemented in disentanglement_lib (``methods/unsupervised/vae.py``).

Loss (per batch, minimised)::

    w·recon + KL + (β - 1) · TC(z)

with w = ``reconstruction_weight`` (default 1; (64·64)/(H·W) restores Table 2's balance at another resolution, see
``probe.models.base``). At w = 1 this is Chen et al. Eq. 5 with α = γ = 1 written as ``ELBO + (1 - β)·TC``
(disentanglement_lib's form).
``TC`` is the minibatch-weighted-sampling (MWS) estimate **without the log(N·M) constants**, exactly
disentanglement_lib's ``total_correlation``; the dropped constant is ``(L - 1)·log(B·N)`` and does not
change the gradients. The paper's own code uses minibatch-stratified sampling; we follow the reference
code Zietlow et al. used (their appendix C: "We used the implementations of the Disentanglement Library").

Hyperparameter ``beta``: Zietlow et al. 2021 Table 2 — 6 (dSprites), 32 (Shapes3D); the default is the
dSprites value. disentanglement_lib's sweep is {1, 2, 4, 6, 8, 10}.
"""

from __future__ import annotations

import math

import torch

from probe.models.base import GaussianVAE, gaussian_kl

_LOG_2PI = math.log(2.0 * math.pi)


def gaussian_log_density(samples: torch.Tensor, mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """Elementwise log N(samples; mean, exp(logvar)) (disentanglement_lib ``gaussian_log_density``)."""
    diff = samples - mean
    return -0.5 * (diff * diff * torch.exp(-logvar) + logvar + _LOG_2PI)


def total_correlation(z: torch.Tensor, mean: torch.Tensor, logvar: torch.Tensor, max_elements: int = 1 << 18) -> torch.Tensor:
    """MWS estimate of TC(z) on a batch, without the log(NM) constants (disentanglement_lib).

    With ``log q(z_j|x_i)`` the per-latent Gaussian log densities of sample j under posterior i::

        log q(z_j)        ≈ logsumexp_i Σ_l log q(z_jl | x_i)
        log Π_l q(z_jl)   ≈ Σ_l logsumexp_i log q(z_jl | x_i)
        TC                = mean_j [log q(z_j) - log Π_l q(z_jl)]

    Same arithmetic as disentanglement_lib; the B×B×L tensor is laid out [l, j, i] (reductions over the
    contiguous axis) and built in chunks of samples j of at most ``max_elements`` entries, so large
    batches (the reference test uses B = 10 000, L = 10) stay small in memory and fast; at training sizes
    it is a single chunk. Computed in float32 (float64 if the inputs are float64).
    """
    dtype = torch.float64 if z.dtype == torch.float64 else torch.float32
    b, num_latent = z.shape
    z_t = z.to(dtype).T.contiguous()                                 # [l, j]
    mean_t = mean.to(dtype).T.contiguous()[:, None, :]               # [l, 1, i]
    inv_var_t = torch.exp(-logvar.to(dtype)).T.contiguous()[:, None, :]
    const_t = (logvar.to(dtype) + _LOG_2PI).T.contiguous()[:, None, :]
    rows = max(1, max_elements // max(b * num_latent, 1))
    parts = []
    for start in range(0, b, rows):
        diff = z_t[:, start:start + rows, None] - mean_t               # [l, j, i]
        log_q = -0.5 * torch.addcmul(const_t, diff * diff, inv_var_t)
        log_qz_product = torch.logsumexp(log_q, dim=2).sum(dim=0)      # [j]
        log_qz = torch.logsumexp(log_q.sum(dim=0), dim=1)              # [j]
        parts.append(log_qz - log_qz_product)
    return torch.cat(parts).mean()


class BetaTCVAE(GaussianVAE):
    name = "beta-tcvae"

    @classmethod
    def default_config(cls) -> dict:
        return {**super().default_config(), "beta": 6.0}

    @classmethod
    def presets(cls) -> dict[str, dict]:
        return {"dsprites": {"beta": 6.0}, "shapes3d": {"beta": 32.0}}   # Zietlow et al. 2021, Table 2

    def regularizer(self, mean, logvar, z, batch, step):
        kl = gaussian_kl(mean, logvar)
        tc = total_correlation(z, mean, logvar)
        return kl + (self.config["beta"] - 1.0) * tc, {"kl": kl.detach(), "tc": tc.detach()}
