"""Auditing a new method: a plug-in model next to the reference models of a modify-* pipeline (issue 9).

    store → plugin-check → restarts → select → manipulate → apply → noise → plugin-train → retrain
          → evaluate → plugin-evaluate → audit          (probe.pipeline.graph.AUDIT)

This module holds what the audit's stages need besides the stages themselves: the plug-in's
identity, the reference config (``audit_config``, the graph's ``prepare``), the checks before any
work, and the verdict and its Markdown. The stages store … evaluate are the modify pipeline's stage
modules built from the reference pipeline's own config (``probe/pipeline/definitions/modify-<dataset>.toml`` at the same
preset, resolved exactly as ``probe pipeline run`` resolves it), so their digests and job keys are the
ones a modify run computes:
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
plug-in stage becomes a UserError naming the plug-in (``probe.pipeline.audit_cli.run_audit``; exit 2),
and the engine keeps every finished stage and job.

The verdict is ``probe.report.stats.verdict`` (Welch t-test, bootstrap CI, the report's rule) on the
primary metric per seed, for the plug-in and each reference model.
"""

from __future__ import annotations

import copy
import inspect
import math
import re
from pathlib import Path
from typing import Callable

from probe.errors import UserError
from probe.pipeline.config import flatten, resolve
from probe.pipeline.engine import Stage, stage_digests
from probe.pipeline.stages import (apply, apply_random, evaluate, manipulate, manipulate_random, noise, restarts,
                                   retrain, select, store)
from probe.pipeline.variants import RANDOM_M, VARIANTS
from probe.pipeline.workdir import STAGE_FILE, final_dir

AUDIT_PIPELINE = "audit"
# the modify pipeline's stages an audit shares with it (same configs, digests and job keys: a modify run's are reused)
# the reference pipeline's stages up to evaluate (manipulate-random and apply-random: a reference model may train on
# mod-random, the random-ψ control's m, as the dSprites smoke preset's β-VAE does; they run no job otherwise)
REFERENCE_STAGES = (store, restarts, select, manipulate, manipulate_random, apply, apply_random, noise, retrain,
                    evaluate)
AUDITS_DIR = "audits"
AUDIT_TABLE = "audit"   # what audit_config adds to the reference config for the plug-in's stages (audit_table)


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


def plugin_error(label: str, exc: BaseException) -> UserError:
    """``exc`` as a UserError that names the plug-in (once)."""
    text = str(exc)
    return UserError(text if text.startswith("plug-in") else f"plug-in {label}: {text}")


# -- config ------------------------------------------------------------------------------------------

def reference_configs(config: dict) -> tuple[str, dict, dict]:
    """(reference pipeline name, its config as `probe pipeline run` resolves it, the config narrowed to
    ``reference.models``)."""
    dataset = config["pipeline"]["dataset"]
    pipelines = config["reference"]["pipelines"]
    if dataset not in pipelines:
        raise UserError(f"--dataset {dataset!r}: no reference pipeline for it (known: {', '.join(pipelines)})")
    name = pipelines[dataset]
    full = resolve(name, config["pipeline"]["preset"], flatten(config["reference"].get("overrides") or {}))
    narrowed = copy.deepcopy(full)
    models = list(config["reference"].get("models") or [])
    if models:
        _narrow(narrowed, models)
    return name, full, narrowed


def _narrow(config: dict, models: list[str]) -> None:
    """The reference config with ``models`` only, trained on what the verdict reads: the reference pipeline's runs on
    mod-random (reported beside mod, never in a verdict) are left out, and the random-ψ control with them when nothing
    else needs it. The shared stages (store … noise) keep the reference pipeline's digests."""
    rt = retrain.settings(config)
    rt["models"] = models
    rt["variants"] = [v for v in rt["variants"] if v != RANDOM_M]
    rt["model_variants"] = {m: [v for v in vs if v != RANDOM_M] for m, vs in (rt.get("model_variants") or {}).items()}
    if manipulate_random.NAME in config and not apply_random.wanted(config):
        config[manipulate_random.NAME]["enabled"] = False


def choose_reference(full: dict, narrowed: dict, workdir, reuse_complete: bool,
                     reference_stages: Callable[[dict, dict], list[Stage]]) -> tuple[dict, str]:
    """The narrowed reference config, unless the full one's retrain stage is complete in ``workdir``
    and holds every narrowed model. ``reference_stages(config, meta)`` builds the reference pipeline's
    stages. Returns (config, where the reference runs come from)."""
    if narrowed == full:
        return full, "the reference pipeline's model list"
    if reuse_complete and workdir is not None:
        names = {m.NAME for m in REFERENCE_STAGES}
        stages = [s for s in reference_stages(full, {}) if s.name in names]
        digest = stage_digests(stages)[retrain.NAME]
        complete = (final_dir(Path(workdir), retrain.NAME, digest) / STAGE_FILE).exists()
        if complete and set(retrain.settings(narrowed)["models"]) <= set(retrain.settings(full)["models"]):
            return full, "the complete reference pipeline run in the workdir"
    return narrowed, "the audit preset's reference.models"


