"""The linear-pca pipeline (Theorem 1 of Zietlow et al.: a linear VAE recovers PCA's directions, ordered by σ).

    store → synthetic (probe.analysis.verify_synthetic) → linear-pca (probe.analysis.verify_store) → report

The report stage writes ``WORKDIR/linear_pca.json`` = {"pipeline", "preset", "synthetic", "store": {...},
"linear_pca", "provenance"}. The two analysis calls take their keyword arguments verbatim from the
``synthetic.config`` and ``linear-pca.config`` tables.
"""

from __future__ import annotations

import time

from probe.errors import UserError
from probe.pipeline.engine import Job, JobContext, Stage
from probe.pipeline.stages import _single


def job_synthetic(ctx: JobContext, *, config: dict) -> dict:
    from probe.analysis import verify_synthetic

    return {"analysis": verify_synthetic(**config)}


def job_store_analysis(ctx: JobContext, *, config: dict) -> dict:
    from probe.analysis import verify_store

    return {"analysis": verify_store(ctx.inputs["store"]["path"], **config)}


def job_linear_report(ctx: JobContext, *, meta: dict) -> dict:
    from pathlib import Path

    from probe.provenance import environment, write_json_atomic

    syn = ctx.inputs["synthetic"]["jobs"].get("synthetic")
    lp = ctx.inputs["linear-pca"]["jobs"].get("linear-pca")
    store = ctx.inputs["store"]["jobs"]["store"]
    out = {"pipeline": meta["pipeline"], "preset": meta["preset"], "dataset": meta.get("dataset"),
           "store": {"path": store["path"], "digest": store["digest"]},
           "synthetic": syn["analysis"] if syn else None, "linear_pca": lp["analysis"] if lp else None,
           "provenance": {"code_version": meta["code_version"], "environment": environment(),
                          "started": meta["started"], "wall_time_s": time.time() - float(meta["t0"]),
                          "config": meta["config"]}}
    write_json_atomic(ctx.job_dir / "linear_pca.json", out)
    write_json_atomic(Path(meta["workdir"]) / "linear_pca.json", out)
    return {"linear_pca": str(ctx.job_dir / "linear_pca.json")}


def linear_pca_stages(config: dict, meta: dict | None = None) -> list[Stage]:
    meta = meta or {}
    syn, lp = config["synthetic"], config["linear-pca"]
    return [
        Stage("store", {**config["store"], "dataset": config["pipeline"]["dataset"]}, [], lambda c: [Job("store", "probe.pipeline.stages:job_store", dict(c))],
              _single("store")),
        Stage("synthetic", syn, [], lambda c: [Job("synthetic", "probe.pipeline.linear_pca:job_synthetic",
                                                   {"config": c["config"]})] if c["enabled"] else []),
        Stage("linear-pca", lp, ["store"], lambda c: [Job("linear-pca", "probe.pipeline.linear_pca:job_store_analysis",
                                                          {"config": c["config"]})] if c["enabled"] else []),
        Stage("report", {}, ["store", "synthetic", "linear-pca"],
              lambda c: [Job("report", "probe.pipeline.linear_pca:job_linear_report", {"meta": meta})], local=True),
    ]


def validate_linear_pca(config: dict) -> None:
    from probe.pipeline.stages import check_official_file

    st = config["store"]
    if st["source"] not in ("synthetic", "official"):
        raise UserError(f"store.source must be 'synthetic' or 'official', got {st['source']!r}")
    if st["source"] == "official":
        check_official_file(config["pipeline"]["dataset"], st.get("file") or None)
