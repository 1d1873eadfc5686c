"""Stage ``retrain``: every model of ``retrain.models`` on every variant's store, ``retrain.seeds`` seeds each."""

from __future__ import annotations

from probe.errors import UserError
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import dose
from probe.pipeline.stages.common import (KEEP_CHECKPOINTS, RETRAIN, check_models, keep_checkpoints, model_train,
                                          model_variants, primary_hyperparameter, retrain_seeds, run_config, run_key,
                                          trained_variants)
from probe.pipeline.stages.face import TrainedRun, input_names, trained_runs
from probe.pipeline.stages.stores import job_train_variant, job_train_variant_batch, variant_stages
from probe.pipeline.variants import check_variant, dose_scale

NAME = RETRAIN


def input_stages(config: dict) -> tuple:
    """The stages whose results the jobs read: the stores of the variants the stage trains on."""
    return variant_stages(trained_variants(settings(config)))


def settings(config: dict) -> dict:
    """The ``[retrain]`` table (robustness trains with its models' settings, the evaluate stage lists its runs)."""
    return config[NAME]


def train_steps(config: dict) -> dict:
    """How long each model is retrained (report_inputs.json's ``setting.retraining``): ``steps``, the ``retrain.train``
    steps, and ``model_steps``, {model: steps} with ``retrain.model_train`` on top, for every model the table names."""
    rt = settings(config)
    models = dict.fromkeys([*rt["models"], *(rt.get("model_train") or {})])
    return {"steps": rt["train"].get("steps"), "model_steps": {m: model_train(rt, m).get("steps") for m in models}}


def retrain_jobs(config: dict, retrain: dict) -> list[Job]:
    """The retrain stage's jobs for its config ``retrain`` (the evaluate stage evaluates each of them)."""
    dataset = config["pipeline"]["dataset"]
    return [Job(run_key(m, v, s), job_train_variant, {
        "run_config": run_config(m, dataset, s, model_train(retrain, m), retrain["model_config"]), "variant": v,
        "model": m, "seed": s, "hyperparameter": primary_hyperparameter(config, m), "keep": keep_checkpoints(config)},
        work=model_train(retrain, m)["steps"],
        batch=f"{m}-{v}", batch_fn=job_train_variant_batch)
        for m in retrain["models"] for v in model_variants(retrain, m) for s in retrain_seeds(retrain)]


def run_keys(config: dict) -> list[str]:
    """The job key of every retrained run (the evaluate stage evaluates each)."""
    return [j.key for j in retrain_jobs(config, settings(config))]


def result(inputs: dict) -> dict[str, TrainedRun]:
    """``{job key: TrainedRun}`` of the retrained runs."""
    return trained_runs(inputs[NAME]["jobs"])


def check(config: dict, *, deep: bool = True) -> None:
    """Seeds, models and variants (a dose variant must be one of ``dose.scales``); with ``deep`` every model's
    settings (also of models a preset leaves out of ``models``: they must name real models and hyperparameters)."""
    rt = settings(config)
    first_seed = rt.get("first_seed", 0)
    if isinstance(first_seed, bool) or not isinstance(first_seed, int) or first_seed < 0:
        raise UserError(f"{NAME}.first_seed must be a non-negative integer, got {first_seed!r}")
    from probe.pipeline.stages.common import check_count

    check_count(f"{NAME}.seeds", rt["seeds"])
    if not rt["models"]:
        raise UserError(f"{NAME}.models is empty")
    variants = trained_variants(rt)
    for v in variants:
        check_variant(v)
    scales = dose.variants(config)
    stray = [v for v in variants if dose_scale(v) is not None and v not in scales]
    if stray:
        raise UserError(f"dataset variant(s) {stray}: a dose variant must be one of {dose.NAME}.scales "
                        f"({', '.join(scales) or 'none'})")
    if deep:
        check_models(config["pipeline"]["dataset"],
                     [(m, rt["model_config"].get(m, {}), model_train(rt, m))
                      for m in dict.fromkeys([*rt["models"], *rt["model_config"], *(rt.get("model_train") or {})])],
                     config.get("hyperparameters"))


def stage(config: dict, meta: dict) -> Stage:
    return Stage(NAME, {**settings(config), KEEP_CHECKPOINTS: keep_checkpoints(config)}, input_names(input_stages(config)),
                 lambda c: retrain_jobs(config, c))
