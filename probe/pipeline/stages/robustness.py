"""Stage ``robustness`` (§5.3): the primary hyperparameter's literature value (the model's dataset preset) times
each of ``robustness.scales``, trained and evaluated in one job. Runs that over-prune (fewer active units than
factors) are kept and flagged (``active_units``); the report decides whether to drop them, as Fig. 5 does."""

from __future__ import annotations

from probe.errors import UserError
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import apply, evaluate, noise, retrain, select, store
from probe.pipeline.stages.alignment import run_alignment
from probe.pipeline.stages.common import (KEEP_CHECKPOINTS, check_count, check_models, evaluate_metrics,
                                          keep_checkpoints, primary_hyperparameter, retrain_seeds, run_config, run_key)
from probe.pipeline.stages.face import TrainedRun, input_names, trained_runs
from probe.pipeline.stages.stores import job_train_variant, job_train_variant_batch, variant_store
from probe.pipeline.variants import VARIANTS
from probe.pipeline.worker import JobContext

NAME = "robustness"
INPUTS = (store, select, apply, noise)


def result(inputs: dict) -> dict[str, TrainedRun]:
    """``{job key: TrainedRun}``; each run's record holds its metrics and alignment (``TrainedRun.raw``)."""
    return trained_runs(inputs[NAME]["jobs"])


def job_robustness(ctx: JobContext, *, evaluate: dict, **kwargs) -> dict:
    """One run at a scaled hyperparameter on its variant's store, then its metrics and alignment (``evaluate``: the
    evaluate stage's settings; the other keyword arguments are ``common.train_job``'s)."""
    return _evaluated(ctx, job_train_variant(ctx, **kwargs), evaluate)


def job_robustness_batch(contexts: list[JobContext], members: list[dict]) -> list:
    """``job_robustness`` for the seeds of one model, scale and variant, trained as one batched job."""
    outcomes = job_train_variant_batch(contexts, [{k: v for k, v in kw.items() if k != "evaluate"} for kw in members])
    return [outcome if isinstance(outcome, BaseException) else _evaluated(ctx, outcome, kw["evaluate"])
            for ctx, kw, outcome in zip(contexts, members, outcomes)]


def _evaluated(ctx: JobContext, run: dict, settings: dict) -> dict:
    store_path = variant_store(ctx.inputs, run["variant"])
    return {**run, "metrics": evaluate_metrics(run["run_dir"], store_path, settings),
            **run_alignment(ctx.inputs, run["run_dir"], store_path, settings)}


def check(config: dict, *, deep: bool = True) -> None:
    c, rt = config[NAME], retrain.settings(config)
    check_count(f"{NAME}.seeds", c["seeds"], minimum=0)
    bad = [v for v in c["variants"] if v not in VARIANTS]
    if bad:
        raise UserError(f"unknown dataset variant(s) {bad}: robustness runs only on {', '.join(VARIANTS)}")
    if not c["enabled"]:
        return
    no_hp = [m for m in c["models"] if not primary_hyperparameter(config, m)]
    if no_hp:
        raise UserError(f"{NAME}.models without a primary hyperparameter (see [hyperparameters]): {no_hp}")
    if deep:
        check_models(config["pipeline"]["dataset"],
                     [(m, rt["model_config"].get(m, {}), c["train"] or rt["train"]) for m in c["models"]],
                     config.get("hyperparameters"))


def stage(config: dict, meta: dict) -> Stage:
    dataset, rt = config["pipeline"]["dataset"], retrain.settings(config)
    settings = evaluate.settings(config)

    def jobs(c):
        if not c["enabled"]:
            return []
        models = c["models"] or [m for m in rt["models"] if primary_hyperparameter(config, m)]
        train = c["train"] or rt["train"]
        return [Job(run_key(m, v, s, x), job_robustness, {
            "run_config": run_config(m, dataset, s, train, rt["model_config"]), "variant": v, "model": m, "seed": s,
            "hyperparameter": primary_hyperparameter(config, m), "scale": float(x), "evaluate": settings,
            "keep": c[KEEP_CHECKPOINTS]},
            work=train["steps"] + 1, batch=f"{m}-x{x:g}-{v}", batch_fn=job_robustness_batch)
            for m in models for x in c["scales"] for v in c["variants"]
            for s in retrain_seeds({**rt, "seeds": c["seeds"]})]

    return Stage(NAME, {**config[NAME], "evaluate": settings, KEEP_CHECKPOINTS: keep_checkpoints(config)},
                 input_names(INPUTS), jobs)
