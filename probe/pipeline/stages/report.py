"""Stage ``report`` of the modify pipelines: ``report_inputs.json`` (probe.pipeline.report_inputs) in the job
folder and in WORKDIR, with the "why" data (probe.pipeline.why), then ``probe.report.make_report``."""

from __future__ import annotations

from pathlib import Path

from probe.pipeline.engine import Job, Stage
from probe.pipeline.report_inputs import (control_entries, report_inputs, restart_entries, robustness_entries,
                                          run_entries)
from probe.pipeline.stages import (apply, dose, evaluate, linear_pca, manipulate, noise, restarts, retrain, robustness,
                                   rotated, select, store)
from probe.pipeline.stages.face import input_names, present
from probe.pipeline.why import why_inputs
from probe.pipeline.worker import JobContext

NAME = "report"
INPUTS = (store, restarts, select, manipulate, apply, noise, retrain, evaluate, robustness, linear_pca)
CONTROL_INPUTS = (rotated, dose)   # the control pipeline's L1 and L3 stores (graph.CONTROL)


def job_report(ctx: JobContext, *, meta: dict, make_report: bool) -> dict:
    from probe.provenance import write_json_atomic

    inputs = ctx.inputs
    workdir = Path(meta["workdir"])
    lp = inputs["linear-pca"]["jobs"]
    runs = run_entries(inputs["retrain"], inputs["evaluate"])
    control = control_entries(inputs, runs) if present(inputs, rotated) else None
    out = report_inputs(inputs, meta, pipeline=meta["pipeline"],
                        restarts=restart_entries(inputs["restarts"], inputs["select"]),
                        runs=[r for r in runs if not (control and r in control["runs"])],
                        robustness=robustness_entries(inputs["robustness"]),
                        linear_pca=lp["linear-pca"]["analysis"] if "linear-pca" in lp else None)
    out["why"] = why_inputs(inputs)  # Fig. 1: local vs global alignment
    if control is not None:
        out["control"] = control
    write_json_atomic(ctx.job_dir / "report_inputs.json", out)
    write_json_atomic(workdir / "report_inputs.json", out)
    result = {"report_inputs": str(ctx.job_dir / "report_inputs.json"), "report": None}
    if make_report:
        from probe.report import make_report as build_report

        made = build_report(workdir, ctx.job_dir / "report")
        result["report"] = {k: (str(v) if not isinstance(v, list) else [str(x) for x in v]) for k, v in made.items()}
    return result


def input_stages(config: dict) -> tuple:
    return INPUTS + (CONTROL_INPUTS if config["pipeline"].get("kind") == "control" else ())


def stage(config: dict, meta: dict) -> Stage:
    return Stage(NAME, {"make_report": config[NAME]["make_report"]}, input_names(input_stages(config)),
                 lambda c: [Job(NAME, job_report, {"meta": meta, "make_report": c["make_report"]})], local=True)
