"""The dataset variants a model is trained on and the stage that makes each one's store.

``VARIANTS`` (orig, mod, noise) are the paper's three (§5.1, §5.2): every report's tables and verdicts are over
them. The names and the dose-variant naming live in ``probe.data.variants`` (below the pipeline and the report, which
reads runs by them); this module adds which stage makes each variant's store. The control pipeline
(pipelines/modify-control.toml, docs/notes/control.md) trains on two more kinds, ``CONTROL_VARIANTS``:

* ``rotated`` (L1): the store rendered from the factors rotated before rendering (stage ``rotated``): a known
  entangling transformation, so a model that follows the images' preferred axes must lose its alignment;
* ``mod-x<scale>`` (L3, dose–response): the learned manipulation applied at ``scale`` × ε (stage ``dose``).
"""

from __future__ import annotations

from probe.data.variants import DOSE_PREFIX, VARIANTS, dose_scale, dose_variant  # noqa: F401 - re-exported
from probe.errors import UserError

VARIANT_STAGES = {"orig": "store", "mod": "apply", "noise": "noise", "rotated": "rotated"}
DOSE_STAGE = "dose"
CONTROL_VARIANTS = ("rotated",)  # and every dose variant, dose_variant(scale)


def is_control_variant(variant: str) -> bool:
    return variant in CONTROL_VARIANTS or dose_scale(variant) is not None


def check_variant(variant: str) -> None:
    if variant not in VARIANT_STAGES and dose_scale(variant) is None:
        raise UserError(f"unknown dataset variant {variant!r} (known: {', '.join(VARIANT_STAGES)}, "
                        f"and {DOSE_PREFIX}<scale> for the dose stage)")


def variant_stage(variant: str) -> str:
    """The stage whose result holds ``variant``'s store."""
    check_variant(variant)
    return DOSE_STAGE if dose_scale(variant) is not None else VARIANT_STAGES[variant]


def variant_stages(variants) -> list[str]:
    """The stages a training stage on ``variants`` reads, in a stable order (the orig store always: it is the
    reference every variant is compared with)."""
    stages = ["store"] + [variant_stage(v) for v in variants]
    return list(dict.fromkeys(stages))


def variant_store(inputs: dict, variant: str) -> str:
    """The store path of ``variant`` among a job's input stage results."""
    stage = variant_stage(variant)
    if stage == DOSE_STAGE:
        return inputs[DOSE_STAGE]["jobs"][variant]["path"]
    return inputs[stage]["path"]
