"""Step (ii) of Zietlow et al. §4.2–4.4 (Fig. 3): learn the additive manipulation m_ψ(w) adversarially.

Setting. The entangled and disentangled β-VAEs chosen by :func:`probe.perturb.select_restarts` keep
their encoders frozen and fed with the *original* images x, so their latent codes do not move. Their
decoders start from the trained weights and keep learning to reconstruct the *manipulated* images
x' = fold(x + ε·m_ψ(w)) from sampled z. ψ minimises L_rec^ent(x') − L_rec^dis(x'): it makes the
data cheaper to decode from the entangled code and dearer from the disentangled one.

Losses. L_rec is the loss the β-VAEs were trained with, disentanglement_lib's Bernoulli loss (sigmoid
cross entropy summed over pixels, mean over images); the paper's Eq. 4 writes a squared error, but
the models it manipulates were trained with the library's Bernoulli loss, so we keep that. With a
soft target x' the cross entropy is H(x') + KL(x' ‖ σ(logits)); H(x') is the same for both sides, so
ψ's objective is a difference of KL terms, and ∂/∂x' of it is (logits_dis − logits_ent): ψ's
gradient never passes through the decoders, which therefore run without autograd in the ψ step.
Ensembles (k > 1) average the losses of their members (appendix B.1).

Schedule (appendix B.1). Every step: 3 decoder batches (``decoder_batches_per_step``), each
reconstructing ``z_samples`` = 5 posterior samples per image, then one ψ batch. Adam with lr 1e-4,
β = (0.9, 0.999), eps 1e-7 for both ψ and the decoders. The frozen encoders' posteriors are computed
once for the whole store (they never change), which is cheaper than re-encoding every batch.
``decoder_batches_per_step`` = 0 keeps the decoders frozen at the restarts' weights (a deviation, measured on
the regime restarts in docs/notes/perturb.md: the fine-tuned decoders absorbed most of what ψ gained); a step
is then one ψ batch.

Outputs: a manipulation run folder (``probe.train.ManipulationRunFolder``) filled by the trainer's run
loop (``probe.train.loop``): the resolved config with the store and restart digests and code version,
the latest checkpoint (ψ, decoders, both optimisers, the batch generator), one log row per logged step,
the reconstruction losses before the first step, and last the done record (steps, wall time, the losses
before/after, coverage, the checkpoint's checksum). Resuming from the checkpoint continues
bit-identically on CPU.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from probe.errors import UserError
from probe.perturb.manipulation import (BOTTLENECK_EMBEDDINGS, RENDER_BIAS_INITS, UPSAMPLES, ManipulationNet,
                                        manipulate, manipulation_coverage, normalised_factors)
from probe.provenance import code_version, digest_json, environment
from probe.train import ManipulationRunFolder, RunFolder
from probe.train.encoder import forward_batch
from probe.train.loop import Schedule, open_run

DEFAULT_EPSILON = {"dsprites": 0.1, "shapes3d": 0.175}  # §5.2: "0.1 for dSprites and 0.175 for Shapes3D"

DEFAULT_MANIPULATION_CONFIG = {
    "steps": 5000,                    # ψ updates (the paper does not state a number)
    "batch_size": 64,                 # images per batch, disentanglement_lib's batch size
    "z_samples": 5,                   # posterior samples reconstructed per image (appendix B.1)
    "decoder_batches_per_step": 3,    # decoder batches per ψ batch (appendix B.1); 0: the decoders stay frozen at the
                                      # restarts' weights (a deviation: fine-tuned decoders cancelled most of ψ's
                                      # advantage on the regime restarts, docs/notes/perturb.md)
    "lr": 1e-4,                       # Adam, ψ and decoders (appendix B.1)
    "manipulation_lr": None,          # None -> lr
    "freeze_psi": False,              # True: ψ keeps its seeded initialisation (no ψ update; the same batches and
                                      # decoder training as the learned run): the frozen random-ψ control
    "normalise_linf": False,          # True: each image's m rescaled to ‖m‖∞ = 1, the whole budget ε (the random-ψ
                                      # control's "full budget"; an untrained m has |m|∞ ≈ 0.005)
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_eps": 1e-7,
    "epsilon": None,                  # None -> DEFAULT_EPSILON[store name]
    "epsilon_by_dataset": dict(DEFAULT_EPSILON),
    "input_hidden": [],               # ReLU layers before the one-neuron bottleneck (paper: none)
    "bottleneck_activation": "none",  # "none" | "tanh"
    "render_bias_init": "zeros",      # "zeros" (disentanglement_lib's decoder) | "uniform" (PyTorch default; not homogeneous in s)
    "bottleneck_embedding": "odd",    # "odd": m = tanh(render(s) − render(−s)) (deviation, docs/notes/perturb.md) | "linear": the renderer sees s (paper) | "circle"
    "upsample": "transposed",         # the renderer's upsampling: "transposed" (paper) | "resize" / "resize-bilinear"
                                      # (×2 resize then 3×3 conv, Odena et al. 2016; a deviation: no checkerboard)
    "coverage_threshold": 0.05,       # ‖m(w)‖∞ below this counts as "unmodified" in the done record's coverage
    "seed": 0,
    "checkpoint_every": 500,
    "log_every": 50,
    "eval_images": 2048,              # fixed subset for the before/after reconstruction losses
}

EVAL_BATCH = 256


def resolve_manipulation_config(config: dict | None, dataset: str | None) -> dict:
    """Defaults <- ``config``; unknown keys and bad values are UserErrors; fills ``epsilon``."""
    cfg = copy.deepcopy(DEFAULT_MANIPULATION_CONFIG)
    for key, value in (config or {}).items():
        if key not in cfg:
            raise UserError(f"unknown manipulation setting {key!r} (known: {', '.join(sorted(cfg))})")
        cfg[key] = value
    if cfg["epsilon"] is None:
        eps = cfg["epsilon_by_dataset"].get(dataset or "")
        if eps is None:
            raise UserError(f"no default epsilon for dataset {dataset!r} (known: {', '.join(sorted(cfg['epsilon_by_dataset']))}); "
                            "pass epsilon explicitly")
        cfg["epsilon"] = eps
    try:
        cfg["epsilon"] = float(cfg["epsilon"])
        for key in ("steps", "batch_size", "z_samples", "decoder_batches_per_step", "seed", "checkpoint_every",
                    "log_every", "eval_images"):
            cfg[key] = int(cfg[key])
        for key in ("lr", "adam_beta1", "adam_beta2", "adam_eps"):
            cfg[key] = float(cfg[key])
        cfg["manipulation_lr"] = cfg["lr"] if cfg["manipulation_lr"] is None else float(cfg["manipulation_lr"])
        cfg["input_hidden"] = [int(h) for h in cfg["input_hidden"]]
    except (TypeError, ValueError) as exc:
        raise UserError(f"bad manipulation setting: {exc}") from None
    if not 0 < cfg["epsilon"] <= 1:
        raise UserError(f"epsilon must be in (0, 1], got {cfg['epsilon']}")
    for key in ("steps", "batch_size", "z_samples", "checkpoint_every", "log_every", "eval_images"):
        if cfg[key] < 1:
            raise UserError(f"{key} must be at least 1, got {cfg[key]}")
    if cfg["decoder_batches_per_step"] < 0:
        raise UserError(f"decoder_batches_per_step must be at least 0 (0: frozen decoders), got {cfg['decoder_batches_per_step']}")
    for key, allowed in (("bottleneck_embedding", BOTTLENECK_EMBEDDINGS), ("render_bias_init", RENDER_BIAS_INITS),
                         ("upsample", UPSAMPLES)):
        if cfg[key] not in allowed:
            raise UserError(f"{key} must be one of {', '.join(allowed)}, got {cfg[key]!r}")
    try:
        cfg["coverage_threshold"] = float(cfg["coverage_threshold"])
    except (TypeError, ValueError) as exc:
        raise UserError(f"bad manipulation setting coverage_threshold: {exc}") from None
    if cfg["bottleneck_activation"] not in ("none", "tanh"):
        raise UserError(f"bottleneck_activation must be 'none' or 'tanh', got {cfg['bottleneck_activation']!r}")
    for key in ("freeze_psi", "normalise_linf"):
        if not isinstance(cfg[key], bool):
            raise UserError(f"{key} must be true or false, got {cfg[key]!r}")
    return cfg


# -- loading the restarts -------------------------------------------------------------------------------

def _run_store_digest(run_config: dict) -> str | None:
    store = run_config.get("store")
    if isinstance(store, dict):
        return store.get("digest")
    return run_config.get("store_digest")


def _load_restart(run_dir, store, device):
    from probe.train import load_run

    run_dir = Path(run_dir)
    model, run_config = load_run(run_dir, device="cpu")
    if not (hasattr(model, "encode_distribution") and hasattr(model, "decoder")):
        raise UserError(f"{run_dir}: the manipulation needs Gaussian VAEs with .encode_distribution and .decoder "
                        f"(e.g. beta-vae), got {type(model).__name__}")
    digest = _run_store_digest(run_config)
    if digest is not None and digest != store.digest:
        raise UserError(f"{run_dir} was trained on a different store (digest {digest[:12]}…) than {store.path} "
                        f"({store.digest[:12]}…); the restarts must come from the store being manipulated")
    c, h, w = tuple(model.image_shape)
    if (h, w, c) != store.image_shape:
        raise UserError(f"{run_dir}: model images are {h}×{w}×{c}, the store's are {store.image_shape}")
    model.to(device).eval()
    return model


@torch.no_grad()
def _encode_store(model, images_u8: torch.Tensor, batch: int = 1024):
    batch = forward_batch(batch, images_u8.device)  # CPU-sized forward passes, the codes unchanged (probe.train.encoder)
    means, logvars = [], []
    for start in range(0, images_u8.shape[0], batch):
        x = images_u8[start:start + batch].permute(0, 3, 1, 2).float() / 255.0
        mean, logvar = model.encode_distribution(x)
        means.append(mean.float())
        logvars.append(logvar.float())
    return torch.cat(means), torch.cat(logvars)


class _Side:
    """The frozen posteriors and trainable decoders of one side (entangled or disentangled)."""

    def __init__(self, models, images_u8):
        self.decoders = []
        self.posteriors = []
        for model in models:
            self.posteriors.append(_encode_store(model, images_u8))
            decoder = copy.deepcopy(model.decoder)
            decoder.train()
            for p in decoder.parameters():
                p.requires_grad_(True)
            self.decoders.append(decoder)

    def logits(self, idx: torch.Tensor, noise_list):
        """Logits [S·B, C, H, W] of each decoder for z = μ + σ·noise (noise [S, B, D] per member)."""
        out = []
        for decoder, (mean, logvar), noise in zip(self.decoders, self.posteriors, noise_list):
            z = mean[idx].unsqueeze(0) + torch.exp(0.5 * logvar[idx]).unsqueeze(0) * noise
            out.append(decoder(z.reshape(-1, z.shape[-1])))
        return out

    def draw_noise(self, batch: int, samples: int, generator: torch.Generator, device):
        return [torch.randn((samples, batch, mean.shape[1]), generator=generator).to(device) for mean, _ in self.posteriors]


def _bce(logits: torch.Tensor, target: torch.Tensor, samples: int) -> torch.Tensor:
    """Bernoulli loss of ``samples`` stacked reconstructions against one target each: sum over pixels, mean over rest."""
    target = target.unsqueeze(0).expand(samples, *target.shape).reshape(logits.shape)
    return F.binary_cross_entropy_with_logits(logits, target, reduction="none").flatten(1).sum(1).mean()


def _entropy(x: torch.Tensor) -> torch.Tensor:
    """Per-image Bernoulli entropy of soft targets, summed over pixels, mean over images."""
    return (-(torch.xlogy(x, x) + torch.xlogy(1 - x, 1 - x))).flatten(1).sum(1).mean()


def _batch(images_u8, idx):
    return images_u8[idx].permute(0, 3, 1, 2).float() / 255.0


# -- training -------------------------------------------------------------------------------------------

def train_manipulation(store_path, entangled_runs, disentangled_runs, out_dir, config: dict | None = None, *,
                       resume: bool = True, progress: bool = True, device: str | None = None) -> Path:
    """Train m_ψ against frozen-encoder β-VAE pairs; returns ``out_dir`` (see the module docstring).

    ``entangled_runs`` / ``disentangled_runs``: run folders of complete β-VAE runs on ``store_path``
    (one each, or k each for ensembles). ``config``: overrides of :data:`DEFAULT_MANIPULATION_CONFIG`.
    A complete ``out_dir`` with the same inputs is returned as is; an incomplete one is resumed from its
    checkpoint when ``resume`` (else UserError).
    """
    from probe.data import open_store

    store = open_store(store_path, verify=True)
    cfg = resolve_manipulation_config(config, store.name)
    entangled_runs = [str(Path(r)) for r in entangled_runs]
    disentangled_runs = [str(Path(r)) for r in disentangled_runs]
    if not entangled_runs or not disentangled_runs:
        raise UserError("need at least one entangled and one disentangled run")
    overlap = set(entangled_runs) & set(disentangled_runs)
    if overlap:
        raise UserError(f"a run cannot be both entangled and disentangled: {', '.join(sorted(overlap))}")
    record = {
        "config": cfg,
        "store": {"path": str(store.path), "digest": store.digest, "name": store.name},
        "entangled": entangled_runs,
        "disentangled": disentangled_runs,
        "restart_digests": {r: RunFolder(r).checkpoint_sha256() for r in entangled_runs + disentangled_runs},
    }
    record = {**record, "identity_digest": digest_json(_identity_of(record)), "code_version": code_version(),
              "environment": environment(), "image_shape": list(store.image_shape),
              "factor_sizes": store.factor_sizes, "factor_names": store.factor_names}
    folder = ManipulationRunFolder(out_dir)
    session = open_run(folder, record, _identity_of, steps=cfg["steps"], resume=resume)
    if session is None:
        return folder.path

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    trainer = ManipulationTrainer(store, cfg, entangled_runs, disentangled_runs, device)
    if session.resumed:
        before = folder.read_before()
    else:
        before = trainer.evaluate(manipulated=False)
        folder.write_before(before)

    def finish(last_row: dict) -> dict:
        return {"final": trainer.final(before), "checkpoint_sha256": folder.checkpoint_sha256()}

    session.drive(trainer, trainer.train_step, Schedule(cfg["steps"], cfg["log_every"], cfg["checkpoint_every"]),
                  finish=finish, label="manipulation", device=device, progress=progress)
    return folder.path


# settings added after manipulation runs were recorded: left out of a run's identity at their default, so a run
# recorded before they existed (the same computation) still resumes and is still found complete
_LATER_SETTINGS = {"upsample": "transposed", "freeze_psi": False, "normalise_linf": False}


def _identity_of(record: dict) -> dict:
    """The parts of a manipulation config that must match for a resume to continue the same run: the config, the
    store's content digest and the restarts' checkpoints (sha256, in order), not where they lie, so a run folder
    copied or moved with its pipeline workdir (the store and the restarts with it) continues in the copy. The
    record keeps the paths as provenance."""
    digests = record.get("restart_digests") or {}
    store = record.get("store") or {}
    config = record.get("config")
    if isinstance(config, dict):
        config = {k: v for k, v in config.items() if not (k in _LATER_SETTINGS and v == _LATER_SETTINGS[k])}
    return {"config": config, "store": {"digest": store.get("digest"), "name": store.get("name")},
            "entangled": [digests.get(r) for r in record.get("entangled") or []],
            "disentangled": [digests.get(r) for r in record.get("disentangled") or []]}


class ManipulationTrainer:
    """The manipulation's state (ψ, both sides' decoders, their optimisers, the batch generator) and its step."""

    def __init__(self, store, cfg, entangled_runs, disentangled_runs, device):
        self.store, self.cfg, self.device = store, cfg, device
        self.images = store.load(device)
        self.w = normalised_factors(store.factors, store.factor_sizes).to(device)
        ent_models = [_load_restart(r, store, device) for r in entangled_runs]
        dis_models = [_load_restart(r, store, device) for r in disentangled_runs]
        self.ent = _Side(ent_models, self.images)
        self.dis = _Side(dis_models, self.images)
        del ent_models, dis_models
        c = (store.image_shape[2], store.image_shape[0], store.image_shape[1])
        with torch.random.fork_rng(devices=[]):  # ψ's initialisation is seeded without touching the caller's RNG
            torch.manual_seed(cfg["seed"])
            self.net = ManipulationNet(store.num_factors, c, cfg["input_hidden"], cfg["bottleneck_activation"],
                                       cfg["render_bias_init"], cfg["bottleneck_embedding"], cfg["upsample"],
                                       cfg["normalise_linf"]).to(device)
        self.frozen = cfg["freeze_psi"]
        if self.frozen:  # the control: m stays the seeded random initialisation the learned run starts from
            self.net.requires_grad_(False)
        adam = dict(lr=cfg["lr"], betas=(cfg["adam_beta1"], cfg["adam_beta2"]), eps=cfg["adam_eps"])
        self.opt_m = torch.optim.Adam(self.net.parameters(), **{**adam, "lr": cfg["manipulation_lr"]})
        self.opt_dec = torch.optim.Adam([p for d in self.ent.decoders + self.dis.decoders for p in d.parameters()], **adam)
        self.generator = torch.Generator().manual_seed(cfg["seed"] + 1)
        eval_rng = np.random.RandomState(cfg["seed"] + 2)
        n_eval = min(cfg["eval_images"], store.num_images)
        self.eval_idx = torch.from_numpy(np.sort(eval_rng.choice(store.num_images, n_eval, replace=False))).to(device)

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"manipulation": self.net.state_dict(),
                "decoders_entangled": [d.state_dict() for d in self.ent.decoders],
                "decoders_disentangled": [d.state_dict() for d in self.dis.decoders],
                "opt_m": self.opt_m.state_dict(), "opt_dec": self.opt_dec.state_dict(),
                "generator": self.generator.get_state(), "epsilon": self.cfg["epsilon"],
                "net": {"num_factors": self.store.num_factors, "image_shape": [self.store.image_shape[2], *self.store.image_shape[:2]],
                        "input_hidden": self.cfg["input_hidden"], "bottleneck_activation": self.cfg["bottleneck_activation"],
                        "bottleneck_embedding": self.cfg["bottleneck_embedding"], "upsample": self.cfg["upsample"],
                        "normalise_linf": self.cfg["normalise_linf"]}}

    def load_state_dict(self, state: dict) -> None:
        self.net.load_state_dict(state["manipulation"])
        for d, s in zip(self.ent.decoders, state["decoders_entangled"]):
            d.load_state_dict(s)
        for d, s in zip(self.dis.decoders, state["decoders_disentangled"]):
            d.load_state_dict(s)
        self.opt_m.load_state_dict(state["opt_m"])
        self.opt_dec.load_state_dict(state["opt_dec"])
        self.generator.set_state(state["generator"])

    # -- one step -----------------------------------------------------------------------------------
    def train_step(self, step: int) -> dict:
        """``decoder_batches_per_step`` decoder batches, then one ψ batch; the logs of the run loop. With frozen
        decoders (0 batches) the ψ batch's losses are the decoders' losses on x′, logged under both names."""
        rounds = self.cfg["decoder_batches_per_step"]
        dec = np.mean([self.decoder_step() for _ in range(rounds)], axis=0) if rounds else None
        rec_ent, rec_dis, objective = self.manipulation_step()
        if dec is None:
            dec = (rec_ent, rec_dis)
        return {"decoder_rec_entangled": dec[0], "decoder_rec_disentangled": dec[1], "rec_entangled": rec_ent,
                "rec_disentangled": rec_dis, "objective": objective}

    def _draw(self):
        idx = torch.randint(self.store.num_images, (self.cfg["batch_size"],), generator=self.generator).to(self.device)
        samples = self.cfg["z_samples"]
        b = idx.shape[0]
        return idx, self.ent.draw_noise(b, samples, self.generator, self.device), self.dis.draw_noise(b, samples, self.generator, self.device)

    def decoder_step(self) -> tuple[float, float]:
        idx, noise_ent, noise_dis = self._draw()
        with torch.no_grad():
            x_mod = manipulate(_batch(self.images, idx), self.net(self.w[idx]), self.cfg["epsilon"])
        s = self.cfg["z_samples"]
        losses_ent = [_bce(l, x_mod, s) for l in self.ent.logits(idx, noise_ent)]
        losses_dis = [_bce(l, x_mod, s) for l in self.dis.logits(idx, noise_dis)]
        self.opt_dec.zero_grad(set_to_none=True)
        # each decoder minimises its own loss; their parameters are disjoint, so one summed backward suffices
        torch.stack(losses_ent + losses_dis).sum().backward()
        self.opt_dec.step()
        return float(torch.stack(losses_ent).detach().mean()), float(torch.stack(losses_dis).detach().mean())

    def objective(self, idx, noise_ent, noise_dis):
        """(L_rec^ent(x'), L_rec^dis(x'), L_rec^ent − L_rec^dis) on one batch, differentiable in ψ only."""
        with torch.no_grad():  # ψ's gradient reaches x' only as the decoders' target
            logits_ent = self.ent.logits(idx, noise_ent)
            logits_dis = self.dis.logits(idx, noise_dis)
        x_mod = manipulate(_batch(self.images, idx), self.net(self.w[idx]), self.cfg["epsilon"])
        s = self.cfg["z_samples"]
        loss_ent = torch.stack([_bce(l, x_mod, s) for l in logits_ent]).mean()
        loss_dis = torch.stack([_bce(l, x_mod, s) for l in logits_dis]).mean()
        return loss_ent, loss_dis, loss_ent - loss_dis

    def manipulation_step(self) -> tuple[float, float, float]:
        if self.frozen:  # the same batch is drawn and logged, so batches and decoder steps match the learned run's
            with torch.no_grad():
                loss_ent, loss_dis, objective = self.objective(*self._draw())
            return float(loss_ent), float(loss_dis), float(objective)
        loss_ent, loss_dis, objective = self.objective(*self._draw())
        self.opt_m.zero_grad(set_to_none=True)
        objective.backward()
        self.opt_m.step()
        return float(loss_ent.detach()), float(loss_dis.detach()), float(objective.detach())

    # -- evaluation ---------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, manipulated: bool, m_rows: torch.Tensor | None = None) -> dict:
        """Mean Bernoulli loss of each side's decoders on the fixed eval subset (fixed z noise). ``m_rows``: a
        permutation of the subset's positions; image i then gets the m of image ``m_rows[i]`` instead of its own."""
        g = torch.Generator().manual_seed(self.cfg["seed"] + 3)
        s = self.cfg["z_samples"]
        totals = {"entangled": 0.0, "disentangled": 0.0, "target_entropy": 0.0}
        n = self.eval_idx.shape[0]
        m_idx = self.eval_idx if m_rows is None else self.eval_idx[m_rows.to(self.eval_idx.device)]
        for start in range(0, n, EVAL_BATCH):
            idx = self.eval_idx[start:start + EVAL_BATCH]
            x = _batch(self.images, idx)
            if manipulated:
                x = manipulate(x, self.net(self.w[m_idx[start:start + EVAL_BATCH]]), self.cfg["epsilon"])
            for name, side in (("entangled", self.ent), ("disentangled", self.dis)):
                logits = side.logits(idx, side.draw_noise(idx.shape[0], s, g, self.device))
                totals[name] += float(torch.stack([_bce(l, x, s) for l in logits]).mean()) * idx.shape[0]
            totals["target_entropy"] += float(_entropy(x)) * idx.shape[0]
        res = {k: v / n for k, v in totals.items()}
        # BCE − H(target) = KL(target ‖ reconstruction): zero for a perfect decoder, comparable across x and x'
        res["entangled_excess"] = res["entangled"] - res["target_entropy"]
        res["disentangled_excess"] = res["disentangled"] - res["target_entropy"]
        res["dis_minus_ent"] = res["disentangled"] - res["entangled"]
        return res

    def final(self, before: dict) -> dict:
        """The done record's ``final``: reconstruction losses before/after, after with m on the wrong images
        (``after_shuffled``), and the coverage of m(w).

        ``after_shuffled`` scores the same decoders on x′ where every image gets another image's m(w) (the eval
        rows permuted once, seeded): the part of the gap dis − ent that survives it is a change of the data as a
        whole, which needs no m tied to its image (on binary images a saturated m is one contrast change for every
        image; docs/notes/perturb.md); ``after − after_shuffled`` is what depends on m being its own image's."""
        after = self.evaluate(manipulated=True)
        perm = torch.from_numpy(np.random.RandomState(self.cfg["seed"] + 4).permutation(self.eval_idx.shape[0]))
        after_shuffled = self.evaluate(manipulated=True, m_rows=perm)
        self.net.eval()
        coverage = manipulation_coverage(self.net, self.w, threshold=self.cfg["coverage_threshold"],
                                         factor_sizes=self.store.factor_sizes, factors=self.store.factors,
                                         seed=self.cfg["seed"])
        coverage["factor_names"] = list(self.store.factor_names)
        return {"before": before, "after": after, "after_shuffled": after_shuffled, "epsilon": self.cfg["epsilon"],
                "entangled_cheaper_after": after["entangled"] < after["disentangled"], "coverage": coverage}


