"""Auditing a new method: a plug-in model next to the reference models of a modify-* pipeline (issue 9).

    store → plugin-check → restarts → select → manipulate → apply → noise → plugin-train → retrain
          → evaluate → plugin-evaluate → audit

The stages store … evaluate are built by ``probe.pipeline.stages.modify_stages`` from the reference
pipeline's own config (``pipelines/modify-<dataset>.toml`` at the same preset, resolved exactly as
``probe pipeline run`` resolves it), so their digests and job keys are the ones a modify run computes:
an audit in a workdir where ``probe pipeline run modify-dsprites --preset P`` ran reuses its stores
and reference runs. The retrain stage's digest covers its model list, so the plug-in's runs live in
their own stages, whose inputs are the store/apply/noise stages and whose configs hold the plug-in's
identity (target string, class, sha256 of its source file): two plug-ins share everything but their
own jobs, and an edited plug-in gets new runs.

Reference models: ``reference.models`` of the audit preset (smoke: AE and β-VAE) narrows the
reference pipeline's ``retrain.models``; when the reference pipeline's own retrain stage (its full
list) is complete in the workdir and holds every model asked for, that one is used instead
(``reference.reuse_complete``), so an audit after a modify run trains only the plug-in.

Broken plug-ins: import errors and missing methods are caught before the lock or any file
(``plugin_identity``); wrong output shapes and a non-finite first loss by the pre-flight check
(``probe.models.plugin.check_model_instance`` on a real batch of the original store), which runs right
after the store stage; a loss that turns NaN later is the trainer's UserError. Each failure in a
plug-in stage becomes a UserError naming the plug-in (``run_audit``; exit 2), and the engine keeps
every finished stage and job.

The verdict is ``probe.report.stats.verdict`` (Welch t-test, bootstrap CI, the report's rule) on the
primary metric per seed, for the plug-in and each reference model.
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import re
import shutil
import time
from pathlib import Path

from probe.errors import UserError
from probe.pipeline.engine import STAGE_FILE, Job, JobContext, Stage, StageFailed, final_dir, stage_digests
from probe.pipeline.stages import VARIANTS, _evaluate, _variant_store, modify_stages, retrain_seeds, run_key

AUDIT_PIPELINE = "audit"
REFERENCE_STAGES = ("store", "restarts", "select", "manipulate", "apply", "noise", "retrain", "evaluate")
PLUGIN_STAGES = ("plugin-check", "plugin-train", "plugin-evaluate", "audit")
AUDITS_DIR = "audits"


# -- the plug-in ------------------------------------------------------------------------------------

def plugin_identity(target: str) -> dict:
    """Import the plug-in and check its class (no data needed). Returns {"target", "class" (module:qualname),
    "name", "source" (file path or None), "source_sha256"}. Raises UserError naming the plug-in."""
    from probe.models.plugin import check_model_class
    from probe.models.registry import get_model_class
    from probe.provenance import sha256_file

    if not target or not isinstance(target, str):
        raise UserError("no plug-in model given: `probe audit --model NAME` (a registry or entry-point name, "
                        "or package.module:Class)")
    cls = get_model_class(target)  # import failures: UserError naming the target
    check_model_class(cls, target)
    try:
        source = inspect.getsourcefile(cls)
    except TypeError:  # defined in C or interactively
        source = None
    return {"target": target, "class": f"{cls.__module__}:{cls.__qualname__}",
            "name": getattr(cls, "name", None) or cls.__name__, "source": source,
            "source_sha256": sha256_file(source) if source and Path(source).is_file() else None}


def hashed_identity(identity: dict) -> dict:
    """The part of the identity that goes into stage digests (not the path: the same file elsewhere is the same plug-in)."""
    return {k: identity[k] for k in ("target", "class", "source_sha256")}


def plugin_slug(target: str) -> str:
    """A file-name-safe form of the target, for job keys, logs and ``WORKDIR/audits/<slug>/``."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", target).strip("-.")
    return slug or "plugin"


def _named(label: str, exc: BaseException) -> UserError:
    text = str(exc)
    return UserError(text if text.startswith("plug-in") else f"plug-in {label}: {text}")


