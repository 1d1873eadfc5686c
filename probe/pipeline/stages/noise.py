"""Stage ``noise``: the control store, the original plus random noise of the same ε as the manipulation (§5.2)
unless ``noise.epsilon`` says otherwise."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages.common import single_job_result
from probe.pipeline.worker import JobContext


def job_noise(ctx: JobContext, *, epsilon: float, seed: int) -> dict:
    from probe.perturb import make_noise_store

    out = ctx.job_dir / "noise.zarr"
    if out.exists():
        from probe.data import open_store

        store = open_store(out)
    else:
        store = make_noise_store(ctx.inputs["store"]["path"], out, epsilon=epsilon, seed=seed)
    return {"path": str(out), "digest": store.digest, "epsilon": float(epsilon)}


def stage(config: dict, meta: dict) -> Stage:
    return Stage("noise", config["noise"], ["store"], lambda c: [Job("noise", job_noise, dict(c))],
                 single_job_result("noise"))
