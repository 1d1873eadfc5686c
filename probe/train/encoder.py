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


def model_encoder(model, device: str = "cpu", batch_size: int = 2048, config: dict | None = None) -> ModelEncoder:
    """The encoder of a probe model (``probe.models.base`` protocol) in eval mode on ``device``."""

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
