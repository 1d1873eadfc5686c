"""Stage ``rotated`` (control pipeline, L1): the store rendered from the generative factors rotated by
``rotated.rotation_deg`` before rendering (probe.data.synth.control), a known entangling transformation. A β-VAE that
follows the images' preferred axes must lose its alignment with the factors here; if the report does not say it
"relies on local structure", the retraining, evaluation or verdict code is wrong (docs/notes/control.md)."""

from __future__ import annotations

import dataclasses

from probe.errors import UserError
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import store
from probe.pipeline.stages.face import StoreResult, input_names, single_job_result
from probe.pipeline.worker import JobContext

NAME = "rotated"
INPUTS = (store,)


@dataclasses.dataclass(frozen=True)
class RotatedResult(StoreResult):
    rotation_deg: float = 0.0


def job_rotated(ctx: JobContext, *, dataset: str, resolution: int, factor_sizes: list | None, rotation_deg: float,
                seed: int, options: dict | None = None) -> dict:
    from probe.data import open_store
    from probe.data.synth import generate

    out = ctx.job_dir / "rotated.zarr"
    if out.exists():  # a previous attempt finished writing (stores are renamed into place when complete)
        rotated = open_store(out)
    else:
        rotated = generate(dataset, out, resolution=resolution, factor_sizes=factor_sizes or None, seed=seed,
                           progress=False, options={**(options or {}), "rotation_deg": float(rotation_deg)})
    orig = open_store(store.result(ctx.inputs).path)
    if list(orig.factor_sizes) != list(rotated.factor_sizes):
        raise UserError(f"the rotated store's factor sizes {rotated.factor_sizes} differ from the original's "
                        f"{orig.factor_sizes}")
    return {"path": str(out), "digest": rotated.digest, "rotation_deg": float(rotation_deg)}


def result(inputs: dict) -> RotatedResult:
    r = inputs[NAME]
    return RotatedResult(r["path"], r["digest"], rotation_deg=float(r["rotation_deg"]))


def check(config: dict, *, deep: bool = True) -> None:
    if not store.is_synthetic(config):
        raise UserError(f"the rotated store is rendered by a generator: {store.NAME}.source must be 'synthetic'")


def stage(config: dict, meta: dict) -> Stage:
    st = store.settings(config)
    settings = {"dataset": config["pipeline"]["dataset"], "resolution": st["resolution"],
                "factor_sizes": st["factor_sizes"], "seed": st["seed"], "options": dict(st.get("options") or {}),
                **config[NAME]}
    return Stage(NAME, settings, input_names(INPUTS), lambda c: [Job(NAME, job_rotated, dict(c))],
                 single_job_result(NAME))
