"""Checks that a (third-party) model class honours the model protocol, before any work is spent on it.

Each failure is a UserError that names the plug-in and the problem: import errors and missing
attributes come from ``registry.get_model_class``; here we check the class, its construction, one
training step on a real batch (finite loss) and the shapes ``encode``/``posterior_variance`` return.
The protocol itself is documented in docs/PLUGINS.md and probe/models/base.py.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import torch

from probe.errors import UserError
from probe.models.base import Batch, ProbeModel

REQUIRED_METHODS = ("default_config", "configure_optimizers", "training_step", "encode")


def check_model_class(cls, label: str) -> None:
    if not inspect.isclass(cls):
        raise UserError(f"plug-in {label}: expected a model class, got {type(cls).__name__}")
    if not issubclass(cls, torch.nn.Module):
        raise UserError(f"plug-in {label}: {cls.__name__} must be a torch.nn.Module (subclass probe.models.ProbeModel)")
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise UserError(f"plug-in {label}: {cls.__name__} lacks required method(s) {', '.join(missing)} (see docs/PLUGINS.md)")
    if issubclass(cls, ProbeModel):
        overrides_loss = cls.loss is not ProbeModel.loss or cls.training_step is not ProbeModel.training_step
        if not overrides_loss:
            raise UserError(f"plug-in {label}: {cls.__name__} implements neither loss() nor training_step()")
        if cls.encode is ProbeModel.encode:
            raise UserError(f"plug-in {label}: {cls.__name__} does not implement encode(x) -> codes [B, D]")
    try:
        config = cls.default_config()
    except Exception as exc:
        raise UserError(f"plug-in {label}: default_config() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(config, dict):
        raise UserError(f"plug-in {label}: default_config() must return a dict, got {type(config).__name__}")


def _batch_from_images(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(255.0)


def check_model_instance(cls, label: str, config: dict, images: np.ndarray, num_factors: int,
                         factors: np.ndarray | None = None) -> dict:
    """Build the model, run one training step and encode on ``images`` (uint8 [B, H, W, C]).

    Returns {"code_dim": D, "loss": float}. Raises UserError naming the plug-in on any violation.
    """
    check_model_class(cls, label)
    h, w, c = images.shape[1:]
    try:
        model = cls(config, image_shape=(c, h, w), num_factors=num_factors)
    except Exception as exc:
        raise UserError(f"plug-in {label}: construction {cls.__name__}(config, image_shape={(c, h, w)}, "
                        f"num_factors={num_factors}) failed: {type(exc).__name__}: {exc}") from None
    x = _batch_from_images(images)
    batch = Batch(x=x, index=torch.arange(len(x)),
                  factors=None if factors is None else torch.as_tensor(factors, dtype=torch.long),
                  x_next=x.roll(1, 0) if getattr(cls, "needs_pairs", False) else None)
    model.train()
    try:
        optimizers = model.configure_optimizers()
        logs = model.training_step(batch, 0, optimizers)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"plug-in {label}: training_step on a batch of {tuple(x.shape)} failed: {type(exc).__name__}: {exc}") from None
    loss = logs.get("loss") if isinstance(logs, dict) else None
    if loss is None:
        raise UserError(f"plug-in {label}: training_step must return a dict with a 'loss' entry, got {type(logs).__name__}")
    loss = float(torch.as_tensor(loss).detach().float().mean())
    if not math.isfinite(loss):
        raise UserError(f"plug-in {label}: the loss is {loss} (not finite) on the first batch")
    model.eval()
    try:
        with torch.no_grad():
            codes = model.encode(x)
    except Exception as exc:
        raise UserError(f"plug-in {label}: encode(x) failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(codes, torch.Tensor) or codes.ndim != 2 or codes.shape[0] != x.shape[0] or codes.shape[1] < 1:
        shape = tuple(codes.shape) if isinstance(codes, torch.Tensor) else type(codes).__name__
        raise UserError(f"plug-in {label}: encode(x) must return a tensor [B, D] = [{x.shape[0]}, D], got {shape}")
    if not torch.isfinite(codes.float()).all():
        raise UserError(f"plug-in {label}: encode(x) returned non-finite codes")
    variance = getattr(model, "posterior_variance", lambda _x: None)
    with torch.no_grad():
        var = variance(x)
    if var is not None and (not isinstance(var, torch.Tensor) or tuple(var.shape) != tuple(codes.shape)):
        shape = tuple(var.shape) if isinstance(var, torch.Tensor) else type(var).__name__
        raise UserError(f"plug-in {label}: posterior_variance(x) must be None or match encode's shape {tuple(codes.shape)}, got {shape}")
    return {"code_dim": int(codes.shape[1]), "loss": loss}
