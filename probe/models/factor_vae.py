"""FactorVAE (Kim & Mnih 2018) as implemented in disentanglement_lib (``vae.py:FactorVAE.model_fn``).

VAE loss (encoder + decoder, minimised)::

    w·recon + KL + γ · tc,      tc = mean_batch(logit_0(z) - logit_1(z))

with w = ``reconstruction_weight`` (default 1; (64·64)/(H·W) restores Table 2's balance at another resolution, see
``probe.models.base``).
The logged ``reconstruction`` is the unweighted recon.

Discriminator loss (discriminator only, minimised)::

    -[0.5 · mean log p_0(z) + 0.5 · mean log p_1(shuffle(z))]

with class 0 = "sample of q(z)" and class 1 = "sample of Π_l q(z_l)"; probabilities are the softmax of
the two logits clipped to [1e-6, 1 - 1e-6] (disentanglement_lib ``make_discriminator``).

Choices and their sources:

* ``shuffle(z)`` permutes every latent column independently across the **same** batch (reference code
  ``shuffle_codes``); the paper draws a second minibatch instead.
* Discriminator: 6 × Linear(1000) + leaky ReLU(0.2) → Linear(2) (reference ``fc_discriminator``; TF's
  leaky slope is 0.2, PyTorch's default would be 0.01); glorot-uniform init as TF. ``disc_width`` (default 1000,
  the reference's) narrows it; only the pipelines' smoke preset does (a 1000-unit one is 20 MB of weights per run).
* Optimisers: the VAE uses the model's Adam (lr 1e-4, β = (0.9, 0.999)); the discriminator its own Adam
  lr 1e-4, β = (0.5, 0.9), ε = 1e-8 (reference ``shared.gin``; the paper's values).
* γ: Zietlow et al. 2021 Table 2 — 35 (dSprites), 7 (Shapes3D); the default is the dSprites value.
  disentanglement_lib's sweep is {10, 20, 30, 40, 50, 100}.

**One probe step = one VAE update + one discriminator update**, both from the same forward pass with the
discriminator's pre-update weights, as the reference's grouped train op. The discriminator sees ``z``
detached, so its loss never reaches the encoder. Quirk of the reference: both ``minimize`` calls pass
``global_step``, so its step counter advances twice per iteration and ``training_steps=300000`` there is
150 000 of our steps (read from the code, not run). Use ``steps = reference_steps / 2`` for parity.
"""

from __future__ import annotations

import torch
from torch import nn

from probe.models.base import Batch, GaussianVAE, bernoulli_reconstruction, gaussian_kl, reparameterise
from probe.models.nets.locatello import glorot_init

DISCRIMINATOR_ADAM = {"disc_lr": 1e-4, "disc_adam_beta1": 0.5, "disc_adam_beta2": 0.9, "disc_adam_eps": 1e-8}


class Discriminator(nn.Module):
    """disentanglement_lib ``fc_discriminator``: z [B, D] -> 2 logits (0 = joint, 1 = permuted)."""

    def __init__(self, num_latent: int, hidden: int = 1000, depth: int = 6):
        super().__init__()
        layers: list[nn.Module] = []
        width = num_latent
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.LeakyReLU(0.2)]
            width = hidden
        self.net = nn.Sequential(*layers, nn.Linear(width, 2))
        glorot_init(self)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


def clipped_probs(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits.float(), dim=1).clamp(1e-6, 1.0 - 1e-6)


