"""Stage ``report`` of the linear-pca pipeline: ``WORKDIR/linear_pca.json`` = {"pipeline", "preset", "dataset",
"store", "synthetic", "linear_pca", "provenance"}."""

from __future__ import annotations

from pathlib import Path

from probe.pipeline.engine import Job, Stage
from probe.pipeline.report_inputs import provenance
from probe.pipeline.worker import JobContext


def job_linear_report(ctx: JobContext, *, meta: dict) -> dict:
    from probe.provenance import write_json_atomic

    syn = ctx.inputs["synthetic"]["jobs"].get("synthetic")
    lp = ctx.inputs["linear-pca"]["jobs"].get("linear-pca")
    store = ctx.inputs["store"]["jobs"]["store"]
    out = {"pipeline": meta["pipeline"], "preset": meta["preset"], "dataset": meta.get("dataset"),
           "store": {"path": store["path"], "digest": store["digest"]},
           "synthetic": syn["analysis"] if syn else None, "linear_pca": lp["analysis"] if lp else None,
           "provenance": provenance(meta)}
    write_json_atomic(ctx.job_dir / "linear_pca.json", out)
    write_json_atomic(Path(meta["workdir"]) / "linear_pca.json", out)
    return {"linear_pca": str(ctx.job_dir / "linear_pca.json")}


def stage(config: dict, meta: dict) -> Stage:
    return Stage("report", {}, ["store", "synthetic", "linear-pca"],
                 lambda c: [Job("report", job_linear_report, {"meta": meta})], local=True)
