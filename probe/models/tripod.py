"""Tripod (Hsu, Hamid et al. 2024): finite scalar quantization + kernel latent multiinformation (KLM)
+ normalized Hessian penalty (NHP).

Loss (per batch of n_b images):
    BCE(decoder(z), x) averaged over pixels and batch
    + λ_KLM · kernel_multiinformation(z, σ) + λ_NHP · normalized_hessian_penalty(decoder activations, z, σ)
with z_c = tanh(encoder(x)), z = FSQ(z_c) on n_q = 12 levels in [−1, 1] (straight-through rounding)
and σ_j = std over the batch of the continuous z_c,j (+1e-6): the densities and finite differences
use the quantized z, their scales the continuous ones (paper §3.4). No stop-gradient anywhere.

KLM (paper eqs. 11–14): Gaussian KDE over the batch, self term included. Joint bandwidth
diag(c·σ) with Silverman's c = (4/((n_z+2) n_b))^{1/(n_z+4)}; marginal bandwidth σ_j (not
Silverman-scaled, as both paper eq. 13 and the code). KLM = mean_i [log q(z_i) − Σ_j log q_j(z_ij)].
It is invariant to rescaling any latent (σ rescales with it). Note the estimator is biased upwards:
for independent latents it is small but positive, because the joint kernel is narrower than the
marginal ones (≈ 0.2 nats for two independent Gaussians at n_b = 1000; measured in the tests).

NHP (paper Prop. 3.1/3.2, Algorithm 1): for each regularized decoder activation f, central second
differences D(v) = (f(z+v) − 2f(z) + f(z−v))/ε² along n_p = 2 Rademacher directions v = ε·r⊙σ
(numerator) and n_p = 2 Gaussian directions w = ε·g⊙σ (denominator), ε = 0.1; the population
variance over the directions is averaged over the batch and the activation's elements separately for
numerator and denominator before dividing (+1e-10), and the ratios are summed over the activations.
Aggregating before dividing is the paper's stability remark (§3.4); we aggregate over the batch too
(Algorithm 1 and the public code divide per example): a ratio of two 2-sample variances is
F(1,1)-like with an infinite mean, and per-example ratios measured NHP ≈ 2000 on a locatello decoder
after 250 steps, swamping the reconstruction term. Regularized
activations: the decoder's conditioning vector and the outputs of its up-stages except the logits
(public code's ``hessian_regularization_on``). On arch=locatello/mlp: every hidden nonlinearity's
output of the shared decoder.

Follows the paper: FSQ form and n_q = 12, KLM/NHP definitions, ε, n_p, n_z = 2·n_s (presets),
batch 64. Follows the public code (kylehkhsu/tripod): λ presets (its sweeper/comments; its plain
config sets both to 0 — we default to the Shapes3D pair instead, so "tripod" without a preset is
Tripod), Adam lr 2e-4 with per-element gradient clipping at 1 and no weight decay (the paper's
Table 4 lists AdamW lr 1e-3, β₂ 0.99 for all autoencoders), one NHP ratio per activation summed
over activations (the paper pools them), BCE mean.
Neither paper nor code: on the shared architectures (arch=locatello/mlp) the raw latents pass a
per-latent BatchNorm without affine parameters before tanh (``latent_norm``, default on; ignored for
arch=tripod). Without it Tripod never leaves the mean image on the shared encoder. Measured on the 32×32
Shapes3D-like quick store, pixel-mean BCE with λ = 0 at step 500: 0.671 without it, 0.369 with it; with
the Shapes3D λ's, 0.60 at step 300 with KLM 8.5, against a collapsed code with KLM 4.06 without it.

Compute knob (neither paper nor code): ``nhp_batch_size`` estimates NHP on the first n rows of the
(shuffled) batch, σ still from the whole batch; default None = the whole batch, as both paper and code.
The penalty's 4·n_p perturbed decoder passes dominate Tripod's cost (at n_b = 64 a step costs ~9
decoder passes against one for the reconstruction); the quick pipeline preset uses 16 of 64, which
measured 3.0× faster on one CPU core with the same metrics at 500 steps (docs/notes/quantized.md).
The reconstruction's forward pass doubles as the finite differences' centre, so the centre is never
recomputed.
"""

from __future__ import annotations

import math
from typing import Any, Callable, ClassVar

import torch
from torch import nn

from probe.models.base import Batch, ProbeModel
from probe.models.qlae import binary_cross_entropy_mean, build_shared_nets, check_arch
from probe.models.quantize import finite_scalar_quantize, fsq_indices

LOG_2PI = math.log(2 * math.pi)


def silverman_factor(num_latent: int, batch_size: int) -> float:
    """c with S_jj = c²·σ_j² (Tripod eq. 12): (4 / ((n_z + 2) n_b))^{1/(n_z + 4)}."""
    return (4.0 / ((num_latent + 2) * batch_size)) ** (1.0 / (num_latent + 4))


