"""The model protocol every objective (built-in or plug-in) implements, and shared helpers.

A model file states its loss and little else; the trainer (``probe.train``) owns loops, devices,
precision, checkpoints and logging. The contract:

* ``name``                   registry name (``"beta-vae"``)
* ``default_config()``       every hyperparameter with its default (dict of JSON scalars/lists).
                             ``num_latent: None`` means "number of ground-truth factors" (Zietlow §5.1).
* ``presets()``              ``{dataset_name: {key: value}}`` paper hyperparameters per dataset.
* ``train_defaults``         overrides of the trainer defaults this model needs (e.g. batch size).
* ``needs_pairs``            True if the batch must carry ``x_next`` (SlowVAE, PCL: Laplace pairs).
* ``code_kind``              ``"continuous"`` or ``"discrete"`` (quantized models).
* ``__init__(config, image_shape=(C, H, W), num_factors=K)``
* ``loss(batch, step) -> (loss, logs)``    scalar loss to minimise and a dict of floats/tensors to log.
* ``configure_optimizers() -> {name: optimizer}``  default: one Adam over all parameters.
* ``training_step(batch, step, optimizers) -> logs``  default: zero_grad, loss, backward, step.
  Models with an adversary (FactorVAE, RTC-VAE, FactorQVAE) override it; the docstring says how
  many parameter updates one step is.
* ``encode(x) -> codes [B, D]``  the representation the metrics see (posterior mean for VAEs).
* ``posterior_variance(x) -> [B, D] | None``  for σ-ordering and active units.
* ``discrete_codes(x) -> LongTensor [B, D] | None``  integer code indices (quantized models).
* ``representation(x) -> {"codes", "variance"?, "discrete"?}``  the three above, what the metrics read. Models whose
  encoder yields them together define ``one_pass_representation(x)`` (one encoder pass instead of two or three) and
  name in ``one_pass_reads`` the methods it reproduces; ``representation`` uses it unless a class below the one that
  defines it redefines one of those methods, and calls the three methods in turn otherwise (one check, here).
* ``reconstruct(x) -> [B, C, H, W]`` in [0, 1].
* ``vmappable``              True if ``loss`` draws random numbers only through ``normal_like`` and
                             ``permutation`` (below), so that seeds can train together (probe.train.batched).

Images enter models as float tensors in [0, 1] with layout [B, C, H, W].

Reconstruction weight. The paper's hyperparameters (Zietlow et al. 2021, Table 2) balance a Bernoulli
reconstruction *summed over 64×64 pixels* against the KL/TC terms; at H×W pixels the sum is (H·W)/(64·64) as
large, so every regulariser (the weight-1 KL of FactorVAE and SlowVAE included) weighs (64·64)/(H·W) times more.
``GaussianVAE`` models therefore take ``reconstruction_weight`` w (default 1.0: the loss, bit for bit, of before)::

    loss = w·Rec + ...;  w = (64·64)/(H·W) restores Table 2's balance at another resolution (4 at 32×32)

and under Adam (scale-invariant up to eps) w·Rec + β·KL trains like Rec + (β/w)·KL. Only the optimised loss
is weighted: the logged ``reconstruction`` stays the unweighted nats. Models without a summed-pixel
reconstruction against a regulariser have no such key: the AE (no regulariser), PCL (no decoder), and the
quantized models (QLAE, Tripod, FactorQVAE: pixel-mean reconstructions, already resolution-invariant) and the
linear VAE (a squared error for the §4.1 PCA check, no Table 2 value to keep).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn
from torch.nn import functional as F

from probe.errors import UserError


@dataclass
class Batch:
    """One training batch. ``x_next`` is the second image of each pair for pair-based models."""

    x: torch.Tensor                       # float [B, C, H, W] in [0, 1]
    index: torch.Tensor | None = None     # long [B] image indices in the store
    factors: torch.Tensor | None = None   # long [B, K] factor class indices
    x_next: torch.Tensor | None = None    # float [B, C, H, W], pairs only


ADAM_DEFAULTS = {"lr": 1e-4, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1e-8}  # disentanglement_lib


class ProbeModel(nn.Module):
    name: ClassVar[str] = ""
    needs_pairs: ClassVar[bool] = False
    # True when loss() draws randomness only through ``normal_like`` / ``permutation`` below: then S seeds can
    # train as members of one vmapped step (probe.train.batched), each drawing from its own generator.
    vmappable: ClassVar[bool] = False
    code_kind: ClassVar[str] = "continuous"
    train_defaults: ClassVar[dict] = {}
    # The methods whose values a class's ``one_pass_representation`` reproduces (read on the defining class).
    one_pass_reads: ClassVar[tuple[str, ...]] = ("encode", "posterior_variance", "discrete_codes")

    def __init__(self, config: dict, image_shape: tuple[int, int, int], num_factors: int):
        super().__init__()
        self.config = dict(config)
        self.image_shape = tuple(image_shape)
        self.num_factors = int(num_factors)
        self.num_latent = int(self.config.get("num_latent") or num_factors)

    # -- configuration ----------------------------------------------------------------------------
    @classmethod
    def default_config(cls) -> dict:
        return {"num_latent": None, "arch": "locatello", **ADAM_DEFAULTS}

    @classmethod
    def presets(cls) -> dict[str, dict]:
        return {}

    # -- training ---------------------------------------------------------------------------------
    def loss(self, batch: Batch, step: int) -> tuple[torch.Tensor, dict[str, Any]]:
        raise NotImplementedError

    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        c = self.config
        return {"main": torch.optim.Adam(self.parameters(), lr=c["lr"], betas=(c["adam_beta1"], c["adam_beta2"]), eps=c["adam_eps"])}

    def training_step(self, batch: Batch, step: int, optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, Any]:
        opt = optimizers["main"]
        opt.zero_grad(set_to_none=True)
        loss, logs = self.loss(batch, step)
        loss.backward()
        opt.step()
        return {"loss": loss.detach(), **logs}

    # -- representation ---------------------------------------------------------------------------
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def posterior_variance(self, x: torch.Tensor) -> torch.Tensor | None:
        return None

    def discrete_codes(self, x: torch.Tensor) -> torch.Tensor | None:
        return None

    def representation(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"codes": encode(x), "variance": posterior_variance(x), "discrete": discrete_codes(x)}``, the entries that
        are None left out: from ``one_pass_representation`` where it still reproduces this class's methods
        (``one_pass_applies``), else from the three methods in turn."""
        if one_pass_applies(type(self)):
            return self.one_pass_representation(x)
        return composed_representation(self, x)

    # one_pass_representation(x) -> the same dict from one encoder pass; defined by the models that have one.

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


