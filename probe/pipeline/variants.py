"""The dataset variants a model is trained on and the stage that makes each one's store.

``VARIANTS`` (orig, mod, noise) are the paper's three (§5.1, §5.2): every report's tables and verdicts are over
them, and the report reads runs by these names (probe.report.inputs imports them from here). The control pipeline
(probe/pipeline/definitions/modify-control.toml, docs/notes/control.md) trains on two more kinds, ``CONTROL_VARIANTS``:

* ``rotated`` (L1): the store rendered from the factors rotated before rendering (stage ``rotated``): a known
  entangling transformation, so a model that follows the images' preferred axes must lose its alignment;
* ``mod-x<scale>`` (L3, dose–response): the learned manipulation applied at ``scale`` × ε (stage ``dose``).
"""

from __future__ import annotations

from probe.errors import UserError

VARIANTS = ("orig", "mod", "noise")
VARIANT_STAGES = {"orig": "store", "mod": "apply", "noise": "noise", "rotated": "rotated"}
DOSE_STAGE = "dose"
DOSE_PREFIX = "mod-x"
CONTROL_VARIANTS = ("rotated",)  # and every dose variant, dose_variant(scale)


def dose_variant(scale: float) -> str:
    """The variant name of the manipulation applied at ``scale`` × ε (``mod-x0.5``)."""
    return f"{DOSE_PREFIX}{float(scale):g}"


def dose_scale(variant: str) -> float | None:
    """The ε scale of a dose variant, None for any other variant."""
    if not variant.startswith(DOSE_PREFIX):
        return None
    try:
        return float(variant[len(DOSE_PREFIX):])
    except ValueError:
        return None


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
