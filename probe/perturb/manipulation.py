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

Deviation from appendix B.1 (the default ``bottleneck_embedding="odd"``): m(w) = tanh(r(s) − r(−s)),
where r is the paper's renderer. The paper's tanh(r(s)) has zero-initialised biases and ReLUs, so r is
positively homogeneous in s (r(α·s) = α·r(s), α > 0): one pattern per sign of s, nothing near s = 0,
and in our runs the s < 0 branch died and left 39 % of the images unmodified. The odd form gives both
signs a pattern, and over a symmetric spread of s it has no constant part (a constant pattern moves
the decoders' losses but not the data's covariance, and it is what every other fix learned). Measured
in docs/notes/perturb.md; ``bottleneck_embedding="linear"`` is the paper's network.

Upsampling (``upsample``): the paper's renderer, disentanglement_lib's decoder, upsamples with stride-2 transposed
convolutions (4×4 kernels), whose uneven overlap paints a period-2 checkerboard even on a constant input (Odena et al.
2016, "Deconvolution and checkerboard artifacts"); the learned m on Shapes3D is such a saturated checkerboard.
``upsample="resize"`` (a deviation, off by default) replaces each transposed convolution by a nearest-neighbour
resize ×2 and a 3×3 convolution ("resize-bilinear": bilinear resize), with replicate padding, so a spatially constant
feature map stays exactly constant through the renderer (no checkerboard and no border artefact by construction).
``manipulation_smoothness`` measures how high-frequency an m is.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from probe.models.nets.locatello import DeconvDecoder, bottleneck_dense, glorot_init, upsampling_stack


BOTTLENECK_EMBEDDINGS = ("linear", "circle", "odd")  # what the renderer sees of s (ManipulationNet)
RENDER_BIAS_INITS = ("zeros", "input", "uniform")     # how the renderer's biases start (ManipulationNet)
UPSAMPLES = ("transposed", "resize", "resize-bilinear")  # how the renderer upsamples (ManipulationNet)
HIGH_FREQUENCY_CUTOFF = 0.25  # cycles per pixel: a spatial frequency with max(|f_x|, |f_y|) ≥ this is "high"


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


class ResizeConvDecoder(nn.Module):
    """disentanglement_lib's deconv decoder with every stride-2 transposed convolution replaced by a ×2 resize
    (``mode`` "nearest" or "bilinear") and a 3×3 convolution with replicate padding (Odena et al. 2016). Same dense
    part, same channel widths, same output size; latents [B, D] -> [B, C, H, W]. A spatially constant feature map
    stays constant through every stage (resize, convolution and ReLU all map constants to constants), so the
    renderer cannot paint a checkerboard that its input does not ask for."""

    def __init__(self, image_shape: tuple[int, int, int], num_latent: int, mode: str = "nearest"):
        super().__init__()
        resize = {} if mode == "nearest" else {"align_corners": False}
        self.dense = bottleneck_dense(num_latent)
        self.deconv = upsampling_stack(image_shape, lambda i, o: [nn.Upsample(scale_factor=2, mode=mode, **resize),
                                                                  nn.Conv2d(i, o, 3, padding=1, padding_mode="replicate")])
        glorot_init(self)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        # Channels-last memory order inside the stack: oneDNN's resize + replicate-pad + 3×3 convolutions run 2.2× faster
        # on it (one thread, 2,000 renders: 5.2 → 2.3 s; apply renders every image of a store). Same values up to float
        # summation order (≈ 3e-7); what forward returns is laid out as before. (The VAEs' transposed-convolution decoders
        # gained nothing from it in a training step: measured, left as they are.)
        h = self.dense(z).view(-1, 64, 4, 4).contiguous(memory_format=torch.channels_last)
        return self.deconv(h).contiguous()


def make_renderer(image_shape: tuple[int, int, int], num_latent: int, upsample: str = "transposed") -> nn.Module:
    """The renderer of m: the paper's transposed convolutions (disentanglement_lib's ``DeconvDecoder``) or a
    resize-convolution decoder of the same widths (``UPSAMPLES``)."""
    if upsample == "transposed":
        return DeconvDecoder(tuple(image_shape), num_latent)
    if upsample in ("resize", "resize-bilinear"):
        return ResizeConvDecoder(tuple(image_shape), num_latent, "nearest" if upsample == "resize" else "bilinear")
    raise ValueError(f"upsample must be one of {UPSAMPLES}, got {upsample!r}")


