"""Stage ``retrain``: every model of ``retrain.models`` on every variant's store, ``retrain.seeds`` seeds each."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages.common import (KEEP_CHECKPOINTS, job_train, job_train_batch, keep_checkpoints, model_train,
                                          primary_hyperparameter, retrain_seeds, run_config, run_key)
from probe.pipeline.variants import variant_stages


def retrain_jobs(config: dict, retrain: dict) -> list[Job]:
    """The retrain stage's jobs for its config ``retrain`` (the evaluate stage evaluates each of them)."""
    dataset = config["pipeline"]["dataset"]
    return [Job(run_key(m, v, s), job_train, {
        "run_config": run_config(m, dataset, s, model_train(retrain, m), retrain["model_config"]), "variant": v,
        "model": m, "seed": s, "hyperparameter": primary_hyperparameter(config, m), "keep": keep_checkpoints(config)},
        work=model_train(retrain, m)["steps"],
        batch=f"{m}-{v}", batch_fn=job_train_batch)
        for m in retrain["models"] for v in model_variants(retrain, m) for s in retrain_seeds(retrain)]


def all_variants(retrain: dict) -> list[str]:
    """Every variant some model of ``retrain`` is trained on."""
    return list(dict.fromkeys(v for m in retrain["models"] for v in model_variants(retrain, m)))


def model_variants(retrain: dict, model: str) -> list[str]:
    """The variants ``model`` is retrained on: ``retrain.model_variants[model]``, else ``retrain.variants`` (the
    control trains the β-VAE on its L1 and L3 stores too, the AE and PCL on orig, mod and noise only)."""
    return list((retrain.get("model_variants") or {}).get(model) or retrain["variants"])


def stage(config: dict, meta: dict) -> Stage:
    return Stage("retrain", {**config["retrain"], KEEP_CHECKPOINTS: keep_checkpoints(config)},
                 variant_stages(all_variants(config["retrain"])),
                 lambda c: retrain_jobs(config, c))
