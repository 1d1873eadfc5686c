"""β-VAE (Higgins et al. 2017) as in disentanglement_lib's ``BetaVAE``.

Loss = w·Rec + β·KL(q(z|x) ‖ N(0, I)): Rec the Bernoulli reconstruction (σ-cross-entropy summed over pixels, mean
over the batch), KL summed over latents, mean over the batch; w = ``reconstruction_weight`` (default 1;
w = (64·64)/(H·W) restores Table 2's balance at another resolution, see ``probe.models.base``). Under Adam
(scale-invariant up to eps) w·Rec + β·KL trains like Rec + (β/w)·KL: w = 4 with β = 32 at 32×32 is β = 8 there.
Presets: Zietlow et al. 2021, Table 2 (β = 8 on dSprites, β = 32 on Shapes3D). Without a preset β defaults to 1
(the plain VAE); disentanglement_lib has no default.
"""

from __future__ import annotations

from probe.models.base import GaussianVAE, gaussian_kl


class BetaVAE(GaussianVAE):
    """β-VAE: w·Bernoulli reconstruction + β·KL to N(0, I)."""

    name = "beta-vae"

    @classmethod
    def default_config(cls) -> dict:
        return {**super().default_config(), "beta": 1.0}

    @classmethod
    def presets(cls) -> dict[str, dict]:
        return {"dsprites": {"beta": 8.0}, "shapes3d": {"beta": 32.0}}

    def regularizer(self, mean, logvar, z, batch, step):
        kl = gaussian_kl(mean, logvar)
        return float(self.config["beta"]) * kl, {"kl": kl.detach()}