def plugin_settings(config: dict, reference: dict) -> dict:
    pc, rt = config["plugin"], retrain.settings(reference)
    return {"model_config": dict(pc.get("model_config") or {}), "dataset": config["pipeline"]["dataset"],
            "train": {**rt["train"], **(pc.get("train") or {})},
            "seeds": int(pc["seeds"]) or int(rt["seeds"]), "variants": list(pc["variants"]),
            "first_seed": int(rt.get("first_seed", 0))}


def validate_audit(config: dict, *, deep: bool = True, validate_reference: Callable[..., None]) -> None:
    """Everything that needs no data: the plug-in imports and has the protocol's methods, its
    hyperparameters and train settings exist, the reference pipeline resolves and validates with
    ``validate_reference(config, deep=)`` (the modify graph's checks; ``deep``: its models too; the plug-in is
    imported either way)."""
    from probe.models.base import resolve_config
    from probe.models.registry import get_model_class
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
    validate_reference(narrowed, deep=deep)
    settings = plugin_settings(config, narrowed)
    cls = get_model_class(identity["target"])
    try:
        resolve_config(cls, settings["dataset"], settings["model_config"])
        resolve_train_config(cls, settings["train"])
    except UserError as exc:
        raise plugin_error(identity["target"], exc) from None


def audit_config(config: dict, meta: dict, reference_stages: Callable[[dict, dict], list[Stage]]) -> dict:
    """What the audit's stage builders read: the reference config (``choose_reference``; the shared stages
    read it as the reference pipeline would) plus an ``audit`` table for the plug-in's stages. ``meta["workdir"]``,
    when given, is looked at for a complete reference run."""
    identity = plugin_identity(config["plugin"]["model"])
    label, slug = identity["target"], plugin_slug(identity["target"])
    ref_name, full, narrowed = reference_configs(config)
    reference, source = choose_reference(full, narrowed, meta.get("workdir"), config["reference"]["reuse_complete"],
                                         reference_stages)
    settings = plugin_settings(config, reference)
    reference_models = list(retrain.settings(reference)["models"])
    model_label = label if label not in reference_models else f"{label} (plug-in)"
    return {**reference, AUDIT_TABLE: {
        "label": label, "slug": slug, "model_label": model_label, "plugin": hashed_identity(identity),
        "settings": settings, "check_batch": int(config["plugin"]["check_batch"]),
        "metric": config["verdict"]["metric"], "seed": int(config["verdict"]["seed"]),
        "about": {"reference_pipeline": ref_name, "reference_models": reference_models, "reference_source": source,
                  "identity": identity, "model_label": model_label, "slug": slug, "reference_config": reference,
                  "plugin_settings": settings}}}


def audit_table(config: dict) -> dict:
    """The plug-in's table of a prepared audit config (``audit_config``): label, slug, identity, settings, ..."""
    return config[AUDIT_TABLE]


# -- verdicts -----------------------------------------------------------------------------------------

def rule_text() -> str:
    from probe.report.gates import GATE_RULE
    from probe.report.stats import verdict_rule_text

    return verdict_rule_text() + " " + GATE_RULE


def _stats(values: list[float]) -> dict:
    import numpy as np

    a = np.asarray(values, dtype=np.float64)
    return {"n": int(len(a)), "mean": float(a.mean()) if len(a) else None,
            "std": float(a.std(ddof=1)) if len(a) > 1 else None, "values": [float(v) for v in a]}


def model_verdict(runs: list[dict], model: str, metric: str, *, seed: int = 0, num_factors: int | None = None) -> dict:
    """The report's verdict (probe.report.stats.verdict) for one model on one metric, with the group
    statistics and the effect size Δ_mod (absolute and relative to mean(orig)). The report's validity gates
    (probe.report.gates) come first: a model whose orig runs keep fewer active latents than the ``num_factors``
    factors, or that noise alone breaks, gets the gate's label instead of a verdict. (The audit does not encode its
    runs for the per-factor capture, so its regime gate reads the active latents only, and a model without a
    posterior variance is not regime-gated here.)"""
    from probe.report.gates import failed_gate, noise_gate, regime_gate
    from probe.report.inputs import active_latent_count, values_by_group
    from probe.report.stats import verdict

    groups = values_by_group([r for r in runs if r["model"] == model], metric)
    orig, mod, noise = (groups.get((model, v), []) for v in VARIANTS)
    if not orig or not mod:
        return {"label": "inconclusive at n=0 seeds", "reason": f"no {metric} values for the orig or mod runs",
                "n": 0, "groups": {v: _stats(groups.get((model, v), [])) for v in VARIANTS}, "to_mod": None,
                "to_noise": None, "relative_change": None}
    out = verdict(orig, mod, noise or None, seed=seed)
    mine = [r for r in runs if r["model"] == model]
    gates = [regime_gate(num_factors, active=[active_latent_count(r) for r in mine if r["variant"] == "orig"]),
             noise_gate(orig, noise, [active_latent_count(r) for r in mine if r["variant"] == "noise"])]
    out["gates"] = gates
    stopped = failed_gate(gates)
    if stopped is not None:
        out.update(stopped)
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
