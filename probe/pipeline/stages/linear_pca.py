"""Stage ``linear-pca``: Theorem 1 on the original store (probe.analysis.verify_store with ``linear-pca.config``)."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import store
from probe.pipeline.stages.face import input_names
from probe.pipeline.worker import JobContext

NAME = "linear-pca"
INPUTS = (store,)


def job_linear_pca(ctx: JobContext, *, config: dict) -> dict:
    from probe.analysis import verify_store

    return {"analysis": verify_store(store.result(ctx.inputs).path, **config)}


def result(inputs: dict) -> dict | None:
    """The analysis (probe.analysis.verify_store), None where the stage is disabled."""
    job = inputs[NAME]["jobs"].get(NAME)
    return job["analysis"] if job else None


def stage(config: dict, meta: dict) -> Stage:
    return Stage(NAME, config[NAME], input_names(INPUTS),
                 lambda c: [Job(NAME, job_linear_pca, {"config": c["config"]})] if c["enabled"] else [])
