"""Stage ``plugin-evaluate`` (audit): the plug-in's runs evaluated with the reference pipeline's settings."""

from __future__ import annotations

from probe.errors import UserError
from probe.pipeline.audit import plugin_error
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages.common import evaluate_metrics, evaluate_settings
from probe.pipeline.stages.plugin_train import plugin_train_jobs, train_config
from probe.pipeline.variants import variant_store
from probe.pipeline.worker import JobContext


def job_plugin_evaluate(ctx: JobContext, *, label: str, run: str, settings: dict) -> dict:
    entry = ctx.inputs["plugin-train"]["jobs"][run]
    try:
        return {"run": run, "metrics": evaluate_metrics(entry["run_dir"], variant_store(ctx.inputs, entry["variant"]),
                                                        settings)}
    except UserError as exc:
        raise plugin_error(label, exc) from None
    except Exception as exc:
        raise UserError(f"plug-in {label}: evaluating run {entry['run_dir']} failed: {type(exc).__name__}: {exc}") from exc


def stage(config: dict, meta: dict) -> Stage:
    audit = config["audit"]
    runs = [j.key for j in plugin_train_jobs(audit, train_config(audit))]
    return Stage("plugin-evaluate", evaluate_settings(config), ["plugin-train", "store", "apply", "noise"],
                 lambda c: [Job(key, job_plugin_evaluate, {"label": audit["label"], "run": key, "settings": c})
                            for key in runs])
