"""Stage ``synthetic`` (linear-pca pipeline): Theorem 1 on Gaussian data with a known covariance
(probe.analysis.verify_synthetic with ``synthetic.config``)."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.worker import JobContext

NAME = "synthetic"
INPUTS = ()


def job_synthetic(ctx: JobContext, *, config: dict) -> dict:
    from probe.analysis import verify_synthetic

    return {"analysis": verify_synthetic(**config)}


def result(inputs: dict) -> dict | None:
    """The analysis (probe.analysis.verify_synthetic), None where the stage is disabled."""
    job = inputs[NAME]["jobs"].get(NAME)
    return job["analysis"] if job else None


def stage(config: dict, meta: dict) -> Stage:
    return Stage(NAME, config[NAME], [],
                 lambda c: [Job(NAME, job_synthetic, {"config": c["config"]})] if c["enabled"] else [])
