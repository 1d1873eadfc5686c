"""The modify-* pipeline (Zietlow et al. 2021): its stages, their jobs, and the checks run before any work.

    store → restarts → select → manipulate → apply → noise → retrain → evaluate → robustness
          → linear-pca → report

Every job function has the signature ``fn(ctx: JobContext, **kwargs) -> dict`` and calls only the
pinned interfaces of the other areas (docs/notes/INTERFACES.md). Job results hold absolute paths;
the engine rewrites them when a stage folder is renamed from ``.partial`` to its final name.

Choices (paper vs reference code):
* Restarts, retrained models and robustness runs use seeds 0..n-1; orig/mod/noise share seeds, so
  each seed is a paired comparison.
* Every run passes ``dataset = pipeline.dataset`` so the model's Table 2 preset applies on every variant
  (the modified and noise stores of a dSprites run are still dSprites).
* Robustness (§5.3): the primary hyperparameter's literature value (the model's dataset preset) times
  each scale; runs that over-prune (fewer active units than factors) are kept and flagged
  (``active_units``), and the report decides whether to drop them, as Fig. 5 does.
* The noise store uses the same ε as the manipulation (§5.2) unless ``noise.epsilon`` says otherwise.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from probe.errors import UserError
from probe.pipeline.engine import Job, JobContext, Stage

MODIFY_STAGES = ("store", "restarts", "select", "manipulate", "apply", "noise", "retrain", "evaluate",
                 "robustness", "linear-pca", "report")
VARIANTS = ("orig", "mod", "noise")


# -- job functions ------------------------------------------------------------------------------------

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


def job_train(ctx: JobContext, *, run_config: dict, variant: str, model: str, seed: int,
              hyperparameter: str | None = None, scale: float | None = None, evaluate: dict | None = None) -> dict:
    """One training run on the store of ``variant``; with ``scale``, the primary hyperparameter's
    resolved (literature) value is multiplied by it; with ``evaluate``, the run is also evaluated."""
    from probe.train import resolve_run_config, train_run

    store_path = _variant_store(ctx.inputs, variant)
    run_config = json.loads(json.dumps(run_config))
    resolved = resolve_run_config(run_config, store_path)
    hp = {"name": hyperparameter, "value": resolved["model_config"].get(hyperparameter) if hyperparameter else None}
    if scale is not None:
        if hyperparameter is None:
            raise UserError(f"model {model!r} has no primary hyperparameter to scale")
        hp["value"] = float(resolved["model_config"][hyperparameter]) * float(scale)
        run_config.setdefault("model_config", {})[hyperparameter] = hp["value"]
    run_dir = train_run(run_config, store_path, ctx.job_dir / "run", resume=True, device=ctx.device, progress=False)
    result = {"model": model, "variant": variant, "seed": seed, "run_dir": str(run_dir), "hyperparameter": hp,
              "curve": str(Path(run_dir) / "metrics.jsonl")}
    if scale is not None:
        result["scale"] = float(scale)
    if evaluate is not None:
        result["metrics"] = _evaluate(run_dir, store_path, evaluate)
        result.update(_alignment(ctx.inputs, run_dir, store_path, evaluate))
    return result


def job_select_mig(ctx: JobContext, *, restart: str, seed: int) -> dict:
    from probe.perturb import evaluate_restarts

    run = _job_result(ctx.inputs["restarts"], restart)
    mig = evaluate_restarts([run["run_dir"]], ctx.inputs["store"]["path"], seed=seed)
    return {"run_dir": run["run_dir"], "seed": run["seed"], "mig": float(mig[run["run_dir"]])}


def job_manipulate(ctx: JobContext, *, config: dict, figure4: bool) -> dict:
    from probe.perturb import figure4 as make_figure4
    from probe.perturb import train_manipulation

    store_path = ctx.inputs["store"]["path"]
    select = ctx.inputs["select"]
    out = train_manipulation(store_path, select["entangled"], select["disentangled"], ctx.job_dir / "manipulation",
                             config, resume=True, progress=False, device=ctx.device)
    png = make_figure4(store_path, out, ctx.job_dir / "figure4.png") if figure4 else None
    from probe.perturb.adversarial import manipulation_final

    final = manipulation_final(out)
    return {"dir": str(out), "losses": str(Path(out) / "losses.jsonl"), "figure4": str(png) if png else None,
            "coverage": final.get("coverage"),
            "dis_minus_ent": {"before": (final.get("before") or {}).get("dis_minus_ent"),
                              "after": (final.get("after") or {}).get("dis_minus_ent")}}


def job_apply(ctx: JobContext, *, epsilon: float | None = None) -> dict:
    from probe.perturb import apply_manipulation

    out = ctx.job_dir / "mod.zarr"
    if out.exists():
        from probe.data import open_store

        store = open_store(out)
    else:
        store = apply_manipulation(ctx.inputs["store"]["path"], ctx.inputs["manipulate"]["dir"], out, epsilon=epsilon)
    return {"path": str(out), "digest": store.digest, "epsilon": _store_epsilon(store, epsilon)}


def job_noise(ctx: JobContext, *, epsilon: float, seed: int) -> dict:
    from probe.perturb import make_noise_store

    out = ctx.job_dir / "noise.zarr"
    if out.exists():
        from probe.data import open_store

        store = open_store(out)
    else:
        store = make_noise_store(ctx.inputs["store"]["path"], out, epsilon=epsilon, seed=seed)
    return {"path": str(out), "digest": store.digest, "epsilon": float(epsilon)}


def job_evaluate(ctx: JobContext, *, run: str, settings: dict) -> dict:
    entry = _job_result(ctx.inputs["retrain"], run)
    store_path = _variant_store(ctx.inputs, entry["variant"])
    return {"run": run, "metrics": _evaluate(entry["run_dir"], store_path, settings),
            **_alignment(ctx.inputs, entry["run_dir"], store_path, settings)}


def job_linear_pca(ctx: JobContext, *, config: dict) -> dict:
    from probe.analysis import verify_store

    return {"analysis": verify_store(ctx.inputs["store"]["path"], **config)}


def job_report(ctx: JobContext, *, meta: dict, make_report: bool) -> dict:
    """Assemble report_inputs.json (docs/notes/INTERFACES.md), publish it to WORKDIR, call make_report."""
    from probe.pipeline.why import why_inputs
    from probe.provenance import environment, write_json_atomic

    inputs = ctx.inputs
    workdir = Path(meta["workdir"])
    mig = {r["run_dir"]: r["mig"] for r in inputs["select"]["jobs"].values()}
    chosen = {r: "entangled" for r in inputs["select"]["entangled"]}
    chosen.update({r: "disentangled" for r in inputs["select"]["disentangled"]})
    restarts = [{"run_dir": r["run_dir"], "seed": r["seed"], "mig": mig.get(r["run_dir"]), "selected": chosen.get(r["run_dir"])}
                for r in sorted(inputs["restarts"]["jobs"].values(), key=lambda r: r["seed"])]
    evaluated = {e["run"]: e for e in inputs["evaluate"]["jobs"].values()}
    metrics = {k: e["metrics"]["metrics"] for k, e in evaluated.items()}
    runs = []
    for key, r in sorted(inputs["retrain"]["jobs"].items()):
        runs.append({k: r[k] for k in ("model", "variant", "seed", "run_dir", "hyperparameter", "curve")}
                    | {"metrics": metrics[key]} | _alignment_entry(evaluated[key]))
    robustness = []
    for _key, r in sorted(inputs["robustness"]["jobs"].items()):
        robustness.append({k: r[k] for k in ("model", "variant", "seed", "run_dir", "hyperparameter", "curve", "scale")}
                          | {"metrics": r["metrics"]["metrics"]} | _alignment_entry(r))
    lp = inputs["linear-pca"]["jobs"]
    store = inputs["store"]["jobs"]["store"]
    report_inputs = {
        "pipeline": meta["pipeline"], "preset": meta["preset"], "dataset": meta["dataset"], "workdir": str(workdir),
        "provenance": {"code_version": meta["code_version"], "environment": environment(), "started": meta["started"],
                       "wall_time_s": time.time() - float(meta["t0"]), "config": meta["config"]},
        "stores": {"orig": {"path": store["path"], "digest": store["digest"]},
                   "mod": inputs["apply"]["jobs"]["apply"], "noise": inputs["noise"]["jobs"]["noise"]},
        "restarts": restarts,
        "manipulation": inputs["manipulate"]["jobs"]["manipulate"],
        "runs": runs,
        "robustness": robustness,
        "linear_pca": lp["linear-pca"]["analysis"] if "linear-pca" in lp else None,
        "why": why_inputs(inputs),  # Fig. 1: local vs global alignment (probe/pipeline/why.py)
    }
    write_json_atomic(ctx.job_dir / "report_inputs.json", report_inputs)
    write_json_atomic(workdir / "report_inputs.json", report_inputs)
    out = {"report_inputs": str(ctx.job_dir / "report_inputs.json"), "report": None}
    if make_report and _module_exists("probe.report"):
        from probe.report import make_report as _make_report

        made = _make_report(workdir, ctx.job_dir / "report")
        out["report"] = {k: (str(v) if not isinstance(v, list) else [str(x) for x in v]) for k, v in made.items()}
    return out


# -- helpers ------------------------------------------------------------------------------------------

def _alignment_entry(result: dict) -> dict:
    """The report_inputs ``alignment`` of one run (None when it was not computed), with its error if any."""
    entry = {"alignment": result.get("alignment")}
    if result.get("alignment_error"):
        entry["alignment_error"] = result["alignment_error"]
    return entry


def _module_exists(name: str) -> bool:
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return False
    if spec is None:
        return False
    module = importlib.import_module(name)
    return hasattr(module, "make_report")


def _job_result(stage_result: dict, key: str) -> dict:
    return stage_result["jobs"][key]


def _variant_store(inputs: dict, variant: str) -> str:
    if variant == "orig":
        return inputs["store"]["path"]
    if variant == "mod":
        return inputs["apply"]["path"]
    if variant == "noise":
        return inputs["noise"]["path"]
    raise UserError(f"unknown dataset variant {variant!r} (known: {', '.join(VARIANTS)})")


def _store_epsilon(store, epsilon):
    if epsilon is not None:
        return float(epsilon)
    origin = getattr(store, "origin", None) or {}
    cfg = origin.get("config") or {}
    return cfg.get("epsilon")


def _evaluate(run_dir, store_path, settings: dict) -> dict:
    from probe.perturb import evaluate_run

    result = evaluate_run(str(run_dir), str(store_path), metrics=settings.get("metrics") or None,
                          seed=int(settings.get("seed", 0)), **(settings.get("sample_sizes") or {}))
    return json.loads(json.dumps(result, default=_jsonable))


ALIGNMENT_SAMPLES = 5000          # factor points encoded by the run and by each selected restart
_RESTART_CODES: dict = {}          # (restart run dir, orig store, sample seed, n, device) -> (codes, active mask)


def _alignment(inputs: dict, run_dir, store_path, settings: dict) -> dict:
    """``{"alignment": ...}`` for a retrained run: ``probe.metrics.code_alignment`` of its posterior-mean
    codes to each selected entangled and disentangled restart (averaged over the members of a
    k-ensemble, each recorded). ``{}`` when the stage has no select input (nothing to compare with);
    ``{"alignment": None, "alignment_error": reason}`` when it fails: it never fails the evaluation.

    The same factor points for both sides: ``ALIGNMENT_SAMPLES`` grid points drawn without replacement
    with ``RandomState(evaluate seed)``; the run encodes them from the store it was trained on, each
    restart from the original store (its training data); its active units (mean posterior variance
    below ``active_threshold`` over the sample) select the reference latents."""
    if "select" not in inputs or "store" not in inputs:
        return {}
    try:
        return {"alignment": _alignment_of(inputs["select"], run_dir, store_path, inputs["store"]["path"], settings)}
    except Exception as exc:  # noqa: BLE001 - a diagnostic; recorded, never fatal
        return {"alignment": None, "alignment_error": f"{type(exc).__name__}: {exc}"}


def _alignment_of(select: dict, run_dir, store_path, orig_path, settings: dict) -> dict:
    import numpy as np

    from probe.data import open_store
    from probe.metrics import code_alignment
    from probe.metrics.evaluate import resolve_settings
    from probe.train import run_encoder

    s = resolve_settings(settings.get("sample_sizes") or {})
    device, seed, threshold = s["device"] or "cpu", int(settings.get("seed", 0)), float(s["active_threshold"])
    orig, run_store = open_store(orig_path), open_store(store_path)
    if list(orig.factor_sizes) != list(run_store.factor_sizes):
        raise UserError(f"store {store_path} has factor sizes {list(run_store.factor_sizes)}, the original store "
                        f"{list(orig.factor_sizes)}: no shared factor points")
    n = min(ALIGNMENT_SAMPLES, orig.num_images)
    orig_idx = np.sort(np.random.RandomState(seed).choice(orig.num_images, size=n, replace=False))
    run_idx = np.asarray(run_store.index_of(np.asarray(orig.factors[orig_idx])), dtype=np.int64)

    def encode(path, store, idx):
        encode_fn = run_encoder(path, device=device, batch_size=s["encode_batch_size"]).encode
        order = np.argsort(idx, kind="stable")         # read in index order, return in sample order
        out = encode_fn(store.read(idx[order]))
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size)
        return {k: np.asarray(v)[inverse] for k, v in out.items()}

    codes = encode(run_dir, run_store, run_idx)["codes"]
    codes = codes.reshape(codes.shape[0], -1).astype(np.float64)
    result = {}
    for group in ("entangled", "disentangled"):
        members = []
        for restart in select[group]:
            key = (str(restart), str(orig_path), seed, n, device)
            if key not in _RESTART_CODES:
                ref = encode(restart, orig, orig_idx)
                active = ref["variance"].mean(axis=0) < threshold if "variance" in ref else None
                if len(_RESTART_CODES) > 16:
                    _RESTART_CODES.clear()
                _RESTART_CODES[key] = (ref["codes"].reshape(n, -1).astype(np.float64), active)
            ref_codes, active = _RESTART_CODES[key]
            members.append({"run_dir": str(restart), **code_alignment(codes, ref_codes, reference_active=active)})
        result[group] = {name: _mean_or_none([m[name] for m in members]) for name in ("best_match_corr", "linear_r2")}
        result[group].update({"members": members, "num_samples": int(n), "seed": seed})
    return result


def _mean_or_none(values: list):
    values = [float(v) for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _jsonable(obj):
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return str(obj)


def _single(key: str):
    def collect(config, inputs, results):
        return {**results[key], "jobs": results}
    return collect


# -- the stage graph ----------------------------------------------------------------------------------

def run_key(model: str, variant: str, seed: int, scale: float | None = None) -> str:
    base = f"{model}-{variant}-s{seed}"
    return base if scale is None else f"{model}-x{scale:g}-{variant}-s{seed}"


def _run_config(model: str, dataset: str, seed: int, train: dict, model_config: dict) -> dict:
    return {"model": model, "model_config": dict(model_config.get(model, {})), "dataset": dataset, "seed": seed,
            "train": dict(train)}


def retrain_seeds(retrain: dict) -> range:
    """The retrained runs' seeds: ``retrain.seeds`` of them from ``retrain.first_seed``. The modify pipelines start
    them at 100, past every restart seed: with equal seeds and settings a retrained orig run would repeat a restart,
    so the orig sample would contain the very runs the selection picked as most entangled and most disentangled."""
    first = int(retrain.get("first_seed", 0))
    return range(first, first + int(retrain["seeds"]))


def model_train(retrain: dict, model: str) -> dict:
    """The retrain stage's train settings for ``model``: ``retrain.train`` with ``retrain.model_train[model]`` on top
    (a preset trains each model as long as it needs, e.g. the AE shorter than the β-VAE)."""
    return {**retrain["train"], **((retrain.get("model_train") or {}).get(model) or {})}


def primary_hyperparameter(config: dict, model: str) -> str | None:
    return (config.get("hyperparameters") or {}).get(model) or None


def modify_stages(config: dict, meta: dict | None = None) -> list[Stage]:
    """The stages of a modify-* pipeline from its resolved config. ``meta`` feeds the report stage
    (workdir, start time, code version); it is not part of any digest."""
    dataset = config["pipeline"]["dataset"]
    meta = meta or {}
    st, rs, sel, man = config["store"], config["restarts"], config["select"], config["manipulate"]
    rt, ev, rb, lp = config["retrain"], config["evaluate"], config["robustness"], config["linear-pca"]
    eval_settings = {"metrics": list(ev["metrics"]), "seed": int(ev["seed"]), "sample_sizes": dict(ev["sample_sizes"])}

    def store_jobs(c):
        return [Job("store", "probe.pipeline.stages:job_store", dict(c), work=1)]

    def restart_jobs(c):
        return [Job(f"seed{s}", "probe.pipeline.stages:job_train", {
            "run_config": _run_config(c["model"], dataset, s, c["train"], {c["model"]: c["model_config"]}),
            "variant": "orig", "model": c["model"], "seed": s}, work=c["train"]["steps"]) for s in range(c["count"])]

    def select_jobs(c):
        return [Job(f"seed{s}", "probe.pipeline.stages:job_select_mig", {"restart": f"seed{s}", "seed": c["seed"]})
                for s in range(rs["count"])]

    def select_collect(c, inputs, results):
        from probe.perturb import select_restarts

        chosen = select_restarts({r["run_dir"]: r["mig"] for r in results.values()}, k=c["k"])
        return {"entangled": chosen["entangled"], "disentangled": chosen["disentangled"], "mig": chosen["mig"],
                "jobs": results}

    def retrain_jobs(c):
        return [Job(run_key(m, v, s), "probe.pipeline.stages:job_train", {
            "run_config": _run_config(m, dataset, s, model_train(c, m), c["model_config"]), "variant": v, "model": m,
            "seed": s, "hyperparameter": primary_hyperparameter(config, m)}, work=model_train(c, m)["steps"])
            for m in c["models"] for v in c["variants"] for s in retrain_seeds(c)]

    def robustness_jobs(c):
        if not c["enabled"]:
            return []
        models = c["models"] or [m for m in rt["models"] if primary_hyperparameter(config, m)]
        train = c["train"] or rt["train"]
        return [Job(run_key(m, v, s, x), "probe.pipeline.stages:job_train", {
            "run_config": _run_config(m, dataset, s, train, rt["model_config"]), "variant": v, "model": m, "seed": s,
            "hyperparameter": primary_hyperparameter(config, m), "scale": float(x), "evaluate": eval_settings},
            work=train["steps"] + 1) for m in models for x in c["scales"] for v in c["variants"]
            for s in retrain_seeds({**rt, "seeds": c["seeds"]})]

    stages = [
        Stage("store", {**st, "dataset": dataset}, [], store_jobs, _single("store")),
        Stage("restarts", rs, ["store"], restart_jobs),
        Stage("select", sel, ["restarts", "store"], select_jobs, select_collect),
        Stage("manipulate", man, ["store", "select"],
              lambda c: [Job("manipulate", "probe.pipeline.stages:job_manipulate", dict(c), work=c["config"].get("steps", 1))],
              _single("manipulate")),
        Stage("apply", config["apply"], ["store", "manipulate"],
              lambda c: [Job("apply", "probe.pipeline.stages:job_apply", dict(c))], _single("apply")),
        Stage("noise", config["noise"], ["store"],
              lambda c: [Job("noise", "probe.pipeline.stages:job_noise", dict(c))], _single("noise")),
        Stage("retrain", rt, ["store", "apply", "noise"], retrain_jobs),
        Stage("evaluate", eval_settings, ["retrain", "store", "select", "apply", "noise"],
              lambda c: [Job(k.key, "probe.pipeline.stages:job_evaluate", {"run": k.key, "settings": c})
                         for k in retrain_jobs(rt)]),
        Stage("robustness", {**rb, "evaluate": eval_settings}, ["store", "select", "apply", "noise"], robustness_jobs),
        Stage("linear-pca", lp, ["store"],
              lambda c: [Job("linear-pca", "probe.pipeline.stages:job_linear_pca", {"config": c["config"]})] if c["enabled"] else []),
        Stage("report", {"make_report": config["report"]["make_report"]},
              ["store", "restarts", "select", "manipulate", "apply", "noise", "retrain", "evaluate", "robustness", "linear-pca"],
              lambda c: [Job("report", "probe.pipeline.stages:job_report", {"meta": meta, "make_report": c["make_report"]})],
              local=True),
    ]
    return stages


# -- checks before any work ----------------------------------------------------------------------------

def validate_modify(config: dict) -> None:
    """Everything that can be checked without data: models, their hyperparameters, train settings,
    manipulation settings, metric names, the official source file. Raises UserError."""
    from probe.models.base import resolve_config
    from probe.models.registry import get_model_class
    from probe.train.config import resolve_train_config

    dataset = config["pipeline"]["dataset"]
    st = config["store"]
    if st["source"] not in ("synthetic", "official"):
        raise UserError(f"store.source must be 'synthetic' or 'official', got {st['source']!r}")
    if st["source"] == "official":
        check_official_file(dataset, st.get("file") or None)
    rt, rs, rb = config["retrain"], config["restarts"], config["robustness"]
    first_seed = rt.get("first_seed", 0)
    if isinstance(first_seed, bool) or not isinstance(first_seed, int) or first_seed < 0:
        raise UserError(f"retrain.first_seed must be a non-negative integer, got {first_seed!r}")
    for key, value in (("restarts.count", rs["count"]), ("retrain.seeds", rt["seeds"]), ("robustness.seeds", rb["seeds"])):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key != "robustness.seeds" else 0):
            raise UserError(f"{key} must be a positive integer, got {value!r}")
    if rs["count"] < 2 * config["select"]["k"]:
        raise UserError(f"restarts.count ({rs['count']}) must be at least 2 × select.k ({config['select']['k']})")
    bad_variants = [v for v in list(rt["variants"]) + list(rb["variants"]) if v not in VARIANTS]
    if bad_variants:
        raise UserError(f"unknown dataset variant(s) {bad_variants} (known: {', '.join(VARIANTS)})")
    if not rt["models"]:
        raise UserError("retrain.models is empty")
    # per-model settings of models not in retrain.models are ignored (a preset may narrow the list),
    # but they must name real models with real hyperparameters
    checks = [(m, rt["model_config"].get(m, {}), model_train(rt, m))
              for m in dict.fromkeys([*rt["models"], *rt["model_config"], *(rt.get("model_train") or {})])]
    checks.append((rs["model"], rs["model_config"], rs["train"]))
    if rb["enabled"]:
        checks += [(m, rt["model_config"].get(m, {}), rb["train"] or rt["train"]) for m in rb["models"]]
    for model, overrides, train in checks:
        cls = get_model_class(model)  # unknown model -> UserError naming it
        resolved = resolve_config(cls, dataset, overrides)
        resolve_train_config(cls, train)
        hp = primary_hyperparameter(config, model)
        if hp is not None and hp not in resolved:
            raise UserError(f"hyperparameters.{model} = {hp!r}, but model {model!r} has no such hyperparameter "
                            f"(known: {', '.join(sorted(resolved))})")
    if rb["enabled"]:
        no_hp = [m for m in rb["models"] if not primary_hyperparameter(config, m)]
        if no_hp:
            raise UserError(f"robustness.models without a primary hyperparameter (see [hyperparameters]): {no_hp}")
    from probe.perturb.adversarial import resolve_manipulation_config

    resolve_manipulation_config(config["manipulate"]["config"], dataset)
    _check_metrics(config["evaluate"]["metrics"], config["evaluate"]["sample_sizes"])


def _check_metrics(metrics: list, sample_sizes: dict) -> None:
    from probe.metrics.evaluate import resolve_metrics, resolve_settings

    resolve_metrics(list(metrics) or None)
    resolve_settings(sample_sizes)


def check_official_file(dataset: str, file: str | None) -> None:
    """The official file must exist before any work (paper preset): name it, its URL and the fetch command."""
    from probe.data.sources import card, default_source

    path = Path(file) if file else default_source(dataset)
    if not path.exists():
        urls = [f.get("url") for f in card(dataset).get("files", []) if f.get("url")]
        raise UserError(
            f"the official {dataset} file {path} does not exist; download it with `probe datasets fetch {dataset}` "
            f"(from {', '.join(urls) or 'the URL on its dataset card'}), or pass its path with --set store.file=PATH")
