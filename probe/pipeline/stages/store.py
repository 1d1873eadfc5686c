"""Stage ``store``: the original dataset store, synthetic (probe.data.synth) or built from the official file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from probe.errors import UserError
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages.face import StoreResult, single_job_result
from probe.pipeline.worker import JobContext

NAME = "store"
INPUTS = ()
SOURCES = ("synthetic", "official")


def job_store(ctx: JobContext, *, dataset: str, source: str, file: str | None, resolution: int,
              factor_sizes: list | None, seed: int, options: dict | None = None) -> dict:
    out = ctx.job_dir / f"{dataset}.zarr"
    if source == "synthetic":
        from probe.data.synth import generate

        if out.exists():  # a previous attempt finished writing (stores are renamed into place when complete)
            from probe.data import open_store

            store = open_store(out)
        else:
            store = generate(dataset, out, resolution=resolution, factor_sizes=factor_sizes or None, seed=seed,
                             progress=False, options=options or None)
    else:
        from probe.data import open_store
        from probe.data.sources import build

        store = open_store(out) if out.exists() else build(dataset, file, out, progress=False)
    return {"path": str(out), "digest": store.digest, "name": store.name, "num_images": len(store),
            "image_shape": list(store.image_shape), "factor_sizes": list(store.factor_sizes)}


@dataclasses.dataclass(frozen=True)
class OrigStoreResult(StoreResult):
    name: str = ""
    num_images: int = 0
    image_shape: tuple[int, ...] = ()
    factor_sizes: tuple[int, ...] = ()


def result(inputs: dict) -> OrigStoreResult:
    """The original store: ``path``, ``digest``, ``name``, ``num_images``, ``image_shape``, ``factor_sizes``."""
    r = inputs[NAME]
    return OrigStoreResult(r["path"], r["digest"], name=r["name"], num_images=int(r["num_images"]),
                           image_shape=tuple(r["image_shape"]), factor_sizes=tuple(int(s) for s in r["factor_sizes"]))


def settings(config: dict) -> dict:
    """The ``[store]`` table (the rotated store renders with the same resolution, factor sizes, options and seed)."""
    return config[NAME]


def description(config: dict) -> dict:
    """What the report says of the store's settings (report_inputs.json's ``setting.data``): ``source``,
    ``resolution`` and ``factor_sizes`` of the ``[store]`` table, and its rendering ``options`` when it has any
    (a deviation from the generator's default images)."""
    st = settings(config)
    out = {key: st.get(key) for key in ("source", "resolution", "factor_sizes")}
    return {**out, "options": dict(st["options"])} if st.get("options") else out


def is_synthetic(config: dict) -> bool:
    return config[NAME]["source"] == "synthetic"


def check(config: dict, *, deep: bool = True) -> None:
    """The store's source and, for ``official``, that its file exists before any work."""
    st = config[NAME]
    if st["source"] not in SOURCES:
        raise UserError(f"{NAME}.source must be 'synthetic' or 'official', got {st['source']!r}")
    if st["source"] == "official":
        if st.get("options"):
            raise UserError(f"{NAME}.options are rendering options of a generator: {NAME}.source must be 'synthetic'")
        check_official_file(config["pipeline"]["dataset"], st.get("file") or None)
    elif st.get("options"):
        from probe.data.synth import check_options

        check_options(config["pipeline"]["dataset"], st["options"], st.get("factor_sizes") or None)


def check_official_file(dataset: str, file: str | None) -> None:
    """The official file must exist before any work (paper preset): name it, its URL and the fetch command."""
    from probe.data.sources import card, default_source

    path = Path(file) if file else default_source(dataset)
    if not path.exists():
        urls = [f.get("url") for f in card(dataset).get("files", []) if f.get("url")]
        raise UserError(
            f"the official {dataset} file {path} does not exist; download it with `probe datasets fetch {dataset}` "
            f"(from {', '.join(urls) or 'the URL on its dataset card'}), or pass its path with --set {NAME}.file=PATH")


def stage(config: dict, meta: dict) -> Stage:
    return Stage(NAME, {**config[NAME], "dataset": config["pipeline"]["dataset"]}, [],
                 lambda c: [Job(NAME, job_store, dict(c), work=1)], single_job_result(NAME))
