"""A toy metric in one file, as a new module of probe.metrics would be: the function, and its spec.

tests/test_metrics_registry.py puts this folder on ``probe.metrics.__path__`` so the registry's module
sweep finds it like a built-in metric."""

import numpy as np

from probe.metrics.registry import MetricSpec, ReportColumn


def code_spread(codes, scale: float = 1.0) -> dict:
    """Mean standard deviation of the codes, times ``scale``."""
    return {"spread": float(scale * np.asarray(codes, dtype=np.float64).std(axis=0).mean())}


def _evaluate(context) -> dict:
    return code_spread(context.train_codes, context.settings["spread_scale"])


METRIC_SPECS = (MetricSpec("code_spread", _evaluate, fast=True, settings={"spread_scale": 1.0},
                           small={"spread_scale": 2.0},
                           report=(ReportColumn("spread", "Code spread", "spread"),)),)
