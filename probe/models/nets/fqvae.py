"""FactorQVAE's DALL-E-dVAE-style backbone (Baykal et al., appendix A.3 Table 4; public code
``encoders/base_encoder.py``, ``decoders/base_decoder.py``, ``blocks/*``).

Encoder: conv k3 (C → n) → [EncResBlock n]×2 → MaxPool → [EncResBlock 2n]×2 → MaxPool →
[EncResBlock 4n]×2 → flatten → ReLU → Linear m → ReLU → Linear m → ReLU → Linear out.
EncResBlock: skip (1×1 conv if the width changes) + g·[ReLU → conv k3 to n/4 → ReLU → conv k3 →
ReLU → conv k3 → ReLU → conv 1×1 to n], g = 1/L² with L = 6 blocks (DALL-E's post-gain).
Decoder: Linear(d → c_in·(R/4)²) → [DecResBlock 4n]×2 → Upsample → [DecResBlock 2n]×2 → Upsample →
[DecResBlock n]×2 → ReLU → conv 1×1 to C. DecResBlock: skip + g·[ReLU → conv 1×1 to n/4 → (ReLU →
conv k3) ×3 → to n].  n = 128, m = 128, c_in = 64 (public code; the paper's table says 16).
All convs/linears are initialised N(0, 0.02) with zero bias (public code). No normalization.
Works at any resolution divisible by 4 (the feature map is R/4 × R/4).
"""

from __future__ import annotations

from torch import nn

NUM_BLOCKS = 6  # 3 groups × 2 blocks, DALL-E's n_layers for the residual post-gain


def normal_init(module: nn.Module, std: float = 0.02) -> None:
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class EncoderBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        hid = max(out_ch // 4, 1)
        self.skip = nn.Identity() if in_ch == out_ch else nn.Conv2d(in_ch, out_ch, 1)
        self.res = nn.Sequential(nn.ReLU(), nn.Conv2d(in_ch, hid, 3, padding=1), nn.ReLU(), nn.Conv2d(hid, hid, 3, padding=1),
                                 nn.ReLU(), nn.Conv2d(hid, hid, 3, padding=1), nn.ReLU(), nn.Conv2d(hid, out_ch, 1))
        self.gain = 1.0 / NUM_BLOCKS ** 2

    def forward(self, x):
        return self.skip(x) + self.gain * self.res(x)


class DecoderBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        hid = max(out_ch // 4, 1)
        self.skip = nn.Identity() if in_ch == out_ch else nn.Conv2d(in_ch, out_ch, 1)
        self.res = nn.Sequential(nn.ReLU(), nn.Conv2d(in_ch, hid, 1), nn.ReLU(), nn.Conv2d(hid, hid, 3, padding=1),
                                 nn.ReLU(), nn.Conv2d(hid, hid, 3, padding=1), nn.ReLU(), nn.Conv2d(hid, out_ch, 3, padding=1))
        self.gain = 1.0 / NUM_BLOCKS ** 2

    def forward(self, x):
        return self.skip(x) + self.gain * self.res(x)


def _check(image_shape):
    channels, height, width = image_shape
    if height != width or height % 4:
        raise ValueError(f"the fqvae architecture needs square images with a side divisible by 4, got {height}×{width}")
    return channels, height


class FQEncoder(nn.Module):
    def __init__(self, image_shape, out_dim: int, channels: int = 128, hidden: int = 128):
        super().__init__()
        c, r = _check(image_shape)
        n = channels
        self.features = nn.Sequential(
            nn.Conv2d(c, n, 3, padding=1),
            EncoderBlock(n, n), EncoderBlock(n, n), nn.MaxPool2d(2),
            EncoderBlock(n, 2 * n), EncoderBlock(2 * n, 2 * n), nn.MaxPool2d(2),
            EncoderBlock(2 * n, 4 * n), EncoderBlock(4 * n, 4 * n), nn.Flatten())
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(4 * n * (r // 4) ** 2, hidden), nn.ReLU(),
                                  nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))
        normal_init(self)

    def forward(self, x):
        return self.head(self.features(x))


class FQDecoder(nn.Module):
    def __init__(self, image_shape, num_latent: int, channels: int = 128, input_channels: int = 64):
        super().__init__()
        c, r = _check(image_shape)
        n = channels
        self.side = r // 4
        self.input_channels = input_channels
        self.project = nn.Linear(num_latent, input_channels * self.side ** 2)
        self.blocks = nn.Sequential(
            DecoderBlock(input_channels, 4 * n), DecoderBlock(4 * n, 4 * n), nn.Upsample(scale_factor=2, mode="nearest"),
            DecoderBlock(4 * n, 2 * n), DecoderBlock(2 * n, 2 * n), nn.Upsample(scale_factor=2, mode="nearest"),
            DecoderBlock(2 * n, n), DecoderBlock(n, n), nn.ReLU(), nn.Conv2d(n, c, 1))
        normal_init(self)

    def forward(self, z):
        return self.blocks(self.project(z).view(-1, self.input_channels, self.side, self.side))