def _log_normal_pairwise(z: torch.Tensor, bandwidth: torch.Tensor) -> torch.Tensor:
    """[B, B, D]: log N(z_i,d; z_j,d, bandwidth_d)."""
    diff = (z.unsqueeze(1) - z.unsqueeze(0)) / bandwidth
    return -0.5 * diff.pow(2) - torch.log(bandwidth) - 0.5 * LOG_2PI


def kernel_multiinformation(z: torch.Tensor, sigma: torch.Tensor | None = None) -> torch.Tensor:
    """Kernel estimate of the multiinformation (total correlation) of the batch ``z`` [B, D], in nats.

    ``sigma`` [D]: per-dimension scales (default: the batch std of ``z`` + 1e-6); Tripod passes the
    std of the continuous latents while ``z`` are the quantized ones.
    """
    b, d = z.shape
    if sigma is None:
        sigma = z.std(0) + 1e-6
    c = silverman_factor(d, b)
    log_b = math.log(b)
    log_marginal = torch.logsumexp(_log_normal_pairwise(z, sigma), dim=1) - log_b           # [B, D]
    log_joint = torch.logsumexp(_log_normal_pairwise(z, c * sigma).sum(-1), dim=1) - log_b   # [B]
    return (log_joint - log_marginal.sum(-1)).mean()


def normalized_hessian_penalty(fn: Callable[[torch.Tensor], list[torch.Tensor] | torch.Tensor], z: torch.Tensor,
                               sigma: torch.Tensor | None = None, *, epsilon: float = 0.1, num_perturbations: int = 2,
                               generator: torch.Generator | None = None, center: list[torch.Tensor] | None = None,
                               num_points: int | None = None) -> torch.Tensor:
    """Normalized Hessian penalty of ``fn`` at the batch ``z`` [B, D] (see the module docstring).

    ``fn(z)`` returns one tensor [B, ...] or a list of them (one penalty each, summed).
    ``sigma`` [D] scales the perturbations (default: batch std of ``z`` + 1e-6, from the whole batch).
    ``num_points``: estimate the penalty on the first ``num_points`` rows of ``z`` only (default: all).
    ``center``: ``fn(z)`` if the caller already has it (the reconstruction's forward pass), so it is not
    recomputed; rows beyond ``num_points`` are ignored. The 4·num_perturbations perturbed evaluations
    go through ``fn`` in one batched call.
    """
    if sigma is None:
        sigma = z.std(0) + 1e-6
    if num_points is not None and 0 < int(num_points) < z.shape[0]:
        z = z[:int(num_points)]
    b, d = z.shape
    p = int(num_perturbations)
    dev = z.device
    draw_on = dev if generator is None else generator.device

    def draw(kind):
        if kind == "rademacher":
            r = torch.randint(0, 2, (p, b, d), generator=generator, device=draw_on).to(dev, z.dtype) * 2 - 1
        else:
            r = torch.randn((p, b, d), generator=generator, device=draw_on).to(dev, z.dtype)
        return epsilon * r * sigma

    v = torch.cat([draw("rademacher"), draw("gaussian")])                     # [2p, B, D]
    def as_list(outs):
        return [outs] if isinstance(outs, torch.Tensor) else outs

    center = as_list(fn(z) if center is None else center)
    perturbed = as_list(fn(torch.cat([z + v, z - v]).reshape(-1, d)))           # [4p·B, D] in one call
    outs = [torch.cat([c[:b].reshape(1, b, -1), out.reshape(4 * p, b, -1)]) for c, out in zip(center, perturbed)]
    total = z.new_zeros(())
    for out in outs:
        out = out.float()
        center_out, plus, minus = out[0], out[1:1 + 2 * p], out[1 + 2 * p:]
        second = (plus - 2 * center_out + minus) / epsilon ** 2                   # [2p, B, E]
        numer = second[:p].var(0, unbiased=False).mean()                       # over batch and elements
        denom = second[p:].var(0, unbiased=False).mean()
        total = total + numer / (denom + 1e-10)
    return total


