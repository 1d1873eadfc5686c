"""RTC-VAE (Cheng et al., "Revisiting factorizing aggregated posterior…", seed 003).

Paper Eq. 4: ``L_RTC = ELBO − β·TC(z) − η·tr(E_p(n) Cov_q(z|n)[z])`` with
``tr(E Cov_q(z|n)[z]) = Σ_k E_p(n)[σ_k²(n)]``, σ_k² the **posterior variance** of latent k. TC is
estimated with the density-ratio trick (§5: "we adopt density-ratio trick as our main method"), i.e. the
FactorVAE discriminator, and Table 1 sets FactorVAE's γ = β. So the VAE loss (minimised) is::

    w·recon + KL + β · tc + η · Σ_k mean_batch exp(logvar_k)

with w = ``reconstruction_weight`` (default 1; (64·64)/(H·W) restores the balance of Cheng et al.'s 64×64 images
at another resolution, see ``probe.models.base``).

β weights the TC term only; the KL keeps weight 1 (the ELBO in Eq. 3/4 is unweighted).
η = max(10, β) (§7 "we set η = max(10, β)"; Table 1), overridable with ``eta``. Sweep β ∈ {2, 6, 10, 20,
50}; default β = 10 (the value of the paper's Figs. 12–13). Discriminator, permutation, optimisers and
update schedule are FactorVAE's (see ``probe.models.factor_vae``: one step = one VAE update + one
discriminator update). Architecture: the shared disentanglement_lib conv nets rather than the paper's
Table 2 nets, and the trainer's batch size rather than the paper's 500, for comparability with the
other objectives (Zietlow et al. take "the other hyperparameters from the disentanglement library").
"""

from __future__ import annotations

import torch

from probe.models.factor_vae import FactorVAE


class RTCVAE(FactorVAE):
    name = "rtc-vae"

    @classmethod
    def default_config(cls) -> dict:
        config = super().default_config()
        del config["gamma"]
        return {**config, "beta": 10.0, "eta": None}

    @classmethod
    def presets(cls) -> dict[str, dict]:
        return {}   # not in Zietlow et al.; Cheng et al. report a sweep, not per-dataset values

    @property
    def tc_weight(self) -> float:
        return float(self.config["beta"])

    @property
    def eta(self) -> float:
        eta = self.config.get("eta")
        return float(max(10.0, self.config["beta"]) if eta is None else eta)

    def extra_penalty(self, mean: torch.Tensor, logvar: torch.Tensor):
        variance_trace = torch.exp(logvar.float()).mean(0).sum()   # Σ_k E_batch[σ_k²]
        return self.eta * variance_trace, {"variance_trace": variance_trace.detach()}
