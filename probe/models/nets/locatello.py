"""disentanglement_lib's conv encoder / deconv decoder (``methods/shared/architectures.py``), in PyTorch.

At 64×64: conv 32 k4 s2 → 32 k4 s2 → 64 k2 s2 → 64 k2 s2 (ReLU, TF "same" padding) → flatten 1024 →
dense 256 → heads; decoder dense 256 → dense 1024 → [64, 4, 4] → convT 64, 32, 32, C (k4 s2) → logits.
Other power-of-two resolutions R ≥ 16 use log2(R/4) stride-2 stages so the bottleneck is always
4×4×64: stages are removed from (or 32-channel k4 stages added to) the front of the encoder and the
back of the decoder. Initialisation copies TF's defaults (glorot-uniform kernels, zero biases).
The ``mlp`` variant is disentanglement_lib's ``fc_encoder``/``fc_decoder`` (1200-unit layers).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def num_stages(resolution: int) -> int:
    if resolution < 16 or resolution & (resolution - 1):
        raise ValueError(f"the locatello architecture needs a power-of-two resolution >= 16, got {resolution}")
    return int(math.log2(resolution // 4))


def encoder_stages(resolution: int) -> list[tuple[int, int]]:
    """(out_channels, kernel) per stride-2 conv; [(32,4),(32,4),(64,2),(64,2)] at 64×64."""
    n = num_stages(resolution)
    return [(32, 4)] * max(n - 2, 0) + [(64, 2)] * min(n, 2)


def decoder_stages(image_shape: tuple[int, int, int]) -> list[int]:
    """Out channels per ×2 upsampling stage of the decoder, from the 4×4×64 bottleneck to the image's channels:
    [64, 32, 32, C] at 64×64 (the transposed-convolution decoder and the manipulation's resize renderer share it)."""
    channels, height, _ = image_shape
    n = num_stages(height)
    return [64] + [32] * (n - 2) + [channels] if n >= 2 else [channels]


def upsampling_stack(image_shape: tuple[int, int, int], stage) -> nn.Sequential:
    """The decoder's stages from the 4×4×64 bottleneck to the image: ``stage(in_channels, out_channels)`` gives one
    ×2 stage's modules (``decoder_stages``' widths); ReLU between stages, none after the last (logits)."""
    outs = decoder_stages(image_shape)
    layers: list[nn.Module] = []
    for i, (in_ch, out_ch) in enumerate(zip([64] + outs[:-1], outs)):
        layers += stage(in_ch, out_ch)
        if i < len(outs) - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def bottleneck_dense(num_latent: int) -> nn.Sequential:
    """The decoder's dense part: latents -> 256 -> 1024 units (the 4×4×64 bottleneck), ReLU after each."""
    return nn.Sequential(nn.Linear(num_latent, 256), nn.ReLU(), nn.Linear(256, 1024), nn.ReLU())


def glorot_init(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class ConvEncoder(nn.Module):
    """Images [B, C, H, W] in [0, 1] -> (mean, logvar) if ``gaussian`` else codes [B, D]."""

    def __init__(self, image_shape: tuple[int, int, int], num_latent: int, gaussian: bool = True):
        super().__init__()
        channels, height, width = image_shape
        if height != width:
            raise ValueError(f"square images required, got {height}×{width}")
        layers: list[nn.Module] = []
        in_ch = channels
        for out_ch, k in encoder_stages(height):
            layers += [nn.Conv2d(in_ch, out_ch, k, stride=2, padding=1 if k == 4 else 0), nn.ReLU()]
            in_ch = out_ch
        self.features = nn.Sequential(*layers, nn.Flatten(), nn.Linear(64 * 4 * 4, 256), nn.ReLU())
        self.gaussian = gaussian
        self.means = nn.Linear(256, num_latent)
        self.log_var = nn.Linear(256, num_latent) if gaussian else None
        glorot_init(self)

    def forward(self, x: torch.Tensor):
        h = self.features(x)
        if self.gaussian:
            return self.means(h), self.log_var(h)
        return self.means(h)


class DeconvDecoder(nn.Module):
    """Latents [B, D] -> logits [B, C, H, W]."""

    def __init__(self, image_shape: tuple[int, int, int], num_latent: int):
        super().__init__()
        self.dense = bottleneck_dense(num_latent)
        self.deconv = upsampling_stack(image_shape, lambda i, o: [nn.ConvTranspose2d(i, o, 4, stride=2, padding=1)])
        glorot_init(self)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.deconv(self.dense(z).view(-1, 64, 4, 4))


class MLPEncoder(nn.Module):
    """disentanglement_lib ``fc_encoder``: flatten -> 1200 ReLU -> 1200 ReLU -> heads."""

    def __init__(self, image_shape: tuple[int, int, int], num_latent: int, gaussian: bool = True, hidden: int = 1200):
        super().__init__()
        n_in = int(torch.tensor(image_shape).prod())
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.gaussian = gaussian
        self.means = nn.Linear(hidden, num_latent)
        self.log_var = nn.Linear(hidden, num_latent) if gaussian else None
        glorot_init(self)

    def forward(self, x):
        h = self.features(x)
        return (self.means(h), self.log_var(h)) if self.gaussian else self.means(h)


class MLPDecoder(nn.Module):
    """disentanglement_lib ``fc_decoder``: 1200 tanh ×3 -> logits."""

    def __init__(self, image_shape: tuple[int, int, int], num_latent: int, hidden: int = 1200):
        super().__init__()
        self.image_shape = tuple(image_shape)
        n_out = int(torch.tensor(image_shape).prod())
        self.net = nn.Sequential(nn.Linear(num_latent, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, n_out))
        glorot_init(self)

    def forward(self, z):
        return self.net(z).view(-1, *self.image_shape)
