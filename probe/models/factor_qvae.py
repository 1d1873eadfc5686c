"""FactorQVAE (Baykal et al., "Disentanglement with factor quantized variational autoencoders") and
its ablations QVAE (no total-correlation term) and dVAE (categorical logits from the encoder).

Posterior: the encoder gives one scalar z_e,j per latent; q(z_j | x) = Cat(softmax(−d_j)) over a
single global codebook of K = 64 scalars (d_jk the distance of z_e,j to code e_k). dVAE instead
reads the K logits per latent from the encoder. Training samples w_j = GumbelSoftmax(logits, τ)
(relaxed one-hots, no straight-through) and decodes z_q,j = Σ_k w_jk e_k; τ = exp(−1e-5 · t).
VAE loss:  MSE(decoder(z_q), x − ½) (mean over pixels and batch; images in [−½, ½])
         + β · KL(q(z|x) || Uniform(K))   (τ = 1 posterior; Σ_k, mean over batch and latents)
         + γ · mean_i [D(w_i)_0 − D(w_i)_1]   (FactorQVAE only: density-ratio TC estimate)
Discriminator D: MLP on the flattened relaxed one-hots (D·K → 1000 → 4 × 1000 → 2, LeakyReLU 0.2,
N(0, 0.02) init), trained with 0.5·[CE(D(w), "joint") + CE(D(perm(w')), "product")] where w' comes
from a second half-batch re-encoded after the VAE update and perm shuffles each latent's one-hot
across the batch independently.

One training step = one iteration = one VAE update (Adam) on the first half of the batch + one
discriminator update (Adam) on [first-half w (detached), permuted second-half w'] (FactorQVAE).
QVAE/dVAE: one VAE update on the whole batch.
Learning rates follow a cosine from lr to 1.25e-6 over the first 50k steps and then stay at the
minimum; both are set from the step inside ``training_step`` (so resuming is exact).

Follows the paper: global scalar codebook of K = 64, Gumbel-softmax relaxed posterior, uniform
prior, TC via the discriminator on one-hots with per-dimension permutation, the τ schedule, Adam
lr 1e-3 cosine-annealed to 1.25e-6 over 50k iterations, β/γ from Table 3, batch 256 (×2 halves for
the Factor model), n_z = 2·n_s (presets 12/14/18), DALL-E-style backbone.
Follows the public code (ituvisionlab/FactorQVAE): squared distances (eq. 3 writes |·|; option
``distance``), N(0, 1) codebook init, KL and MSE as means, discriminator shape and init, images
shifted to [−½, ½], decoder input channels 64.
Fixes relative to the public code: the discriminator step uses detached first-half one-hots (the
code reuses the non-detached outputs after the VAE optimizer modified the weights in place); the
temperature and lr schedules count one iteration per (VAE + discriminator) update (Lightning
counted both optimizer steps); the cosine lr holds at its minimum after 50k steps instead of rising
back (``CosineAnnealingLR`` periodicity).

Representation: ``encode`` = value of the most probable code (float [B, D]); ``discrete_codes`` =
its index (long [B, D]).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn
from torch.nn import functional as F

from probe.errors import UserError
from probe.models.base import Batch, ProbeModel
from probe.models.qlae import build_shared_nets, check_arch
from probe.models.factor_vae import Discriminator, permute_dims
from probe.models.quantize import RelaxedScalarQuantizer, gumbel_temperature, uniform_prior_kl


def cosine_lr(step: int, lr: float, lr_min: float, anneal_steps: int) -> float:
    """Cosine from ``lr`` at step 0 to ``lr_min`` at ``anneal_steps``, constant afterwards."""
    if anneal_steps <= 0:
        return lr
    t = min(max(step, 0), anneal_steps) / anneal_steps
    return lr_min + 0.5 * (lr - lr_min) * (1 + math.cos(math.pi * t))


class TCDiscriminator(Discriminator):
    """FactorVAE's MLP discriminator (same layer stack) on the flattened relaxed one-hots, initialised
    N(0, 0.02) as FactorQVAE's public code does instead of glorot."""

    def __init__(self, in_dim: int, width: int = 1000, num_hidden: int = 5):
        super().__init__(in_dim, hidden=width, depth=num_hidden)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.02)
                nn.init.zeros_(m.bias)

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return self.net(w.flatten(1))