# -- config ------------------------------------------------------------------------------------------

def reference_configs(config: dict) -> tuple[str, dict, dict]:
    """(reference pipeline name, its config as `probe pipeline run` resolves it, the config narrowed to
    ``reference.models``)."""
    from probe.pipeline.config import flatten, resolve

    dataset = config["pipeline"]["dataset"]
    pipelines = config["reference"]["pipelines"]
    if dataset not in pipelines:
        raise UserError(f"--dataset {dataset!r}: no reference pipeline for it (known: {', '.join(pipelines)})")
    name = pipelines[dataset]
    full = resolve(name, config["pipeline"]["preset"], flatten(config["reference"].get("overrides") or {}))
    narrowed = copy.deepcopy(full)
    models = list(config["reference"].get("models") or [])
    if models:
        narrowed["retrain"]["models"] = models
    return name, full, narrowed


def choose_reference(full: dict, narrowed: dict, workdir, reuse_complete: bool) -> tuple[dict, str]:
    """The narrowed reference config, unless the full one's retrain stage is complete in ``workdir``
    and holds every narrowed model. Returns (config, where the reference runs come from)."""
    if narrowed == full:
        return full, "the reference pipeline's model list"
    if reuse_complete and workdir is not None:
        stages = [s for s in modify_stages(full, {}) if s.name in REFERENCE_STAGES]
        digest = stage_digests(stages)["retrain"]
        complete = (final_dir(Path(workdir), "retrain", digest) / STAGE_FILE).exists()
        if complete and set(narrowed["retrain"]["models"]) <= set(full["retrain"]["models"]):
            return full, "the complete reference pipeline run in the workdir"
    return narrowed, "the audit preset's reference.models"


def plugin_settings(config: dict, reference: dict) -> dict:
    pc = config["plugin"]
    return {"model_config": dict(pc.get("model_config") or {}), "dataset": config["pipeline"]["dataset"],
            "train": {**reference["retrain"]["train"], **(pc.get("train") or {})},
            "seeds": int(pc["seeds"]) or int(reference["retrain"]["seeds"]), "variants": list(pc["variants"]),
            "first_seed": int(reference["retrain"].get("first_seed", 0))}


def validate_audit(config: dict) -> None:
    """Everything that needs no data: the plug-in imports and has the protocol's methods, its
    hyperparameters and train settings exist, the reference pipeline resolves and validates."""
    from probe.models.base import resolve_config
    from probe.models.registry import get_model_class
    from probe.pipeline.stages import validate_modify
    from probe.report.inputs import verdict_metrics
    from probe.train.config import resolve_train_config

    pc = config["plugin"]
    seeds = pc["seeds"]
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 0:
        raise UserError(f"plugin.seeds (--seeds) must be a positive integer, got {seeds!r}")
    bad = [v for v in pc["variants"] if v not in VARIANTS]
    if bad or "orig" not in pc["variants"] or "mod" not in pc["variants"]:
        raise UserError(f"plugin.variants must include orig and mod and be among {', '.join(VARIANTS)}, got {pc['variants']}")
    if isinstance(pc["check_batch"], bool) or not isinstance(pc["check_batch"], int) or pc["check_batch"] < 2:
        raise UserError(f"plugin.check_batch must be an integer >= 2, got {pc['check_batch']!r}")
    metric = config["verdict"]["metric"]
    usable = verdict_metrics()
    if metric not in usable:
        raise UserError(f"verdict.metric must be one of {', '.join(usable)} (higher is better), got {metric!r}")
    identity = plugin_identity(pc["model"])
    _name, _full, narrowed = reference_configs(config)
    validate_modify(narrowed)
    settings = plugin_settings(config, narrowed)
    cls = get_model_class(identity["target"])
    try:
        resolve_config(cls, settings["dataset"], settings["model_config"])
        resolve_train_config(cls, settings["train"])
    except UserError as exc:
        raise _named(identity["target"], exc) from None


# -- the stage graph ----------------------------------------------------------------------------------

