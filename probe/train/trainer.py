"""Training a model: device, precision, seeding, and its state and step in the run loop (``probe.train.loop``).

Models only state their loss (``probe/models``); everything here works through the model protocol
(``training_step``, ``configure_optimizers``, ``needs_pairs`` + ``pair_sampler``, ``train_defaults``).

The run folder (``probe.train.run_folder``) holds the resolved run config + store path/digest + code
version + environment + runtime, the latest checkpoint (every ``checkpoint_every`` steps and at the end),
one log row per logged step ({"step", "loss", <model logs>, "img_per_s", "wall_time_s"}) and, last, the
done record {"steps", "wall_time_s", "final": {...}, "final_step_logged"}.

A step is one call of the model's ``training_step`` (one optimizer iteration of its main objective;
models with an adversary document how many parameter updates that is). Logged values are means over
the steps since the previous log line.

Determinism: on CPU a fixed seed gives identical parameters, and a run resumed from any checkpoint
continues bit-identically, because the checkpoint holds the optimizer states and every RNG state
(batch generator, global torch/numpy/Python RNGs). The caller's global RNG states are restored when
``train_run`` returns.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import numpy as np
import torch

from probe.errors import UserError
from probe.provenance import code_version, environment
from probe.train.config import identity_of, resolve_run_config
from probe.train.data import ResidentData
from probe.train.loop import Schedule, open_run
from probe.train.rng import capture_rng, restore_rng
from probe.train.run_folder import RunFolder

BATCH_SEED_OFFSET = 0x5EED  # the batch generator's seed differs from the init seed, so the streams do not coincide


def select_device(device: str | None = None) -> torch.device:
    """``None``/"auto" -> cuda if available, else cpu. Anything else must be usable here."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise UserError(f"unknown device {device!r} (use cpu, cuda, cuda:N or auto)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device!r} requested but CUDA is not available here (use --device cpu)")
    if dev.type not in ("cpu", "cuda"):
        raise UserError(f"device {device!r} is not supported (use cpu, cuda, cuda:N or auto)")
    return dev


def effective_precision(precision: str, device: torch.device) -> str:
    if precision == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return precision


def _autocast(precision: str, device: torch.device):
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _isolated_global_rng(device: torch.device):
    """Training seeds the global RNGs (models draw noise from them); give the caller its states back."""
    np_state, py_state = np.random.get_state(), random.getstate()
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)


def _open_data(data):
    from probe.data import Store, open_store

    store = data if isinstance(data, Store) else open_store(data)
    return store.ensure_intact()  # never train on a corrupt store (issue 17): exit 2 naming it, no run folder


def _build_model(resolved: dict):
    from probe.models.registry import get_model_class

    try:
        model_cls = get_model_class(resolved["model"])
    except UserError:
        model_cls = get_model_class(resolved["model_class"])
    c, h, w = resolved["store"]["image_shape"]
    return model_cls(resolved["model_config"], image_shape=(c, h, w), num_factors=len(resolved["store"]["factor_sizes"]))


def _make_pair_sampler(model, store):
    """``model.pair_sampler(factor_sizes[, factor_names])``: names let a model freeze "shape" by name on any
    store; plug-ins written against the one-argument protocol still work."""
    import inspect

    params = inspect.signature(model.pair_sampler).parameters
    if "factor_names" in params:
        return model.pair_sampler(list(store.factor_sizes), factor_names=list(store.factor_names))
    return model.pair_sampler(list(store.factor_sizes))


class _TrainingState:
    """What a checkpoint restores besides the loop's progress: the model, its optimizers, every RNG state."""

    def __init__(self, model, optimizers: dict, batch_generator: torch.Generator):
        self.model, self.optimizers, self.batch_generator = model, optimizers, batch_generator

    def state_dict(self) -> dict:
        return {"model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
                "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
                "rng": capture_rng(self.batch_generator)}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        for name, opt in self.optimizers.items():
            opt.load_state_dict(state["optimizers"][name])
        restore_rng(state["rng"], self.batch_generator)


def train_run(run_config: dict, data, out, *, resume: bool = True, device: str | None = None, progress: bool = True,
              stop_after: int | None = None, overwrite: bool = False) -> Path:
    """Train one model; returns the run folder ``out``.

    ``data`` is a store path or an opened Store. ``resume``: continue a run folder left by an
    interrupted (or shorter, finished) run with the same configuration; without it an existing run
    folder is an error. A complete run folder with the same configuration is returned as is.
    ``stop_after`` (testing hook): stop like a killed process after that many steps, without a final
    checkpoint or done record.
    """
    store = _open_data(data)
    dev = select_device(device)
    resolved, precision, session = open_session(run_config, store, out, dev, resume=resume, overwrite=overwrite)
    if session is None:
        return Path(out)
    with _isolated_global_rng(dev):
        _train(resolved, store, session, dev, precision, progress, stop_after)
    return Path(out)