class ManipulationNet(nn.Module):
    """m_ψ(w): factors w [B, K] in [-1, 1] -> manipulation [B, C, H, W] in [-1, 1].

    ``input_hidden``: widths of optional ReLU layers before the one-neuron bottleneck (paper: none).
    After the bottleneck comes disentanglement_lib's deconv decoder with a 1-dimensional input
    (dense 256 → dense 1024 → 4×4×64 → transposed convs), then tanh; ``upsample="resize"`` /
    ``"resize-bilinear"`` renders with resize-convolutions instead (``ResizeConvDecoder``). ``normalise_linf``
    rescales each image's m to ‖m‖∞ = 1.
    """

    def __init__(self, num_factors: int, image_shape: tuple[int, int, int], input_hidden=(), bottleneck_activation: str = "none",
                 render_bias_init: str = "zeros", bottleneck_embedding: str = "linear", upsample: str = "transposed",
                 normalise_linf: bool = False):
        super().__init__()
        # ``normalise_linf``: m(w) / ‖m(w)‖∞ per image, so every image uses the whole budget ε. The frozen random-ψ
        # control uses it: an untrained renderer's |m|∞ is ~0.005, far below the learned m's saturated ±1, and a control
        # of "the same ε" should spend it (docs/notes/perturb.md)
        self.normalise_linf = bool(normalise_linf)
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
        if bottleneck_embedding not in BOTTLENECK_EMBEDDINGS:
            raise ValueError(f"bottleneck_embedding must be one of {BOTTLENECK_EMBEDDINGS}, got {bottleneck_embedding!r}")
        # "circle": the renderer sees (cos πs, sin πs) instead of s. Its input then has norm 1 for every w, so a
        # positively homogeneous renderer (zero biases, ReLUs) has no region where m shrinks to 0 (s ≈ 0) and no
        # half it can switch off (s < 0); m changes along s by turning, not by scaling (docs/notes/perturb.md).
        self.bottleneck_embedding = bottleneck_embedding
        # "odd": m(w) = tanh(render(s) − render(−s)), an odd function of s. Both signs of s get a pattern (the
        # renderer's s < 0 units cannot die and switch half the data set off), and over a symmetric spread of s the
        # manipulation has no constant part: it cannot add one pattern to every image, which moves the decoders'
        # losses but not the data's covariance.
        self.upsample = upsample
        self.render = make_renderer(tuple(image_shape), 2 if bottleneck_embedding == "circle" else 1, upsample)
        glorot_init(self.to_scalar)
        if render_bias_init in ("uniform", "input"):
            # With zero biases and ReLUs the renderer is positively homogeneous in s: render(α·s) = α·render(s)
            # for α > 0, so m(w) = tanh(|s|·A±) with one pattern per sign of s, ~0 near s = 0, and the units that
            # carry one sign can die and leave half of the data set unmodified (docs/notes/perturb.md). PyTorch's
            # default bias init U(±1/√fan_in) breaks the homogeneity: "input" in the renderer's first dense layer
            # only (its ReLU kinks then sit at different s, a generic piecewise-linear function of s), "uniform" in
            # every layer.
            layers = [self.render.dense[0]] if render_bias_init == "input" else [
                m for m in self.render.modules() if isinstance(m, (nn.Linear, nn.ConvTranspose2d, nn.Conv2d))]
            for module in layers:
                fan_in, _ = nn.init._calculate_fan_in_and_fan_out(module.weight)
                bound = 1.0 / float(fan_in) ** 0.5
                nn.init.uniform_(module.bias, -bound, bound)
        elif render_bias_init not in RENDER_BIAS_INITS:
            raise ValueError(f"render_bias_init must be one of {RENDER_BIAS_INITS}, got {render_bias_init!r}")

    def bottleneck(self, w: torch.Tensor) -> torch.Tensor:
        """The scalar s(w) [B, 1] that m depends on."""
        return self.to_scalar(w)

    def from_bottleneck(self, s: torch.Tensor) -> torch.Tensor:
        if self.bottleneck_embedding == "circle":
            s = torch.cat([torch.cos(torch.pi * s), torch.sin(torch.pi * s)], dim=1)
        if self.bottleneck_embedding == "odd":
            m = torch.tanh(self.render(s) - self.render(-s))
        else:
            m = torch.tanh(self.render(s))
        if self.normalise_linf:  # every image's m reaches ‖m‖∞ = 1: the whole budget ε (an all-zero m stays zero)
            m = m / m.abs().amax(dim=tuple(range(1, m.dim())), keepdim=True).clamp_min(1e-12)
        return m

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return self.from_bottleneck(self.bottleneck(w))


def manipulate(x: torch.Tensor, m: torch.Tensor, epsilon: float) -> torch.Tensor:
    """x' = fold(x + ε·m) for images x in [0, 1] (any layout, same shape as m)."""
    return fold(x + epsilon * m)