def audit_stages(config: dict, meta: dict | None = None) -> list[Stage]:
    """The audit's stages (builder of pipeline kind ``audit``). ``meta["workdir"]``, when given, is
    looked at for a complete reference run (``choose_reference``)."""
    meta = meta if meta is not None else {}
    identity = plugin_identity(config["plugin"]["model"])
    label, slug = identity["target"], plugin_slug(identity["target"])
    ref_name, full, narrowed = reference_configs(config)
    reference, source = choose_reference(full, narrowed, meta.get("workdir"), config["reference"]["reuse_complete"])
    ref_stages = {s.name: s for s in modify_stages(reference, {}) if s.name in REFERENCE_STAGES}
    ps = plugin_settings(config, reference)
    ev = reference["evaluate"]
    eval_settings = {"metrics": list(ev["metrics"]), "seed": int(ev["seed"]), "sample_sizes": dict(ev["sample_sizes"])}
    plugin = hashed_identity(identity)
    reference_models = list(reference["retrain"]["models"])
    model_label = label if label not in reference_models else f"{label} (plug-in)"

    check_config = {"plugin": plugin, "model_config": ps["model_config"], "dataset": ps["dataset"],
                    "train": ps["train"], "batch": int(config["plugin"]["check_batch"])}
    train_config = {"plugin": plugin, **{k: ps[k] for k in ("model_config", "dataset", "train", "seeds", "variants", "first_seed")}}

    def train_jobs(c):
        return [Job(run_key(slug, v, s), "probe.pipeline.audit:job_plugin_train", {
            "label": label, "model": model_label, "variant": v, "seed": s,
            "run_config": {"model": label, "model_config": dict(c["model_config"]), "dataset": c["dataset"],
                           "seed": s, "train": dict(c["train"])}}, work=c["train"]["steps"])
            for v in c["variants"] for s in retrain_seeds(c)]

    audit_config = {"plugin": plugin, "metric": config["verdict"]["metric"], "seed": int(config["verdict"]["seed"])}
    about = {"reference_pipeline": ref_name, "reference_models": reference_models, "reference_source": source,
             "identity": identity, "model_label": model_label, "slug": slug, "reference_config": reference,
             "plugin_settings": ps}
    return [
        ref_stages["store"],
        Stage("plugin-check", check_config, ["store"],
              lambda c: [Job(f"{slug}-check", "probe.pipeline.audit:job_plugin_check", {"label": label, **c})], local=True),
        *(ref_stages[n] for n in ("restarts", "select", "manipulate", "apply", "noise")),
        Stage("plugin-train", train_config, ["store", "apply", "noise"], train_jobs),
        ref_stages["retrain"],
        ref_stages["evaluate"],
        Stage("plugin-evaluate", eval_settings, ["plugin-train", "store", "apply", "noise"],
              lambda c: [Job(j.key, "probe.pipeline.audit:job_plugin_evaluate", {"label": label, "run": j.key, "settings": c})
                         for j in train_jobs(train_config)]),
        Stage("audit", audit_config, ["store", "manipulate", "apply", "noise", "retrain", "evaluate", "plugin-train",
                                      "plugin-evaluate"],
              lambda c: [Job(f"{slug}-audit", "probe.pipeline.audit:job_audit",
                             {"meta": meta, "about": about, "metric": c["metric"], "seed": c["seed"]})], local=True),
    ]


# -- job functions ------------------------------------------------------------------------------------

def job_plugin_check(ctx: JobContext, *, label: str, plugin: dict, model_config: dict, dataset: str, train: dict,
                     batch: int) -> dict:
    """Pre-flight: build the plug-in, one training step and ``encode`` on a real batch of the original store."""
    import numpy as np

    from probe.data import open_store
    from probe.models.base import resolve_config
    from probe.models.plugin import check_model_instance
    from probe.models.registry import get_model_class
    from probe.train import resolve_run_config

    store = open_store(ctx.inputs["store"]["path"])
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(len(store), size=min(batch, len(store)), replace=False))
    images, factors = store.read(idx), np.asarray(store.factors[idx])
    try:
        cls = get_model_class(label)
        config = resolve_config(cls, dataset, model_config)
        if config.get("num_latent", "absent") is None:
            config["num_latent"] = store.num_factors
        out = check_model_instance(cls, label, config, images, store.num_factors, factors)
        resolve_run_config({"model": label, "model_config": model_config, "dataset": dataset, "seed": 0,
                            "train": train}, store)
    except UserError as exc:
        raise _named(label, exc) from None
    except Exception as exc:  # anything else the plug-in raises is its problem, not a probe bug
        raise UserError(f"plug-in {label}: pre-flight check failed: {type(exc).__name__}: {exc}") from exc
    return {**out, "batch": int(len(idx)), "image_shape": list(images.shape[1:])}


