"""Deterministic autoencoder: the β = 0 reference point of the β-VAE family.

Loss: Bernoulli reconstruction of the images from a deterministic code, σ-cross-entropy summed over
pixels and averaged over the batch (disentanglement_lib's ``bernoulli_loss``); no regulariser.
Same encoder/decoder as the VAEs (``arch``), with a single linear head: the representation is the code.
"""

from __future__ import annotations

import torch

from probe.models.base import Batch, ProbeModel, bernoulli_reconstruction


class AE(ProbeModel):
    """Deterministic autoencoder, Bernoulli reconstruction loss (no KL)."""

    name = "ae"
    vmappable = True

    def __init__(self, config: dict, image_shape, num_factors: int):
        super().__init__(config, image_shape, num_factors)
        from probe.models.nets import build_decoder, build_encoder

        arch = self.config.get("arch", "locatello")
        self.encoder = build_encoder(arch, image_shape, self.num_latent, gaussian=False)
        self.decoder = build_decoder(arch, image_shape, self.num_latent)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Logits [B, C, H, W]."""
        return self.decoder(z)

    def loss(self, batch: Batch, step: int):
        recon = bernoulli_reconstruction(self.decode(self.encoder(batch.x)), batch.x)
        return recon, {"reconstruction": recon.detach()}

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.decode(self.encode(x)))
