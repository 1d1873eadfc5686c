"""Stage ``apply``: the modified store, the original store with the learned manipulation applied."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import manipulate, store
from probe.pipeline.stages.face import StoreResult, input_names, single_job_result
from probe.pipeline.worker import JobContext

NAME = "apply"
INPUTS = (store, manipulate)


def job_apply(ctx: JobContext, *, epsilon: float | None = None) -> dict:
    return write_store(store.result(ctx.inputs).path, manipulate.result(ctx.inputs).dir, ctx.job_dir / "mod.zarr",
                       epsilon)


def write_store(orig_path, manipulation_dir, out, epsilon: float | None = None) -> dict:
    """The store x′ = fold(x + ε·m(w)) of the manipulation run in ``manipulation_dir`` at ``out`` (kept where a
    resumed job finds it written), as this stage's result records it; also stage apply-random's, for the random ψ."""
    from probe.data import open_store
    from probe.perturb import apply_manipulation

    made = open_store(out) if out.exists() else apply_manipulation(orig_path, manipulation_dir, out, epsilon=epsilon)
    return {"path": str(out), "digest": made.digest, "epsilon": _store_epsilon(made, epsilon)}


def _store_epsilon(store, epsilon):
    if epsilon is not None:
        return float(epsilon)
    origin = getattr(store, "origin", None) or {}
    cfg = origin.get("config") or {}
    return cfg.get("epsilon")


def result(inputs: dict) -> StoreResult:
    """The modified store and the ε it was made with."""
    r = inputs[NAME]
    return StoreResult(r["path"], r["digest"], r.get("epsilon"))


def stage(config: dict, meta: dict) -> Stage:
    return Stage(NAME, config[NAME], input_names(INPUTS), lambda c: [Job(NAME, job_apply, dict(c))],
                 single_job_result(NAME))
