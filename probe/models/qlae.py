"""QLAE: quantized-latent autoencoder (Hsu et al. 2023, "Disentanglement via latent quantization").

Loss (per batch): BCE(decoder(z), x) averaged over pixels and batch
                  + λ_quantize · mean (sg(z_c) − q)² + λ_commit · mean (z_c − sg(q))²,
z = z_c + sg(q − z_c) (straight-through), q the nearest value of each dimension's own learnable
scalar codebook (n_v = 10, initialised linspace(−0.5, 0.5)).
Optimizer: AdamW (lr 1e-3, weight decay λ_wd) on every encoder/decoder parameter except biases,
plain Adam (same lr, no decay) on biases and the codebooks; one update per training step.

Follows the paper: per-dimension codebooks, n_v, init, λ_quantize = λ_commit = 0.01, AdamW
(β₂ = 0.99, Table 9), weight decay presets, BCE, n_z = 2·n_s in the dataset presets, batch 128.
Follows the public code (kylehkhsu/latent_quantization): losses and BCE averaged (not summed) over
dimensions/pixels, decay applied to every non-bias encoder/decoder tensor (norm scales and the
decoder's input map included), and per-element gradient clipping at 1.0 on the decayed group only
(``optax.clip``); no clipping for biases/codebooks.
Without a preset, ``num_latent`` defaults to the number of factors (the protocol's default).

Representation: ``encode`` returns the quantized code values (float [B, D]) and ``discrete_codes``
the code indices (long [B, D]).
``arch``: "qlae" (the published conv/InstanceNorm encoder and StyleGAN-like decoder,
``probe.models.nets.qlae``) or a shared architecture ("locatello", "mlp").
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from probe.errors import UserError
from probe.models.base import Batch, ProbeModel
from probe.models.quantize import ScalarCodebooks


def binary_cross_entropy_mean(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Sigmoid BCE averaged over pixels and batch (the QLAE/Tripod code bases; not disentanglement_lib's sum)."""
    return nn.functional.binary_cross_entropy_with_logits(logits.float(), x.float())


def build_shared_nets(arch: str, image_shape, encoder_out: int, num_latent: int) -> tuple[nn.Module, nn.Module]:
    from probe.models.nets import SHARED_ARCHS, build_decoder, build_encoder

    if arch not in SHARED_ARCHS:
        raise UserError(f"unknown architecture {arch!r}")
    return (build_encoder(arch, image_shape, encoder_out, gaussian=False), build_decoder(arch, image_shape, num_latent))


def check_arch(arch: str, own: str) -> None:
    from probe.models.nets import SHARED_ARCHS

    if arch != own and arch not in SHARED_ARCHS:
        raise UserError(f"unknown architecture {arch!r} (choose from {', '.join((own,) + tuple(SHARED_ARCHS))})")


def split_decay_groups(modules: list[nn.Module]) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(decayed, not decayed): biases are not decayed, everything else is."""
    decay, no_decay = [], []
    for module in modules:
        for name, p in module.named_parameters():
            (no_decay if name.endswith("bias") else decay).append(p)
    return decay, no_decay


class QLAE(ProbeModel):
    """Quantized-latent AE: per-dimension learnable scalar codebooks, straight-through, AdamW weight decay."""

    name: ClassVar[str] = "qlae"
    code_kind: ClassVar[str] = "discrete"
    train_defaults: ClassVar[dict] = {"batch_size": 128}

    def __init__(self, config: dict, image_shape: tuple[int, int, int], num_factors: int):
        super().__init__(config, image_shape, num_factors)
        c = self.config
        arch = c.get("arch", "qlae")
        check_arch(arch, "qlae")
        if arch == "qlae":
            from probe.models.nets.qlae import QLAEDecoder, QLAEEncoder

            self.encoder = QLAEEncoder(image_shape, self.num_latent, widths=c["enc_widths"], dense_width=c["dense_width"])
            self.decoder = QLAEDecoder(image_shape, self.num_latent, widths=c["dec_widths"], dense_width=c["dense_width"])
        else:
            self.encoder, self.decoder = build_shared_nets(arch, image_shape, self.num_latent, self.num_latent)
        self.quantizer = ScalarCodebooks(self.num_latent, int(c["num_values"]), c["codebook_low"], c["codebook_high"])

    @classmethod
    def default_config(cls) -> dict:
        return {"num_latent": None, "arch": "qlae", "lr": 1e-3, "adam_beta1": 0.9, "adam_beta2": 0.99, "adam_eps": 1e-8,
                "weight_decay": 0.1, "grad_clip_value": 1.0, "num_values": 10, "codebook_low": -0.5, "codebook_high": 0.5,
                "quantize_weight": 0.01, "commit_weight": 0.01,
                "enc_widths": [32, 64, 128, 256], "dec_widths": [256, 128, 64, 32], "dense_width": 256}

    @classmethod
    def presets(cls) -> dict[str, dict]:
        # weight decay per dataset: public code configs/params/quantized_ae/*.yaml; n_z = 2·n_s.
        return {"shapes3d": {"weight_decay": 0.1, "num_latent": 12},
                "mpi3d": {"weight_decay": 0.001, "num_latent": 14},
                "falcor3d": {"weight_decay": 0.1, "num_latent": 14},
                "isaac3d": {"weight_decay": 0.1, "num_latent": 18}}

    # -- training ---------------------------------------------------------------------------------
    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        c = self.config
        decay, no_decay = split_decay_groups([self.encoder, self.decoder])
        groups = [{"params": decay, "weight_decay": c["weight_decay"], "clip": True},
                  {"params": no_decay + list(self.quantizer.parameters()), "weight_decay": 0.0, "clip": False}]
        return {"main": torch.optim.AdamW(groups, lr=c["lr"], betas=(c["adam_beta1"], c["adam_beta2"]), eps=c["adam_eps"])}

    def training_step(self, batch: Batch, step: int, optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, Any]:
        """One AdamW update; gradients of the decayed group are clipped per element first."""
        opt = optimizers["main"]
        opt.zero_grad(set_to_none=True)
        loss, logs = self.loss(batch, step)
        loss.backward()
        clip = self.config.get("grad_clip_value")
        if clip:
            for group in opt.param_groups:
                if group.get("clip"):
                    torch.nn.utils.clip_grad_value_(group["params"], clip)
        opt.step()
        return {"loss": loss.detach(), **logs}

    def loss(self, batch: Batch, step: int):
        c = self.config
        q, quantize_loss, commit_loss = self.quantizer(self.encoder(batch.x))
        recon = binary_cross_entropy_mean(self.decoder(q.values), batch.x)
        loss = recon + c["quantize_weight"] * quantize_loss + c["commit_weight"] * commit_loss
        return loss, {"reconstruction": recon.detach(), "quantize": quantize_loss.detach(), "commit": commit_loss.detach()}

    # -- representation ---------------------------------------------------------------------------
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        z_c = self.encoder(x)
        return self.quantizer.lookup(self.quantizer.nearest(z_c))

    def discrete_codes(self, x: torch.Tensor) -> torch.Tensor:
        return self.quantizer.nearest(self.encoder(x))

    def one_pass_representation(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        indices = self.quantizer.nearest(self.encoder(x))  # one encoder pass for codes and indices
        return {"codes": self.quantizer.lookup(indices), "discrete": indices}

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.decoder(self.encode(x)))
