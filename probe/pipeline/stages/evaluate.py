"""Stage ``evaluate``: the metrics of every retrained run on its own store, and its alignment with the
selected restarts."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import manipulate, retrain, select
from probe.pipeline.stages.alignment import run_alignment
from probe.pipeline.stages.common import evaluate_metrics, trained_variants
from probe.pipeline.stages.face import input_names
from probe.pipeline.stages.stores import variant_stages, variant_store
from probe.pipeline.worker import JobContext

NAME = "evaluate"


def input_stages(config: dict) -> tuple:
    # manipulate: the runs m(w) was trained against, the alignment's references (stages.alignment.reference_runs)
    return (retrain, select, manipulate, *variant_stages(trained_variants(retrain.settings(config))))


def job_evaluate(ctx: JobContext, *, run: str, settings: dict) -> dict:
    entry = retrain.result(ctx.inputs)[run]
    store_path = variant_store(ctx.inputs, entry.variant)
    return {"run": run, "metrics": evaluate_metrics(entry.run_dir, store_path, settings),
            **run_alignment(ctx.inputs, entry.run_dir, store_path, settings)}


def result(inputs: dict) -> dict[str, dict]:
    """``{retrained run's job key: {"metrics": ..., "alignment": ...}}``."""
    return {e["run"]: e for e in inputs[NAME]["jobs"].values()}


def settings(config: dict) -> dict:
    """The ``[evaluate]`` table as the evaluate jobs take it (and as the stages that evaluate hash it: robustness,
    the audit's plug-in runs)."""
    ev = config[NAME]
    return {"metrics": list(ev["metrics"]), "seed": int(ev["seed"]), "sample_sizes": dict(ev["sample_sizes"])}


def check(config: dict, *, deep: bool = True) -> None:
    """The metric names and sample sizes (``deep``: they import the metrics)."""
    if deep:
        from probe.metrics.evaluate import resolve_metrics, resolve_settings

        ev = config[NAME]
        resolve_metrics(list(ev["metrics"]) or None)
        resolve_settings(ev["sample_sizes"])


def stage(config: dict, meta: dict) -> Stage:
    runs = retrain.run_keys(config)
    return Stage(NAME, settings(config), input_names(input_stages(config)),
                 lambda c: [Job(key, job_evaluate, {"run": key, "settings": c}) for key in runs])
