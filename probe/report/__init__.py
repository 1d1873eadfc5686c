"""Comparison reports: tables (mean ± std over seeds), statistics and verdicts, figures, provenance.

The names below load on first use: the pipeline imports ``probe.report.schema`` (the report-inputs file) at start-up,
and that must not pull the report builder, matplotlib and the metrics into `probe pipeline list`."""

import importlib

_EXPORTS = {"make_report": "probe.report.build", "bootstrap_ci": "probe.report.stats", "compare": "probe.report.stats",
            "verdict": "probe.report.stats", "verdict_rule_text": "probe.report.stats",
            "welch_t_test": "probe.report.stats"}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'probe.report' has no attribute {name!r}")
