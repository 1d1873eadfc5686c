"""Which stage makes each dataset variant's store (the variants' names: probe.pipeline.variants), the store a
training or evaluation job reads for a variant, and the training job on a variant's store (retrain, robustness and the
audit's plug-in runs; the restarts train on the orig store through ``common.train_job`` directly)."""

from __future__ import annotations

from types import ModuleType

from probe.pipeline.stages import apply, apply_random, dose, noise, rotated, store
from probe.pipeline.stages.common import train_job, train_jobs
from probe.pipeline.variants import STORE_VARIANTS, check_variant, dose_scale
from probe.pipeline.worker import JobContext

# the stage whose result is the variant's store (dose variants: the dose stage, one store per scale)
VARIANT_STAGES: dict[str, ModuleType] = {"orig": store, "mod": apply, "noise": noise, "rotated": rotated,
                                         "mod-random": apply_random}
assert tuple(VARIANT_STAGES) == STORE_VARIANTS


def variant_stage(variant: str) -> ModuleType:
    """The stage module whose result holds ``variant``'s store."""
    check_variant(variant)
    return dose if dose_scale(variant) is not None else VARIANT_STAGES[variant]


def variant_stages(variants) -> tuple[ModuleType, ...]:
    """The stages a training stage on ``variants`` reads, in a stable order (the orig store always: it is the
    reference every variant is compared with)."""
    return tuple(dict.fromkeys([store] + [variant_stage(v) for v in variants]))


def variant_store(inputs: dict, variant: str) -> str:
    """The store path of ``variant`` among a job's input stage results."""
    stage = variant_stage(variant)
    if stage is dose:
        return dose.result(inputs)[variant].path
    return stage.result(inputs).path


def job_train_variant(ctx: JobContext, **kwargs) -> dict:
    """One training run on the store of ``kwargs["variant"]`` (``common.train_job``'s keyword arguments)."""
    return train_job(ctx, variant_store(ctx.inputs, kwargs["variant"]), **kwargs)


def job_train_variant_batch(contexts: list[JobContext], members: list[dict]) -> list:
    """``job_train_variant`` for jobs that differ only in seed, trained as one batched job."""
    return train_jobs(contexts, [variant_store(ctx.inputs, kw["variant"]) for ctx, kw in zip(contexts, members)],
                      members)
