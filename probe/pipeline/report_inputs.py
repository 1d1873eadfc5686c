"""Building ``report_inputs.json`` (the file's name, schema, reader and writer: ``probe.report.schema``; contract:
docs/notes/INTERFACES.md) from the results of the stages that feed it. The modify pipelines' report stage and the
audit stage both build it here: each pulls what it needs out of its input stages' results into ``StageValues``
(plain values, in one function per stage), ``report_inputs`` assembles the dict, and ``probe.pipeline.report_data``
adds what must be computed from stores and models.

``meta`` is what ``run_pipeline`` knows about the run (pipeline, preset, dataset, workdir, config,
code_version, started, t0); ``probe audit --plan`` builds stages with only ``workdir``, hence ``get``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from probe.pipeline.stages import evaluate, manipulate, retrain, store
from probe.pipeline.stages.alignment import alignment_entry
from probe.pipeline.stages.dose import DoseStore
from probe.pipeline.stages.face import StoreResult, TrainedRun
from probe.pipeline.stages.manipulate import ManipulateResult
from probe.pipeline.stages.manipulate_random import RandomControlResult
from probe.pipeline.stages.rotated import RotatedResult
from probe.pipeline.stages.select import SelectResult
from probe.pipeline.stages.store import OrigStoreResult
from probe.pipeline.workdir import plan_legs

RUN_FIELDS = ("model", "variant", "seed", "run_dir", "hyperparameter", "curve")


@dataclass
class StageValues:
    """What report_inputs.json is built from: the input stages' results, typed by their stage modules
    (``<stage>.result(inputs)``, probe.pipeline.stages.face)."""

    orig_store: OrigStoreResult      # store
    mod_store: StoreResult           # apply: path, digest, epsilon
    noise_store: StoreResult         # noise: path, digest, epsilon
    manipulation: ManipulateResult   # manipulate (dir, losses, figure4, coverage, the pair m was trained on)
    retrain: dict[str, TrainedRun]   # retrain: training job key -> run
    evaluate: dict[str, dict]        # evaluate: training job key -> {"metrics", alignment}
    restarts: list[TrainedRun] = field(default_factory=list)
    selection: SelectResult | None = None
    robustness: dict[str, TrainedRun] = field(default_factory=dict)  # each run's record holds metrics, alignment
    linear_pca: dict | None = None   # the linear-pca stage's analysis
    rotated_store: RotatedResult | None = None    # control pipeline: rotated
    dose_stores: dict[str, DoseStore] | None = None  # control pipeline: dose variant -> its store
    manipulation_random: RandomControlResult | None = None  # manipulate-random: the frozen random-ψ control
    random_m_store: StoreResult | None = None     # apply-random: the control's m applied (when a model trains on it)


def provenance(meta: dict) -> dict:
    """Code, environment, config and timing of the run. A run that was interrupted and run again took several legs
    (``probe.pipeline.workdir.Leg``): ``started`` is the first leg's start, ``wall_time_s`` the sum of the legs'
    wall times and ``legs`` each one's {"started", "wall_time_s"}."""
    from probe.provenance import environment

    legs = plan_legs(Path(meta["workdir"])) if meta.get("workdir") else []
    if not legs:  # stages built without a workdir run (``probe audit --plan``, tests): this process's time
        legs = [{"started": meta.get("started"), "wall_time_s": time.time() - float(meta.get("t0", time.time()))}]
    return {"code_version": meta.get("code_version"), "environment": environment(), "started": legs[0]["started"],
            "wall_time_s": sum(leg["wall_time_s"] for leg in legs), "legs": legs, "config": meta.get("config")}


def setting(config: dict | None) -> dict | None:
    """report_inputs.json's ``setting`` (``probe.report.schema.SETTING_PARTS``): what the report says of the store and
    the retraining steps, and what ``probe.pipeline.report_data`` needs of the evaluation and the manipulation, each
    through the stage module that owns its table; a part is None where ``config`` has no such table (the audit's
    config is its own TOML, not the reference pipeline's). None without a config (``probe audit --plan``, tests)."""
    if not config:
        return None

    def part(module, accessor):
        return accessor(config) if module.NAME in config else None

    return {"data": part(store, store.description), "retraining": part(retrain, retrain.train_steps),
            "evaluation": part(evaluate, evaluate.settings),
            "manipulation": part(manipulate, manipulate.manipulation_config)}


