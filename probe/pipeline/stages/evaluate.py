"""Stage ``evaluate``: the metrics of every retrained run on its own store, and its alignment with the
selected restarts."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages.alignment import run_alignment
from probe.pipeline.stages.common import evaluate_metrics, evaluate_settings
from probe.pipeline.stages.retrain import all_variants, retrain_jobs
from probe.pipeline.variants import variant_stages, variant_store
from probe.pipeline.worker import JobContext


def job_evaluate(ctx: JobContext, *, run: str, settings: dict) -> dict:
    entry = ctx.inputs["retrain"]["jobs"][run]
    store_path = variant_store(ctx.inputs, entry["variant"])
    return {"run": run, "metrics": evaluate_metrics(entry["run_dir"], store_path, settings),
            **run_alignment(ctx.inputs, entry["run_dir"], store_path, settings)}


def stage(config: dict, meta: dict) -> Stage:
    runs = [j.key for j in retrain_jobs(config, config["retrain"])]
    # manipulate: the runs m(w) was trained against, the alignment's references (stages.alignment.reference_runs)
    return Stage("evaluate", evaluate_settings(config),
                 ["retrain", "select", "manipulate", *variant_stages(all_variants(config["retrain"]))],
                 lambda c: [Job(key, job_evaluate, {"run": key, "settings": c}) for key in runs])
