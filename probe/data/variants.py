"""The names of the dataset variants a model is trained on: the one owner below the pipeline and the report.

``VARIANTS`` (orig, mod, noise) are the paper's three (Zietlow et al. 2021 §5.1, §5.2): every report's tables and
verdicts are over them, and the pipeline names its training jobs and stores by them. The control pipeline's dose
stage adds ``mod-x<scale>``: the learned manipulation applied at ``scale`` × ε (``dose_variant``/``dose_scale``).
``RANDOM_M`` (``mod-random``) is the frozen random-ψ control's m(w) applied at the same ε (stage apply-random): models
retrained on it say whether *learning* m is what moves them, or any saturated m(w) of the budget would.
Which stage makes each variant's store is the pipeline's business (``probe.pipeline.variants``); the names live
here so that the report can read runs by them without importing the pipeline.
"""

from __future__ import annotations

VARIANTS = ("orig", "mod", "noise")
DOSE_PREFIX = "mod-x"
RANDOM_M = "mod-random"


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
