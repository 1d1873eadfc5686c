"""The dataset variants a model is trained on (orig, mod, noise) and the stage that makes each one's store.
The report reads runs by these names (probe.report.inputs imports them from here)."""

from __future__ import annotations

from probe.errors import UserError

VARIANTS = ("orig", "mod", "noise")
VARIANT_STAGES = {"orig": "store", "mod": "apply", "noise": "noise"}


def variant_store(inputs: dict, variant: str) -> str:
    """The store path of ``variant`` among a job's input stage results."""
    if variant not in VARIANT_STAGES:
        raise UserError(f"unknown dataset variant {variant!r} (known: {', '.join(VARIANTS)})")
    return inputs[VARIANT_STAGES[variant]]["path"]
