"""The report's "why" data (Zietlow et al. 2021 §3.3, Fig. 1): does a decoder align with the local
principal directions of the data it was trained on rather than with the global ones?

``why_inputs(values)`` is called by ``job_report`` (probe.pipeline.stages.report) with the report stage's
``StageValues`` (probe.pipeline.report_inputs) and returns the ``"why"`` entry of report_inputs.json (schema:
docs/notes/INTERFACES.md):
for the selected entangled/disentangled restarts (trained on orig) and the retrained beta-vae and pcl
runs on orig and mod, ``probe.analysis.local_alignment_of_run`` on the run's own training store; and
the change of the global PCA structure from orig to mod (``probe.analysis.global_pca_change``) and, when the pipeline
ran the frozen random-ψ control (stage manipulate-random), from orig to that control's x′ on the same image sample
(``global_pca_random``; x′ computed as ``apply`` would write it, ``probe.perturb.apply.manipulated_images``, since the
control has no store).
Errors are recorded per entry, never raised: the report must not be lost to this diagnostic.
"""

from __future__ import annotations

import time

WHY_MODELS = ("beta-vae", "pcl")
WHY_VARIANTS = ("orig", "mod")
# cheap on purpose (seconds per run on a CPU): 1500 images, 32 anchors, 64 data-space neighbours
WHY_SETTINGS = {"num_images": 1500, "num_anchors": 32, "neighbours": 64, "seed": 0, "pca_k": 12}

_KEEP = ("model", "num_active", "num_anchors", "neighbours", "neighbourhood", "direction_source",
         "local_mean_abs_cos", "local_std", "global_mean_abs_cos", "global_std", "local_minus_global",
         "jacobian_v_perm_error_mean", "note")


def why_inputs(values, settings: dict | None = None) -> dict:
    from probe.analysis import global_pca_change, local_alignment_of_run
    from probe.data import open_store

    s = {**WHY_SETTINGS, **(settings or {})}
    started = time.time()
    paths = {"orig": values.orig_store.path, "mod": values.mod_store.path}
    stores = {}
    entries = []
    restart_seed = {r.run_dir: r.seed for r in values.restarts}
    selection = values.selection
    todo = [("restart", role, "orig", restart_seed.get(d), d)
            for role, dirs in (("entangled", selection.entangled if selection else []),
                               ("disentangled", selection.disentangled if selection else []))
            for d in dirs]
    for _key, r in sorted(values.retrain.items()):
        if r.model in WHY_MODELS and r.variant in WHY_VARIANTS:
            todo.append((r.model, None, r.variant, r.seed, r.run_dir))
    for model, role, variant, seed, run_dir in todo:
        entry = {"model": model, "role": role, "variant": variant, "seed": seed, "run_dir": run_dir}
        try:
            if variant not in stores:
                stores[variant] = open_store(paths[variant])
            res = local_alignment_of_run(run_dir, stores[variant], num_images=s["num_images"], seed=s["seed"],
                                         num_anchors=s["num_anchors"], neighbours=s["neighbours"])
            entry.update({k: res[k] for k in _KEEP if k in res})
            if model == "restart":
                entry["model"], entry["trained_model"] = "restart", res.get("model")
        except Exception as exc:  # noqa: BLE001 - recorded, shown in the report
            entry["error"] = f"{type(exc).__name__}: {exc}"
        entries.append(entry)
    try:
        global_pca = global_pca_change(paths["orig"], paths["mod"], k=s["pca_k"], num_images=s["num_images"],
                                       seed=s["seed"])
    except Exception as exc:  # noqa: BLE001
        global_pca = {"error": f"{type(exc).__name__}: {exc}"}
    out = {"settings": s, "runs": entries, "global_pca": global_pca}
    control = getattr(values, "manipulation_random", None)
    if control is not None:
        out["global_pca_random"] = random_global_pca(paths["orig"], control.dir, s)
    return {**out, "wall_time_s": time.time() - started}


def random_global_pca(orig_path, control_dir, settings: dict) -> dict:
    """``global_pca_change`` orig → x′ of the random-ψ control (the images its manipulation gives, rounded to uint8 as
    a store would hold them), on the sample ``global_pca`` uses; an error is recorded, never raised."""
    from probe.analysis import global_pca_change_of
    from probe.perturb.apply import manipulated_images

    try:
        return global_pca_change_of(orig_path, lambda index: manipulated_images(orig_path, control_dir, index),
                                    k=settings["pca_k"], num_images=settings["num_images"], seed=settings["seed"])
    except Exception as exc:  # noqa: BLE001 - recorded, shown in the report
        return {"error": f"{type(exc).__name__}: {exc}"}
