"""Stage ``audit``: the verdict for the plug-in and every reference model; writes audit.json, audit.md and
report_inputs.json (``probe.report.schema``, with the store facts and factor capture of probe.pipeline.report_data,
so `probe report` can render the full comparison without loading a model)."""

from __future__ import annotations

import dataclasses

from probe.pipeline.audit import AUDIT_PIPELINE, audit_table, format_audit, model_verdict, rule_text
from probe.pipeline.engine import Job, Stage
from probe.pipeline.report_data import add_report_data
from probe.pipeline.report_inputs import StageValues, report_inputs, run_entries
from probe.pipeline.stages import apply, evaluate, manipulate, noise, plugin_evaluate, plugin_train, retrain, store
from probe.pipeline.stages.face import input_names
from probe.pipeline.variants import VARIANTS
from probe.pipeline.worker import JobContext
from probe.report.schema import write_inputs

NAME = "audit"
INPUTS = (store, manipulate, apply, noise, retrain, evaluate, plugin_train, plugin_evaluate)


def stage_values(inputs: dict) -> tuple[StageValues, StageValues]:
    """What this stage reads from its input stages' results (``ctx.inputs``), each through its stage module: the
    reference runs and the plug-in's (the same stores and manipulation)."""
    reference = StageValues(
        orig_store=store.result(inputs), mod_store=apply.result(inputs), noise_store=noise.result(inputs),
        manipulation=manipulate.result(inputs), retrain=retrain.result(inputs), evaluate=evaluate.result(inputs))
    plugin = dataclasses.replace(reference, retrain=plugin_train.result(inputs), evaluate=plugin_evaluate.result(inputs))
    return reference, plugin


def job_audit(ctx: JobContext, *, meta: dict, about: dict, metric: str, seed: int) -> dict:
    from probe.provenance import write_json_atomic

    reference, plugin = stage_values(ctx.inputs)
    # the verdicts and the published runs are over orig, mod and noise (a reference model's mod-random runs, where the
    # reference pipeline trains them, have their own report section, not the audit's)
    ref_runs = [r for r in run_entries(reference.retrain, reference.evaluate, alignment=False) if r["variant"] in VARIANTS]
    plugin_runs = run_entries(plugin.retrain, plugin.evaluate, alignment=False)
    models = [about["model_label"], *about["reference_models"]]
    num_factors = sum(1 for size in reference.orig_store.factor_sizes if size > 1)
    verdicts = {m: model_verdict(ref_runs + plugin_runs, m, metric, seed=seed, num_factors=num_factors) for m in models}
    published = report_inputs(reference, meta, pipeline=AUDIT_PIPELINE, runs=plugin_runs + ref_runs,
                              extra_provenance={"reference_config": about["reference_config"],
                                                "plugin_settings": about["plugin_settings"]})
    published = add_report_data(published, root=meta.get("workdir"))
    identity = about["identity"]
    result = {
        "plugin": {k: identity[k] for k in ("target", "class", "name", "source", "source_sha256")},
        "model": about["model_label"], "dataset": meta.get("dataset"), "preset": meta.get("preset"),
        "reference_pipeline": about["reference_pipeline"], "reference_models": about["reference_models"],
        "reference_source": about["reference_source"], "metric": metric, "stores": published["stores"],
        "verdict": verdicts[about["model_label"]], "verdicts": verdicts, "rule": rule_text(),
        "provenance": published["provenance"],
    }
    write_json_atomic(ctx.job_dir / "audit.json", result)
    published_path = write_inputs(ctx.job_dir, published, workdir=meta.get("workdir"))
    md = ctx.job_dir / "audit.md"
    md.write_text(format_audit(result))
    return {"audit": str(ctx.job_dir / "audit.json"), "markdown": str(md),
            "report_inputs": str(published_path), "slug": about["slug"],
            "verdict": verdicts[about["model_label"]]["label"]}


def result(inputs: dict) -> dict:
    """The audit job's result: ``audit``, ``markdown``, ``report_inputs`` (paths), ``slug``, ``verdict``."""
    return next(iter(inputs[NAME]["jobs"].values()))


def stage(config: dict, meta: dict) -> Stage:
    audit = audit_table(config)
    return Stage(NAME, {"plugin": audit["plugin"], "metric": audit["metric"], "seed": audit["seed"]},
                 input_names(INPUTS),
                 lambda c: [Job(f"{audit['slug']}-audit", job_audit,
                                {"meta": meta, "about": audit["about"], "metric": c["metric"], "seed": c["seed"]})],
                 local=True)
