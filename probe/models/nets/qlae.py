"""QLAE's published encoder/decoder (Hsu et al. 2023, appendix C.3; public code
``encoders/image.py`` and ``decoders/style_image.py``).

Encoder: blocks of [conv k3 s1, conv k3 s1, conv k4 s2] at one width per block (paper: 32, 64, 128,
256), each conv without bias → instance norm with affine (``GroupNorm(C, C)``, eps 1e-6) →
LeakyReLU(0.2); flatten the 4×4 map → dense 256 → dense 256 (ReLU) → linear to the latents.
Decoder (StyleGAN-like): z → dense 256 → dense 256 (ReLU) = w; a learnable 0.1-filled 4×4 input map;
blocks of [convT k3 s1, convT k3 s1, convT k4 s2] at widths 256, 128, 64, 32, each convT without
bias → LeakyReLU(0.2) → instance norm (no affine) → AdaIN modulation x·scale + shift with
(scale, shift) an affine projection of w; final conv k3 (no bias) to logits.

Paper vs public code: norm/activation order, LeakyReLU slope 0.2 and the final k3 conv follow the
code (the paper says slope 0.3, norm after activation in the encoder, a 1×1 final conv). The code
passes (scale, shift) through a ReLU (a default of its DenseBlock); we follow the paper's affine
projection and initialise the scale bias to 1 (identity modulation at init), since a ReLU'd
scale can die at 0.

Resolution: one stride-2 block per halving down to 4×4 (four at 64×64). At lower resolutions the
first encoder blocks / last decoder blocks are dropped (their widths taken from the end / start
of the width lists); at higher ones the outermost width is repeated.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def stage_count(resolution: int) -> int:
    if resolution < 8 or resolution & (resolution - 1):
        raise ValueError(f"the qlae architecture needs a power-of-two resolution >= 8, got {resolution}")
    return int(math.log2(resolution // 4))


def fit_widths(widths, n: int, keep: str) -> list[int]:
    """``n`` widths from ``widths``: the last n (keep='end') or first n (keep='start'), padded by
    repeating the outermost one."""
    widths = [int(w) for w in widths]
    if n <= len(widths):
        return widths[-n:] if keep == "end" else widths[:n]
    pad = n - len(widths)
    return [widths[0]] * pad + widths if keep == "end" else widths + [widths[-1]] * pad


class QLAEEncoder(nn.Module):
    def __init__(self, image_shape, num_latent: int, widths=(32, 64, 128, 256), dense_width: int = 256,
                 negative_slope: float = 0.2):
        super().__init__()
        channels, height, width = image_shape
        if height != width:
            raise ValueError(f"square images required, got {height}×{width}")
        layers: list[nn.Module] = []
        in_ch = channels
        for w in fit_widths(widths, stage_count(height), keep="end"):
            for k, s in ((3, 1), (3, 1), (4, 2)):
                layers += [nn.Conv2d(in_ch, w, k, stride=s, padding=1, bias=False),
                           nn.GroupNorm(w, w, eps=1e-6), nn.LeakyReLU(negative_slope)]
                in_ch = w
        self.features = nn.Sequential(*layers, nn.Flatten())
        self.head = nn.Sequential(nn.Linear(in_ch * 16, dense_width), nn.ReLU(),
                                  nn.Linear(dense_width, dense_width), nn.ReLU(),
                                  nn.Linear(dense_width, num_latent))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class StyleBlock(nn.Module):
    """convT (no bias) → LeakyReLU → instance norm (no affine) → x·scale + shift from w."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int, style_dim: int, negative_slope: float):
        super().__init__()
        self.conv = nn.ConvTranspose2d(in_ch, out_ch, kernel, stride=stride, padding=1, bias=False)
        self.act = nn.LeakyReLU(negative_slope)
        self.norm = nn.InstanceNorm2d(out_ch, affine=False, eps=1e-6)
        self.style = nn.Linear(style_dim, 2 * out_ch)
        with torch.no_grad():
            self.style.bias[:out_ch].fill_(1.0)
            self.style.bias[out_ch:].zero_()

    def forward(self, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        scale, shift = self.style(w)[:, :, None, None].chunk(2, dim=1)
        return self.norm(self.act(self.conv(h))) * scale + shift


class QLAEDecoder(nn.Module):
    def __init__(self, image_shape, num_latent: int, widths=(256, 128, 64, 32), dense_width: int = 256,
                 negative_slope: float = 0.2):
        super().__init__()
        channels, height, _ = image_shape
        widths = fit_widths(widths, stage_count(height), keep="start")
        self.mapping = nn.Sequential(nn.Linear(num_latent, dense_width), nn.ReLU(),
                                     nn.Linear(dense_width, dense_width), nn.ReLU())
        self.input_map = nn.Parameter(torch.full((widths[0], 4, 4), 0.1))
        blocks = []
        in_ch = widths[0]
        for w in widths:
            for k, s in ((3, 1), (3, 1), (4, 2)):
                blocks.append(StyleBlock(in_ch, w, k, s, dense_width, negative_slope))
                in_ch = w
        self.blocks = nn.ModuleList(blocks)
        self.out = nn.Conv2d(in_ch, channels, 3, padding=1, bias=False)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        w = self.mapping(z)
        h = self.input_map.unsqueeze(0).expand(z.shape[0], -1, -1, -1)
        for block in self.blocks:
            h = block(h, w)
        return self.out(h)
