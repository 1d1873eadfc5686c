"""The trainer: loops, devices, precision, checkpoints, resume, logging and progress for every model.

Public API (docs/notes/INTERFACES.md): ``train_run``, ``load_run``, ``resolve_run_config``; the run folder
types every other package reads run folders through (``RunFolder``, ``ManipulationRunFolder``); ``run_encoder``
and ``model_encoder`` give a trained model as the numpy encoder that ``probe.metrics`` evaluates.
"""

from probe.train.config import TRAIN_DEFAULTS, TRAIN_KEYS, resolve_run_config
from probe.train.encoder import ModelEncoder, model_encoder, run_encoder
from probe.train.run_folder import ManipulationRunFolder, RunFolder
from probe.train.trainer import load_run, run_progress, select_device, train_run

__all__ = ["train_run", "load_run", "run_progress", "resolve_run_config", "select_device", "RunFolder",
           "ManipulationRunFolder", "TRAIN_DEFAULTS", "TRAIN_KEYS", "ModelEncoder", "model_encoder", "run_encoder"]
