"""Stage ``noise``: the control store, the original plus random noise of the same ε as the manipulation (§5.2)
unless ``noise.epsilon`` says otherwise."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import store
from probe.pipeline.stages.face import StoreResult, input_names, single_job_result
from probe.pipeline.worker import JobContext

NAME = "noise"
INPUTS = (store,)


def job_noise(ctx: JobContext, *, epsilon: float, seed: int) -> dict:
    from probe.perturb import make_noise_store

    out = ctx.job_dir / "noise.zarr"
    if out.exists():
        from probe.data import open_store

        noisy = open_store(out)
    else:
        noisy = make_noise_store(store.result(ctx.inputs).path, out, epsilon=epsilon, seed=seed)
    return {"path": str(out), "digest": noisy.digest, "epsilon": float(epsilon)}


def result(inputs: dict) -> StoreResult:
    r = inputs[NAME]
    return StoreResult(r["path"], r["digest"], r.get("epsilon"))


def stage(config: dict, meta: dict) -> Stage:
    return Stage(NAME, config[NAME], input_names(INPUTS), lambda c: [Job(NAME, job_noise, dict(c))],
                 single_job_result(NAME))
