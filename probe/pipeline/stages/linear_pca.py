"""Stage ``linear-pca``: Theorem 1 on the original store (probe.analysis.verify_store with ``linear-pca.config``)."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.worker import JobContext


def job_linear_pca(ctx: JobContext, *, config: dict) -> dict:
    from probe.analysis import verify_store

    return {"analysis": verify_store(ctx.inputs["store"]["path"], **config)}


def stage(config: dict, meta: dict) -> Stage:
    return Stage("linear-pca", config["linear-pca"], ["store"],
                 lambda c: [Job("linear-pca", job_linear_pca, {"config": c["config"]})] if c["enabled"] else [])
