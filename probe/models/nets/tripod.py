"""Tripod's encoder/decoder (public code ``nn/encoder.py``, ``nn/decoder.py``, ``nn/layers.py``;
the paper only says "expressive convolutional architectures (Dhariwal & Nichol, 2021)").

Encoder (ResidualEncoder): conv k3 stem → per stage 2 residual blocks [(conv k3 → GroupNorm(C, C)
→ GELU) ×2 + skip] and a downsample (space-to-depth ×2 → conv 1×1 to the next width); widths 32, 64,
128, 256 → 512 at 4×4; global mean pool → Linear 512 + LayerNorm + GELU → Linear to the latents.
Decoder (ResidualDecoder): cond MLP z → [Linear 256 + LayerNorm + GELU] ×2; learnable constant
ones(512, 4, 4); per stage 2 conditional residual blocks [(conv k3 → instance norm (no affine) →
x·(1 + scale) + shift with (scale, shift) = Linear(cond) → GELU) ×2 + skip] and an upsample (nearest
×2 → conv k3); widths 512 → 256 → 128 → 64 → C (the last upsample conv gives the logits).

``activations(z)`` returns the decoder activations the normalized Hessian penalty regularizes:
the cond vector and the output of every up-stage except the last (at 64×64: cond, block0 256×8×8,
block1 128×16×16, block2 64×32×32, as ``hessian_regularization_on`` in the public code), then the
logits last. Internals of the residual blocks beyond what the reference notes state (two convs per
block, where the skip sits) are our reading of the code's layer names.

Resolution: one stage per halving down to 4×4; fewer stages drop the outermost widths.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from probe.models.nets.qlae import fit_widths, stage_count


class ResConvBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(in_ch, out_ch, 3, padding=1), nn.GroupNorm(out_ch, out_ch), nn.GELU(),
                                  nn.Conv2d(out_ch, out_ch, 3, padding=1), nn.GroupNorm(out_ch, out_ch), nn.GELU())
        self.skip = nn.Identity() if in_ch == out_ch else nn.Conv2d(in_ch, out_ch, 1)

    def forward(self, x):
        return self.skip(x) + self.body(x)


class Downsample(nn.Module):
    """space-to-depth ×2 then a 1×1 conv."""

    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.proj = nn.Conv2d(4 * in_ch, out_ch, 1)

    def forward(self, x):
        return self.proj(F.pixel_unshuffle(x, 2))


class TripodEncoder(nn.Module):
    def __init__(self, image_shape, num_latent: int, widths=(32, 64, 128, 256, 512), hidden: int = 512):
        super().__init__()
        channels, height, width = image_shape
        if height != width:
            raise ValueError(f"square images required, got {height}×{width}")
        n = stage_count(height)
        widths = fit_widths(widths, n + 1, keep="end")
        layers: list[nn.Module] = [nn.Conv2d(channels, widths[0], 3, padding=1)]
        for i in range(n):
            layers += [ResConvBlock(widths[i], widths[i]), ResConvBlock(widths[i], widths[i]),
                       Downsample(widths[i], widths[i + 1])]
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Linear(widths[-1], hidden), nn.LayerNorm(hidden), nn.GELU(),
                                  nn.Linear(hidden, num_latent))

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


class CondConv(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, cond_dim: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.norm = nn.InstanceNorm2d(out_ch, affine=False)
        self.style = nn.Linear(cond_dim, 2 * out_ch)

    def forward(self, h, cond):
        scale, shift = self.style(cond)[:, :, None, None].chunk(2, dim=1)
        return F.gelu(self.norm(self.conv(h)) * (1 + scale) + shift)


class ResCondConvBlock(nn.Module):
    def __init__(self, ch: int, cond_dim: int):
        super().__init__()
        self.a = CondConv(ch, ch, cond_dim)
        self.b = CondConv(ch, ch, cond_dim)

    def forward(self, h, cond):
        return h + self.b(self.a(h, cond), cond)


class TripodDecoder(nn.Module):
    def __init__(self, image_shape, num_latent: int, widths=(512, 256, 128, 64), cond_dim: int = 256):
        super().__init__()
        channels, height, _ = image_shape
        n = stage_count(height)
        widths = fit_widths(widths, n, keep="start") + [channels]
        self.cond = nn.Sequential(nn.Linear(num_latent, cond_dim), nn.LayerNorm(cond_dim), nn.GELU(),
                                  nn.Linear(cond_dim, cond_dim), nn.LayerNorm(cond_dim), nn.GELU())
        self.input_map = nn.Parameter(torch.ones(widths[0], 4, 4))
        self.stages = nn.ModuleList()
        for i in range(n):
            self.stages.append(nn.ModuleList([ResCondConvBlock(widths[i], cond_dim), ResCondConvBlock(widths[i], cond_dim),
                                              nn.Upsample(scale_factor=2, mode="nearest"),
                                              nn.Conv2d(widths[i], widths[i + 1], 3, padding=1)]))

    def activations(self, z: torch.Tensor) -> list[torch.Tensor]:
        """[cond, stage outputs except the last..., logits]."""
        cond = self.cond(z)
        out = [cond]
        h = self.input_map.unsqueeze(0).expand(z.shape[0], -1, -1, -1)
        for block_a, block_b, up, conv in self.stages:
            h = conv(up(block_b(block_a(h, cond), cond)))
            out.append(h)
        return out

    def forward(self, z):
        return self.activations(z)[-1]