def stores(values: StageValues) -> dict:
    """The three stores (orig from the store stage, mod from apply, noise from noise)."""
    return {"orig": values.orig_store.entry(),
            **{name: {**store.entry(), "epsilon": store.epsilon}
               for name, store in (("mod", values.mod_store), ("noise", values.noise_store))}}


def run_entries(retrain: dict[str, TrainedRun], evaluate: dict[str, dict], *, alignment: bool = True) -> list[dict]:
    """One entry per trained run (in job-key order) with its evaluated metrics (``evaluate``: training job key ->
    evaluation) and, with ``alignment``, its alignment with the selected restarts."""
    return [run.entry(RUN_FIELDS) | {"metrics": evaluate[key]["metrics"]["metrics"]}
            | (alignment_entry(evaluate[key]) if alignment else {})
            for key, run in sorted(retrain.items())]


def robustness_entries(robustness: dict[str, TrainedRun]) -> list[dict]:
    """The robustness runs (trained and evaluated in one job), in job-key order."""
    return [run.entry((*RUN_FIELDS, "scale")) | {"metrics": run.raw["metrics"]["metrics"]} | alignment_entry(run.raw)
            for _key, run in sorted(robustness.items())]


def restart_entries(values: StageValues) -> list[dict]:
    """The restarts in seed order with their MIG and whether the select stage chose them."""
    selection = values.selection
    chosen = selection.chosen() if selection else {}
    restart_mig = selection.restart_mig if selection else {}
    return [{"run_dir": r.run_dir, "seed": r.seed, "mig": restart_mig.get(r.run_dir), "selected": chosen.get(r.run_dir)}
            for r in sorted(values.restarts, key=lambda r: r.seed)]


def control_entries(values: StageValues, runs: list[dict]) -> dict:
    """The control pipeline's own part of the report inputs (docs/notes/control.md): its runs on the control
    variants (L1 ``rotated``, L3 ``mod-x<scale>``; the report's tables and verdicts stay over VARIANTS), their stores,
    and the partner m(w) was trained against (L2)."""
    from probe.pipeline.variants import is_control_variant

    manipulate, rotated = values.manipulation, values.rotated_store
    doses = {key: {**j.entry(), "epsilon": j.epsilon, "scale": j.scale}
             for key, j in sorted((values.dose_stores or {}).items())}
    return {"runs": [r for r in runs if is_control_variant(r["variant"])],
            "stores": {"rotated": {**rotated.entry(), "rotation_deg": rotated.rotation_deg}, **doses},
            "epsilon": values.mod_store.epsilon,
            "partner": {"kind": manipulate.partner, "entangled": manipulate.entangled,
                        "disentangled": manipulate.disentangled}}


def random_m_entries(values: StageValues, runs: list[dict]) -> dict | None:
    """The models retrained on the random-ψ control's m (variant mod-random, stage apply-random; the report's section:
    probe.report.random_m): its store and their runs, None where no model trained on it."""
    from probe.pipeline.variants import RANDOM_M

    mine = [r for r in runs if r["variant"] == RANDOM_M]
    if values.random_m_store is None or not mine:
        return None
    return {"store": {**values.random_m_store.entry(), "epsilon": values.random_m_store.epsilon}, "runs": mine}


def report_inputs(values: StageValues, meta: dict, *, pipeline: str, runs: list[dict],
                  restarts: list[dict] | None = None, robustness: list[dict] | None = None,
                  linear_pca: dict | None = None, extra_provenance: dict | None = None,
                  random_m: dict | None = None) -> dict:
    """The report_inputs dict of a run whose stages include store, manipulate, apply and noise, before the sections
    ``probe.pipeline.report_data`` computes; ``extra_provenance`` is added to the provenance entry (the audit's
    reference config); ``random_m``: ``random_m_entries``'s (``runs`` holds the orig, mod and noise runs only)."""
    return {
        "pipeline": pipeline, "preset": meta.get("preset"), "dataset": meta.get("dataset"), "workdir": meta.get("workdir"),
        "provenance": {**provenance(meta), **(extra_provenance or {})},
        "setting": setting(meta.get("config")),
        "stores": stores(values),
        "restarts": restarts or [],
        "manipulation": values.manipulation.record,
        "manipulation_random": values.manipulation_random.record if values.manipulation_random else None,
        "runs": runs,
        "robustness": robustness or [],
        "linear_pca": linear_pca,
        "random_m": random_m,
    }