def _high_frequency_mask(height: int, width: int, device=None) -> torch.Tensor:
    """[H, W] bool: the DFT bins with max(|f_y|, |f_x|) ≥ ``HIGH_FREQUENCY_CUTOFF`` cycles per pixel."""
    fy = torch.fft.fftfreq(height, device=device).abs()
    fx = torch.fft.fftfreq(width, device=device).abs()
    return torch.maximum(fy[:, None], fx[None, :]) >= HIGH_FREQUENCY_CUTOFF


class SmoothnessSums:
    """Running sums behind ``manipulation_smoothness`` over batches of manipulations [B, C, H, W]."""

    def __init__(self):
        self.abs_diff = self.pairs = self.sq = self.values = self.high = self.energy = 0.0
        self.white = None

    @torch.no_grad()
    def add(self, m: torch.Tensor) -> None:
        m = m.detach().float()
        dx, dy = (m[..., :, 1:] - m[..., :, :-1]).abs(), (m[..., 1:, :] - m[..., :-1, :]).abs()
        self.abs_diff += float(dx.sum() + dy.sum())
        self.pairs += dx.numel() + dy.numel()
        self.sq += float(m.pow(2).sum())
        self.values += m.numel()
        power = torch.fft.fft2(m).abs().pow(2)       # Parseval: power.sum() / (H·W) = (m²).sum()
        mask = _high_frequency_mask(m.shape[-2], m.shape[-1], m.device)
        self.high += float(power[..., mask].sum())
        self.energy += float(power.sum())
        self.white = float(mask.float().mean())

    def result(self) -> dict:
        rms = (self.sq / self.values) ** 0.5 if self.values else 0.0
        return {"neighbour_diff_ratio": (self.abs_diff / self.pairs) / rms if rms > 0 and self.pairs else 0.0,
                "high_frequency_share": self.high / self.energy if self.energy > 0 else 0.0,
                "white_noise_high_frequency_share": self.white, "cutoff_cycles_per_pixel": HIGH_FREQUENCY_CUTOFF,
                "rms": rms}


def manipulation_smoothness(m: torch.Tensor) -> dict:
    """How high-frequency the manipulations m [B, C, H, W] are, pooled over the batch (scale-free: m·a scores alike).

    * ``neighbour_diff_ratio``: mean |m(p) − m(q)| over horizontally and vertically neighbouring pixels p, q, over m's
      RMS. 0 for a constant m, 2 for a ±a checkerboard, ≈ 1.1 for white noise, ≪ 1 for a smooth pattern.
    * ``high_frequency_share``: the share of m's energy (|DFT|² over H, W, DC included) at spatial frequencies with
      max(|f_x|, |f_y|) ≥ ``HIGH_FREQUENCY_CUTOFF`` (¼ cycle per pixel; the Nyquist frequency is ½). 1 for a
      checkerboard, 0 for a constant; ``white_noise_high_frequency_share`` is white noise's value for this image size
      (the share of the DFT bins above the cutoff, ≈ 0.75).
    * ``rms``: m's RMS.
    """
    sums = SmoothnessSums()
    sums.add(m)
    return sums.result()


# manipulation_coverage's sample sizes: 5× less rendering than every image with 4,096 pairs. On the quick Shapes3D
# manipulation (64,000 images) they gave fraction_covered within 0.006 of every image's, |m|∞ quartiles within 0.03
# and the per-factor RMS within 7 %, in 76 s instead of 369 s (docs/notes/perturb.md, "Coverage from a sample").
COVERAGE_SAMPLE = 8192
COVERAGE_PAIRS = 2048
COVERAGE_FACTOR_PAIRS = 1024


