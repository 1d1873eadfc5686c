"""Every RNG state a training step draws from, as tensors and plain containers for a checkpoint.

Restoring them and continuing reproduces an uninterrupted run bit for bit on CPU: the batch generator,
the global torch RNG (reparameterisation noise), numpy's and Python's global RNGs are all part of it.
"""

from __future__ import annotations

import random

import numpy as np
import torch


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
