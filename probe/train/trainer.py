"""The training loop: device, precision, seeding, checkpoints, resume, logging, progress.

Models only state their loss (``probe/models``); everything here works through the model protocol
(``training_step``, ``configure_optimizers``, ``needs_pairs`` + ``pair_sampler``, ``train_defaults``).

Run directory (docs/notes/INTERFACES.md)::

    RUN/config.json     resolved run config + store path/digest + code version + environment + runtime
    RUN/checkpoint.pt   latest checkpoint, replaced atomically every ``checkpoint_every`` steps and at the end
    RUN/metrics.jsonl   one JSON object per logged step: {"step", "loss", <model logs>, "img_per_s", "wall_time_s"}
    RUN/done.json       written last: {"steps", "wall_time_s", "final": {...}}; a run dir with it is complete

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
import json
import os
import random
import time
from pathlib import Path

import numpy as np
import torch

from probe.errors import UserError
from probe.provenance import atomic_path, code_version, digest_json, environment, write_json_atomic
from probe.train.checkpoint import load_checkpoint, restore_rng, save_checkpoint
from probe.train.config import identity_of, resolve_run_config
from probe.train.data import ResidentData

CONFIG_FILE = "config.json"
CHECKPOINT_FILE = "checkpoint.pt"
METRICS_FILE = "metrics.jsonl"
DONE_FILE = "done.json"
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

    return data if isinstance(data, Store) else open_store(data)


def _build_model(resolved: dict):
    from probe.models.registry import get_model_class

    try:
        model_cls = get_model_class(resolved["model"])
    except UserError:
        model_cls = get_model_class(resolved["model_class"])
    c, h, w = resolved["store"]["image_shape"]
    return model_cls(resolved["model_config"], image_shape=(c, h, w), num_factors=len(resolved["store"]["factor_sizes"]))


def _scalar_logs(logs: dict) -> dict:
    """Keep scalar entries (tensors or numbers); drop anything else from the running means."""
    out = {}
    for key, value in logs.items():
        if isinstance(value, torch.Tensor):
            if value.numel() == 1:
                out[key] = value.detach().float().reshape(())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = torch.tensor(float(value), dtype=torch.float64)
    return out


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill: everything after it is discarded too
            break
    return rows


def _write_jsonl_atomic(path: Path, rows: list[dict]) -> None:
    with atomic_path(path, overwrite=True) as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _prepare_run_dir(out: Path, resolved: dict, resume: bool) -> tuple[dict | None, bool]:
    """Returns (checkpoint payload or None, already_complete)."""
    identity = identity_of(resolved)
    if not out.exists():
        if not out.parent.exists():
            raise UserError(f"the folder {out.parent} does not exist; create it first")
        out.mkdir()
        return None, False
    if not out.is_dir():
        raise UserError(f"{out} exists and is not a run directory")
    config_path = out / CONFIG_FILE
    if not config_path.exists():
        if any(out.iterdir()):
            raise UserError(f"{out} exists, is not empty and holds no run ({CONFIG_FILE} missing); choose another --out")
        return None, False
    if not resume:
        raise UserError(f"run directory {out} already exists; pass --resume to continue it or remove it to start over")
    previous = json.loads(config_path.read_text())
    old_identity = identity_of(previous)
    if digest_json(old_identity) != digest_json(identity):
        normalised = json.loads(json.dumps(identity))  # tuples -> lists, as stored in config.json
        diffs = sorted(k for k in normalised if normalised[k] != old_identity.get(k))
        raise UserError(f"{out} holds a run with a different configuration (differs in: {', '.join(diffs)}); "
                        "choose another --out or remove it")
    ckpt_path = out / CHECKPOINT_FILE
    done_path = out / DONE_FILE
    if done_path.exists():
        done = json.loads(done_path.read_text())
        if int(done["steps"]) == resolved["train"]["steps"]:
            return None, True
        if int(done["steps"]) > resolved["train"]["steps"]:
            raise UserError(f"{out} is complete at {done['steps']} steps, more than the {resolved['train']['steps']} "
                            "requested; a run cannot be shortened (choose another --out)")
    if not ckpt_path.exists():
        return None, False
    payload = load_checkpoint(ckpt_path)
    if payload["identity_digest"] != digest_json(identity):
        raise UserError(f"{ckpt_path} belongs to a different configuration than {config_path}; remove the run directory")
    if payload["step"] > resolved["train"]["steps"]:
        raise UserError(f"{out} has a checkpoint at step {payload['step']}, beyond the {resolved['train']['steps']} "
                        "steps requested; a run cannot be shortened")
    return payload, False


def _make_pair_sampler(model, store):
    """``model.pair_sampler(factor_sizes[, factor_names])``: names let a model freeze "shape" by name on any
    store; plug-ins written against the one-argument protocol still work."""
    import inspect

    params = inspect.signature(model.pair_sampler).parameters
    if "factor_names" in params:
        return model.pair_sampler(list(store.factor_sizes), factor_names=list(store.factor_names))
    return model.pair_sampler(list(store.factor_sizes))


def train_run(run_config: dict, data, out, *, resume: bool = True, device: str | None = None, progress: bool = True,
              stop_after: int | None = None) -> Path:
    """Train one model; returns the run directory ``out``.

    ``data`` is a store path or an opened Store. ``resume``: continue a run directory left by an
    interrupted (or shorter, finished) run with the same configuration; without it an existing run
    directory is an error. A complete run directory with the same configuration is returned as is.
    ``stop_after`` (testing hook): stop like a killed process after that many steps, without a final
    checkpoint or ``done.json``.
    """
    store = _open_data(data)
    resolved = resolve_run_config(run_config, store)
    out = Path(out)
    dev = select_device(device)
    payload, complete = _prepare_run_dir(out, resolved, resume)
    if complete:
        return out
    train = resolved["train"]
    precision = effective_precision(train["precision"], dev)
    if precision == "bf16" and dev.type == "cpu":
        pass  # allowed (slow on most CPUs); the user asked for it explicitly
    record = {**resolved, "code_version": code_version(), "environment": environment(),
              "runtime": {"device": str(dev), "precision": precision, "compile": train["compile"],
                          "torch_threads": torch.get_num_threads()}}
    write_json_atomic(out / CONFIG_FILE, record)
    (out / DONE_FILE).unlink(missing_ok=True)  # extending a finished run: it is incomplete until the end

    with _isolated_global_rng(dev):
        return _train(resolved, store, out, dev, precision, payload, progress, stop_after)


def _train(resolved, store, out: Path, dev: torch.device, precision: str, payload, progress: bool, stop_after):
    from tqdm.auto import tqdm

    train = resolved["train"]
    seed = resolved["seed"]
    identity_digest = digest_json(identity_of(resolved))

    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
    random.seed(seed)
    model = _build_model(resolved).to(dev)
    model.train()
    optimizers = model.configure_optimizers()
    generator = torch.Generator(device=dev)
    generator.manual_seed(seed + BATCH_SEED_OFFSET)
    pair_sampler = _make_pair_sampler(model, store) if getattr(model, "needs_pairs", False) else None

    start_step, wall_before = 0, 0.0
    sums: dict = {}
    count = 0
    metrics_path = out / METRICS_FILE
    if payload is not None:
        model.load_state_dict(payload["model"])
        for name, opt in optimizers.items():
            opt.load_state_dict(payload["optimizers"][name])
        restore_rng(payload["rng"], generator)
        start_step, wall_before = int(payload["step"]), float(payload["wall_time_s"])
        # the running means of the current log interval, so that log lines match an uninterrupted run
        sums = {k: v.to(dev) if v.dtype != torch.float64 else v for k, v in payload["log_state"]["sums"].items()}
        count = int(payload["log_state"]["count"])
    # the log must describe exactly the steps the parameters went through
    _write_jsonl_atomic(metrics_path, [r for r in _read_jsonl(metrics_path) if r.get("step", 0) <= start_step])

    data = ResidentData(store, dev)
    if train["compile"]:
        model.loss = torch.compile(model.loss)  # instance attribute: training_step picks it up

    steps, batch_size = train["steps"], train["batch_size"]
    log_every, ckpt_every = train["log_every"], train["checkpoint_every"]
    last_ckpt_step = start_step if payload is not None else None
    first_bad = torch.full((), -1, dtype=torch.long, device=dev)
    t_session = time.perf_counter()
    t_interval, steps_interval = t_session, 0
    last_row: dict = {}

    def check_finite():
        bad = int(first_bad.item())
        if bad >= 0:
            kept = (f"the last good checkpoint (step {last_ckpt_step}) is kept in {out / CHECKPOINT_FILE}"
                    if last_ckpt_step is not None else "no checkpoint had been written yet")
            raise UserError(f"training diverged: the loss became NaN or infinite at step {bad} of {steps} "
                            f"({resolved['model']}, seed {seed}); the run stopped and {kept}. "
                            "Lower the learning rate (--set lr=...) or change the configuration, then train again.")

    bar = tqdm(total=steps, initial=start_step, disable=not progress, unit="step", dynamic_ncols=True,
               desc=f"{resolved['model']} s{seed}", mininterval=0.5)
    try:
        with open(metrics_path, "a") as log_file:
            for step in range(start_step + 1, steps + 1):
                batch = data.sample(batch_size, generator, pair_sampler)
                with _autocast(precision, dev):
                    logs = model.training_step(batch, step - 1, optimizers)
                loss = logs["loss"]
                loss_t = loss.detach().float().reshape(()) if isinstance(loss, torch.Tensor) else torch.tensor(float(loss), device=dev)
                first_bad = torch.where((first_bad < 0) & ~torch.isfinite(loss_t), torch.full_like(first_bad, step), first_bad)
                for key, value in _scalar_logs(logs).items():
                    sums[key] = sums[key] + value if key in sums else value
                count += 1
                steps_interval += 1
                bar.update(1)

                if stop_after is not None and step >= stop_after:
                    return out
                if step % log_every == 0 or step == steps:
                    check_finite()
                    now = time.perf_counter()
                    row = {"step": step}
                    row.update({k: float(v.item()) / count for k, v in sums.items()})
                    row["img_per_s"] = steps_interval * batch_size / max(now - t_interval, 1e-9)
                    row["wall_time_s"] = wall_before + now - t_session
                    log_file.write(json.dumps(row) + "\n")
                    log_file.flush()
                    bar.set_postfix(loss=f"{row['loss']:.4g}", img_s=f"{row['img_per_s']:.0f}")
                    last_row, sums, count = row, {}, 0
                    t_interval, steps_interval = now, 0
                if step % ckpt_every == 0 or step == steps:
                    check_finite()
                    log_file.flush()
                    os.fsync(log_file.fileno())
                    save_checkpoint(out / CHECKPOINT_FILE, step=step, model=model, optimizers=optimizers,
                                    batch_generator=generator, wall_time_s=wall_before + time.perf_counter() - t_session,
                                    identity_digest=identity_digest,
                                    log_state={"sums": {k: v.detach().cpu() for k, v in sums.items()},
                                               "count": count})
                    last_ckpt_step = step
    finally:
        bar.close()

    if not last_row:  # resumed at the final step (nothing left to do): take the last logged row
        rows = _read_jsonl(metrics_path)
        last_row = rows[-1] if rows else {}
    final = {k: v for k, v in last_row.items() if k not in ("step", "img_per_s", "wall_time_s")}
    wall = wall_before + time.perf_counter() - t_session
    write_json_atomic(out / DONE_FILE, {"steps": steps, "wall_time_s": wall, "final": final,
                                        "final_step_logged": last_row.get("step")})
    return out


def load_run(run_dir, device: str = "cpu", *, allow_incomplete: bool = False):
    """(model in eval mode on ``device``, config dict) of a finished run (``allow_incomplete``: its latest checkpoint)."""
    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG_FILE
    if not config_path.exists():
        raise UserError(f"{run_dir} is not a run directory ({CONFIG_FILE} missing)")
    if not allow_incomplete and not (run_dir / DONE_FILE).exists():
        raise UserError(f"run {run_dir} is not complete ({DONE_FILE} missing); finish it with `probe train ... --resume`")
    ckpt_path = run_dir / CHECKPOINT_FILE
    if not ckpt_path.exists():
        raise UserError(f"run {run_dir} has no checkpoint yet")
    config = json.loads(config_path.read_text())
    payload = load_checkpoint(ckpt_path)
    with torch.random.fork_rng(devices=[]):
        model = _build_model(config)
    model.load_state_dict(payload["model"])
    model.to(select_device(device))
    model.eval()
    return model, config


def run_is_complete(run_dir) -> bool:
    return (Path(run_dir) / DONE_FILE).exists()


__all__ = ["train_run", "load_run", "select_device", "run_is_complete"]
