"""Stage ``dose`` (control pipeline, L3, dose–response): the learned manipulation applied at ``dose.scales`` × ε,
one store per scale (variant ``mod-x<scale>``, probe.pipeline.variants). ε × 1 is the ``mod`` store and ε × 0 the
original, so the scales here are the others."""

from __future__ import annotations

import dataclasses

from probe.errors import UserError
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import apply, manipulate, store
from probe.pipeline.stages.face import StoreResult, input_names
from probe.pipeline.variants import dose_variant
from probe.pipeline.worker import JobContext

NAME = "dose"
INPUTS = (store, manipulate, apply)


@dataclasses.dataclass(frozen=True)
class DoseStore(StoreResult):
    scale: float = 1.0


def job_dose(ctx: JobContext, *, scale: float) -> dict:
    from probe.data import open_store
    from probe.perturb import apply_manipulation

    epsilon = float(apply.result(ctx.inputs).epsilon) * float(scale)
    out = ctx.job_dir / "mod.zarr"
    dosed = open_store(out) if out.exists() else apply_manipulation(store.result(ctx.inputs).path,
                                                                    manipulate.result(ctx.inputs).dir, out,
                                                                    epsilon=epsilon)
    return {"path": str(out), "digest": dosed.digest, "epsilon": epsilon, "scale": float(scale)}


def result(inputs: dict) -> dict[str, DoseStore]:
    """``{variant (mod-x<scale>): its store}`` in variant order."""
    return {key: DoseStore(j["path"], j["digest"], j["epsilon"], scale=float(j["scale"]))
            for key, j in sorted(inputs[NAME]["jobs"].items())}


def variants(config: dict) -> list[str]:
    """The dose variants this stage makes (none where the pipeline has no ``[dose]`` table)."""
    return [dose_variant(x) for x in (config.get(NAME) or {}).get("scales", [])]


def check(config: dict, *, deep: bool = True) -> None:
    for x in config[NAME]["scales"]:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0:
            raise UserError(f"{NAME}.scales must be non-negative numbers, got {x!r}")


def stage(config: dict, meta: dict) -> Stage:
    return Stage(NAME, config[NAME], input_names(INPUTS),
                 lambda c: [Job(dose_variant(x), job_dose, {"scale": float(x)}) for x in c["scales"]],
                 lambda c, inputs, results: {"jobs": results})
