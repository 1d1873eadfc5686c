"""The stage graph of each pipeline kind (``[pipeline] kind`` of a definitions/*.toml): its stages in run order
and its checks before any work.

    modify      store → restarts → select → manipulate → apply → noise → retrain → evaluate → robustness
                → linear-pca → report
    linear-pca  store → synthetic → linear-pca → report
    control     store → restarts → select → manipulate → apply → noise → rotated → dose → retrain → evaluate
                → robustness → linear-pca → report   (modify + the control's L1 and L3 stores, docs/notes/control.md)
    audit       store → plugin-check → restarts → select → manipulate → apply → noise → plugin-train
                → retrain → evaluate → plugin-evaluate → audit

Adding a stage: a module in probe/pipeline/stages/ with its job functions and ``stage(config, meta) -> Stage``,
and its line below. A stage builder reads the pipeline's resolved config; ``meta`` (workdir, start time, code
version) feeds the report stages and is in no digest.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from probe.errors import UserError
from probe.pipeline.audit import audit_config, validate_audit
from probe.pipeline.checks import validate_linear_pca, validate_modify
from probe.pipeline.engine import Stage
from probe.pipeline.stages import (apply, dose, evaluate, linear_pca, linear_pca_report, manipulate, noise,
                                   plugin_check, plugin_evaluate, plugin_train, report, restarts, retrain, robustness,
                                   rotated, select, store, synthetic)
from probe.pipeline.stages import audit as audit_stage

StageBuilder = Callable[[dict, dict], Stage]


@dataclasses.dataclass(frozen=True)
class Graph:
    """``builders`` in run order; ``validate(config, deep=)`` raises UserError (``deep``: also the checks that import
    models and metrics, see ``probe.pipeline.checks.validate_modify``); ``prepare(config, meta)``, when given,
    turns the pipeline's config into the one the builders read (the audit: its reference pipeline's config)."""

    builders: tuple[StageBuilder, ...]
    validate: Callable[..., None]
    prepare: Callable[[dict, dict], dict] | None = None

    def stages(self, config: dict, meta: dict | None = None) -> list[Stage]:
        meta = meta if meta is not None else {}
        config = self.prepare(config, meta) if self.prepare else config
        return [build(config, meta) for build in self.builders]


MODIFY = Graph((
    store.stage,
    restarts.stage,
    select.stage,
    manipulate.stage,
    apply.stage,
    noise.stage,
    retrain.stage,
    evaluate.stage,
    robustness.stage,
    linear_pca.stage,
    report.stage,
), validate_modify)



def validate_control(config: dict, *, deep: bool = True) -> None:
    validate_modify(config, deep=deep)
    rotated.check(config)


# the modify graph with the control's L1 and L3 stores made before the training stages read them
_BEFORE_RETRAIN = MODIFY.builders.index(retrain.stage)
CONTROL = Graph(MODIFY.builders[:_BEFORE_RETRAIN] + (rotated.stage, dose.stage) + MODIFY.builders[_BEFORE_RETRAIN:],
                validate_control)

LINEAR_PCA = Graph((
    store.stage,
    synthetic.stage,
    linear_pca.stage,
    linear_pca_report.stage,
), validate_linear_pca)


def _audit_config(config: dict, meta: dict) -> dict:
    return audit_config(config, meta, reference_stages=MODIFY.stages)


AUDIT = Graph((
    store.stage,
    plugin_check.stage,
    restarts.stage,
    select.stage,
    manipulate.stage,
    apply.stage,
    noise.stage,
    plugin_train.stage,
    retrain.stage,
    evaluate.stage,
    plugin_evaluate.stage,
    audit_stage.stage,
), validate_audit, prepare=_audit_config)

GRAPHS = {"modify": MODIFY, "control": CONTROL, "linear-pca": LINEAR_PCA, "audit": AUDIT}


def graph_of(config: dict) -> Graph:
    """The graph of a resolved pipeline config (``pipeline.kind``, default modify)."""
    kind = config["pipeline"].get("kind", "modify")
    if kind not in GRAPHS:
        raise UserError(f"pipeline kind {kind!r} is not known (known: {', '.join(GRAPHS)})")
    return GRAPHS[kind]
