"""A model as numpy functions: the encoder that ``probe.metrics.evaluate_encoder`` evaluates (its
``Encoder`` attributes ``encode``, ``reconstruct``, ``discrete``), for a model in memory or a trained run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from probe.models.base import representation_of
from probe.train.trainer import load_run


@dataclass(frozen=True)
class ModelEncoder:
    """``encode(uint8 [n, H, W, C]) -> {"codes", "variance"?, "discrete"?}`` (numpy); ``reconstruct(uint8
    images) -> float [n, H, W, C]`` in [0, 1], None for a model without a decoder; ``discrete``: the model's
    codes are quantized. ``model`` is the loaded model, ``config`` the run's config when loaded from a run."""

    encode: Callable[[np.ndarray], dict]
    reconstruct: Callable[[np.ndarray], np.ndarray] | None
    discrete: bool
    model: torch.nn.Module
    config: dict | None = None


# The largest batch a model sees in one forward pass on a CPU. Encoding the dSprites-like quick store's β-VAE, PCL and
# AE on this project's 2-core VM (one thread) took about half as long in batches of 256 as of 2048 (the activations
# of a 2048-image batch do not stay in cache), with the same codes bit for bit (docs/notes/metrics.md). An
# accelerator keeps the caller's batch.
CPU_FORWARD_BATCH = 256


def forward_batch(batch_size: int, device) -> int:
    """The images per forward pass: ``batch_size``, at most ``CPU_FORWARD_BATCH`` on a CPU."""
    return min(int(batch_size), CPU_FORWARD_BATCH) if torch.device(device).type == "cpu" else int(batch_size)


def model_encoder(model, device: str = "cpu", batch_size: int = 2048, config: dict | None = None) -> ModelEncoder:
    """The encoder of a probe model (``probe.models.base`` protocol) in eval mode on ``device``; each call is
    encoded in forward passes of ``forward_batch(batch_size, device)`` images."""
    batch_size = forward_batch(batch_size, device)

    def to_tensor(images: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(images)).to(device).permute(0, 3, 1, 2).float().div_(255.0)

    @torch.no_grad()
    def encode(images: np.ndarray) -> dict:
        parts: dict[str, list] = {}
        for s in range(0, images.shape[0], batch_size):
            out = representation_of(model, to_tensor(images[s:s + batch_size]))  # one encoder pass where it can
            for k, v in out.items():
                parts.setdefault(k, []).append(v.detach().float().cpu().numpy() if k != "discrete"
                                               else v.detach().cpu().numpy().astype(np.int64))
        return {k: np.concatenate(v) for k, v in parts.items()}

    @torch.no_grad()
    def reconstruct(images: np.ndarray) -> np.ndarray:
        outs = []
        for s in range(0, images.shape[0], batch_size):
            outs.append(model.reconstruct(to_tensor(images[s:s + batch_size])).float().clamp(0, 1)
                        .permute(0, 2, 3, 1).cpu().numpy())
        return np.concatenate(outs)

    # Models without a decoder (PCL) declare it by raising NotImplementedError from reconstruct():
    # their reconstruction metrics are then listed as skipped instead of failing the evaluation.
    shape = getattr(model, "image_shape", None)
    if not callable(getattr(model, "reconstruct", None)):
        reconstruct = None
    elif shape is not None:
        try:
            with torch.no_grad():
                model.reconstruct(torch.zeros((1, *shape), device=device))
        except NotImplementedError:
            reconstruct = None
    return ModelEncoder(encode, reconstruct, getattr(model, "code_kind", "continuous") == "discrete", model, config)


def run_encoder(run_dir, device: str = "cpu", batch_size: int = 2048) -> ModelEncoder:
    """The encoder of the finished run in ``run_dir``, its model loaded on ``device``."""
    model, config = load_run(run_dir, device=device)
    return model_encoder(model, device, batch_size, config)
