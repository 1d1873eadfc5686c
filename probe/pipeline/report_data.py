"""What the report shows that needs stores, trained models or torch, computed by the pipeline and recorded in
report_inputs.json (``probe.report.schema``), so that ``probe report`` is a pure function of that file and the files
it names and re-renders a finished workdir in seconds.

``add_report_data(inputs, root=)`` takes the assembled report inputs (``probe.pipeline.report_inputs``:
stores, runs, restarts, provenance, setting) and adds, each from the stores and run folders those name:

* per store (``stores[variant]``): ``factor_names``, ``factor_sizes``, ``num_images``; for orig and mod
  ``mean_image_mse``, the MSE of the mean image on up to ``MEAN_IMAGE_SAMPLE`` images (the report's "did not train"
  check; noise runs do not enter the verdict, so the noise store is not measured); for orig ``factor_ceiling``, what
  its images determine of each factor over the whole grid (``probe.data.visibility``: the most of a factor's
  entropy any latent can hold);
* ``factor_capture``: which factors each retrained run encodes on MIG's own sample of its training store
  (``probe.metrics.mig.factor_capture``; the report counts, checks and tabulates them, ``probe.report.capture``);
* ``restart_latents``: for the selected restarts, the normalised MI of factors × latents on ``NMI_SAMPLES`` orig
  images and a 2-D latent traversal (Fig. 10/11) decoded into a PNG recorded in the file (base64; tiles of
  ``TRAVERSAL_STEPS`` × ``TRAVERSAL_STEPS`` images, no gaps; the report draws the figures);
* ``manipulation_deviations``: appendix B.1 departures of the manipulation config (``probe.perturb.adversarial``).
* ``step_costs``: seconds per training step of each model's retrained runs, from their step logs: the host's speed,
  beside the run's wall time in the report's provenance.

What the configuration says (MIG's sample, the manipulation's config) is read from the inputs' ``setting``
(``probe.pipeline.report_inputs.setting``), never from the recorded pipeline config.

Errors are recorded per part, never raised: the report must not be lost to one diagnostic. Image samples are drawn
with ``SEED``. Paths are opened through ``probe.report.schema.resolve`` against ``root`` (the workdir).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from probe.data.variants import RANDOM_M, VARIANTS
from probe.report.schema import resolve, setting

SEED = 0
MEAN_IMAGE_SAMPLE = 10_000       # images per store behind the mean-image MSE
MEAN_IMAGE_VARIANTS = ("orig", "mod")
NMI_SAMPLES = 2000               # orig images encoded per selected restart for its NMI heatmap
NMI_BINS = 20
TRAVERSAL_STEPS = 7              # the traversal grid is steps × steps decoded images ...
TRAVERSAL_LIMIT = 2.0            # ... over [−limit, limit] on the restart's two most important latents


def add_report_data(inputs: dict, *, root=None) -> dict:
    """``inputs`` with the computed sections added (a new dict; ``inputs`` is not changed). ``root``: what relative
    recorded paths are relative to (default ``inputs["workdir"]``)."""
    root = root if root is not None else inputs.get("workdir") or "."
    out = dict(inputs)
    out["stores"] = store_facts(inputs.get("stores") or {}, root)
    out["factor_capture"] = capture_runs(inputs, root) if inputs.get("runs") else None
    random_m = inputs.get("random_m")
    if random_m and random_m.get("runs"):  # the runs on the random-ψ control's m, each on that store
        out["random_m"] = {**random_m, "factor_capture": capture_runs(
            inputs, root, runs=random_m["runs"], stores={RANDOM_M: random_m["store"]})}
    latents = restart_latents(inputs, root)
    if latents is not None:
        out["restart_latents"] = latents
    out["manipulation_deviations"] = manipulation_deviations(inputs)
    out["step_costs"] = step_costs(inputs.get("runs") or [], root)
    return out


def step_costs(runs: list[dict], root) -> dict:
    """{model: {"median_s", "fastest_decile_s", "intervals", "runs"}}: seconds per training step over the logged
    intervals of the model's retrained runs (``RunFolder.step_costs``). The median is the host as the run saw it;
    the fastest decile approaches an uncontended core (benchmarks/logged_step_costs.py projects stage times from it)."""
    from probe.train.run_folder import RunFolder

    per_run: dict[str, list[list[float]]] = {}  # model -> each logged run's intervals
    for run in runs:
        intervals = RunFolder(resolve(root, run["run_dir"])).step_costs() if run.get("run_dir") else []
        if intervals:
            per_run.setdefault(run["model"], []).append(intervals)
    out = {}
    for model, lists in sorted(per_run.items()):
        c = np.concatenate(lists)
        out[model] = {"median_s": float(np.median(c)), "fastest_decile_s": float(np.quantile(c, RunFolder.FASTEST_QUANTILE)),
                      "intervals": len(c), "runs": len(lists)}
    return out


# -- stores ------------------------------------------------------------------------------------------------------

def mean_image_mse(images: np.ndarray, block: int = 1024) -> float:
    """MSE of the best constant predictor (the mean image) on ``images`` [N, H, W, C] uint8 or float in [0, 1].

    Accumulated block by block in float64 (E[x²] − mean²), so a 10,000-image 64×64×3 sample never
    exists as one float copy.
    """
    arr = np.asarray(images)
    scale = 255.0 if np.issubdtype(arr.dtype, np.integer) else 1.0
    n = arr.shape[0]
    total = np.zeros(arr.shape[1:], dtype=np.float64)
    total_sq = 0.0
    for start in range(0, n, block):
        b = arr[start:start + block].astype(np.float64) / scale
        total += b.sum(0)
        total_sq += float(np.square(b).sum())
    mean = total / n
    return float(total_sq / (n * mean.size) - np.square(mean).mean())


def store_facts(stores: dict, root) -> dict:
    """``stores`` with each readable store's factor names, sizes and size, the mean-image MSE of orig and mod
    (``MEAN_IMAGE_SAMPLE`` images drawn with ``SEED``) and orig's factor ceilings. A store that cannot be read gets no facts: the report then
    falls back on the recorded config, or does not judge."""
    from probe.data import open_store
    from probe.data.visibility import factor_ceilings

    out = {}
    for variant, entry in stores.items():
        entry = dict(entry or {})
        try:
            store = open_store(resolve(root, entry.get("path")))
        except Exception:  # noqa: BLE001 - the report says what it cannot judge
            out[variant] = entry
            continue
        entry.update(factor_names=list(store.factor_names), factor_sizes=[int(s) for s in store.factor_sizes],
                     num_images=int(store.num_images))
        if variant == "orig":  # what its images determine of each factor: the ceiling on any latent's normalised MI
            entry["factor_ceiling"] = factor_ceilings(store)
        if variant in MEAN_IMAGE_VARIANTS:
            n = min(store.num_images, MEAN_IMAGE_SAMPLE)
            index = np.sort(np.random.RandomState(SEED).choice(store.num_images, n, replace=False))
            entry["mean_image_mse"] = mean_image_mse(store.read(index))
        out[variant] = entry
    return out


# -- factor capture ----------------------------------------------------------------------------------------------

def mig_sample_settings(inputs: dict) -> dict:
    """{"seed", "recorded", "num_train", "num_test", "draw_batch_size", "num_bins"} of the evaluation that produced
    the runs' metrics (the inputs' ``setting.evaluation``; the metric defaults where the inputs do not record it)."""
    from probe.metrics.registry import default_settings

    evaluate = setting(inputs, "evaluation") or {}
    settings = {**default_settings(), **(evaluate.get("sample_sizes") or {})}
    return {"seed": int(evaluate.get("seed", 0)), "recorded": bool(evaluate),
            **{k: int(settings[k]) for k in ("num_train", "num_test", "draw_batch_size", "num_bins")}}


def run_capture(run_dir, store, sample: dict, device: str = "cpu") -> dict:
    """``factor_capture`` of one run on MIG's sample of ``store``, with the number of active latents
    (E[σ²] < 0.8 over that sample; None without a posterior variance)."""
    from probe.metrics.mig import factor_capture
    from probe.metrics.sampler import draw_train_test
    from probe.train import run_encoder

    factors, _ = draw_train_test(np.asarray(store.factor_sizes), sample["num_train"], sample["num_test"],
                                 sample["seed"], sample["draw_batch_size"])
    # each distinct image encoded once, as the evaluation's code cache does
    unique, inverse = np.unique(store.index_of(factors), return_inverse=True)
    out = run_encoder(run_dir, device=device).encode(store.read(unique))
    capture = factor_capture(out["codes"][inverse], factors, num_bins=sample["num_bins"])
    variance = out.get("variance")
    capture["active"] = int((variance[inverse].mean(axis=0) < 0.8).sum()) if variance is not None else None
    return capture


def capture_runs(inputs: dict, root, *, runs: list[dict] | None = None, stores: dict | None = None) -> dict:
    """{"runs": [{model, variant, seed, run_dir, gap, latent, best_nmi, mig, active} or {model, variant, seed,
    run_dir, error}], "factor_names", "sample", "device", "wall_time_s"} for every retrained run (the schema's
    ``CAPTURE_*`` fields), each on the store it was trained on: ``inputs["runs"]`` on ``inputs["stores"]``, or ``runs``
    on ``stores`` ({variant: store entry}). A GPU encodes when there is one: the full preset's 10,000-image samples
    over hundreds of runs take long on a CPU."""
    import torch

    from probe.data import open_store

    sample = mig_sample_settings(inputs)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    started = time.time()
    runs = inputs["runs"] if runs is None else runs
    stores = (inputs.get("stores") or {}) if stores is None else stores
    opened, entries = {}, []
    factor_names = None
    order = {v: i for i, v in enumerate(VARIANTS)}
    for run in sorted(runs, key=lambda r: (str(r["model"]), order.get(r["variant"], len(order)), r.get("seed") or 0)):
        entry = {"model": run["model"], "variant": run["variant"], "seed": run.get("seed"),
                 "run_dir": run.get("run_dir")}
        try:
            if run["variant"] not in opened:
                path = resolve(root, (stores.get(run["variant"]) or {}).get("path"))
                if path is None:
                    raise FileNotFoundError(f"the inputs name no {run['variant']} store")
                opened[run["variant"]] = open_store(path)
            store = opened[run["variant"]]
            factor_names = factor_names or list(store.factor_names)
            entry.update(run_capture(resolve(root, run.get("run_dir")), store, sample, device))
        except Exception as exc:  # noqa: BLE001 - a missing checkpoint or store is stated in the report
            entry["error"] = f"{type(exc).__name__}: {exc}"
        entries.append(entry)
    return {"runs": entries, "factor_names": factor_names, "sample": sample, "device": device,
            "wall_time_s": time.time() - started}


# -- the selected restarts: NMI heatmaps and latent traversals ---------------------------------------------------

def traversal_grid(model, base_code: np.ndarray, dims: tuple[int, int], *, steps: int = TRAVERSAL_STEPS,
                   limit: float = TRAVERSAL_LIMIT) -> np.ndarray:
    """Decode a steps×steps grid over latents ``dims`` (values in [−limit, limit], others fixed at
    ``base_code``) -> images float [steps, steps, H, W, C] in [0, 1]."""
    import torch

    values = np.linspace(-limit, limit, steps)
    codes = np.repeat(np.asarray(base_code, dtype=np.float32)[None], steps * steps, 0)
    rows, cols = np.meshgrid(values, values, indexing="ij")
    codes[:, dims[0]] = rows.ravel()
    codes[:, dims[1]] = cols.ravel()
    if not hasattr(model, "decode"):
        raise TypeError("model has no decode(z)")
    with torch.no_grad():
        images = torch.sigmoid(model.decode(torch.from_numpy(codes)))
    images = images.permute(0, 2, 3, 1).float().cpu().numpy()
    return images.reshape(steps, steps, *images.shape[1:])


def encode_tiles(grid: np.ndarray) -> str:
    """A traversal grid float [S, S, H, W, C] in [0, 1] as one PNG of S × S tiles (8 bit; grey for C = 1), base64:
    recorded in report_inputs.json itself, so the file names no file of the stage that writes it (a stage's own
    folder is renamed when it completes) and a copied workdir keeps its figures."""
    import base64
    import io

    from PIL import Image

    s1, s2, h, w, c = grid.shape
    mosaic = np.clip(np.rint(np.asarray(grid) * 255.0), 0, 255).astype(np.uint8)
    mosaic = mosaic.transpose(0, 2, 1, 3, 4).reshape(s1 * h, s2 * w, c)
    buffer = io.BytesIO()
    Image.fromarray(mosaic[..., 0] if c == 1 else mosaic).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def restart_latents(inputs: dict, root) -> dict | None:
    """{"nmi_samples", "seed", "bins", "steps", "limit", "factor_names", "panels": [{"run_dir", "selected", "mig",
    "nmi" [K, D], "dims", "traversal_png" (base64 PNG, ``encode_tiles``)}]} for the selected restarts in role order, or {"unavailable": why}
    when they cannot be loaded (missing trainer, missing checkpoint, unreadable store); None without selected
    restarts."""
    selected = [r for r in inputs.get("restarts") or [] if r.get("selected") in ("entangled", "disentangled")]
    if not selected:
        return None
    try:
        return {"nmi_samples": NMI_SAMPLES, "seed": SEED, "bins": NMI_BINS, "steps": TRAVERSAL_STEPS,
                "limit": TRAVERSAL_LIMIT, **_restart_panels(inputs, selected, root)}
    except Exception as exc:  # noqa: BLE001 - stated in the report
        return {"unavailable": f"{type(exc).__name__}: {exc}"}


def _restart_panels(inputs: dict, selected: list[dict], root) -> dict:
    from probe.analysis.runs import active_latents, encode_sample, load_model
    from probe.metrics.information import histogram_nmi
    from probe.data import open_store
    from probe.errors import UserError

    store_path = resolve(root, ((inputs.get("stores") or {}).get("orig") or {}).get("path"))
    if store_path is None:
        raise UserError("the inputs name no original store")
    store = open_store(store_path)
    panels = []
    for i, r in enumerate(sorted(selected, key=lambda r: r["selected"])):
        model, _ = load_model(resolve(root, r["run_dir"]))
        sample = encode_sample(model, store, NMI_SAMPLES, seed=SEED)
        order = active_latents(sample["variances"], sample["codes"].shape[1], threshold=math.inf)
        dims = (int(order[0]), int(order[1])) if len(order) > 1 else (0, min(1, sample["codes"].shape[1] - 1))
        grid = traversal_grid(model, sample["codes"][0], dims)
        panels.append({"run_dir": r["run_dir"], "selected": r["selected"], "mig": r.get("mig"),
                       "nmi": histogram_nmi(sample["codes"], sample["factors"], NMI_BINS).tolist(),
                       "dims": list(dims), "traversal_png": encode_tiles(grid)})
    return {"factor_names": list(store.factor_names), "panels": panels}


# -- the manipulation ----------------------------------------------------------------------------------------------

def manipulation_deviations(inputs: dict) -> list[str] | None:
    """Where the run's manipulation config (the inputs' ``setting.manipulation``) departs from the paper's appendix
    B.1 (plain-language list), or None when the inputs record no manipulation config."""
    from probe.perturb.adversarial import appendix_b1_deviations

    config = setting(inputs, "manipulation")
    return None if config is None else appendix_b1_deviations(config, inputs.get("dataset"))
