"""Stage ``apply-random``: the original store with the frozen random-ψ control's m(w) applied at the manipulation's ε
(variant ``mod-random``, probe.data.variants.RANDOM_M) — the retraining-level control of the learned manipulation.

Stage manipulate-random compares the learned and the random ψ on the two restart decoders only. Whether *learning* m
is what moves a retrained model, or any saturated m(w) that spends the budget ε would, is read from models trained on
this store beside mod's (issue 24: on the closer-camera Shapes3D-like store two β-VAE seeds lost their alignment on
the learned m, 0.010 / 0.070 against 0.323 / 0.299 on orig, and one of the two as far on the random m, 0.257 /
0.015). The store is written only when a model trains on it (``mod-random`` among retrain's variants, which needs
``[manipulate-random] enabled``): at paper scale it is as large as the mod store.
"""

from __future__ import annotations

from probe.errors import UserError
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import apply, manipulate_random, store
from probe.pipeline.stages.common import retrain_table, trained_variants
from probe.pipeline.stages.face import StoreResult, input_names
from probe.pipeline.variants import RANDOM_M
from probe.pipeline.worker import JobContext

NAME = "apply-random"
INPUTS = (store, manipulate_random)


def job_apply_random(ctx: JobContext) -> dict:
    control = manipulate_random.result(ctx.inputs)
    return apply.write_store(store.result(ctx.inputs).path, control.dir, ctx.job_dir / f"{RANDOM_M}.zarr")


def result(inputs: dict) -> StoreResult | None:
    """The random-m store and its ε, None where no model trains on it (or the pipeline has no such stage)."""
    job = (inputs.get(NAME) or {}).get("jobs", {}).get(NAME)
    return StoreResult(job["path"], job["digest"], job.get("epsilon")) if job else None


def wanted(config: dict) -> bool:
    """Whether some retrained model trains on ``mod-random``."""
    table = retrain_table(config)
    return table is not None and RANDOM_M in trained_variants(table)


def check(config: dict, *, deep: bool = True) -> None:
    if wanted(config) and not manipulate_random.settings(config)["enabled"]:
        raise UserError(f"dataset variant {RANDOM_M!r} is the random-ψ control's m applied: it needs "
                        f"[{manipulate_random.NAME}] enabled = true")


def stage(config: dict, meta: dict) -> Stage:
    # the digest covers whether the store is made; what it is made of is the input stages' (store, manipulate-random)
    return Stage(NAME, {"enabled": wanted(config)}, input_names(INPUTS),
                 lambda c: [Job(NAME, job_apply_random, {})] if c["enabled"] else [])