def job_plugin_train(ctx: JobContext, *, label: str, model: str, variant: str, seed: int, run_config: dict) -> dict:
    from probe.pipeline.stages import job_train

    try:
        return job_train(ctx, run_config=run_config, variant=variant, model=model, seed=seed)
    except UserError as exc:  # e.g. the trainer's "training diverged: ... NaN ... at step N"
        raise _named(label, exc) from None
    except Exception as exc:
        raise UserError(f"plug-in {label}: training on the {variant} data (seed {seed}) failed: "
                        f"{type(exc).__name__}: {exc}") from exc


def job_plugin_evaluate(ctx: JobContext, *, label: str, run: str, settings: dict) -> dict:
    entry = ctx.inputs["plugin-train"]["jobs"][run]
    try:
        return {"run": run, "metrics": _evaluate(entry["run_dir"], _variant_store(ctx.inputs, entry["variant"]), settings)}
    except UserError as exc:
        raise _named(label, exc) from None
    except Exception as exc:
        raise UserError(f"plug-in {label}: evaluating run {entry['run_dir']} failed: {type(exc).__name__}: {exc}") from exc


def _runs(train_stage: dict, evaluate_stage: dict) -> list[dict]:
    metrics = {e["run"]: e["metrics"]["metrics"] for e in evaluate_stage["jobs"].values()}
    return [{k: r[k] for k in ("model", "variant", "seed", "run_dir", "hyperparameter", "curve")} | {"metrics": metrics[key]}
            for key, r in sorted(train_stage["jobs"].items())]


def job_audit(ctx: JobContext, *, meta: dict, about: dict, metric: str, seed: int) -> dict:
    """Verdicts for the plug-in and every reference model; writes audit.json, audit.md and an
    INTERFACES-format report_inputs.json (so `probe report` can render the full comparison)."""
    from probe.provenance import environment, write_json_atomic

    inputs = ctx.inputs
    ref_runs = _runs(inputs["retrain"], inputs["evaluate"])
    plugin_runs = _runs(inputs["plugin-train"], inputs["plugin-evaluate"])
    models = [about["model_label"], *about["reference_models"]]
    verdicts = {m: model_verdict(ref_runs + plugin_runs, m, metric, seed=seed) for m in models}
    store = inputs["store"]["jobs"]["store"]
    stores = {"orig": {"path": store["path"], "digest": store["digest"]},
              "mod": inputs["apply"]["jobs"]["apply"], "noise": inputs["noise"]["jobs"]["noise"]}
    provenance = {"code_version": meta.get("code_version"), "environment": environment(), "started": meta.get("started"),
                  "wall_time_s": time.time() - float(meta.get("t0", time.time())), "config": meta.get("config"),
                  "reference_config": about["reference_config"], "plugin_settings": about["plugin_settings"]}
    identity = about["identity"]
    result = {
        "plugin": {k: identity[k] for k in ("target", "class", "name", "source", "source_sha256")},
        "model": about["model_label"], "dataset": meta.get("dataset"), "preset": meta.get("preset"),
        "reference_pipeline": about["reference_pipeline"], "reference_models": about["reference_models"],
        "reference_source": about["reference_source"], "metric": metric, "stores": stores,
        "verdict": verdicts[about["model_label"]], "verdicts": verdicts, "rule": _rule_text(),
        "provenance": provenance,
    }
    report_inputs = {"pipeline": AUDIT_PIPELINE, "preset": meta.get("preset"), "dataset": meta.get("dataset"),
                     "workdir": meta.get("workdir"), "provenance": provenance, "stores": stores, "restarts": [],
                     "manipulation": inputs["manipulate"]["jobs"]["manipulate"], "runs": plugin_runs + ref_runs,
                     "robustness": [], "linear_pca": None}
    write_json_atomic(ctx.job_dir / "audit.json", result)
    write_json_atomic(ctx.job_dir / "report_inputs.json", report_inputs)
    md = ctx.job_dir / "audit.md"
    md.write_text(format_audit(result))
    return {"audit": str(ctx.job_dir / "audit.json"), "markdown": str(md),
            "report_inputs": str(ctx.job_dir / "report_inputs.json"), "slug": about["slug"],
            "verdict": verdicts[about["model_label"]]["label"]}


