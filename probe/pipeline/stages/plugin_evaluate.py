"""Stage ``plugin-evaluate`` (audit): the plug-in's runs evaluated with the reference pipeline's settings."""

from __future__ import annotations

from probe.errors import UserError
from probe.pipeline.audit import audit_table, plugin_error
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import apply, evaluate, noise, plugin_train, store
from probe.pipeline.stages.common import evaluate_metrics
from probe.pipeline.stages.face import input_names
from probe.pipeline.stages.stores import variant_store
from probe.pipeline.worker import JobContext

NAME = "plugin-evaluate"
INPUTS = (plugin_train, store, apply, noise)


def job_plugin_evaluate(ctx: JobContext, *, label: str, run: str, settings: dict) -> dict:
    entry = plugin_train.result(ctx.inputs)[run]
    try:
        return {"run": run, "metrics": evaluate_metrics(entry.run_dir, variant_store(ctx.inputs, entry.variant),
                                                        settings)}
    except UserError as exc:
        raise plugin_error(label, exc) from None
    except Exception as exc:
        raise UserError(f"plug-in {label}: evaluating run {entry.run_dir} failed: {type(exc).__name__}: {exc}") from exc


def result(inputs: dict) -> dict[str, dict]:
    """``{plug-in run's job key: {"metrics": ...}}``."""
    return {e["run"]: e for e in inputs[NAME]["jobs"].values()}


def stage(config: dict, meta: dict) -> Stage:
    audit = audit_table(config)
    runs = [j.key for j in plugin_train.plugin_train_jobs(audit, plugin_train.train_config(audit))]
    return Stage(NAME, evaluate.settings(config), input_names(INPUTS),
                 lambda c: [Job(key, job_plugin_evaluate, {"label": audit["label"], "run": key, "settings": c})
                            for key in runs])