def permute_dims(z: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Each latent's slice permuted independently across the batch (reference ``shuffle_codes``).

    ``z``: [B, D] codes, or [B, D, K] (FactorQVAE's relaxed one-hots, each latent's K-vector moved whole).
    """
    b, d = z.shape[:2]
    keys = torch.rand(b, d, generator=generator, device=z.device if generator is None else generator.device)
    perms = torch.argsort(keys, dim=0).to(z.device)   # one permutation per latent
    if z.dim() == 3:
        perms = perms.unsqueeze(-1).expand_as(z)
    return torch.gather(z, 0, perms)


def discriminator_loss(logits_joint: torch.Tensor, logits_permuted: torch.Tensor) -> torch.Tensor:
    """Negative of the reference's maximised ``0.5·E log p0(z) + 0.5·E log p1(z_perm)``."""
    return -(0.5 * torch.log(clipped_probs(logits_joint)[:, 0]).mean()
             + 0.5 * torch.log(clipped_probs(logits_permuted)[:, 1]).mean())


class FactorVAE(GaussianVAE):
    name = "factor-vae"

    def __init__(self, config: dict, image_shape, num_factors: int):
        super().__init__(config, image_shape, num_factors)
        self.discriminator = Discriminator(self.num_latent, hidden=int(self.config["disc_width"]))

    @classmethod
    def default_config(cls) -> dict:
        return {**super().default_config(), "gamma": 35.0, "disc_width": 1000, **DISCRIMINATOR_ADAM}

    @classmethod
    def presets(cls) -> dict[str, dict]:
        return {"dsprites": {"gamma": 35.0}, "shapes3d": {"gamma": 7.0}}   # Zietlow et al. 2021, Table 2

    # -- loss pieces ------------------------------------------------------------------------------
    @property
    def tc_weight(self) -> float:
        return float(self.config["gamma"])

    def extra_penalty(self, mean: torch.Tensor, logvar: torch.Tensor) -> tuple[torch.Tensor | None, dict]:
        """Hook for subclasses (RTC-VAE adds its variance penalty); FactorVAE has none."""
        return None, {}

    def vae_loss(self, batch: Batch) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """(VAE loss, logs, sampled z). Gradients of the loss also reach the discriminator's weights;
        ``training_step`` applies them to the encoder/decoder only."""
        mean, logvar = self.encode_distribution(batch.x)
        z = reparameterise(mean, logvar)
        recon = bernoulli_reconstruction(self.decode(z), batch.x)
        kl = gaussian_kl(mean, logvar)
        logits = self.discriminator(z).float()
        tc = (logits[:, 0] - logits[:, 1]).mean()
        loss = self.weighted_reconstruction(recon) + kl + self.tc_weight * tc   # w·Rec + KL + γ·tc
        logs = {"reconstruction": recon.detach(), "kl": kl.detach(), "tc": tc.detach()}
        penalty, extra_logs = self.extra_penalty(mean, logvar)
        if penalty is not None:
            loss = loss + penalty
        logs.update(extra_logs)
        return loss, logs, z

    def loss(self, batch: Batch, step: int):
        loss, logs, _ = self.vae_loss(batch)
        return loss, logs

    def discriminator_step_loss(self, z: torch.Tensor) -> tuple[torch.Tensor, dict]:
        z = z.detach()
        logits_joint = self.discriminator(z)
        logits_perm = self.discriminator(permute_dims(z))
        d_loss = discriminator_loss(logits_joint, logits_perm)
        accuracy = 0.5 * ((logits_joint.argmax(1) == 0).float().mean() + (logits_perm.argmax(1) == 1).float().mean())
        return d_loss, {"discriminator_loss": d_loss.detach(), "discriminator_accuracy": accuracy.detach()}

    # -- optimisation -----------------------------------------------------------------------------
    def vae_parameters(self) -> list[nn.Parameter]:
        return list(self.encoder.parameters()) + list(self.decoder.parameters())

    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        c = self.config
        return {
            "main": torch.optim.Adam(self.vae_parameters(), lr=c["lr"], betas=(c["adam_beta1"], c["adam_beta2"]), eps=c["adam_eps"]),
            "discriminator": torch.optim.Adam(self.discriminator.parameters(), lr=c["disc_lr"],
                                              betas=(c["disc_adam_beta1"], c["disc_adam_beta2"]), eps=c["disc_adam_eps"]),
        }

    def training_step(self, batch: Batch, step: int, optimizers: dict[str, torch.optim.Optimizer]) -> dict:
        """One VAE Adam update + one discriminator Adam update from one forward pass (see module doc)."""
        opt_vae, opt_d = optimizers["main"], optimizers["discriminator"]
        opt_vae.zero_grad(set_to_none=True)
        opt_d.zero_grad(set_to_none=True)
        loss, logs, z = self.vae_loss(batch)
        d_loss, d_logs = self.discriminator_step_loss(z)
        # ``inputs=`` keeps each loss's gradients on its own parameter group.
        loss.backward(inputs=self.vae_parameters())
        d_loss.backward(inputs=list(self.discriminator.parameters()))
        opt_vae.step()
        opt_d.step()
        return {"loss": loss.detach(), **logs, **d_logs}
