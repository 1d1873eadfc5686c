"""The manipulation network m_ψ(w) and the folding that keeps manipulated images in [0, 1].

Zietlow et al. 2021 (§4.4, appendix B.1): m has "almost the same architecture as the CNN decoder"
of disentanglement_lib; "the only difference lies in the input MLP which was extended by a single
neuron hidden layer", which compresses the ground-truth factors w to one scalar s from which the
modification is rendered. The output is bounded by tanh so that ‖m(w)‖∞ ≤ 1 and the manipulated
image x' = x + ε·m(w) is within ε of x in the max norm (Eq. 12).

Factor input: each factor's class index is min-max normalised to [-1, 1] (a factor with one class
maps to 0). Class indices are what disentanglement_lib calls the factors; they are monotone in the
physical values of every ordinal factor.

Bottleneck: by default the single neuron is linear, s = a·φ(w) + b, where φ is an optional MLP
(``input_hidden``, empty in the paper); no activation on s, so no half of the factor space is mapped
to one constant (a ReLU would kill gradients for every w with s < 0).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from probe.models.nets.locatello import DeconvDecoder, glorot_init


def fold(x: torch.Tensor) -> torch.Tensor:
    """Reflect values that left [0, 1] back inside: x − 2·ReLU(x − 1) + 2·ReLU(−x) (appendix B.1).

    The identity on [0, 1]; for x ∈ [−1, 2] the result lies in [0, 1]. Folding never moves a
    manipulated pixel further from its original value in [0, 1] than the unfolded one was.
    """
    return x - 2 * torch.relu(x - 1) + 2 * torch.relu(-x)


def fold_numpy(x: np.ndarray) -> np.ndarray:
    return x - 2 * np.maximum(x - 1, 0) + 2 * np.maximum(-x, 0)


def to_uint8(x: np.ndarray) -> np.ndarray:
    """[0, 1] floats -> uint8 by rounding to the nearest level (error ≤ 0.5/255)."""
    return np.clip(np.rint(np.asarray(x, dtype=np.float64) * 255.0), 0, 255).astype(np.uint8)


def normalised_factors(factors: np.ndarray | torch.Tensor, factor_sizes) -> torch.Tensor:
    """Class indices [..., K] -> float32 in [-1, 1]: 2·index/(size − 1) − 1 (0 for one-class factors)."""
    factors = torch.as_tensor(np.asarray(factors) if not isinstance(factors, torch.Tensor) else factors)
    sizes = torch.as_tensor(list(factor_sizes), dtype=torch.float32, device=factors.device)
    span = torch.clamp(sizes - 1, min=1)
    w = 2 * factors.to(torch.float32) / span - 1
    return torch.where(sizes > 1, w, torch.zeros_like(w))


class ManipulationNet(nn.Module):
    """m_ψ(w): factors w [B, K] in [-1, 1] -> manipulation [B, C, H, W] in [-1, 1].

    ``input_hidden``: widths of optional ReLU layers before the one-neuron bottleneck (paper: none).
    After the bottleneck comes disentanglement_lib's deconv decoder with a 1-dimensional input
    (dense 256 → dense 1024 → 4×4×64 → transposed convs), then tanh.
    """

    def __init__(self, num_factors: int, image_shape: tuple[int, int, int], input_hidden=(), bottleneck_activation: str = "none"):
        super().__init__()
        layers: list[nn.Module] = []
        width = int(num_factors)
        for h in input_hidden:
            layers += [nn.Linear(width, int(h)), nn.ReLU()]
            width = int(h)
        layers.append(nn.Linear(width, 1))
        if bottleneck_activation == "tanh":
            layers.append(nn.Tanh())
        elif bottleneck_activation != "none":
            raise ValueError(f"bottleneck_activation must be 'none' or 'tanh', got {bottleneck_activation!r}")
        self.to_scalar = nn.Sequential(*layers)
        self.render = DeconvDecoder(tuple(image_shape), 1)
        glorot_init(self.to_scalar)

    def bottleneck(self, w: torch.Tensor) -> torch.Tensor:
        """The scalar s(w) [B, 1] that m depends on."""
        return self.to_scalar(w)

    def from_bottleneck(self, s: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.render(s))

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return self.from_bottleneck(self.bottleneck(w))


def manipulate(x: torch.Tensor, m: torch.Tensor, epsilon: float) -> torch.Tensor:
    """x' = fold(x + ε·m) for images x in [0, 1] (any layout, same shape as m)."""
    return fold(x + epsilon * m)