def open_session(run_config: dict, store, out, dev: torch.device, *, resume: bool, overwrite: bool = False,
                 batched: dict | None = None):
    """(resolved config, precision, Session or None when the run is already complete) of one run on ``store``;
    ``batched``: how a batched job trains it (engine, members), recorded in the runtime."""
    resolved = resolve_run_config(run_config, store)
    train = resolved["train"]
    precision = effective_precision(train["precision"], dev)
    record = {**resolved, "code_version": code_version(), "environment": environment(),
              "runtime": {"device": str(dev), "precision": precision, "compile": train["compile"],
                          "torch_threads": torch.get_num_threads(), **({"batched": batched} if batched else {})}}
    session = open_run(RunFolder(out), record, identity_of, steps=train["steps"], resume=resume,
                       overwrite=overwrite)
    return resolved, precision, session


def seed_globals(seed: int) -> None:
    """The global RNG states a run starts from (its model initialisation draws from torch's)."""
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
    random.seed(seed)


def _train(resolved, store, session, dev: torch.device, precision: str, progress: bool, stop_after,
           data: ResidentData | None = None) -> None:
    """Train one run in ``session``; ``data``: the store already resident on ``dev`` (shared by a batched job)."""
    train = resolved["train"]
    seed = resolved["seed"]
    seed_globals(seed)
    model = _build_model(resolved).to(dev)
    model.train()
    optimizers = model.configure_optimizers()
    generator = torch.Generator(device=dev)
    generator.manual_seed(seed + BATCH_SEED_OFFSET)
    pair_sampler = _make_pair_sampler(model, store) if getattr(model, "needs_pairs", False) else None
    data = ResidentData(store, dev) if data is None else data
    if train["compile"]:
        model.loss = torch.compile(model.loss)  # instance attribute: training_step picks it up

    def step(i: int) -> dict:
        batch = data.sample(train["batch_size"], generator, pair_sampler)
        with _autocast(precision, dev):
            return model.training_step(batch, i - 1, optimizers)

    session.drive(_TrainingState(model, optimizers, generator), step,
                  schedule_of(train), finish=done_entries,
                  label=f"{resolved['model']}, seed {seed}", device=dev, watch="loss",
                  images_per_step=train["batch_size"], progress=progress, stop_after=stop_after)


def schedule_of(train: dict) -> Schedule:
    return Schedule(train["steps"], train["log_every"], train["checkpoint_every"])


def done_entries(last_row: dict) -> dict:
    """The done record's entries besides steps and wall time: the last logged values."""
    final = {k: v for k, v in last_row.items() if k not in ("step", "img_per_s", "wall_time_s")}
    return {"final": final, "final_step_logged": last_row.get("step")}


def run_progress(run_dir) -> dict | None:
    """How far the training run in ``run_dir`` got, read off its files without loading a checkpoint: ``{"step": the
    last logged step (0 before the first log row), "steps": the steps it trains, "complete": bool}``; None where no
    run was started there. For a user watching a long run (``probe pipeline status``)."""
    folder = RunFolder(run_dir)
    if not folder.config_path.exists():
        return None
    steps = (folder.read_config().get("train") or {}).get("steps")
    if folder.is_complete:
        return {"step": folder.read_done().get("steps", steps), "steps": steps, "complete": True}
    rows = folder.read_log()
    return {"step": rows[-1].get("step", 0) if rows else 0, "steps": steps, "complete": False}


def load_run(run_dir, device: str = "cpu", *, allow_incomplete: bool = False):
    """(model in eval mode on ``device``, config dict) of a finished run (``allow_incomplete``: its latest checkpoint)."""
    folder = RunFolder(run_dir)
    config = folder.read_config()
    if not allow_incomplete:
        folder.require_complete("finish it with `probe train ... --resume`")
    payload = folder.load_checkpoint()
    with torch.random.fork_rng(devices=[]):
        model = _build_model(config)
    model.load_state_dict(payload["model"])
    model.to(select_device(device))
    model.eval()
    return model, config


__all__ = ["train_run", "load_run", "select_device"]