def decoder_outputs(decoder: nn.Module, z: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """(activations to regularize, logits) in one forward pass. Activations: ``decoder.activations(z)[:-1]``
    when the decoder exposes them (Tripod's), else the output of every hidden nonlinearity of a sequential
    shared decoder."""
    if hasattr(decoder, "activations"):
        outs = decoder.activations(z)
        return outs[:-1], outs[-1]
    from probe.models.nets import locatello

    outs: list[torch.Tensor] = []

    def run(seq, h):
        for layer in seq:
            h = layer(h)
            if isinstance(layer, (nn.ReLU, nn.Tanh, nn.GELU, nn.LeakyReLU)):
                outs.append(h)
        return h

    if isinstance(decoder, locatello.DeconvDecoder):
        logits = run(decoder.deconv, run(decoder.dense, z).view(-1, 64, 4, 4))
    elif isinstance(decoder, locatello.MLPDecoder):
        logits = run(decoder.net, z)
    else:
        raise TypeError(f"cannot extract activations from {type(decoder).__name__}")
    return outs, logits


def decoder_activations(decoder: nn.Module, z: torch.Tensor) -> list[torch.Tensor]:
    """The activations NHP regularizes (see ``decoder_outputs``)."""
    return decoder_outputs(decoder, z)[0]


class Tripod(ProbeModel):
    """FSQ autoencoder + kernel latent multiinformation + normalized Hessian penalty."""

    name: ClassVar[str] = "tripod"
    code_kind: ClassVar[str] = "discrete"
    train_defaults: ClassVar[dict] = {"batch_size": 64}
    # encode reads quantize, so a subclass that redefines quantize is read through its own methods
    one_pass_reads: ClassVar[tuple[str, ...]] = ProbeModel.one_pass_reads + ("quantize",)

    def __init__(self, config: dict, image_shape: tuple[int, int, int], num_factors: int):
        super().__init__(config, image_shape, num_factors)
        c = self.config
        arch = c.get("arch", "tripod")
        check_arch(arch, "tripod")
        if arch == "tripod":
            from probe.models.nets.tripod import TripodDecoder, TripodEncoder

            self.encoder = TripodEncoder(image_shape, self.num_latent, widths=c["enc_widths"], hidden=c["enc_hidden"])
            self.decoder = TripodDecoder(image_shape, self.num_latent, widths=c["dec_widths"], cond_dim=c["cond_dim"])
        else:
            encoder, self.decoder = build_shared_nets(arch, image_shape, self.num_latent, self.num_latent)
            # The shared encoder's features are unbounded ReLUs: without this its raw latents drift to
            # |raw| ≈ 20 within ~100 steps, tanh saturates, every image gets the same code and the
            # gradient vanishes (docs/notes/quantized.md). Tripod's own encoder bounds its head's input
            # with LayerNorm + GELU instead.
            self.encoder = (nn.Sequential(encoder, nn.BatchNorm1d(self.num_latent, affine=False))
                            if c["latent_norm"] else encoder)

    @classmethod
    def default_config(cls) -> dict:
        return {"num_latent": None, "arch": "tripod", "lr": 2e-4, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1e-8,
                "grad_clip_value": 1.0, "num_levels": 12, "klm_weight": 1e-4, "nhp_weight": 1e-2,
                "nhp_epsilon": 0.1, "nhp_perturbations": 2, "nhp_batch_size": None, "latent_norm": True,
                "enc_widths": [32, 64, 128, 256, 512], "enc_hidden": 512, "dec_widths": [512, 256, 128, 64], "cond_dim": 256}

    @classmethod
    def presets(cls) -> dict[str, dict]:
        # (λ_KLM, λ_NHP) from the public code's configs/train_autoencoder.yaml sweeper/comments; n_z = 2·n_s.
        return {"shapes3d": {"klm_weight": 1e-4, "nhp_weight": 1e-2, "num_latent": 12},
                "mpi3d": {"klm_weight": 1e-8, "nhp_weight": 1e-4, "num_latent": 14},
                "falcor3d": {"klm_weight": 1e-10, "nhp_weight": 1e-2, "num_latent": 14},
                "isaac3d": {"klm_weight": 1e-4, "nhp_weight": 1e-8, "num_latent": 18}}

    def training_step(self, batch: Batch, step: int, optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, Any]:
        """One Adam update after per-element gradient clipping (``optax.clip``)."""
        opt = optimizers["main"]
        opt.zero_grad(set_to_none=True)
        loss, logs = self.loss(batch, step)
        loss.backward()
        if self.config.get("grad_clip_value"):
            torch.nn.utils.clip_grad_value_(self.parameters(), self.config["grad_clip_value"])
        opt.step()
        return {"loss": loss.detach(), **logs}

    def quantize(self, x: torch.Tensor):
        return finite_scalar_quantize(self.encoder(x), int(self.config["num_levels"]))

    def loss(self, batch: Batch, step: int):
        c = self.config
        q = self.quantize(batch.x)
        activations, logits = decoder_outputs(self.decoder, q.values)
        recon = binary_cross_entropy_mean(logits, batch.x)
        loss, logs = recon, {"reconstruction": recon.detach()}
        sigma = q.continuous.std(0) + 1e-6
        if c["klm_weight"]:
            klm = kernel_multiinformation(q.values, sigma)
            loss = loss + c["klm_weight"] * klm
            logs["klm"] = klm.detach()
        if c["nhp_weight"]:
            # The centre of the finite differences is the reconstruction's own forward pass.
            nhp = normalized_hessian_penalty(lambda z: decoder_activations(self.decoder, z), q.values, sigma,
                                             epsilon=c["nhp_epsilon"], num_perturbations=c["nhp_perturbations"],
                                             center=activations, num_points=c["nhp_batch_size"])
            loss = loss + c["nhp_weight"] * nhp
            logs["nhp"] = nhp.detach()
        return loss, logs

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.quantize(x).quantized

    def discrete_codes(self, x: torch.Tensor) -> torch.Tensor:
        return fsq_indices(torch.tanh(self.encoder(x)), int(self.config["num_levels"]))

    def one_pass_representation(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        q = self.quantize(x)  # one encoder pass; q.indices is fsq_indices(tanh(raw)) of the same raw latents
        return {"codes": q.quantized, "discrete": q.indices}

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.decoder(self.encode(x)))
