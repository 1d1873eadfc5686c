"""Deliberately broken plug-ins for the audit/plug-in tests."""

import torch

from probe.models.base import ProbeModel, bernoulli_reconstruction
from probe.models.nets import build_decoder, build_encoder


class _Base(ProbeModel):
    def __init__(self, config, image_shape, num_factors):
        super().__init__(config, image_shape, num_factors)
        self.encoder = build_encoder("mlp", image_shape, self.num_latent, gaussian=False)
        self.decoder = build_decoder("mlp", image_shape, self.num_latent)

    def loss(self, batch, step):
        return bernoulli_reconstruction(self.decoder(self.encoder(batch.x)), batch.x), {}

    def encode(self, x):
        return self.encoder(x)


class NoEncode(ProbeModel):
    name = "no-encode"

    def loss(self, batch, step):
        return torch.zeros((), requires_grad=True), {}


class WrongShape(_Base):
    name = "wrong-shape"

    def encode(self, x):
        return self.encoder(x).reshape(-1)  # [B*D] instead of [B, D]


class NaNLoss(_Base):
    name = "nan-loss"

    def loss(self, batch, step):
        loss, logs = super().loss(batch, step)
        return loss * float("nan"), logs


class NaNLater(_Base):
    """Fine on the first batch, NaN from step 3 on: caught by the trainer, not the pre-flight check."""

    name = "nan-later"

    def loss(self, batch, step):
        loss, logs = super().loss(batch, step)
        return (loss * float("nan") if step >= 3 else loss), logs


class NotAModule:
    pass
