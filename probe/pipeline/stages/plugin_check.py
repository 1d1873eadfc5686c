"""Stage ``plugin-check`` (audit): the pre-flight check of the plug-in on a real batch of the original store."""

from __future__ import annotations

from probe.errors import UserError
from probe.pipeline.audit import audit_table, plugin_error
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import store
from probe.pipeline.stages.face import input_names
from probe.pipeline.worker import JobContext

NAME = "plugin-check"
INPUTS = (store,)


def job_plugin_check(ctx: JobContext, *, label: str, plugin: dict, model_config: dict, dataset: str, train: dict,
                     batch: int) -> dict:
    """Build the plug-in, one training step and ``encode`` on a real batch of the original store."""
    import numpy as np

    from probe.data import open_store
    from probe.models.base import resolve_config
    from probe.models.plugin import check_model_instance
    from probe.models.registry import get_model_class
    from probe.train import resolve_run_config

    orig = open_store(store.result(ctx.inputs).path)
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(len(orig), size=min(batch, len(orig)), replace=False))
    images, factors = orig.read(idx), np.asarray(orig.factors[idx])
    try:
        cls = get_model_class(label)
        config = resolve_config(cls, dataset, model_config)
        if config.get("num_latent", "absent") is None:
            config["num_latent"] = orig.num_factors
        out = check_model_instance(cls, label, config, images, orig.num_factors, factors)
        resolve_run_config({"model": label, "model_config": model_config, "dataset": dataset, "seed": 0,
                            "train": train}, orig)
    except UserError as exc:
        raise plugin_error(label, exc) from None
    except Exception as exc:  # anything else the plug-in raises is its problem, not a probe bug
        raise UserError(f"plug-in {label}: pre-flight check failed: {type(exc).__name__}: {exc}") from exc
    return {**out, "batch": int(len(idx)), "image_shape": list(images.shape[1:])}


def stage(config: dict, meta: dict) -> Stage:
    audit = audit_table(config)
    settings = audit["settings"]
    check = {"plugin": audit["plugin"], "model_config": settings["model_config"], "dataset": settings["dataset"],
             "train": settings["train"], "batch": audit["check_batch"]}
    return Stage(NAME, check, input_names(INPUTS),
                 lambda c: [Job(f"{audit['slug']}-check", job_plugin_check, {"label": audit["label"], **c})], local=True)
