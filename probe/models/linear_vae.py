"""Linear VAE of Zietlow et al. 2021 §4.1 (Theorem 1: linear VAEs perform PCA).

Encoder mean μ = M_E x + b_E (linear); encoder variance σ² is one learned value per latent,
independent of x (the setting of the theorem: ε⁽ⁱ⁾ ~ N(0, diag σ²)); decoder Dec(z) = M_D z + b_D
(linear). Loss, as the paper's eq. (4): L = E_i[ ‖Dec(z⁽ⁱ⁾) − x⁽ⁱ⁾‖² + β·KL(N(μ⁽ⁱ⁾, σ²) ‖ N(0, I)) ], i.e. a
Gaussian likelihood whose squared error is summed over pixels (no ½ factor: the paper's form, not
the normalised log-density), mean over the batch. The biases absorb the data mean, so the matrices
act on centred data as in the theorem.

For the PCA comparison: ``decoder_matrix()`` is M_D [m, D] (pixels × latents), ``encoder_matrix()``
is M_E [D, m], ``encoder_std()`` is σ [D]. Any input shape works (it is flattened), so the analysis
can feed non-image data as [B, 1, 1, m].
"""

from __future__ import annotations

import math

import torch
from torch import nn

from probe.models.base import ADAM_DEFAULTS, Batch, ProbeModel, normal_like


class LinearVAE(ProbeModel):
    """Linear encoder mean + learned diagonal σ, linear Gaussian decoder (PCA check, Zietlow §4.1)."""

    name = "linear-vae"
    vmappable = True

    def __init__(self, config: dict, image_shape, num_factors: int):
        super().__init__(config, image_shape, num_factors)
        self.num_inputs = math.prod(self.image_shape)
        self.encoder = nn.Linear(self.num_inputs, self.num_latent)
        self.encoder_log_var = nn.Parameter(torch.full((self.num_latent,), float(self.config["init_log_var"])))
        self.decoder = nn.Linear(self.num_latent, self.num_inputs)

    @classmethod
    def default_config(cls) -> dict:
        return {"num_latent": None, "beta": 1.0, "init_log_var": 0.0, **ADAM_DEFAULTS}

    # -- the matrices the PCA analysis reads ---------------------------------------------------------
    def decoder_matrix(self) -> torch.Tensor:
        """M_D, shape [m, D] (inputs × latents)."""
        return self.decoder.weight.detach()

    def encoder_matrix(self) -> torch.Tensor:
        """M_E, shape [D, m]."""
        return self.encoder.weight.detach()

    def encoder_std(self) -> torch.Tensor:
        """σ, shape [D]: the per-latent posterior standard deviation (independent of x)."""
        return torch.exp(0.5 * self.encoder_log_var.detach())

    # -- model ----------------------------------------------------------------------------------------
    def encode_distribution(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.encoder(x.flatten(1))
        return mean, self.encoder_log_var.expand_as(mean)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.decoder(z).view(-1, *self.image_shape)

    def loss(self, batch: Batch, step: int):
        x = batch.x.float()
        mean, log_var = self.encode_distribution(x)
        z = mean + torch.exp(0.5 * log_var) * normal_like(mean)
        recon = (self.decode(z) - x).pow(2).flatten(1).sum(1).mean()
        kl = (0.5 * (mean.pow(2) + log_var.exp() - log_var - 1).sum(1)).mean()
        return recon + float(self.config["beta"]) * kl, {"reconstruction": recon.detach(), "kl": kl.detach()}

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.encode_distribution(x)[0]

    def posterior_variance(self, x: torch.Tensor) -> torch.Tensor:
        return self.encode_distribution(x)[1].exp()

    def one_pass_representation(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        mean, log_var = self.encode_distribution(x)
        return {"codes": mean, "variance": log_var.exp()}

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        """Decoder mean of the posterior mean, clipped to [0, 1] (a linear decoder is unbounded)."""
        return self.decode(self.encode(x)).clamp(0, 1)
