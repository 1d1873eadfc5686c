"""β-VAE (Higgins et al. 2017) as in disentanglement_lib's ``BetaVAE``.

Loss = Bernoulli reconstruction (σ-cross-entropy summed over pixels, mean over the batch) + β·KL(q(z|x) ‖ N(0, I))
(KL summed over latents, mean over the batch). Presets: Zietlow et al. 2021, Table 2 (β = 8 on dSprites,
β = 32 on Shapes3D). Without a preset β defaults to 1 (the plain VAE); disentanglement_lib has no default.
"""

from __future__ import annotations

from probe.models.base import GaussianVAE, gaussian_kl


class BetaVAE(GaussianVAE):
    """β-VAE: Bernoulli reconstruction + β·KL to N(0, I)."""

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
