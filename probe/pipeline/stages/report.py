"""Stage ``report`` of the modify pipelines: everything the report shows, as data. ``report_inputs.json``
(``probe.report.schema``) in the job folder and in WORKDIR: the stages' results (probe.pipeline.report_inputs), the
"why" data (probe.pipeline.why) and what needs stores and models (probe.pipeline.report_data: store facts, factor
capture, the restarts' NMI and traversal PNGs in the job folder, appendix-B deviations); then, when the config asks,
``probe.report.make_report``, which reads only that file and the files it names."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from probe.pipeline.engine import Job, Stage
from probe.pipeline.report_data import add_report_data
from probe.pipeline.report_inputs import (StageValues, control_entries, random_m_entries, report_inputs,
                                          restart_entries, robustness_entries, run_entries)
from probe.pipeline.stages import (apply, apply_random, dose, evaluate, linear_pca, manipulate, manipulate_random, noise,
                                   restarts, retrain, robustness, rotated, select, store)
from probe.pipeline.variants import VARIANTS
from probe.pipeline.stages.face import input_names, present
from probe.pipeline.why import why_inputs
from probe.pipeline.worker import JobContext
from probe.report.schema import write_inputs

NAME = "report"
INPUTS = (store, restarts, select, manipulate, manipulate_random, apply, apply_random, noise, retrain, evaluate, robustness,
          linear_pca)
CONTROL_INPUTS = (rotated, dose)   # the control pipeline's L1 and L3 stores (graph.CONTROL)


def stage_values(inputs: dict) -> StageValues:
    """What this stage reads from its input stages' results (``ctx.inputs``), each through its stage module."""
    control = present(inputs, rotated)
    return StageValues(
        orig_store=store.result(inputs), mod_store=apply.result(inputs), noise_store=noise.result(inputs),
        manipulation=manipulate.result(inputs), manipulation_random=manipulate_random.result(inputs),
        random_m_store=apply_random.result(inputs),
        retrain=retrain.result(inputs), evaluate=evaluate.result(inputs),
        restarts=list(restarts.result(inputs).values()), selection=select.result(inputs),
        robustness=robustness.result(inputs), linear_pca=linear_pca.result(inputs),
        rotated_store=rotated.result(inputs) if control else None, dose_stores=dose.result(inputs) if control else None)


def job_report(ctx: JobContext, *, meta: dict, make_report: bool) -> dict:
    values = stage_values(ctx.inputs)
    workdir = Path(meta["workdir"])
    runs = run_entries(values.retrain, values.evaluate)
    control = control_entries(values, runs) if values.rotated_store is not None else None
    # the verdict tables are over orig, mod and noise; the control's and the random m's runs have sections of their own
    out = report_inputs(values, meta, pipeline=meta["pipeline"], restarts=restart_entries(values),
                        runs=[r for r in runs if r["variant"] in VARIANTS],
                        robustness=robustness_entries(values.robustness), linear_pca=values.linear_pca,
                        random_m=random_m_entries(values, runs))
    out["why"] = why_inputs(values)  # Fig. 1: local vs global alignment
    if control is not None:
        out["control"] = control
    out = add_report_data(out, root=workdir)
    job_inputs = write_inputs(ctx.job_dir, out, workdir=workdir)
    write_inputs(workdir, out, workdir=workdir)
    result = {"report_inputs": str(job_inputs), "report": None}
    if make_report:
        from probe.report import make_report as build_report

        made = build_report(workdir, ctx.job_dir / "report")
        result["report"] = {k: (str(v) if not isinstance(v, list) else [str(x) for x in v]) for k, v in made.items()}
    return result


@dataclasses.dataclass(frozen=True)
class ReportResult:
    report_inputs: str           # the job folder's report_inputs.json
    report: dict | None          # the report's files (markdown, html, figures) when the stage made it


def result(inputs: dict) -> ReportResult:
    job = inputs[NAME]["jobs"][NAME]
    return ReportResult(job["report_inputs"], job.get("report"))


def input_stages(config: dict) -> tuple:
    return INPUTS + (CONTROL_INPUTS if config["pipeline"].get("kind") == "control" else ())


def stage(config: dict, meta: dict) -> Stage:
    return Stage(NAME, {"make_report": config[NAME]["make_report"]}, input_names(input_stages(config)),
                 lambda c: [Job(NAME, job_report, {"meta": meta, "make_report": c["make_report"]})], local=True)
