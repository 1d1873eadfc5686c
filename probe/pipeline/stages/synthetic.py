"""Stage ``synthetic`` (linear-pca pipeline): Theorem 1 on Gaussian data with a known covariance
(probe.analysis.verify_synthetic with ``synthetic.config``)."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.worker import JobContext


def job_synthetic(ctx: JobContext, *, config: dict) -> dict:
    from probe.analysis import verify_synthetic

    return {"analysis": verify_synthetic(**config)}


def stage(config: dict, meta: dict) -> Stage:
    return Stage("synthetic", config["synthetic"], [],
                 lambda c: [Job("synthetic", job_synthetic, {"config": c["config"]})] if c["enabled"] else [])