# -- verdicts -----------------------------------------------------------------------------------------

def _rule_text() -> str:
    from probe.report.stats import verdict_rule_text

    return verdict_rule_text()


def _stats(values: list[float]) -> dict:
    import numpy as np

    a = np.asarray(values, dtype=np.float64)
    return {"n": int(len(a)), "mean": float(a.mean()) if len(a) else None,
            "std": float(a.std(ddof=1)) if len(a) > 1 else None, "values": [float(v) for v in a]}


def model_verdict(runs: list[dict], model: str, metric: str, *, seed: int = 0) -> dict:
    """The report's verdict (probe.report.stats.verdict) for one model on one metric, with the group
    statistics and the effect size Δ_mod (absolute and relative to mean(orig))."""
    from probe.report.inputs import values_by_group
    from probe.report.stats import verdict

    groups = values_by_group([r for r in runs if r["model"] == model], metric)
    orig, mod, noise = (groups.get((model, v), []) for v in VARIANTS)
    if not orig or not mod:
        return {"label": "inconclusive at n=0 seeds", "reason": f"no {metric} values for the orig or mod runs",
                "n": 0, "groups": {v: _stats(groups.get((model, v), [])) for v in VARIANTS}, "to_mod": None,
                "to_noise": None, "relative_change": None}
    out = verdict(orig, mod, noise or None, seed=seed)
    mean_orig = float(sum(orig) / len(orig))
    delta = out["to_mod"]["delta"]
    out["relative_change"] = delta / abs(mean_orig) if mean_orig and math.isfinite(delta) else None
    out["groups"] = {v: _stats(groups.get((model, v), [])) for v in VARIANTS}
    return _finite(out)