def composed_representation(model, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The representation from the protocol's three methods, one call each (a plug-in module need define only
    ``encode``)."""
    out = {"codes": model.encode(x)}
    for key, method in (("variance", "posterior_variance"), ("discrete", "discrete_codes")):
        value = getattr(model, method, lambda _x: None)(x)
        if value is not None:
            out[key] = value
    return out


@functools.lru_cache(maxsize=None)
def one_pass_applies(cls: type) -> bool:
    """Whether ``cls``'s ``one_pass_representation`` gives what its own methods would: true when some class in its MRO
    defines one and no class below that one redefines a method it names in ``one_pass_reads``. A plug-in that
    derives from a built-in and redefines ``encode`` (say) is then read through its own ``encode``, not through the
    parent's shortcut; one that also defines its own ``one_pass_representation`` is taken at its word."""
    mro = cls.__mro__
    owner = next((k for k in mro if "one_pass_representation" in vars(k)), None)
    if owner is None:
        return False
    below = mro[:mro.index(owner)]
    return not any(name in vars(k) for k in below for name in owner.one_pass_reads)


def representation_of(model, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """``model.representation(x)``, or the composed one for a plug-in ``nn.Module`` that does not subclass
    ProbeModel."""
    method = getattr(model, "representation", None)
    return method(x) if callable(method) else composed_representation(model, x)


# -- shared loss pieces -------------------------------------------------------------------------------

def bernoulli_reconstruction(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """disentanglement_lib's ``bernoulli_loss``: sigmoid cross entropy summed over pixels, mean over batch."""
    per_pixel = F.binary_cross_entropy_with_logits(logits.float(), x.float(), reduction="none")
    return per_pixel.flatten(1).sum(1).mean()


def gaussian_kl(mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(mean, exp(logvar)) || N(0, I)) summed over latents, mean over batch."""
    return (0.5 * (mean.pow(2) + logvar.exp() - logvar - 1).sum(1)).mean()


def reparameterise(mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    return mean + torch.exp(0.5 * logvar) * normal_like(mean)


# -- random draws in a loss ---------------------------------------------------------------------------
# A loss draws its noise through these two functions. Alone they are torch.randn_like / torch.randperm on the
# global RNG; while probe.train.batched trains several seeds in one vmapped step it installs per-member
# generators, so every member draws exactly what it would draw trained alone.

_member_draws = None  # the batched trainer's MemberDraws while a vmapped step runs, else None


def normal_like(t: torch.Tensor) -> torch.Tensor:
    """Standard normal noise shaped like ``t`` (``torch.randn_like`` on the global RNG when trained alone)."""
    if _member_draws is None:
        return torch.randn_like(t)
    return _member_draws.normal_like(t)


def permutation(n: int, device) -> torch.Tensor:
    """A random permutation of range(n) (``torch.randperm`` on the global RNG when trained alone)."""
    if _member_draws is None:
        return torch.randperm(n, device=device)
    return _member_draws.permutation(n, device)


def install_member_draws(draws) -> None:
    """Route ``normal_like``/``permutation`` to ``draws`` (None: back to the global RNG); for probe.train.batched."""
    global _member_draws
    _member_draws = draws


class GaussianVAE(ProbeModel):
    """Base of every Gaussian-encoder model: encoder -> (mean, logvar), decoder -> logits.

    Subclasses implement ``regularizer(mean, logvar, z, batch, step) -> (penalty, logs)``; the loss is
    w·(Bernoulli reconstruction) + penalty, as ``BaseVAE.model_fn`` in disentanglement_lib when
    w = ``reconstruction_weight`` = 1 (the default; see the module docstring for w = (64·64)/(H·W)).
    Models that compute their own loss weight their reconstruction with ``weighted_reconstruction``.
    ``encoder`` and ``decoder`` are attributes so that the perturbation stage can freeze one and
    fine-tune the other.
    """

    vmappable = True  # noise only through reparameterise; subclasses with an adversary override training_step

    def __init__(self, config: dict, image_shape: tuple[int, int, int], num_factors: int):
        super().__init__(config, image_shape, num_factors)
        from probe.models.nets import build_decoder, build_encoder

        # .get: a run folder written before the key existed has no reconstruction_weight in its config
        weight = self.config.get("reconstruction_weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise UserError(f"model {self.name!r}: reconstruction_weight must be a finite number >= 0, got {weight!r} "
                            "(1 = the paper's loss at 64×64; (64·64)/(H·W) keeps its balance at H×W)")
        self.reconstruction_weight = float(weight)
        self.encoder = build_encoder(self.config.get("arch", "locatello"), image_shape, self.num_latent, gaussian=True)
        self.decoder = build_decoder(self.config.get("arch", "locatello"), image_shape, self.num_latent)

    @classmethod
    def default_config(cls) -> dict:
        return {**super().default_config(), "reconstruction_weight": 1.0}

    def weighted_reconstruction(self, recon: torch.Tensor) -> torch.Tensor:
        """w·recon, the reconstruction term of the optimised loss; at w = 1 ``recon`` itself (no multiply, so the
        loss and its gradients are those of before the weight existed, bit for bit)."""
        if self.reconstruction_weight == 1.0:
            return recon
        return self.reconstruction_weight * recon

    def encode_distribution(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encoder(x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Logits [B, C, H, W]."""
        return self.decoder(z)

    def regularizer(self, mean, logvar, z, batch: Batch, step: int) -> tuple[torch.Tensor, dict]:
        raise NotImplementedError

    def loss(self, batch: Batch, step: int):
        mean, logvar = self.encode_distribution(batch.x)
        z = reparameterise(mean, logvar)
        recon = bernoulli_reconstruction(self.decode(z), batch.x)
        penalty, logs = self.regularizer(mean, logvar, z, batch, step)
        kl = logs.get("kl")
        if kl is None:
            kl = gaussian_kl(mean, logvar)
        # loss = w·Rec + penalty; the log keeps the unweighted reconstruction (nats per image)
        loss = self.weighted_reconstruction(recon) + penalty
        return loss, {"reconstruction": recon.detach(), "kl": kl.detach(), **logs}

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.encode_distribution(x)[0]

    def posterior_variance(self, x: torch.Tensor) -> torch.Tensor:
        return self.encode_distribution(x)[1].exp()

    def one_pass_representation(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        mean, logvar = self.encode_distribution(x)  # one encoder pass for both
        return {"codes": mean, "variance": logvar.exp()}

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.decode(self.encode(x)))


def resolve_config(model_cls: type[ProbeModel], dataset: str | None = None, overrides: dict | None = None) -> dict:
    """defaults <- preset for ``dataset`` (if any) <- ``overrides``; unknown keys are a UserError."""
    config = dict(model_cls.default_config())
    preset = model_cls.presets().get(dataset or "", {})
    config.update(preset)
    for key, value in (overrides or {}).items():
        if key not in config:
            known = ", ".join(sorted(config))
            raise UserError(f"model {model_cls.name!r} has no hyperparameter {key!r} (known: {known})")
        expected = _type_of(config[key])
        if expected is not None and not _is_a(value, expected):
            raise UserError(f"model {model_cls.name!r}: hyperparameter {key!r} must be {expected} (default "
                            f"{config[key]!r}), got {value!r}")
        config[key] = value
    return config


def _type_of(default) -> str | None:
    """The kind of value a hyperparameter takes, from its default (None: any, e.g. num_latent = None)."""
    if default is None:
        return None
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, str):
        return "a string"
    if isinstance(default, (list, tuple)):
        # a numeric list may also be given as one number (SlowVAE's transition_rate: a range or a fixed rate)
        numeric = default and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in default)
        return "a number or a list" if numeric else "a list"
    if isinstance(default, dict):
        return "a table"
    return None


def _is_a(value, expected: str) -> bool:
    # a typed value must match before any job starts (issue 17: `--set beta=abc` gave tracebacks from workers)
    if expected == "true or false":
        return isinstance(value, bool)
    if expected == "an integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "a number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected == "a string":
        return isinstance(value, str)
    if expected == "a list":
        return isinstance(value, (list, tuple))
    if expected == "a number or a list":
        return isinstance(value, (list, tuple)) or (isinstance(value, (int, float)) and not isinstance(value, bool))
    return isinstance(value, dict)