@torch.no_grad()
def manipulation_coverage(net: "ManipulationNet", w: torch.Tensor, *, threshold: float = 0.05,
                          factor_sizes=None, factors=None, batch: int = 512, sample: int | None = COVERAGE_SAMPLE,
                          pairs: int = COVERAGE_PAIRS, factor_pairs: int = COVERAGE_FACTOR_PAIRS, seed: int = 0) -> dict:
    """How much of the data set m(w) touches, and how much it varies over the factor space.

    ``w``: normalised factors [N, K] of the data set's images. The statistics over images are estimated on a random
    ``sample`` of them (None: all; ``num_images`` says how many, ``of_images`` of how many), ``mean_pairwise_rms`` on
    ``pairs`` random pairs, each ``per_factor_rms`` on ``factor_pairs`` pairs: the cost is one rendering of m per
    image measured, and rendering every image of a 64,000-image store took ≈ 5 min of the quick Shapes3D preset's hour.
    * ``fraction_small``: fraction of images whose manipulation is (almost) nothing, ‖m(w)‖∞ < ``threshold``
      (the modified image is within ε·threshold of the original everywhere); ``fraction_covered`` = 1 − that.
    * ``linf_quantiles``: quantiles of ‖m(w)‖∞ over the images.
    * ``variation``: ``rms_mean`` is the RMS of the mean manipulation (the part every image gets alike);
      ``rms_about_mean`` the RMS of m − mean (what varies with w); ``varying_share`` = rms_about_mean² /
      (rms_mean² + rms_about_mean²), the share of m's energy that changes with w; ``mean_pairwise_rms`` the RMS difference
      between the manipulations of ``pairs`` random image pairs (0 = the same pattern everywhere). With
      ``factors`` (class indices [N, K]) and ``factor_sizes``, ``per_factor_rms`` is, per factor, the RMS change
      of m between two images that differ in that factor alone (by one class step): which factors m follows.
    * ``bottleneck_quantiles``: quantiles of the scalar s(w).
    * ``smoothness``: ``manipulation_smoothness`` pooled over the images (neighbour difference ratio, high-frequency
      share).
    """
    rng = np.random.RandomState(seed)
    of_images = w.shape[0]
    measured = w
    if sample is not None and sample < of_images:
        measured = w[torch.from_numpy(np.sort(rng.choice(of_images, sample, replace=False))).to(w.device)]
    n = measured.shape[0]
    linf = torch.empty(n)
    s_all = torch.empty(n)
    total = None
    total_sq = 0.0
    smooth = SmoothnessSums()
    for start in range(0, n, batch):
        wb = measured[start:start + batch]
        s = net.bottleneck(wb)
        image = net.from_bottleneck(s)
        smooth.add(image)
        m = image.flatten(1).float().cpu()
        linf[start:start + batch] = m.abs().amax(1)
        s_all[start:start + batch] = s[:, 0].float().cpu()
        total = m.sum(0) if total is None else total + m.sum(0)
        total_sq += float((m ** 2).sum())
    mean = total / n
    num_pixels = mean.numel()
    rms_mean = float(mean.pow(2).mean().sqrt())
    rms_about_mean = float(max(total_sq / (n * num_pixels) - rms_mean ** 2, 0.0) ** 0.5)
    a = torch.from_numpy(rng.randint(0, of_images, pairs))
    b = torch.from_numpy(rng.randint(0, of_images, pairs))
    diffs = []
    for start in range(0, pairs, batch):
        ma = net(w[a[start:start + batch]]).flatten(1).float().cpu()
        mb = net(w[b[start:start + batch]]).flatten(1).float().cpu()
        diffs.append((ma - mb).pow(2).mean(1))
    mean_pairwise_rms = float(torch.cat(diffs).mean().sqrt())
    qs = (0.05, 0.25, 0.5, 0.75, 0.95)
    out = {
        "threshold": float(threshold), "num_images": int(n), "of_images": int(of_images),
        "pairs": int(pairs), "factor_pairs": int(factor_pairs),
        "fraction_small": float((linf < threshold).float().mean()),
        "fraction_covered": float((linf >= threshold).float().mean()),
        "linf_quantiles": {f"p{int(q * 100):02d}": float(torch.quantile(linf, q)) for q in qs},
        "bottleneck_quantiles": {f"p{int(q * 100):02d}": float(torch.quantile(s_all, q)) for q in qs},
        "variation": {"rms_mean": rms_mean, "rms_about_mean": rms_about_mean, "mean_pairwise_rms": mean_pairwise_rms,
                      # share of m's energy that changes with w; a constant pattern (share 0) adds the same image to
                      # every image and cannot change the data's covariance, whatever it does to the decoders' losses
                      "varying_share": (rms_about_mean ** 2 / (rms_mean ** 2 + rms_about_mean ** 2)
                                        if rms_mean + rms_about_mean > 0 else 0.0)},
        "smoothness": {k: v for k, v in smooth.result().items() if k != "rms"},
    }
    if factors is not None and factor_sizes is not None:
        f = torch.as_tensor(np.asarray(factors), dtype=torch.long)
        sizes = list(factor_sizes)
        per_factor = {}
        rows = torch.from_numpy(rng.randint(0, f.shape[0], min(factor_pairs, f.shape[0])))
        for k, size in enumerate(sizes):
            if size < 2:
                continue
            base = f[rows].clone()
            base[:, k] = torch.clamp(base[:, k], max=size - 2)
            step = base.clone()
            step[:, k] += 1
            sq = []
            for start in range(0, base.shape[0], batch):
                m0 = net(normalised_factors(base[start:start + batch], sizes).to(w.device)).flatten(1).float().cpu()
                m1 = net(normalised_factors(step[start:start + batch], sizes).to(w.device)).flatten(1).float().cpu()
                sq.append((m1 - m0).pow(2).mean(1))
            per_factor[k] = float(torch.cat(sq).mean().sqrt())
        out["variation"]["per_factor_rms"] = per_factor
    return out
