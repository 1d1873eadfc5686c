"""SlowVAE (Klindt et al. 2021), loss exactly as the reference code ``bethgelab/slow_disentanglement``
(``master:scripts/solver.py``), on pairs (x = x_{t−1}, x_next = x_t) from a Laplace transition.

Posterior q(z|x) = N(μ, diag σ²); prior N(0, I) on every frame; transition prior
p(z_t | z_{t−1}) = Π_i (λ/2) exp(−λ |z_t,i − z_{t−1,i}|). With B pairs (2B images)::

    loss = 2·w·R + β·KL_N + γ·(CE_L − H)
    R    = mean over 2B images of Σ_pixels BCE(logits, x)                 (Bernoulli decoder)
    KL_N = mean over 2B images of Σ_i ½(μ² + σ² − log σ² − 1)
    CE_L = mean over B pairs of Σ_i [CE(q⁰; Lap(μ¹, 1/λ)) + CE(q¹; Lap(μ⁰, 1/λ))]   ("both ways")
    H    = mean over 2B images of Σ_i ½ log(2πe σ²)

w = ``reconstruction_weight`` (default 1; (64·64)/(H·W) restores Table 2's balance at another resolution, see
``probe.models.base``); the logged ``reconstruction`` is the unweighted R. ``CE`` is the closed-form cross
entropy of a Gaussian against a Laplace located at the *other* frame's posterior mean (``laplace_cross_entropy``);
no sampling, no stop-gradient (both means get gradients).
Reference quirks kept on purpose and documented: (a) ``2·R`` sums reconstruction over the pair while KL_N
is per image, so the effective per-image β is β/2; (b) the two-way Laplace term subtracts the per-image
entropy once, not H⁰ + H¹.

Defaults (reference ``main.py`` / ``demo.ipynb``, "best params found by UDR"): β = 1, γ = 10, λ
(``rate_prior``) = 6. Zietlow et al. Table 2: β = 1 on both datasets. ``train_defaults`` sets 32 pairs per
batch = the reference's 64 images. Encoder/decoder are the shared disentanglement_lib nets (Zietlow et
al. take other hyperparameters from the disentanglement library), not the reference's BetaVAE_H.

Pairs: ``pair_sampler`` returns ``probe.data.samplers.LaplaceTransitionSampler`` (truncated, no wrap,
frozen factors copied, ≥ 1 change). ``transition_rate`` is the data rate r of the scale ln(n)/r: a number,
or ``[lo, hi]`` for a per-pair U(lo, hi) draw; default ``[1, 10]`` (the reference demo's ``rate=-1``,
commented "random rate (for LAP)"; its CLI default is 1). ``frozen_factors``: ``None`` freezes the
factor named "shape" when the factor names are passed to ``pair_sampler`` (the reference marks shape
categorical in dSprites and Shapes3D), else nothing; or a list of factor indices/names. The dSprites and
Shapes3D presets set the index of "shape" explicitly ([0] and [4]) so that the freeze does not depend on
the caller passing names.
"""

from __future__ import annotations

import math

import torch

from probe.data.samplers import LaplaceTransitionSampler, resolve_frozen_factors
from probe.models.base import Batch, GaussianVAE, bernoulli_reconstruction, gaussian_kl, reparameterise

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_LOG_2PI_E = math.log(2.0 * math.pi * math.e)


def laplace_cross_entropy(delta: torch.Tensor, logvar: torch.Tensor, rate: float) -> torch.Tensor:
    """E_{z∼N(μ, σ²)}[−log Lap(z; m, 1/λ)] elementwise, with ``delta = μ − m`` (reference
    ``compute_cross_ent_laplace``): −log(λ/2) + λ[σ√(2/π) exp(−δ²/2σ²) + δ(2Φ(δ/σ) − 1)]."""
    sigma = torch.exp(0.5 * logvar)
    folded_mean = sigma * _SQRT_2_OVER_PI * torch.exp(-delta.pow(2) / (2 * sigma.pow(2))) \
        + delta * torch.erf(delta / (sigma * math.sqrt(2.0)))          # E|z − m|; 2Φ(a) − 1 = erf(a/√2)
    return -math.log(rate / 2.0) + rate * folded_mean


def gaussian_entropy(logvar: torch.Tensor) -> torch.Tensor:
    """Elementwise ½ log(2πe σ²)."""
    return 0.5 * (logvar + _LOG_2PI_E)


def laplace_transition_kl(mean0, logvar0, mean1, logvar1, rate: float) -> torch.Tensor:
    """The reference's "KL_L" = CE_L − H for frames 0 and 1 (posterior parameters [B, D] each):
    mean over pairs of the two-way Laplace cross entropy minus the mean per-image Gaussian entropy."""
    cross_ent = (laplace_cross_entropy(mean0 - mean1, logvar0, rate)
                 + laplace_cross_entropy(mean1 - mean0, logvar1, rate)).sum(1).mean()
    entropy = gaussian_entropy(torch.cat([logvar0, logvar1])).sum(1).mean()
    return cross_ent - entropy


class SlowVAE(GaussianVAE):
    name = "slow-vae"
    needs_pairs = True
    train_defaults = {"batch_size": 32}   # pairs; = the reference's 64 images

    @classmethod
    def default_config(cls) -> dict:
        return {**super().default_config(), "beta": 1.0, "gamma": 10.0, "rate_prior": 6.0,
                "transition_rate": [1.0, 10.0], "frozen_factors": None}

    @classmethod
    def presets(cls) -> dict[str, dict]:
        # β: Zietlow et al. 2021, Table 2. frozen_factors: "shape" is factor 0 of dSprites and 4 of
        # Shapes3D in the official (and probe.data.synth) factor order; the reference freezes it.
        return {"dsprites": {"beta": 1.0, "frozen_factors": [0]}, "shapes3d": {"beta": 1.0, "frozen_factors": [4]}}

    def pair_sampler(self, factor_sizes, factor_names=None) -> LaplaceTransitionSampler:
        frozen = resolve_frozen_factors(self.config.get("frozen_factors"), factor_names, len(factor_sizes))
        return LaplaceTransitionSampler(factor_sizes, frozen=frozen, rate=self.config["transition_rate"])

    def loss(self, batch: Batch, step: int):
        if batch.x_next is None:
            raise ValueError("SlowVAE needs pairs: the batch must carry x_next")
        x = torch.cat([batch.x, batch.x_next])                      # [2B, C, H, W]: frame 0 then frame 1
        mean, logvar = self.encode_distribution(x)
        z = reparameterise(mean, logvar)
        recon = bernoulli_reconstruction(self.decode(z), x)        # mean over the 2B images
        kl_normal = gaussian_kl(mean, logvar)
        mean, logvar = mean.float(), logvar.float()
        b = batch.x.shape[0]
        mu0, mu1 = mean[:b], mean[b:]
        kl_laplace = laplace_transition_kl(mu0, logvar[:b], mu1, logvar[b:], float(self.config["rate_prior"]))
        loss = (2.0 * self.weighted_reconstruction(recon)           # 2·w·R + β·KL_N + γ·(CE_L − H)
                + self.config["beta"] * kl_normal + self.config["gamma"] * kl_laplace)
        return loss, {"reconstruction": recon.detach(), "kl": kl_normal.detach(), "kl_laplace": kl_laplace.detach(),
                      "l1_transition": (mu0 - mu1).abs().mean().detach()}
