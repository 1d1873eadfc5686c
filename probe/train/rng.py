"""Every RNG state a training step draws from, as tensors and plain containers for a checkpoint.

Restoring them and continuing reproduces an uninterrupted run bit for bit on CPU: the batch generator,
the global torch RNG (reparameterisation noise), numpy's and Python's global RNGs are all part of it.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def capture_rng(batch_generator: torch.Generator) -> dict:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return rng_record(torch.get_rng_state(), batch_generator, np.random.get_state(), random.getstate(), cuda)


def seeded_rng_record(seed: int, torch_state: torch.Tensor, batch_generator: torch.Generator,
                      cuda: list | None = None) -> dict:
    """The record ``capture_rng`` would write for a run whose numpy and Python RNGs are still as seeded by ``seed``
    (a batched member: its loss never draws from them) and whose torch states are the given ones."""
    return rng_record(torch_state, batch_generator, np.random.RandomState(seed % (2**32)).get_state(),
                      random.Random(seed).getstate(), cuda)


def rng_record(torch_state: torch.Tensor, batch_generator: torch.Generator, numpy_state: tuple, python_state: tuple,
               cuda: list | None = None) -> dict:
    """The checkpoint's RNG record (the one place that spells it)."""
    _, key, pos, has_gauss, cached = numpy_state
    py_version, py_internal, py_gauss = python_state
    state = {
        "torch": torch_state,
        "batch_generator": batch_generator.get_state(),
        "batch_generator_device": str(batch_generator.device),
        "numpy": {"key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": {"version": py_version, "internal": list(py_internal), "gauss_next": py_gauss},
    }
    if cuda is not None:
        state["cuda"] = cuda
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
