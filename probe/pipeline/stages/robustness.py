"""Stage ``robustness`` (§5.3): the primary hyperparameter's literature value (the model's dataset preset) times
each of ``robustness.scales``, trained and evaluated in one job. Runs that over-prune (fewer active units than
factors) are kept and flagged (``active_units``); the report decides whether to drop them, as Fig. 5 does."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages.common import (KEEP_CHECKPOINTS, evaluate_settings, job_train, job_train_batch,
                                          keep_checkpoints, primary_hyperparameter, retrain_seeds, run_config, run_key)


def stage(config: dict, meta: dict) -> Stage:
    dataset, rt = config["pipeline"]["dataset"], config["retrain"]
    settings = evaluate_settings(config)

    def jobs(c):
        if not c["enabled"]:
            return []
        models = c["models"] or [m for m in rt["models"] if primary_hyperparameter(config, m)]
        train = c["train"] or rt["train"]
        return [Job(run_key(m, v, s, x), job_train, {
            "run_config": run_config(m, dataset, s, train, rt["model_config"]), "variant": v, "model": m, "seed": s,
            "hyperparameter": primary_hyperparameter(config, m), "scale": float(x), "evaluate": settings,
            "keep": c[KEEP_CHECKPOINTS]},
            work=train["steps"] + 1, batch=f"{m}-x{x:g}-{v}", batch_fn=job_train_batch)
            for m in models for x in c["scales"] for v in c["variants"]
            for s in retrain_seeds({**rt, "seeds": c["seeds"]})]

    return Stage("robustness", {**config["robustness"], "evaluate": settings, KEEP_CHECKPOINTS: keep_checkpoints(config)},
                 ["store", "select", "apply", "noise"], jobs)
