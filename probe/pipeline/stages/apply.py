"""Stage ``apply``: the modified store, the original store with the learned manipulation applied."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages.common import single_job_result
from probe.pipeline.worker import JobContext


def job_apply(ctx: JobContext, *, epsilon: float | None = None) -> dict:
    from probe.perturb import apply_manipulation

    out = ctx.job_dir / "mod.zarr"
    if out.exists():
        from probe.data import open_store

        store = open_store(out)
    else:
        store = apply_manipulation(ctx.inputs["store"]["path"], ctx.inputs["manipulate"]["dir"], out, epsilon=epsilon)
    return {"path": str(out), "digest": store.digest, "epsilon": _store_epsilon(store, epsilon)}


def _store_epsilon(store, epsilon):
    if epsilon is not None:
        return float(epsilon)
    origin = getattr(store, "origin", None) or {}
    cfg = origin.get("config") or {}
    return cfg.get("epsilon")


def stage(config: dict, meta: dict) -> Stage:
    return Stage("apply", config["apply"], ["store", "manipulate"], lambda c: [Job("apply", job_apply, dict(c))],
                 single_job_result("apply"))
