"""Objectives (one file each) on shared architectures; see ``base.py`` for the model protocol."""

from probe.models import registry
from probe.models.base import Batch, GaussianVAE, ProbeModel, resolve_config

__all__ = ["registry", "Batch", "GaussianVAE", "ProbeModel", "resolve_config"]
