"""Checkpoints: model, optimizers, step and every RNG state, written atomically.

Everything is stored as tensors and plain containers so that ``torch.load(weights_only=True)`` reads
it back (no pickled code). Restoring a checkpoint and continuing reproduces an uninterrupted run
bit for bit on CPU: the batch generator, the global torch RNG (reparameterisation noise), numpy's and
Python's global RNGs are all part of it.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from probe.errors import UserError
from probe.provenance import atomic_path

CHECKPOINT_FORMAT = 1


def capture_rng(batch_generator: torch.Generator) -> dict:
    np_state = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "batch_generator": batch_generator.get_state(),
        "batch_generator_device": str(batch_generator.device),
        "numpy": {"key": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": {"version": py_version, "internal": list(py_internal), "gauss_next": py_gauss},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict, batch_generator: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    batch_generator.set_state(state["batch_generator"])
    np_state = state["numpy"]
    np.random.set_state(("MT19937", np_state["key"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["cached_gaussian"]))
    py = state["python"]
    random.setstate((py["version"], tuple(py["internal"]), py["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: Path, *, step: int, model: torch.nn.Module, optimizers: dict, batch_generator: torch.Generator,
                    wall_time_s: float, identity_digest: str, log_state: dict | None = None) -> None:
    payload = {
        "format": CHECKPOINT_FORMAT,
        "step": int(step),
        "wall_time_s": float(wall_time_s),
        "identity_digest": identity_digest,
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "optimizers": {name: opt.state_dict() for name, opt in optimizers.items()},
        "rng": capture_rng(batch_generator),
        "log_state": log_state or {"sums": {}, "count": 0},
    }
    with atomic_path(path, overwrite=True) as tmp:
        torch.save(payload, tmp)


def load_checkpoint(path: Path) -> dict:
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file: say which, no traceback
        raise UserError(f"cannot read checkpoint {path}: {type(exc).__name__}: {exc}") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"{path} is not a probe checkpoint (format {CHECKPOINT_FORMAT})")
    return payload
