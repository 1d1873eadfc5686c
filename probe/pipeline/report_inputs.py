"""``report_inputs.json`` (contract: docs/notes/INTERFACES.md; read by probe.report.inputs), built from
the results of the stages that feed it. The modify pipelines' report stage and the audit stage both
write it through ``report_inputs``.

``meta`` is what ``run_pipeline`` knows about the run (pipeline, preset, dataset, workdir, config,
code_version, started, t0); ``probe audit --plan`` builds stages with only ``workdir``, hence ``get``.
"""

from __future__ import annotations

import time
from pathlib import Path

from probe.pipeline.stages.alignment import alignment_entry
from probe.pipeline.workdir import plan_legs

RUN_FIELDS = ("model", "variant", "seed", "run_dir", "hyperparameter", "curve")


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


def stores(inputs: dict) -> dict:
    """The three stores (orig from the store stage, mod from apply, noise from noise)."""
    store = inputs["store"]["jobs"]["store"]
    return {"orig": {"path": store["path"], "digest": store["digest"]},
            "mod": inputs["apply"]["jobs"]["apply"], "noise": inputs["noise"]["jobs"]["noise"]}


def run_entries(train_stage: dict, evaluate_stage: dict, *, alignment: bool = True) -> list[dict]:
    """One entry per trained run (in job-key order) with its evaluated metrics and, with ``alignment``,
    its alignment with the selected restarts."""
    evaluated = {e["run"]: e for e in evaluate_stage["jobs"].values()}
    return [{k: r[k] for k in RUN_FIELDS} | {"metrics": evaluated[key]["metrics"]["metrics"]}
            | (alignment_entry(evaluated[key]) if alignment else {})
            for key, r in sorted(train_stage["jobs"].items())]


def robustness_entries(robustness_stage: dict) -> list[dict]:
    """The robustness runs (trained and evaluated in one job), in job-key order."""
    return [{k: r[k] for k in (*RUN_FIELDS, "scale")} | {"metrics": r["metrics"]["metrics"]} | alignment_entry(r)
            for _key, r in sorted(robustness_stage["jobs"].items())]


def restart_entries(restarts_stage: dict, select_stage: dict) -> list[dict]:
    """The restarts in seed order with their MIG and whether the select stage chose them."""
    mig = {r["run_dir"]: r["mig"] for r in select_stage["jobs"].values()}
    chosen = {r: "entangled" for r in select_stage["entangled"]}
    chosen.update({r: "disentangled" for r in select_stage["disentangled"]})
    return [{"run_dir": r["run_dir"], "seed": r["seed"], "mig": mig.get(r["run_dir"]), "selected": chosen.get(r["run_dir"])}
            for r in sorted(restarts_stage["jobs"].values(), key=lambda r: r["seed"])]


def control_entries(inputs: dict, runs: list[dict]) -> dict:
    """The control pipeline's own part of the report inputs (docs/notes/control.md): its runs on the control
    variants (L1 ``rotated``, L3 ``mod-x<scale>``; the report's tables and verdicts stay over VARIANTS), their stores,
    and the partner m(w) was trained against (L2)."""
    from probe.pipeline.variants import is_control_variant

    manipulate = inputs["manipulate"]["jobs"]["manipulate"]
    rotated = inputs["rotated"]["jobs"]["rotated"]
    doses = {key: {"path": j["path"], "digest": j["digest"], "epsilon": j["epsilon"], "scale": j["scale"]}
             for key, j in sorted(inputs["dose"]["jobs"].items())}
    return {"runs": [r for r in runs if is_control_variant(r["variant"])],
            "stores": {"rotated": {"path": rotated["path"], "digest": rotated["digest"],
                                   "rotation_deg": rotated["rotation_deg"]}, **doses},
            "epsilon": inputs["apply"]["jobs"]["apply"].get("epsilon"),
            "partner": {"kind": manipulate.get("partner"), "entangled": manipulate.get("entangled"),
                        "disentangled": manipulate.get("disentangled")}}


def report_inputs(inputs: dict, meta: dict, *, pipeline: str, runs: list[dict], restarts: list[dict] | None = None,
                  robustness: list[dict] | None = None, linear_pca: dict | None = None,
                  extra_provenance: dict | None = None) -> dict:
    """The report_inputs dict of a run whose stages include store, manipulate, apply and noise (``inputs``: stage
    name -> result); ``extra_provenance`` is added to the provenance entry (the audit's reference config)."""
    return {
        "pipeline": pipeline, "preset": meta.get("preset"), "dataset": meta.get("dataset"), "workdir": meta.get("workdir"),
        "provenance": {**provenance(meta), **(extra_provenance or {})},
        "stores": stores(inputs),
        "restarts": restarts or [],
        "manipulation": inputs["manipulate"]["jobs"]["manipulate"],
        "runs": runs,
        "robustness": robustness or [],
        "linear_pca": linear_pca,
    }
