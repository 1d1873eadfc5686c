"""Stage ``report`` of the linear-pca pipeline: ``WORKDIR/linear_pca.json`` = {"pipeline", "preset", "dataset",
"store", "synthetic", "linear_pca", "provenance"}."""

from __future__ import annotations

from pathlib import Path

from probe.pipeline.engine import Job, Stage
from probe.pipeline.report_inputs import provenance
from probe.pipeline.stages import linear_pca, store, synthetic
from probe.pipeline.stages.face import input_names
from probe.pipeline.worker import JobContext

NAME = "report"
INPUTS = (store, synthetic, linear_pca)
OUTPUT = "linear_pca.json"


def job_linear_report(ctx: JobContext, *, meta: dict) -> dict:
    from probe.provenance import write_json_atomic

    out = {"pipeline": meta["pipeline"], "preset": meta["preset"], "dataset": meta.get("dataset"),
           "store": store.result(ctx.inputs).entry(),
           "synthetic": synthetic.result(ctx.inputs), "linear_pca": linear_pca.result(ctx.inputs),
           "provenance": provenance(meta)}
    write_json_atomic(ctx.job_dir / OUTPUT, out)
    write_json_atomic(Path(meta["workdir"]) / OUTPUT, out)
    return {"linear_pca": str(ctx.job_dir / OUTPUT)}


def stage(config: dict, meta: dict) -> Stage:
    return Stage(NAME, {}, input_names(INPUTS), lambda c: [Job(NAME, job_linear_report, {"meta": meta})], local=True)
