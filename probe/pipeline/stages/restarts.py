"""Stage ``restarts``: ``restarts.count`` runs of one model on the original store (seeds 0..count-1), the pool
the select stage picks the most entangled and most disentangled from."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import store
from probe.pipeline.stages.common import (KEEP_CHECKPOINTS, check_count, check_models, keep_checkpoints, run_config,
                                          train_job, train_jobs)
from probe.pipeline.stages.face import TrainedRun, input_names, trained_runs
from probe.pipeline.worker import JobContext

NAME = "restarts"
INPUTS = (store,)


def job_key(seed: int) -> str:
    return f"seed{seed}"


def count(config: dict) -> int:
    return config[NAME]["count"]


def seeds(config: dict) -> range:
    return range(count(config))


def result(inputs: dict) -> dict[str, TrainedRun]:
    """``{job key: TrainedRun}`` of the restarts."""
    return trained_runs(inputs[NAME]["jobs"])


def run_of(inputs: dict, seed: int) -> TrainedRun:
    key = job_key(seed)
    return TrainedRun.of(key, inputs[NAME]["jobs"][key])


def job_restart(ctx: JobContext, **kwargs) -> dict:
    """One restart on the original store (``common.train_job``'s keyword arguments)."""
    return train_job(ctx, store.result(ctx.inputs).path, **kwargs)


def job_restart_batch(contexts: list[JobContext], members: list[dict]) -> list:
    """``job_restart`` for several seeds, trained as one batched job."""
    return train_jobs(contexts, [store.result(ctx.inputs).path for ctx in contexts], members)


def check(config: dict, *, deep: bool = True) -> None:
    c = config[NAME]
    check_count(f"{NAME}.count", c["count"])
    if deep:
        check_models(config["pipeline"]["dataset"], [(c["model"], c["model_config"], c["train"])],
                     config.get("hyperparameters"))


def stage(config: dict, meta: dict) -> Stage:
    dataset = config["pipeline"]["dataset"]

    def jobs(c):
        return [Job(job_key(s), job_restart, {
            "run_config": run_config(c["model"], dataset, s, c["train"], {c["model"]: c["model_config"]}),
            "variant": "orig", "model": c["model"], "seed": s, "keep": c[KEEP_CHECKPOINTS]}, work=c["train"]["steps"],
            batch=NAME,
            batch_fn=job_restart_batch) for s in range(c["count"])]

    return Stage(NAME, {**config[NAME], KEEP_CHECKPOINTS: keep_checkpoints(config)}, input_names(INPUTS), jobs)
