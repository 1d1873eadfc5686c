"""Stage ``dose`` (control pipeline, L3, dose–response): the learned manipulation applied at ``dose.scales`` × ε,
one store per scale (variant ``mod-x<scale>``, probe.pipeline.variants). ε × 1 is the ``mod`` store and ε × 0 the
original, so the scales here are the others."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.variants import dose_variant
from probe.pipeline.worker import JobContext


def job_dose(ctx: JobContext, *, scale: float) -> dict:
    from probe.data import open_store
    from probe.perturb import apply_manipulation

    epsilon = float(ctx.inputs["apply"]["epsilon"]) * float(scale)
    out = ctx.job_dir / "mod.zarr"
    store = open_store(out) if out.exists() else apply_manipulation(ctx.inputs["store"]["path"],
                                                                    ctx.inputs["manipulate"]["dir"], out, epsilon=epsilon)
    return {"path": str(out), "digest": store.digest, "epsilon": epsilon, "scale": float(scale)}


def stage(config: dict, meta: dict) -> Stage:
    return Stage("dose", config["dose"], ["store", "manipulate", "apply"],
                 lambda c: [Job(dose_variant(x), job_dose, {"scale": float(x)}) for x in c["scales"]],
                 lambda c, inputs, results: {"jobs": results})