# -- loading a trained manipulation ----------------------------------------------------------------------

_UNFINISHED_HINT = "run `probe perturb train` first"


def manipulation_final(manipulation_dir) -> dict:
    """The done record's ``final`` of a finished manipulation run (losses before/after, coverage) without
    loading its weights; UserError if the run is not finished."""
    folder = ManipulationRunFolder(manipulation_dir)
    folder.require_complete(_UNFINISHED_HINT)
    return folder.read_done().get("final") or {}


def _finished_run(manipulation_dir):
    """(folder, config record, done record, checkpoint sha256, checkpoint state) of a finished manipulation run whose
    checkpoint matches the checksum in its done record; UserError otherwise."""
    folder = ManipulationRunFolder(manipulation_dir)
    folder.require_complete(_UNFINISHED_HINT)
    done = folder.read_done()
    digest = folder.checkpoint_sha256()
    if digest != done.get("checkpoint_sha256"):
        raise UserError(f"{folder.checkpoint_path} does not match the checksum in {folder.done_path}; "
                        "the manipulation run is corrupt")
    return folder, folder.read_config(), done, digest, folder.load_checkpoint()


def load_manipulation(manipulation_dir, device: str = "cpu") -> tuple[ManipulationNet, dict]:
    """The trained m_ψ (eval mode) and ``{"config", "store", "checkpoint_sha256", "epsilon", ...}``."""
    folder, record, done, digest, state = _finished_run(manipulation_dir)
    spec = state["net"]
    net = ManipulationNet(spec["num_factors"], tuple(spec["image_shape"]), spec["input_hidden"], spec["bottleneck_activation"],
                          bottleneck_embedding=spec.get("bottleneck_embedding", "linear"),
                          upsample=spec.get("upsample", "transposed"), normalise_linf=spec.get("normalise_linf", False))
    net.load_state_dict(state["manipulation"])
    net.to(device).eval()
    info = {"dir": str(folder.path), "config": record["config"], "store": record["store"], "checkpoint_sha256": digest,
            "identity_digest": record["identity_digest"], "epsilon": float(state["epsilon"]),
            "entangled": record["entangled"], "disentangled": record["disentangled"], "final": done.get("final")}
    return net, info


