"""Stage ``retrain``: every model of ``retrain.models`` on every variant's store, ``retrain.seeds`` seeds each."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages.common import (KEEP_CHECKPOINTS, job_train, job_train_batch, keep_checkpoints, model_train,
                                          primary_hyperparameter, retrain_seeds, run_config, run_key)


def retrain_jobs(config: dict, retrain: dict) -> list[Job]:
    """The retrain stage's jobs for its config ``retrain`` (the evaluate stage evaluates each of them)."""
    dataset = config["pipeline"]["dataset"]
    return [Job(run_key(m, v, s), job_train, {
        "run_config": run_config(m, dataset, s, model_train(retrain, m), retrain["model_config"]), "variant": v,
        "model": m, "seed": s, "hyperparameter": primary_hyperparameter(config, m), "keep": keep_checkpoints(config)},
        work=model_train(retrain, m)["steps"],
        batch=f"{m}-{v}", batch_fn=job_train_batch)
        for m in retrain["models"] for v in retrain["variants"] for s in retrain_seeds(retrain)]


def stage(config: dict, meta: dict) -> Stage:
    return Stage("retrain", {**config["retrain"], KEEP_CHECKPOINTS: keep_checkpoints(config)}, ["store", "apply", "noise"],
                 lambda c: retrain_jobs(config, c))
