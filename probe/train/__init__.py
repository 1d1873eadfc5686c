"""The trainer: loops, devices, precision, checkpoints, resume, logging and progress for every model.

Public API (docs/notes/INTERFACES.md): ``train_run``, ``load_run``, ``resolve_run_config``; ``run_encoder``
and ``model_encoder`` give a trained model as the numpy encoder that ``probe.metrics`` evaluates.
"""

from probe.train.config import TRAIN_DEFAULTS, TRAIN_KEYS, resolve_run_config
from probe.train.encoder import ModelEncoder, model_encoder, run_encoder
from probe.train.trainer import load_run, run_is_complete, select_device, train_run

__all__ = ["train_run", "load_run", "resolve_run_config", "run_is_complete", "select_device", "TRAIN_DEFAULTS", "TRAIN_KEYS",
           "ModelEncoder", "model_encoder", "run_encoder"]
