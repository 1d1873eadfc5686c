"""The stage graph of each pipeline kind (``[pipeline] kind`` of a pipeline definition, probe/pipeline/definitions/*.toml): its stage modules in run order
and its checks before any work.

    modify      store → restarts → select → manipulate → manipulate-random → apply → apply-random → noise → retrain
                → evaluate → robustness → linear-pca → report   (apply-random has a job only when a model trains on
                mod-random, the random-ψ control's m)
    linear-pca  store → synthetic → linear-pca → report
    control     store → restarts → select → manipulate → manipulate-random → apply → apply-random → noise → rotated → dose → retrain
                → evaluate → robustness → linear-pca → report   (modify + the control's L1 and L3 stores,
                docs/notes/control.md)
    audit       store → plugin-check → restarts → select → manipulate → manipulate-random → apply → apply-random
                → noise → plugin-train → retrain → evaluate → plugin-evaluate → audit   (the reference pipeline's
                stages; the random-ψ control and its store run only where a reference model trains on mod-random)

The arrows are the run order, which is the priority; on dask a stage starts as soon as its input stages are done
(probe.pipeline.engine), so in modify noise and linear-pca (inputs: store) run beside restarts, and manipulate-random
(inputs: store, select) beside manipulate.

A stage is one module of probe.pipeline.stages with the face described in probe.pipeline.stages.face (``NAME``,
``INPUTS``, ``result``, ``check``, ``stage``). Adding a stage: that module, its table in the pipeline TOML, and its
line in a graph below. A graph checks, before any work, the pipeline-wide settings and each stage's ``check``, and
that every stage's inputs run before it.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Callable

from probe.errors import UserError
from probe.pipeline.audit import audit_config, validate_audit
from probe.pipeline.engine import Stage
from probe.pipeline.stages import (apply, apply_random, dose, evaluate, linear_pca, linear_pca_report, manipulate,
                                   manipulate_random, noise, plugin_check, plugin_evaluate, plugin_train, report,
                                   restarts, retrain, robustness, rotated, select, store, synthetic)
from probe.pipeline.stages import audit as audit_stage
from probe.pipeline.stages.common import check_pipeline


@dataclasses.dataclass(frozen=True)
class Graph:
    """``modules``: the stage modules in run order. ``validate(config, deep=)`` raises UserError (``deep``: also the
    checks that import models, the trainer and metrics). ``prepare(config, meta)``, when given, turns the pipeline's
    config into the one the stages read (the audit: its reference pipeline's config), and ``check`` replaces the
    stages' own checks (the audit checks its reference config with the modify graph)."""

    modules: tuple[ModuleType, ...]
    prepare: Callable[[dict, dict], dict] | None = None
    check: Callable[..., None] | None = None

    @property
    def names(self) -> list[str]:
        return [m.NAME for m in self.modules]

    def stages(self, config: dict, meta: dict | None = None) -> list[Stage]:
        meta = meta if meta is not None else {}
        config = self.prepare(config, meta) if self.prepare else config
        return [m.stage(config, meta) for m in self.modules]

    def validate(self, config: dict, *, deep: bool = True) -> None:
        if self.check is not None:
            self.check(config, deep=deep)
            return
        check_pipeline(config, deep=deep)
        for module in self.modules:
            if hasattr(module, "check"):
                module.check(config, deep=deep)
        self.check_inputs(config)

    def check_inputs(self, config: dict) -> None:
        """Every stage's inputs run before it (a training stage's variants need the stages that make their stores)."""
        seen: set[str] = set()
        for stage in self.stages(config):
            missing = [i for i in stage.inputs if i not in seen]
            if missing:
                kind = config["pipeline"].get("kind", "modify")
                raise UserError(f"stage {stage.name!r} reads stage(s) {', '.join(map(repr, missing))}, which the "
                                f"{kind} pipeline does not run before it (check {stage.name}'s variants)")
            seen.add(stage.name)

    def before(self, module: ModuleType, *inserted: ModuleType) -> tuple[ModuleType, ...]:
        """This graph's modules with ``inserted`` right before ``module``."""
        i = self.modules.index(module)
        return self.modules[:i] + inserted + self.modules[i:]


MODIFY = Graph((store, restarts, select, manipulate, manipulate_random, apply, apply_random, noise, retrain, evaluate,
                robustness, linear_pca, report))

# the modify graph with the control's L1 and L3 stores made before the training stages read them
CONTROL = Graph(MODIFY.before(retrain, rotated, dose))

LINEAR_PCA = Graph((store, synthetic, linear_pca, linear_pca_report))


def _audit_config(config: dict, meta: dict) -> dict:
    return audit_config(config, meta, reference_stages=MODIFY.stages)


def _validate_audit(config: dict, *, deep: bool = True) -> None:
    validate_audit(config, deep=deep, validate_reference=MODIFY.validate)


AUDIT = Graph((store, plugin_check, restarts, select, manipulate, manipulate_random, apply, apply_random, noise,
               plugin_train, retrain, evaluate, plugin_evaluate, audit_stage), prepare=_audit_config, check=_validate_audit)

GRAPHS = {"modify": MODIFY, "control": CONTROL, "linear-pca": LINEAR_PCA, "audit": AUDIT}


def graph_of(config: dict) -> Graph:
    """The graph of a resolved pipeline config (``pipeline.kind``, default modify)."""
    kind = config["pipeline"].get("kind", "modify")
    if kind not in GRAPHS:
        raise UserError(f"pipeline kind {kind!r} is not known (known: {', '.join(GRAPHS)})")
    return GRAPHS[kind]
