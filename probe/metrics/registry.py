"""The metric list: one ``MetricSpec`` per metric, declared next to the metric, collected here.

A module of ``probe.metrics`` declares its metrics as ``METRIC_SPECS = (MetricSpec(...), ...)``; on first
use the registry imports every module of the package and collects them, so a new metric is one new file.
``register_metric`` adds one from anywhere else (a plug-in, a test). Evaluation (``evaluate_encoder``:
which metrics, in which order, with which settings, which are skipped and why), the 'fast' subset and the
report (``probe.report.inputs``: tables, runs.csv, summary.json, figures) all read this list.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass, field, replace
from typing import Callable

from probe.errors import UserError

# Settings every metric shares, in the order results record them: the shared train/test sample
# (mig/dci/sap/modularity gins) and the histogram discretizer ...
SAMPLE_SETTINGS = {"num_train": 10000, "num_test": 5000, "draw_batch_size": 16, "num_bins": 20}
SMALL_SAMPLE_SETTINGS = {"num_train": 2000, "num_test": 1000}
# ... then each metric's own settings (MetricSpec.settings, in metric order), then how to run.
RUNTIME_SETTINGS = {"encode_batch_size": 2048, "n_jobs": -1, "device": None}

# The report key the verdicts rest on unless told otherwise (``probe report --primary-metric``): MIG, the metric of
# Zietlow et al. 2021's Table 1. The one place the choice is made; the report and the audit default to it.
PRIMARY_METRIC = "mig"

# What a metric may need from the encoder -> the reason recorded under "skipped" when it is missing.
REQUIREMENTS = {
    "variance": "the model has no posterior variance",
    "reconstruct": "no reconstruct function",
    "discrete": "the model has no discrete codes",
}


@dataclass(frozen=True)
class ReportColumn:
    """One number of a metric's result that the report shows (a table, a runs.csv metric, summary.json)."""

    key: str                      # report key: runs.csv "metric", summary.json, the verdict's primary metric
    label: str                    # table and figure label
    field: str                    # entry of the metric's result dict
    higher_is_better: bool = True
    metric: str = ""              # the metric's name; filled in by its MetricSpec


@dataclass(frozen=True)
class MetricSpec:
    """A metric as evaluation and the report see it.

    ``compute(context)`` returns the metric's result dict from the shared evaluation context
    (``probe.metrics.evaluate.EvaluationContext``: the train/test sample, its codes, the code cache,
    the store, the seed and the resolved settings). ``settings`` are the metric's own settings at
    disentanglement_lib's sizes, ``small`` their values at the small sizes of quick presets and tests.
    ``needs`` (keys of ``REQUIREMENTS``): without them the metric is skipped, with the reason.
    ``order`` places it in results and settings; ``report_order`` (default ``order``) its columns in
    the report's tables.
    """

    name: str
    compute: Callable[..., dict]
    order: float = math.inf
    settings: dict = field(default_factory=dict)
    small: dict = field(default_factory=dict)
    fast: bool = False            # in the cheap subset presets ask for with metrics = "fast"
    needs: tuple[str, ...] = ()
    report: tuple[ReportColumn, ...] = ()
    report_order: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "report", tuple(replace(c, metric=self.name) for c in self.report))


_specs: dict[str, MetricSpec] = {}
_discovered = False


def _discover() -> None:
    """Import every module of probe.metrics once and register the METRIC_SPECS they declare."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    package = importlib.import_module("probe.metrics")
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for spec in getattr(module, "METRIC_SPECS", ()):
            register_metric(spec)


def register_metric(spec: MetricSpec) -> MetricSpec:
    """Add ``spec`` to the metric list (evaluation, settings and report). UserError on a clash."""
    _discover()
    taken_settings = {**SAMPLE_SETTINGS, **RUNTIME_SETTINGS, **{k: s.name for s in _specs.values() for k in s.settings}}
    taken_keys = {c.key: s.name for s in _specs.values() for c in s.report}
    problems = []
    if not spec.name or spec.name == "fast" or "," in spec.name:
        problems.append(f"invalid name {spec.name!r}")
    if spec.name in _specs:
        problems.append("a metric of that name is registered already")
    problems += [f"unknown requirement {n!r} (known: {', '.join(REQUIREMENTS)})" for n in spec.needs
                 if n not in REQUIREMENTS]
    problems += [f"setting {k!r} is taken" for k in spec.settings if k in taken_settings]
    problems += [f"small setting {k!r} is not one of its settings" for k in spec.small if k not in spec.settings]
    problems += [f"report key {c.key!r} is taken" for c in spec.report if c.key in taken_keys]
    if problems:
        raise UserError(f"cannot register metric {spec.name!r}: {'; '.join(problems)}")
    _specs[spec.name] = spec
    return spec


def metric_specs() -> tuple[MetricSpec, ...]:
    """Every registered metric, in evaluation order."""
    _discover()
    return tuple(sorted(_specs.values(), key=lambda s: s.order))


def metric_spec(name: str) -> MetricSpec:
    _discover()
    return _specs[name]


def default_metrics() -> tuple[str, ...]:
    """All metrics, what evaluation computes unless told otherwise."""
    return tuple(s.name for s in metric_specs())


def fast_metrics() -> tuple[str, ...]:
    """The cheap subset for presets: no boosted trees, no fixed-factor batches."""
    return tuple(s.name for s in metric_specs() if s.fast)


def default_settings() -> dict:
    """Every evaluation setting at disentanglement_lib's sizes, in the order results record them."""
    return {**SAMPLE_SETTINGS, **{k: v for s in metric_specs() for k, v in s.settings.items()}, **RUNTIME_SETTINGS}


def small_settings() -> dict:
    """The settings that differ at the small sizes of quick presets and tests (not the reference protocol;
    recorded with every result)."""
    return {**SMALL_SAMPLE_SETTINGS, **{k: v for s in metric_specs() for k, v in s.small.items()}}


def report_columns() -> tuple[ReportColumn, ...]:
    """Every number the report shows, in the order of its tables."""
    ordered = sorted(metric_specs(), key=lambda s: s.order if s.report_order is None else s.report_order)
    return tuple(c for s in ordered for c in s.report)
