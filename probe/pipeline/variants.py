"""The dataset variants a model is trained on: their names (the stage that makes each one's store:
probe.pipeline.stages.stores).

``VARIANTS`` (orig, mod, noise) are the paper's three (§5.1, §5.2): every report's tables and verdicts are over
them. The names and the dose-variant naming live in ``probe.data.variants`` (below the pipeline and the report, which
reads runs by them); this module adds the variants the pipeline can make stores of and checks a name. The control pipeline
(probe/pipeline/definitions/modify-control.toml, docs/notes/control.md) trains on two more kinds, ``CONTROL_VARIANTS``:

* ``rotated`` (L1): the store rendered from the factors rotated before rendering (stage ``rotated``): a known
  entangling transformation, so a model that follows the images' preferred axes must lose its alignment;
* ``mod-x<scale>`` (L3, dose–response): the learned manipulation applied at ``scale`` × ε (stage ``dose``).

Any modify pipeline can also train on ``mod-random`` (``RANDOM_M``): the frozen random-ψ control's m(w) at the same ε
(stage ``apply-random``, which needs ``[manipulate-random] enabled``). Its runs are reported beside mod's, not in the
verdict table (probe.report.random_psi).
"""

from __future__ import annotations

from probe.data.variants import DOSE_PREFIX, RANDOM_M, VARIANTS, dose_scale, dose_variant  # noqa: F401 - re-exported
from probe.errors import UserError

STORE_VARIANTS = VARIANTS + ("rotated", RANDOM_M)   # each made by one stage (and the dose variants): stages/stores.py
CONTROL_VARIANTS = ("rotated",)  # and every dose variant, dose_variant(scale)


def is_control_variant(variant: str) -> bool:
    return variant in CONTROL_VARIANTS or dose_scale(variant) is not None


def check_variant(variant: str) -> None:
    if variant not in STORE_VARIANTS and dose_scale(variant) is None:
        raise UserError(f"unknown dataset variant {variant!r} (known: {', '.join(STORE_VARIANTS)}, "
                        f"and {DOSE_PREFIX}<scale> for the dose–response stores)")