def _finite(obj):
    """NaN/inf (e.g. p of a constant group) -> None, so the audit files are strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "item"):  # numpy scalars
        return _finite(obj.item())
    return obj


def _f(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{digits}f}"


def _p(p) -> str:
    if p is None or not math.isfinite(p):
        return "–"
    return f"{p:.3g}"


def _group(g: dict) -> str:
    if not g["n"]:
        return "–"
    return f"{_f(g['mean'])} ± {_f(g['std'])}" if g["std"] is not None else _f(g["mean"])


def _effect(v: dict) -> str:
    c = v.get("to_mod")
    if not c:
        return "–"
    lo, hi = c["ci"]
    return f"{_f(c['delta'])} [{_f(lo)}, {_f(hi)}]"


def _relative(v: dict) -> str:
    r = v.get("relative_change")
    return "–" if r is None else f"{100 * r:+.0f}%"


def summary_line(result: dict) -> str:
    v = result["verdict"]
    c = v.get("to_mod") or {}
    seeds = v["groups"]["orig"]["n"], v["groups"]["mod"]["n"]
    return (f"verdict for {result['model']}: {v['label']} — {v['reason']}. "
            f"{_metric_label(result['metric'])} Δ_mod = {_f(c.get('delta'))} (95% CI [{_f((c.get('ci') or [None, None])[0])}, "
            f"{_f((c.get('ci') or [None, None])[1])}], {_relative(v)} of the original score), Welch p = {_p(c.get('p'))}, "
            f"n = {seeds[0]} orig / {seeds[1]} mod seeds")


def _metric_label(key: str) -> str:
    from probe.report.inputs import metric_label

    return metric_label(key)


def format_audit(result: dict) -> str:
    """Markdown (also what `probe audit` prints)."""
    p = result["plugin"]
    sha = (p["source_sha256"] or "")[:16] or "unknown"
    lines = [f"# Audit of plug-in `{result['model']}`", "",
             f"- plug-in: `{p['target']}` = `{p['class']}` (source `{p['source']}`, sha256 {sha}…)",
             f"- data: {result['dataset']}, preset {result['preset']}; stores from the reference pipeline "
             f"{result['reference_pipeline']} (mod ε = {result['stores']['mod'].get('epsilon')}, "
             f"noise ε = {result['stores']['noise'].get('epsilon')})",
             f"- reference models: {', '.join(result['reference_models'])} (from {result['reference_source']})",
             f"- primary metric: {_metric_label(result['metric'])}", "",
             f"**{summary_line(result)}**", "",
             "| model | n | orig | mod | noise | Δ_mod [95% CI] | Δ_mod / orig | p (Welch) | Δ_noise | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    order = [result["model"]] + [m for m in result["reference_models"] if m != result["model"]]
    for model in order:
        v = result["verdicts"][model]
        g = v["groups"]
        noise = v.get("to_noise") or {}
        name = f"**{model}**" if model == result["model"] else model
        lines.append(f"| {name} | {v['n']} | {_group(g['orig'])} | {_group(g['mod'])} | {_group(g['noise'])} | "
                     f"{_effect(v)} | {_relative(v)} | {_p((v.get('to_mod') or {}).get('p'))} | "
                     f"{_f(noise.get('delta'))} | {v['label']} |")
    lines += ["", f"Rule: {result['rule']}", ""]
    return "\n".join(lines)


# -- running ------------------------------------------------------------------------------------------

def run_audit(target: str, *, workdir, dataset: str = "dsprites", preset: str = "smoke", seeds: int | None = None,
              overrides: dict | None = None, scheduler: str | None = None, workers: int | None = None,
              progress: bool = True) -> dict:
    """Run (or resume) the audit of plug-in ``target`` in ``workdir``; returns the audit result
    (``audit.json``'s content) plus ``paths`` of the files published to ``WORKDIR/audits/<slug>/``.
    A failure in a plug-in stage raises UserError naming the plug-in; finished work is kept."""
    from probe.pipeline import run_pipeline

    over = dict(overrides or {})
    over.update({"plugin.model": target, "pipeline.dataset": dataset})
    if seeds is not None:
        over["plugin.seeds"] = seeds
    workdir = Path(workdir).resolve()
    try:
        run = run_pipeline(AUDIT_PIPELINE, workdir=workdir, preset=preset, overrides=over, scheduler=scheduler,
                           workers=workers, progress=progress)
    except StageFailed as exc:
        if exc.stage not in PLUGIN_STAGES:
            raise
        err = exc.error
        problem = str(err) if isinstance(err, UserError) else f"plug-in {target}: {type(err).__name__}: {err}"
        if not problem.startswith("plug-in"):
            problem = f"plug-in {target}: {problem}"
        raise UserError(f"{problem}\n(stage {exc.stage!r}, job {exc.job!r}; log: {exc.log})\nThe stores, the reference "
                        f"runs and every finished stage and job are kept in {workdir}; fix the plug-in and run the "
                        "audit again.") from None
    job = next(iter(run.results["audit"]["jobs"].values()))
    return publish(workdir, job)


def publish(workdir: Path, job: dict) -> dict:
    """Copy the audit stage's files to ``WORKDIR/audits/<slug>/`` (also after a cached run: the
    latest audit of a plug-in is the one published)."""
    from probe.provenance import atomic_path

    out = Path(workdir) / AUDITS_DIR / job["slug"]
    out.mkdir(parents=True, exist_ok=True)  # may also hold a `probe report` of it: files are replaced one by one
    for key, name in (("report_inputs", "report_inputs.json"), ("markdown", "audit.md"), ("audit", "audit.json")):
        with atomic_path(out / name, overwrite=True) as tmp:
            shutil.copyfile(job[key], tmp)
    result = json.loads((out / "audit.json").read_text())
    result["paths"] = {"json": str(out / "audit.json"), "markdown": str(out / "audit.md"),
                       "report_inputs": str(out / "report_inputs.json")}
    return result
