"""Comparison reports: tables (mean ± std over seeds), statistics and verdicts, figures, provenance."""

from probe.report.build import make_report
from probe.report.stats import bootstrap_ci, compare, verdict, verdict_rule_text, welch_t_test

__all__ = ["bootstrap_ci", "compare", "make_report", "verdict", "verdict_rule_text", "welch_t_test"]
