"""Quantizers shared by the quantized-latent models (QLAE, Tripod, FactorQVAE/QVAE/dVAE).

* ``straight_through(x, q)``        value of ``q``, gradient of the identity w.r.t. ``x``.
* ``ScalarCodebooks``                one learnable scalar codebook per latent dimension (QLAE).
* ``finite_scalar_quantize``         tanh + rounding onto ``num_levels`` fixed values in [-1, 1] (Tripod's FSQ).
* ``RelaxedScalarQuantizer``         one global learnable scalar codebook, Gumbel-softmax relaxed
                                     categorical posterior (FactorQVAE / QVAE), or logits given by the
                                     encoder (dVAE).
* ``gumbel_temperature(step)``       FactorQVAE's schedule exp(-1e-5 · step).
* ``uniform_prior_kl(logits)``       KL(Cat(softmax(logits)) || Uniform(K)), the τ = 1 posterior.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


def straight_through(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``q`` in the forward pass, d/dx = identity in the backward pass (Bengio et al. 2013)."""
    return x + (q - x).detach()


# -- QLAE: per-dimension learnable scalar codebooks ---------------------------------------------------

@dataclass
class QuantizerOutput:
    continuous: torch.Tensor   # [B, D] pre-quantization values
    quantized: torch.Tensor    # [B, D] code values (no gradient path to the encoder)
    values: torch.Tensor       # [B, D] what the decoder sees (straight-through or relaxed)
    indices: torch.Tensor      # [B, D] long, code index per dimension


class ScalarCodebooks(nn.Module):
    """``num_latent`` learnable codebooks of ``num_values`` scalars each, initialised to
    ``linspace(-0.5, 0.5, num_values)`` (QLAE paper Table 8 and public code).

    ``forward(z_c)`` quantizes each dimension to its nearest value (|z_c - v|) and returns the
    straight-through values plus the two VQ losses, each the squared error averaged over dimensions
    and batch (the public code's per-example mean; the paper writes a squared norm):
    ``quantize = mean (sg(z_c) - q)^2`` moves the codebook, ``commit = mean (z_c - sg(q))^2`` the encoder.
    """

    def __init__(self, num_latent: int, num_values: int = 10, low: float = -0.5, high: float = 0.5):
        super().__init__()
        init = torch.linspace(low, high, num_values).repeat(num_latent, 1)
        self.values = nn.Parameter(init)  # [D, n_v]

    def forward(self, z_c: torch.Tensor) -> tuple[QuantizerOutput, torch.Tensor, torch.Tensor]:
        indices = self.nearest(z_c)
        q = torch.gather(self.values.unsqueeze(0).expand(z_c.shape[0], -1, -1), 2, indices.unsqueeze(-1)).squeeze(-1)
        quantize_loss = (z_c.detach() - q).pow(2).mean()
        commit_loss = (z_c - q.detach()).pow(2).mean()
        out = QuantizerOutput(continuous=z_c, quantized=q.detach(), values=straight_through(z_c, q), indices=indices)
        return out, quantize_loss, commit_loss

    def nearest(self, z_c: torch.Tensor) -> torch.Tensor:
        return (z_c.unsqueeze(-1) - self.values.unsqueeze(0)).abs().argmin(-1)

    def lookup(self, indices: torch.Tensor) -> torch.Tensor:
        return torch.gather(self.values.unsqueeze(0).expand(indices.shape[0], -1, -1), 2, indices.unsqueeze(-1)).squeeze(-1)


# -- Tripod: finite scalar quantization ---------------------------------------------------------------

def fsq_indices(z_c: torch.Tensor, num_levels: int) -> torch.Tensor:
    """Level index in {0, …, num_levels-1} of bounded continuous latents ``z_c`` in [-1, 1]."""
    return torch.round((z_c + 1) * (num_levels - 1) / 2).long()


def finite_scalar_quantize(raw: torch.Tensor, num_levels: int = 12) -> QuantizerOutput:
    """Tripod eq. (10): z_c = tanh(raw), z = 2/(n-1) · round((n-1)/2 · (z_c + 1)) − 1 with a
    straight-through rounding. Levels {-1, -1 + 2/(n-1), …, 1}; no codebook, no auxiliary loss."""
    z_c = torch.tanh(raw)
    scaled = (z_c + 1) * (num_levels - 1) / 2
    rounded = straight_through(scaled, torch.round(scaled))
    values = rounded * 2 / (num_levels - 1) - 1
    indices = torch.round(scaled.detach()).long()
    return QuantizerOutput(continuous=z_c, quantized=values.detach(), values=values, indices=indices)


# -- FactorQVAE / QVAE / dVAE: global codebook, relaxed categorical posterior ------------------------

def gumbel_temperature(step: int, rate: float = 1e-5) -> float:
    """τ = exp(−rate · t), t = training iteration (FactorQVAE appendix A; one iteration = one VAE
    update + one discriminator update here, not Lightning's double-counted global_step)."""
    return math.exp(-rate * float(step))


def uniform_prior_kl(logits: torch.Tensor) -> torch.Tensor:
    """KL(q || Uniform(K)) for q = softmax(logits) over the last axis, summed over codes and
    averaged over batch and latents (as the public code: Σ_k q log(qK + 1e-10), mean over b, j)."""
    q = F.softmax(logits.float(), dim=-1)
    k = logits.shape[-1]
    return (q * torch.log(q * k + 1e-10)).sum(-1).mean()


class RelaxedScalarQuantizer(nn.Module):
    """One global codebook of ``num_codes`` scalars shared by all latents (FactorQVAE/QVAE).

    Posterior q(z_j | x) = Cat(softmax(−d_j)), d_jk the distance between the encoder's scalar z_j
    and code e_k: squared (public code, default) or absolute (paper eq. 3), see ``distance``.
    Training: w = Gumbel-softmax(−d, τ) (soft, no straight-through) and z_q = w · e.
    Evaluation: hard nearest code. With ``logits_from_encoder`` (dVAE) the encoder gives the
    K logits per latent directly and the codebook only maps indices to values.
    The codebook is initialised N(0, 1) (public code's ``nn.Embedding`` default).
    """

    def __init__(self, num_codes: int = 64, distance: str = "squared", logits_from_encoder: bool = False):
        super().__init__()
        if distance not in ("squared", "absolute"):
            raise ValueError(f"distance must be 'squared' or 'absolute', got {distance!r}")
        self.num_codes = int(num_codes)
        self.distance = distance
        self.logits_from_encoder = logits_from_encoder
        self.codebook = nn.Parameter(torch.randn(num_codes))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """[B, D, K] posterior logits from encoder output ``h`` ([B, D], or [B, D·K] for dVAE)."""
        if self.logits_from_encoder:
            return h.view(h.shape[0], -1, self.num_codes)
        diff = h.unsqueeze(-1) - self.codebook
        return -(diff.pow(2) if self.distance == "squared" else diff.abs())

    def relaxed(self, logits: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(soft one-hots w [B, D, K], values w·e [B, D]) with Gumbel noise."""
        w = F.gumbel_softmax(logits, tau=temperature, hard=False, dim=-1)
        return w, w @ self.codebook

    def hard(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices [B, D] long, code values [B, D]) of the most probable code."""
        idx = logits.argmax(-1)
        return idx, self.codebook[idx]
