"""Pulling metric values, groups and rows out of the runs of ``report_inputs.json`` (read by
``probe.report.schema.load_inputs``; contract: docs/notes/INTERFACES.md): ``evaluate_run(...)["metrics"]`` dicts,
active latents, alignment numbers, the untrained-run rule and runs.csv's rows."""

from __future__ import annotations

import math

import numpy as np

from probe.metrics.alignment import ALIGNMENT_NUMBERS, GLOBAL_PCA, GLOBAL_PCA_NUMBERS
from probe.metrics.registry import ReportColumn, report_columns


def metric_columns() -> dict[str, ReportColumn]:
    """{report key: column} of every registered metric (``probe.metrics.registry``), in table order; a
    metric is shown only when present in the inputs."""
    return {c.key: c for c in report_columns()}


def metric_label(key: str) -> str:
    column = metric_columns().get(key)
    return column.label if column else key


def verdict_metrics() -> list[str]:
    """Report keys a verdict can be based on: verdicts look for drops, so higher must be better."""
    return [key for key, column in metric_columns().items() if column.higher_is_better]


def metric_value(metrics: dict | None, key: str) -> float | None:
    """The float for report key ``key`` in an evaluate_run metrics dict, or None if absent/non-finite."""
    column = metric_columns()[key]
    try:
        value = float((metrics or {})[column.metric][column.field])
    except (KeyError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def active_latent_count(run: dict) -> int | None:
    """The run's active latents (``active_units`` metric: E[σ²] < 0.8), or None for a model without a posterior
    variance (the metric is skipped) or an older run without it."""
    value = ((run.get("metrics") or {}).get("active_units") or {}).get("active_units")
    return int(value) if value is not None else None


def model_order(runs: list[dict]) -> list[str]:
    seen = []
    for run in runs:
        if run["model"] not in seen:
            seen.append(run["model"])
    return seen


def present_metrics(runs: list[dict]) -> list[str]:
    return [key for key in metric_columns() if any(metric_value(r.get("metrics"), key) is not None for r in runs)]


def values_by_group(runs: list[dict], key: str) -> dict:
    """{(model, variant): [values in seed order]} for one metric."""
    return {g: [v for _, v in pairs] for g, pairs in seeded_values_by_group(runs, key).items()}


def seeded_values_by_group(runs: list[dict], key: str, value=None) -> dict:
    """{(model, variant): [(seed, value) in seed order]}; ``value(run)`` overrides the metric lookup
    of metric ``key`` (used for the alignment numbers)."""
    get = value or (lambda run: metric_value(run.get("metrics"), key))
    out: dict = {}
    for run in sorted(runs, key=lambda r: (str(r["model"]), r["variant"], r.get("seed") or 0)):
        v = get(run)
        if v is not None:
            out.setdefault((run["model"], run["variant"]), []).append((run.get("seed"), v))
    return out


# A run whose reconstruction MSE is at least this fraction of the mean-image MSE has learned (almost)
# nothing about its inputs; comparing its disentanglement scores across variants measures training
# failures, not reliance on local structure.
UNTRAINED_FRACTION = 0.9


def untrained_runs(runs: list[dict], baselines: dict, fraction: float = UNTRAINED_FRACTION) -> list[dict]:
    """Runs whose reconstruction MSE is >= ``fraction`` × the mean-image MSE of their variant's store (measured by
    the report stage: ``stores[variant]["mean_image_mse"]``).

    ``baselines``: {variant: mean-image MSE}. Runs without an MSE value or without a baseline for their
    variant are not judged (models without a decoder, such as PCL, are never flagged).
    """
    flagged = []
    for run in runs:
        mse = metric_value(run.get("metrics"), "recon_mse")
        base = baselines.get(run["variant"])
        if mse is not None and base and mse >= fraction * base:
            flagged.append({"model": run["model"], "variant": run["variant"], "seed": run.get("seed"),
                            "mse": mse, "baseline": base})
    return flagged


# -- alignment of a run with the selected restarts (runs[i]["alignment"], optional) ---------------------
ALIGNMENT_TARGETS = ("entangled", "disentangled")
ALIGNMENT_FIELDS = ALIGNMENT_NUMBERS
# (target, its numbers) written to runs.csv: the two restarts, then the global PCA of the orig images
ALIGNMENT_ROWS = tuple((t, ALIGNMENT_FIELDS) for t in ALIGNMENT_TARGETS) + ((GLOBAL_PCA, GLOBAL_PCA_NUMBERS),)


def alignment_value(run: dict, target: str, field: str) -> float | None:
    """``run["alignment"][target][field]`` as a float, or None when absent, null or non-finite."""
    try:
        value = float(((run.get("alignment") or {}).get(target) or {})[field])
    except (KeyError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def alignment_metric_name(target: str, field: str) -> str:
    """The ``metric`` column of runs.csv for one alignment number, e.g. ``alignment_entangled_best_match_corr``."""
    return f"alignment_{target}_{field}"


def retrained_runs(inputs: dict) -> list[dict]:
    """The retrained runs of one workdir's inputs: orig, mod and noise (``runs``) and the runs on the random-ψ
    control's m (``random_m.runs``, variant mod-random)."""
    return list(inputs.get("runs") or []) + list((inputs.get("random_m") or {}).get("runs") or [])


# -- runs.csv: one row per run × metric -------------------------------------------------------------------
TIDY_COLUMNS = ("dataset", "model", "variant", "seed", "kind", "hyperparameter", "hyperparameter_value", "scale",
                "metric", "value", "run_dir")


def tidy_rows(inputs: dict) -> list[dict]:
    """Long-format rows for every retrained ("retrain", the runs on the random-ψ control's m among them) and
    robustness ("robustness") run of one workdir: each metric column (``metric_columns``) and each alignment number
    present (to the restarts and to the global PCA) becomes one row. ``scale`` is empty for retrain runs; missing values are left out rather than written as blanks."""
    dataset = str(inputs.get("dataset") or "dataset")
    rows = []
    for kind, runs in (("retrain", retrained_runs(inputs)), ("robustness", inputs.get("robustness") or [])):
        for run in runs:
            hp = run.get("hyperparameter") or {}
            base = {"dataset": dataset, "model": run["model"], "variant": run["variant"], "seed": run.get("seed"),
                    "kind": kind, "hyperparameter": hp.get("name"), "hyperparameter_value": hp.get("value"),
                    "scale": run.get("scale"), "run_dir": run.get("run_dir")}
            for key in metric_columns():
                value = metric_value(run.get("metrics"), key)
                if value is not None:
                    rows.append({**base, "metric": key, "value": value})
            for target, fields in ALIGNMENT_ROWS:
                for field in fields:
                    value = alignment_value(run, target, field)
                    if value is not None:
                        rows.append({**base, "metric": alignment_metric_name(target, field), "value": value})
    return rows


def group_stats(pairs) -> dict:
    """{"mean", "std" (sample; None for n < 2), "n", "values", "seeds"} from [(seed, value)] — the numbers
    behind a "mean ± std" cell, per-seed values in the same order as ``seeds``."""
    vals = [float(v) for _, v in pairs]
    n = len(vals)
    return {"mean": float(np.mean(vals)) if n else None, "std": float(np.std(vals, ddof=1)) if n > 1 else None,
            "n": n, "values": vals, "seeds": [s for s, _ in pairs]}
