"""Which stage makes each dataset variant's store (the variants' names: probe.pipeline.variants), and the store a
training or evaluation job reads for a variant."""

from __future__ import annotations

from types import ModuleType

from probe.pipeline.stages import apply, apply_random, dose, noise, rotated, store
from probe.pipeline.variants import STORE_VARIANTS, check_variant, dose_scale

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
