"""Stage ``restarts``: ``restarts.count`` runs of one model on the original store (seeds 0..count-1), the pool
the select stage picks the most entangled and most disentangled from."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages.common import KEEP_CHECKPOINTS, job_train, job_train_batch, keep_checkpoints, run_config


def stage(config: dict, meta: dict) -> Stage:
    dataset = config["pipeline"]["dataset"]

    def jobs(c):
        return [Job(f"seed{s}", job_train, {
            "run_config": run_config(c["model"], dataset, s, c["train"], {c["model"]: c["model_config"]}),
            "variant": "orig", "model": c["model"], "seed": s, "keep": c[KEEP_CHECKPOINTS]}, work=c["train"]["steps"],
            batch="restarts",
            batch_fn=job_train_batch) for s in range(c["count"])]

    return Stage("restarts", {**config["restarts"], KEEP_CHECKPOINTS: keep_checkpoints(config)}, ["store"], jobs)
