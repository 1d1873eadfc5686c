"""Stage ``store``: the original dataset store, synthetic (probe.data.synth) or built from the official file."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages.common import single_job_result
from probe.pipeline.worker import JobContext


def job_store(ctx: JobContext, *, dataset: str, source: str, file: str | None, resolution: int,
              factor_sizes: list | None, seed: int) -> dict:
    out = ctx.job_dir / f"{dataset}.zarr"
    if source == "synthetic":
        from probe.data.synth import generate

        if out.exists():  # a previous attempt finished writing (stores are renamed into place when complete)
            from probe.data import open_store

            store = open_store(out)
        else:
            store = generate(dataset, out, resolution=resolution, factor_sizes=factor_sizes or None, seed=seed,
                             progress=False)
    else:
        from probe.data import open_store
        from probe.data.sources import build

        store = open_store(out) if out.exists() else build(dataset, file, out, progress=False)
    return {"path": str(out), "digest": store.digest, "name": store.name, "num_images": len(store),
            "image_shape": list(store.image_shape), "factor_sizes": list(store.factor_sizes)}


def stage(config: dict, meta: dict) -> Stage:
    return Stage("store", {**config["store"], "dataset": config["pipeline"]["dataset"]}, [],
                 lambda c: [Job("store", job_store, dict(c), work=1)], single_job_result("store"))
