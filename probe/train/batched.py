"""Batched training: S seeds of one model on one store as one job (issue 16).

Every member keeps its own seed, initialisation, batch order and optimiser state, and writes exactly the run
folder :func:`probe.train.train_run` writes (config, checkpoint, log, done record), so evaluate, report and
resume see ordinary runs; a member's folder can even be continued by ``probe train --resume`` alone.

Two engines (measurements: docs/notes/train.md, benchmarks/train_batched.py):

* ``loop``: the members one after another in one process, sharing the store resident on the device. Each
  member runs the single-run code, so it is **bit-identical** to the seed trained alone, for every model
  (adversaries, BatchNorm, pair samplers, plug-ins). On CPU this is as fast as anything: a CPU step is
  compute-bound and vmapped convolutions were 0.5-1.0× the single loop there.
* ``vmap``: one step for all members: parameters stacked (``torch.func.stack_module_state``), the model's
  ``loss`` vmapped over them with ``functional_call``, one optimiser over the stacked tensors (Adam is
  elementwise, so it is S independent Adams). Kernel launches and Python are paid once per step instead of
  S times, which is what a GPU needs for small models. Each member draws its batches from its own batch
  generator and its noise from its own generator (``probe.models.base.normal_like``/``permutation``), with
  the states a single run would have, so a member follows the single run **to float rounding**: the vmapped
  backward sums in another order (max |Δ| of the weights ~1e-6 after 20 steps of the 32×32 β-VAE on CPU;
  tests/test_train_batched.py). Models qualify when they are ``vmappable`` (randomness only through those
  helpers), keep the default ``training_step``/``configure_optimizers`` (one optimiser, no adversary) and
  have no buffers (BatchNorm); every member must share the model config and train settings.

``engine="auto"`` takes ``vmap`` on CUDA when the members qualify, else ``loop``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from probe.errors import UserError
from probe.models import base as model_base
from probe.models.base import Batch, ProbeModel
from probe.train.data import ResidentData
from probe.train.loop import divergence_error, drive_members
from probe.train.rng import seeded_rng_record
from probe.train.trainer import (BATCH_SEED_OFFSET, _autocast, _build_model, _isolated_global_rng, _make_pair_sampler,
                                 _open_data, _train, done_entries, open_session, schedule_of, seed_globals,
                                 select_device)

ENGINES = ("auto", "loop", "vmap")


def train_runs(run_configs: list[dict], data, outs: list, *, engine: str = "auto", device: str | None = None,
               resume: bool = True, overwrite: bool = False, progress: bool = False,
               stop_after: int | None = None) -> list[Path | BaseException]:
    """Train one run per ``run_configs[i]`` into ``outs[i]``, all on the store ``data``, as one batched job.

    Returns, per member, its run folder or the UserError that stopped it (a NaN loss stops only its member).
    ``resume``/``overwrite``/``stop_after`` as :func:`probe.train.train_run`.
    """
    if engine not in ENGINES:
        raise UserError(f"unknown batched engine {engine!r} (choose from {', '.join(ENGINES)})")
    if len(run_configs) != len(outs):
        raise ValueError("one out folder per run config")
    store = _open_data(data)
    dev = select_device(device)
    chosen = choose_engine(engine, run_configs, store, dev)
    batched = {"engine": chosen, "members": len(run_configs)}
    members = [(i, *open_session(rc, store, out, dev, resume=resume, overwrite=overwrite, batched=batched))
               for i, (rc, out) in enumerate(zip(run_configs, outs))]
    outcomes: list[Path | BaseException] = [Path(out) for out in outs]
    todo = [m for m in members if m[3] is not None]
    if not todo:
        return outcomes
    shared = ResidentData(store, dev)
    if chosen == "loop":
        for i, resolved, precision, session in todo:
            try:
                with _isolated_global_rng(dev):
                    _train(resolved, store, session, dev, precision, progress, stop_after, data=shared)
            except UserError as exc:
                outcomes[i] = exc
        return outcomes
    failed = _train_vmapped(todo, run_configs, outs, store, shared, dev, progress, stop_after, resume, batched)
    for i, error in failed.items():
        outcomes[i] = error
    return outcomes


def choose_engine(engine: str, run_configs: list[dict], store, dev: torch.device) -> str:
    """``auto``: vmap on CUDA when the members can share one step, else loop. ``vmap`` on members that cannot
    share a step is a UserError saying why."""
    if engine == "loop" or (engine == "auto" and (dev.type != "cuda" or len(run_configs) < 2)):
        return "loop"
    reason = vmap_obstacle(run_configs, store)
    if reason is None:
        return "vmap"
    if engine == "vmap":
        raise UserError(f"these runs cannot train in one vmapped step: {reason} (use the loop engine)")
    return "loop"


def vmap_obstacle(run_configs: list[dict], store) -> str | None:
    """Why the members cannot train in one vmapped step, or None when they can."""
    from probe.train.config import resolve_run_config

    resolved = [resolve_run_config(rc, store) for rc in run_configs]
    first = resolved[0]
    for r in resolved[1:]:
        for key in ("model_class", "model_config", "train"):
            if r[key] != first[key]:
                return f"the members differ in {key} (only the seed may differ)"
    with torch.random.fork_rng(devices=[]):
        model = _build_model(first)
    return model_obstacle(model)


def model_obstacle(model: ProbeModel) -> str | None:
    cls = type(model)
    name = cls.name or cls.__name__
    if not getattr(cls, "vmappable", False):
        return f"model {name!r} is not vmappable (its loss may draw randomness outside normal_like/permutation)"
    if cls.training_step is not ProbeModel.training_step:
        return f"model {name!r} has its own training_step (an adversary or gradient clipping)"
    if cls.configure_optimizers is not ProbeModel.configure_optimizers:
        return f"model {name!r} has its own optimisers"
    if any(True for _ in model.buffers()):
        return f"model {name!r} has buffers (e.g. BatchNorm statistics)"
    return None


class MemberDraws:
    """The random draws of a vmapped loss: member m draws from ``generators[m]`` exactly what ``torch.randn_like``
    / ``torch.randperm`` would draw from the global RNG of the run trained alone (``member`` is the vmapped
    member index; each draw is made for every member and the member's own one picked)."""

    def __init__(self, generators: list[torch.Generator]):
        self.generators = generators
        self.member: torch.Tensor | None = None

    def normal_like(self, t: torch.Tensor) -> torch.Tensor:
        draws = torch.stack([torch.randn(t.shape, generator=g, dtype=t.dtype, device=g.device) for g in self.generators])
        return draws.to(t.device)[self.member]

    def permutation(self, n: int, device) -> torch.Tensor:
        draws = torch.stack([torch.randperm(n, generator=g, device=g.device) for g in self.generators])
        return draws.to(device)[self.member]


class _LossOf(nn.Module):
    """``functional_call`` calls ``forward``; a model's objective is ``loss``."""

    def __init__(self, model: ProbeModel):
        super().__init__()
        self.model = model

    def forward(self, batch: dict, step: int):
        return self.model.loss(Batch(**batch), step)


class StackedMembers:
    """S models' parameters stacked [S, ...], one optimiser over them, and each member's generators."""

    def __init__(self, models: list[ProbeModel], seeds: list[int], cpu_states: list[torch.Tensor], dev: torch.device):
        from torch.func import stack_module_state

        params, _ = stack_module_state(models)
        self.names = list(params)
        self.params = {k: v.detach().to(dev).requires_grad_() for k, v in params.items()}
        template = models[0].configure_optimizers()["main"]
        self.optimizer = type(template)(list(self.params.values()), **template.defaults)
        self.loss_module = _LossOf(copy.deepcopy(models[0]).to("meta"))
        self.seeds, self.cpu_states, self.dev = seeds, cpu_states, dev
        self.batch_generators = []
        self.noise_generators = []
        for seed, cpu_state in zip(seeds, cpu_states):
            batch_gen = torch.Generator(device=dev)
            batch_gen.manual_seed(seed + BATCH_SEED_OFFSET)
            noise_gen = torch.Generator(device=dev)
            if dev.type == "cpu":
                noise_gen.set_state(cpu_state)  # the global state after the member's initialisation drew from it
            else:
                noise_gen.manual_seed(seed)      # torch.manual_seed(seed) seeds the device generator too
            self.batch_generators.append(batch_gen)
            self.noise_generators.append(noise_gen)
        self.draws = MemberDraws(self.noise_generators)

    # -- checkpoints: each member's payload is a single run's --------------------------------------------
    def member_state_dict(self, m: int) -> dict:
        optim = self.optimizer.state_dict()
        stacked_shapes = [self.params[k].shape for k in self.names]
        state = {i: {key: (v[m].detach().cpu().clone() if _per_param(key, v, stacked_shapes[i]) else
                           v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v)
                     for key, v in entry.items()} for i, entry in optim["state"].items()}
        return {"model": {k: self.params[k][m].detach().cpu().clone() for k in self.names},
                "optimizers": {"main": {"state": state, "param_groups": optim["param_groups"]}},
                "rng": self._member_rng(m)}

    def load_member_state_dicts(self, states: list[dict]) -> None:
        with torch.no_grad():
            for k in self.names:
                self.params[k].copy_(torch.stack([s["model"][k] for s in states]).to(self.dev))
        optims = [s["optimizers"]["main"] for s in states]
        stacked = {}
        for i, entry in optims[0]["state"].items():
            member_shape = self.params[self.names[int(i)]].shape[1:]
            stacked[i] = {key: (torch.stack([o["state"][i][key] for o in optims]) if _per_param(key, v, member_shape)
                                else v) for key, v in entry.items()}
        self.optimizer.load_state_dict({"state": stacked, "param_groups": optims[0]["param_groups"]})
        for m, s in enumerate(states):
            rng = s["rng"]
            self.batch_generators[m].set_state(rng["batch_generator"])
            if self.dev.type == "cpu":
                self.noise_generators[m].set_state(rng["torch"])
            else:
                self.noise_generators[m].set_state(rng["cuda"][self.dev.index or 0])
                self.cpu_states[m] = rng["torch"]

    def _member_rng(self, m: int) -> dict:
        """The RNG record the run trained alone would checkpoint (numpy's and Python's RNGs as seeded)."""
        noise = self.noise_generators[m].get_state()
        if self.dev.type == "cpu":
            return seeded_rng_record(self.seeds[m], noise, self.batch_generators[m])
        devices = [torch.cuda.get_rng_state(d) for d in range(torch.cuda.device_count())]
        devices[self.dev.index or 0] = noise
        return seeded_rng_record(self.seeds[m], self.cpu_states[m], self.batch_generators[m], devices)

    # -- one step of every member -------------------------------------------------------------------------
    def step_fn(self, data: ResidentData, batch_size: int, pair_sampler, precision: str):
        from torch.func import functional_call, vmap

        members = torch.arange(len(self.seeds), device=self.dev)
        params = {f"model.{k}": v for k, v in self.params.items()}

        def member_loss(p, batch, member, step):
            self.draws.member = member
            loss, logs = functional_call(self.loss_module, p, (batch, step))
            return loss, {k: v for k, v in logs.items() if isinstance(v, torch.Tensor)}

        def step(i: int) -> dict:
            batches = [data.sample(batch_size, g, pair_sampler) for g in self.batch_generators]
            stacked = {f: torch.stack([getattr(b, f) for b in batches]) for f in ("x", "index", "factors", "x_next")
                       if getattr(batches[0], f) is not None}
            self.optimizer.zero_grad(set_to_none=True)
            model_base.install_member_draws(self.draws)
            try:
                with _autocast(precision, self.dev):
                    losses, logs = vmap(lambda p, b, m: member_loss(p, b, m, i - 1), in_dims=(0, 0, 0),
                                        randomness="same")(params, stacked, members)
            finally:
                model_base.install_member_draws(None)
            losses.sum().backward()
            self.optimizer.step()
            return {"loss": losses.detach(), **{k: v.detach() for k, v in logs.items()}}

        return step


def _per_param(key: str, value, param_shape) -> bool:
    """Is an optimiser state entry shaped like its parameter (Adam's moments), not a shared scalar (its step)?"""
    return key != "step" and isinstance(value, torch.Tensor) and value.shape == param_shape


def _train_vmapped(todo, run_configs, outs, store, shared: ResidentData, dev, progress, stop_after, resume,
                   batched) -> dict[int, BaseException]:
    """Drive the open members in vmapped steps; members left at different steps by a kill (between two
    members' checkpoint writes) are first brought level in smaller groups. Returns {member: error}."""
    failed: dict[int, BaseException] = {}
    while todo:
        start_of = {i: int(s.checkpoint["step"]) if s.checkpoint is not None else 0 for i, _, _, s in todo}
        starts = sorted(set(start_of.values()))
        group = [m for m in todo if start_of[m[0]] == starts[0]]
        until = starts[1] if len(starts) > 1 else None
        outcome = _drive_group(group, store, shared, dev, progress, stop_after, until)
        for (i, resolved, _, session), result in zip(group, outcome):
            if result is not None and "failed_at" in result:
                failed[i] = divergence_error(session.folder, result, "loss", resolved["train"]["steps"],
                                             f"{resolved['model']}, seed {resolved['seed']}, batched")
        if until is None or stop_after is not None and any(r and "stopped_at" in r and r["stopped_at"] < until
                                                           for r in outcome):
            break
        reopened = []
        for i, *_ in todo:
            if i in failed:
                continue
            reopened.append((i, *open_session(run_configs[i], store, outs[i], dev, resume=resume, batched=batched)))
        todo = [m for m in reopened if m[3] is not None]
    return failed


def _drive_group(group, store, shared: ResidentData, dev, progress, stop_after, until) -> list[dict | None]:
    first = group[0][1]
    train = first["train"]
    models, seeds, cpu_states = [], [], []
    with _isolated_global_rng(dev):
        for _, resolved, _, _ in group:
            seed_globals(resolved["seed"])
            models.append(_build_model(resolved))
            seeds.append(resolved["seed"])
            cpu_states.append(torch.get_rng_state())
        stacked = StackedMembers(models, seeds, cpu_states, dev)
        pair_sampler = _make_pair_sampler(models[0], store) if getattr(models[0], "needs_pairs", False) else None
        step = stacked.step_fn(shared, train["batch_size"], pair_sampler, group[0][2])
        return drive_members([m[3] for m in group], stacked, step, schedule_of(train), finish=done_entries,
                             label=f"{first['model']}, seeds {seeds[0]}..{seeds[-1]}", device=dev, watch="loss",
                             images_per_step=train["batch_size"], progress=progress,
                             stop_after=stop_after, until=until)
