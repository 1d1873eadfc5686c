"""Stage ``plugin-train`` (audit): the plug-in on every variant's store with the reference pipeline's training
settings, seeds as the reference runs'."""

from __future__ import annotations

from probe.errors import UserError
from probe.pipeline.audit import audit_table, plugin_error
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import apply, noise, store
from probe.pipeline.stages.common import retrain_seeds, run_key
from probe.pipeline.stages.face import TrainedRun, input_names, trained_runs
from probe.pipeline.stages.stores import job_train_variant
from probe.pipeline.worker import JobContext

NAME = "plugin-train"
INPUTS = (store, apply, noise)


def job_plugin_train(ctx: JobContext, *, label: str, model: str, variant: str, seed: int, run_config: dict) -> dict:
    try:
        return job_train_variant(ctx, run_config=run_config, variant=variant, model=model, seed=seed)
    except UserError as exc:  # e.g. the trainer's "training diverged: ... NaN ... at step N"
        raise plugin_error(label, exc) from None
    except Exception as exc:
        raise UserError(f"plug-in {label}: training on the {variant} data (seed {seed}) failed: "
                        f"{type(exc).__name__}: {exc}") from exc


def train_config(audit: dict) -> dict:
    """The stage's (hashed) config: the plug-in's identity and its training settings."""
    return {"plugin": audit["plugin"],
            **{k: audit["settings"][k] for k in ("model_config", "dataset", "train", "seeds", "variants", "first_seed")}}


def plugin_train_jobs(audit: dict, c: dict) -> list[Job]:
    label = audit["label"]
    return [Job(run_key(audit["slug"], v, s), job_plugin_train, {
        "label": label, "model": audit["model_label"], "variant": v, "seed": s,
        "run_config": {"model": label, "model_config": dict(c["model_config"]), "dataset": c["dataset"],
                       "seed": s, "train": dict(c["train"])}}, work=c["train"]["steps"])
        for v in c["variants"] for s in retrain_seeds(c)]


def result(inputs: dict) -> dict[str, TrainedRun]:
    """``{job key: TrainedRun}`` of the plug-in's runs."""
    return trained_runs(inputs[NAME]["jobs"])


def stage(config: dict, meta: dict) -> Stage:
    audit = audit_table(config)
    return Stage(NAME, train_config(audit), input_names(INPUTS), lambda c: plugin_train_jobs(audit, c))