def restore_trainer(manipulation_dir, device: str = "cpu") -> ManipulationTrainer:
    """A finished manipulation's trainer as its checkpoint left it (ψ and both sides' decoders, the evaluation
    subset and its fixed z noise), for rescoring x′ with ``evaluate`` — e.g. with m moved between images
    (``benchmarks/m_pairing.py``)."""
    from probe.data import open_store

    _, record, _, _, state = _finished_run(manipulation_dir)
    store = open_store(record["store"]["path"])
    cfg = resolve_manipulation_config(record["config"], store.name)
    trainer = ManipulationTrainer(store, cfg, record["entangled"], record["disentangled"], torch.device(device))
    trainer.load_state_dict(state)
    return trainer


def appendix_b1_deviations(config: dict | None, dataset: str | None) -> list[str]:
    """Plain-language list of where a manipulation config departs from Zietlow et al. 2021, appendix B.1 and §5.2.

    The report prints it beside Figure 4, so a reader knows which m(w) the verdicts rest on.
    """
    try:
        cfg = resolve_manipulation_config(config, dataset)
    except UserError:
        return []
    out = []
    if cfg["bottleneck_embedding"] == "odd":
        out.append("m(w) = tanh(r(s) − r(−s)) with r the paper's renderer (an odd function of the one-neuron "
                   "bottleneck s): the paper's tanh(r(s)) left the images with s < 0 unmodified and, given a "
                   "non-zero renderer input, learned one constant pattern for every image (docs/notes/perturb.md)")
    elif cfg["bottleneck_embedding"] == "circle":
        out.append("the renderer sees (cos πs, sin πs) instead of s")
    if cfg["upsample"] != "transposed":
        out.append(f"the renderer upsamples by resize-convolution ({'nearest' if cfg['upsample'] == 'resize' else 'bilinear'} "
                   "×2 resize then a 3×3 convolution, Odena et al. 2016) instead of the paper's transposed convolutions, "
                   "so m cannot carry their checkerboard")
    if cfg["freeze_psi"]:
        out.append("ψ frozen at its random initialisation (the random-ψ control, not a learned manipulation)")
    if cfg["normalise_linf"]:
        out.append("each image's m rescaled to ‖m‖∞ = 1 (the whole budget ε for every image)")
    if cfg["render_bias_init"] != "zeros":
        out.append(f"renderer biases initialised {cfg['render_bias_init']!r} (the paper's start at zero)")
    if cfg["input_hidden"] or cfg["bottleneck_activation"] != "none":
        out.append(f"input MLP {cfg['input_hidden']} with bottleneck activation {cfg['bottleneck_activation']!r}")
    if cfg["manipulation_lr"] != 1e-4 or cfg["lr"] != 1e-4:
        out.append(f"learning rates ψ {cfg['manipulation_lr']:g}, decoders {cfg['lr']:g} (paper: 1e-4 for both)")
    if cfg["decoder_batches_per_step"] == 0:
        out.append("the decoders stay frozen at the restarts' weights (the paper fine-tunes them on three batches per ψ "
                   "batch; on our restarts the fine-tuned decoders cancelled most of ψ's advantage, docs/notes/perturb.md)")
    if cfg["z_samples"] != 5 or cfg["decoder_batches_per_step"] not in (0, 3):
        out.append(f"{cfg['z_samples']} z samples per image and {cfg['decoder_batches_per_step']} decoder batches per ψ "
                   "batch (paper: 5 and 3)")
    paper_eps = DEFAULT_EPSILON.get(dataset or "")
    if paper_eps is not None and abs(cfg["epsilon"] - paper_eps) > 1e-12:
        out.append(f"ε {cfg['epsilon']:g} (paper: {paper_eps:g})")
    out.append(f"{cfg['steps']} ψ steps (the paper gives no number)")
    return out
