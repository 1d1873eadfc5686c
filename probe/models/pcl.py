"""Permutation-contrastive learning (Hyvärinen & Morioka 2017) on Laplace pairs, as in the only image
PCL of the reference code (``bethgelab/slow_disentanglement``, ``baselines`` branch: ``model.py``,
``solver.py:r_func``).

Feature extractor h(x) ∈ R^D: the shared conv encoder with one linear output head (no posterior, no
final nonlinearity, no BatchNorm). Regression function, for x_t = ``batch.x_next`` (second frame) and
x_{t−1} = ``batch.x`` (first frame)::

    r(x_t, x_{t−1}) = −Σ_i |a_i h_i(x_t) + b_i h_i(x_{t−1}) + c_i| + Σ_i h_i(x_t)² + m

with learnable a (init 1), b (init −1), c (init 0) per dimension and a scalar m (init 0); the Q̄
coefficient is fixed to 1 (reference; the official PCL code learns a clamped scalar). Negatives: x_{t−1}
permuted within the batch (``torch.randperm``, fixed points not excluded — reference; the official code
draws a random time point from the whole dataset instead). Loss: logistic regression, real pairs label 1,
permuted pairs label 0, ``binary_cross_entropy_with_logits`` averaged over the 2B logits.

The representation the metrics see is the raw h(x) (reference ``mean_rep``: no ICA, no whitening).
There is no decoder and no posterior variance: ``reconstruct`` raises ``NotImplementedError`` (the
metrics skip reconstruction for models without a decoder) and ``posterior_variance`` returns ``None``.
Optimiser and batch: the model's Adam (lr 1e-4, β = (0.9, 0.999)) and 32 pairs per batch, as the
reference's SlowVAE settings. Unlike the reference checkpoint, a, b, c, m are saved (they are
parameters of this module); they do not affect the representation.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from probe.data.samplers import LaplaceTransitionSampler, resolve_frozen_factors
from probe.models.base import Batch, ProbeModel, permutation


class PCL(ProbeModel):
    name = "pcl"
    vmappable = True
    needs_pairs = True
    train_defaults = {"batch_size": 32}   # pairs; = the reference's 64 images

    def __init__(self, config: dict, image_shape, num_factors: int):
        super().__init__(config, image_shape, num_factors)
        from probe.models.nets import build_encoder

        d = self.num_latent
        self.encoder = build_encoder(self.config.get("arch", "locatello"), image_shape, d, gaussian=False)
        self.coef_t = nn.Parameter(torch.ones(d))         # a
        self.coef_prev = nn.Parameter(-torch.ones(d))     # b
        self.offset = nn.Parameter(torch.zeros(d))        # c
        self.bias = nn.Parameter(torch.zeros(()))         # m

    @classmethod
    def default_config(cls) -> dict:
        return {**super().default_config(), "transition_rate": [1.0, 10.0], "frozen_factors": None}

    @classmethod
    def presets(cls) -> dict[str, dict]:
        return {"dsprites": {"frozen_factors": [0]}, "shapes3d": {"frozen_factors": [4]}}   # "shape", as SlowVAE

    def pair_sampler(self, factor_sizes, factor_names=None) -> LaplaceTransitionSampler:
        """The same Laplace pairs as SlowVAE (see ``probe.models.slow_vae`` for the defaults)."""
        frozen = resolve_frozen_factors(self.config.get("frozen_factors"), factor_names, len(factor_sizes))
        return LaplaceTransitionSampler(factor_sizes, frozen=frozen, rate=self.config["transition_rate"])

    def regression(self, h_t: torch.Tensor, h_prev: torch.Tensor) -> torch.Tensor:
        """r(x_t, x_{t−1}) per row [B] from features h_t, h_prev [B, D]."""
        q = (self.coef_t * h_t + self.coef_prev * h_prev + self.offset).abs().sum(1)
        return -q + h_t.pow(2).sum(1) + self.bias

    def logits(self, h_t: torch.Tensor, h_prev: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
        """[r(real pairs); r(x_t, x_{t−1}[perm])] — 2B logits, labels 1 then 0."""
        return torch.cat([self.regression(h_t, h_prev), self.regression(h_t, h_prev[perm])])

    def loss(self, batch: Batch, step: int):
        if batch.x_next is None:
            raise ValueError("PCL needs pairs: the batch must carry x_next")
        b = batch.x.shape[0]
        h = self.encoder(torch.cat([batch.x, batch.x_next])).float()
        h_prev, h_t = h[:b], h[b:]
        perm = permutation(b, h.device)
        logits = self.logits(h_t, h_prev, perm)
        labels = torch.cat([torch.ones(b, device=h.device), torch.zeros(b, device=h.device)])
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        accuracy = ((logits > 0).float() == labels).float().mean()
        return loss, {"accuracy": accuracy.detach()}

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)

    def posterior_variance(self, x: torch.Tensor) -> None:
        return None

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("PCL has no decoder; it learns features h(x) only")