class FactorQVAE(ProbeModel):
    """Global scalar codebook, Gumbel-relaxed posterior, uniform-prior KL + discriminator TC."""

    name: ClassVar[str] = "factor-qvae"
    code_kind: ClassVar[str] = "discrete"
    train_defaults: ClassVar[dict] = {"batch_size": 512}   # split into two halves of 256
    use_discriminator: ClassVar[bool] = True
    logits_from_encoder: ClassVar[bool] = False

    def __init__(self, config: dict, image_shape: tuple[int, int, int], num_factors: int):
        super().__init__(config, image_shape, num_factors)
        c = self.config
        k = int(c["num_codes"])
        enc_out = self.num_latent * k if self.logits_from_encoder else self.num_latent
        arch = c.get("arch", "fqvae")
        check_arch(arch, "fqvae")
        if arch == "fqvae":
            from probe.models.nets.fqvae import FQDecoder, FQEncoder

            self.encoder = FQEncoder(image_shape, enc_out, channels=c["channels"], hidden=c["hidden"])
            self.decoder = FQDecoder(image_shape, self.num_latent, channels=c["channels"], input_channels=c["dec_input_channels"])
        else:
            self.encoder, self.decoder = build_shared_nets(arch, image_shape, enc_out, self.num_latent)
        self.quantizer = RelaxedScalarQuantizer(k, distance=c.get("distance", "squared"),
                                                logits_from_encoder=self.logits_from_encoder)
        if self.use_discriminator:
            self.discriminator = TCDiscriminator(self.num_latent * k, c["disc_width"], c["disc_hidden_layers"])

    @classmethod
    def default_config(cls) -> dict:
        config = {"num_latent": None, "arch": "fqvae", "lr": 1e-3, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1e-8,
                  "lr_min": 1.25e-6, "lr_anneal_steps": 50000, "temperature_decay": 1e-5,
                  "num_codes": 64, "distance": "squared", "beta": 1e-3,
                  "channels": 128, "hidden": 128, "dec_input_channels": 64}
        if cls.use_discriminator:
            config.update({"gamma": 1e-4, "disc_lr": 1e-3, "disc_width": 1000, "disc_hidden_layers": 5})
        return config

    @classmethod
    def presets(cls) -> dict[str, dict]:
        # FactorQVAE paper Table 3 (β = KL weight, γ = TC weight); n_z from the public configs.
        return {"shapes3d": {"beta": 1e-3, "gamma": 1e-4, "num_latent": 12},
                "isaac3d": {"beta": 5e-5, "gamma": 5e-5, "num_latent": 18},
                "mpi3d": {"beta": 5e-5, "gamma": 1e-6, "num_latent": 14}}

    # -- pieces -----------------------------------------------------------------------------------
    def posterior_logits(self, x: torch.Tensor) -> torch.Tensor:
        """[B, D, K]; images are shifted to [−½, ½] as in the public code."""
        return self.quantizer.logits(self.encoder(x - 0.5))

    def relaxed_sample(self, x: torch.Tensor, step: int):
        logits = self.posterior_logits(x)
        w, z_q = self.quantizer.relaxed(logits, gumbel_temperature(step, self.config["temperature_decay"]))
        return logits, w, z_q

    def vae_terms(self, x: torch.Tensor, step: int):
        """(loss, logs, relaxed one-hots w) for one (half-)batch."""
        c = self.config
        logits, w, z_q = self.relaxed_sample(x, step)
        recon = F.mse_loss(self.decoder(z_q).float(), (x - 0.5).float())
        kl = uniform_prior_kl(logits)
        loss = recon + c["beta"] * kl
        logs = {"reconstruction": recon.detach(), "kl": kl.detach(),
                "temperature": gumbel_temperature(step, c["temperature_decay"])}
        if self.use_discriminator:
            d = self.discriminator(w)
            tc = (d[:, 0] - d[:, 1]).mean()
            loss = loss + c["gamma"] * tc
            logs["tc"] = tc.detach()
        return loss, logs, w

    # -- training ---------------------------------------------------------------------------------
    def vae_parameters(self) -> list[nn.Parameter]:
        return [*self.encoder.parameters(), *self.decoder.parameters(), *self.quantizer.parameters()]

    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        c = self.config
        betas = (c["adam_beta1"], c["adam_beta2"])
        opts = {"main": torch.optim.Adam(self.vae_parameters(), lr=c["lr"], betas=betas, eps=c["adam_eps"])}
        if self.use_discriminator:
            opts["discriminator"] = torch.optim.Adam(self.discriminator.parameters(), lr=c["disc_lr"], betas=betas,
                                                     eps=c["adam_eps"])
        return opts

    def _set_lr(self, opt: torch.optim.Optimizer, base: float, step: int) -> float:
        lr = cosine_lr(step, base, self.config["lr_min"], int(self.config["lr_anneal_steps"]))
        for group in opt.param_groups:
            group["lr"] = lr
        return lr

    def loss(self, batch: Batch, step: int):
        loss, logs, _ = self.vae_terms(batch.x, step)
        return loss, logs

    def training_step(self, batch: Batch, step: int, optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, Any]:
        """FactorQVAE: one VAE update on the first half of the batch, then one discriminator update.
        QVAE/dVAE: one VAE update on the whole batch."""
        x = batch.x
        if self.use_discriminator:
            if x.shape[0] < 4:
                raise UserError(f"{self.name} splits each batch in two halves; batch_size must be >= 4, got {x.shape[0]}")
            half = x.shape[0] // 2
            x, x_other = x[:half], x[half:2 * half]
        opt = optimizers["main"]
        lr = self._set_lr(opt, self.config["lr"], step)
        opt.zero_grad(set_to_none=True)
        loss, logs, w = self.vae_terms(x, step)
        loss.backward()
        opt.step()
        logs = {"loss": loss.detach(), "lr": lr, **logs}
        if not self.use_discriminator:
            return logs

        d_opt = optimizers["discriminator"]
        self._set_lr(d_opt, self.config["disc_lr"], step)
        with torch.no_grad():
            _, w_other, _ = self.relaxed_sample(x_other, step)   # encoder after the VAE update (Algorithm 1)
        w_perm = permute_dims(w_other)
        d_joint = self.discriminator(w.detach())
        d_perm = self.discriminator(w_perm)
        zeros = torch.zeros(d_joint.shape[0], dtype=torch.long, device=d_joint.device)
        ones = torch.ones(d_perm.shape[0], dtype=torch.long, device=d_perm.device)
        d_loss = 0.5 * (F.cross_entropy(d_joint, zeros) + F.cross_entropy(d_perm, ones))
        d_opt.zero_grad(set_to_none=True)
        d_loss.backward()
        d_opt.step()
        d_acc = 0.5 * ((d_joint.argmax(1) == 0).float().mean() + (d_perm.argmax(1) == 1).float().mean())
        logs.update({"discriminator_loss": d_loss.detach(), "discriminator_accuracy": d_acc.detach()})
        return logs

    # -- representation ---------------------------------------------------------------------------
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.quantizer.hard(self.posterior_logits(x))[1]

    def discrete_codes(self, x: torch.Tensor) -> torch.Tensor:
        return self.quantizer.hard(self.posterior_logits(x))[0]

    def one_pass_representation(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        indices, values = self.quantizer.hard(self.posterior_logits(x))  # one encoder pass for both
        return {"codes": values, "discrete": indices}

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        return (self.decoder(self.encode(x)) + 0.5).clamp(0, 1)


class QVAE(FactorQVAE):
    """FactorQVAE without the total-correlation discriminator (γ = 0)."""

    name: ClassVar[str] = "qvae"
    train_defaults: ClassVar[dict] = {"batch_size": 256}
    use_discriminator: ClassVar[bool] = False

    @classmethod
    def presets(cls) -> dict[str, dict]:
        return {"shapes3d": {"beta": 1e-3, "num_latent": 12},
                "isaac3d": {"beta": 5e-5, "num_latent": 18},
                "mpi3d": {"beta": 5e-5, "num_latent": 14}}


class DVAE(FactorQVAE):
    """dVAE: K logits per latent from the encoder; the global scalar codebook maps one-hots to values.

    No distance to the codebook and no discriminator."""

    name: ClassVar[str] = "dvae"
    train_defaults: ClassVar[dict] = {"batch_size": 256}
    use_discriminator: ClassVar[bool] = False
    logits_from_encoder: ClassVar[bool] = True

    @classmethod
    def default_config(cls) -> dict:
        config = super().default_config()
        config["beta"] = 5e-3
        del config["distance"]
        return config

    @classmethod
    def presets(cls) -> dict[str, dict]:
        return {"shapes3d": {"beta": 5e-3, "num_latent": 12},
                "isaac3d": {"beta": 1e-5, "num_latent": 18},
                "mpi3d": {"beta": 5e-5, "num_latent": 14}}
