"""Pooling the runs of several workdirs of one experiment into one column group of the report.

Why: the verdict's power grows with seeds (the paper reports 10 per setting; the cpu preset's 8 hours hold 5). More
seeds are trained later, or on another machine, as a second pipeline run of the same preset with
``--set retrain.first_seed=...`` (and, if only some models need them, ``retrain.models``) in a workdir that starts as a
copy of the first one's upstream stages, so that stores, restarts and manipulation are the first run's, cached.
``probe report A B`` then reads both and reports their runs as one sample per model × variant.

Two workdirs are one experiment when they hold the same data: every store (orig, mod, noise and, where both wrote it,
the random-ψ control's mod-random) has the same digest. Then everything else that decides a score must match as well —
pipeline, preset, code (source digest), the recorded ``setting`` (its per-model steps only for the models both
trained), the recorded config less the keys that choose which runs were retrained (``schema.RUN_CHOICE_KEYS``) and less
the per-model entries (``schema.PER_MODEL_TABLES``) of models that only one of the two trained, the MIG sample of the
factor capture — and no run (model, variant, seed) may be in both; otherwise the report refuses, naming the
difference, because a pooled sample of runs trained differently would measure the difference. A workdir joining a
group is compared with every workdir already in it, so two parts that add the same model (which the first part never
trained) must agree on its steps and settings too. Workdirs with other stores stay column groups of their own, as
before.

Pure over the loaded inputs (``probe.report.schema.load_inputs``): run paths are already absolute there, so a pooled
run's files resolve wherever its own workdir is.
"""

from __future__ import annotations

from probe.errors import UserError
from probe.report.inputs import retrained_runs
from probe.report.schema import (SETTING_PARTS, config_for_models, config_less_run_choice, recorded_code_version,
                                 recorded_config, setting)

# the loaded inputs a pooled group keeps, in the order given: the provenance section shows each one
PARTS = "_parts"


def store_digests(inputs: dict) -> dict:
    """{variant: store digest} of the stores every workdir trained on (orig, mod, noise)."""
    return {variant: (store or {}).get("digest") for variant, store in (inputs.get("stores") or {}).items()}


def random_store_digest(inputs: dict) -> str | None:
    """The digest of the random-ψ control's store (variant mod-random), written only where a model trained on it."""
    return ((inputs.get("random_m") or {}).get("store") or {}).get("digest")


def same_data(a: dict, b: dict) -> bool:
    """Whether two workdirs trained on the same stores: equal digests for every variant, none missing. The random-ψ
    control's store is compared where both wrote it: a workdir that retrained no model on it (its stage apply-random
    writes the store only then, e.g. a second part adding other models) has none, and its other stores still say
    whether it is the same experiment."""
    da, db = store_digests(a), store_digests(b)
    ra, rb = random_store_digest(a), random_store_digest(b)
    if ra and rb and ra != rb:
        return False
    return bool(da) and da == db and all(da.values()) and a.get("dataset") == b.get("dataset")


def differences(a: dict, b: dict) -> list[str]:
    """What keeps two workdirs on the same stores from being one experiment (empty: they are)."""
    out = []
    for key in ("pipeline", "preset", "schema"):
        if a.get(key) != b.get(key):
            out.append(f"{key} {a.get(key)!r} vs {b.get(key)!r}")
    source = [recorded_code_version(i).get("source_digest") for i in (a, b)]
    if source[0] != source[1]:
        out.append(f"code (source digest {str(source[0])[:16]} vs {str(source[1])[:16]})")
    shared = _trained_models(a) & _trained_models(b)  # a model's own steps and settings matter where both trained it
    for part in SETTING_PARTS:
        va, vb = setting(a, part), setting(b, part)
        if part == "retraining" and isinstance(va, dict) and isinstance(vb, dict):
            va, vb = _model_steps_of(va, shared), _model_steps_of(vb, shared)
        if va != vb:
            out.append(f"setting.{part} ({va} vs {vb})")
    ca, cb = (config_for_models(config_less_run_choice(recorded_config(i)), shared) for i in (a, b))
    out += [f"config {path} ({va!r} vs {vb!r})" for path, va, vb in _config_differences(ca, cb)]
    sa, sb = (((i.get("factor_capture") or {}).get("sample")) for i in (a, b))
    if sa != sb:
        out.append(f"the factor capture's MIG sample ({sa} vs {sb})")
    return out


def _trained_models(inputs: dict) -> set:
    """The models with a retrained or robustness run in one workdir's inputs."""
    return {run["model"] for run in _retrained(inputs)}


def _model_steps_of(retraining: dict, models: set) -> dict:
    """``setting.retraining`` with ``model_steps`` cut to ``models``: a workdir records steps for the models it
    retrained and for those the preset gives steps of their own, and only the steps of models both workdirs retrained
    decide a pooled score."""
    steps = retraining.get("model_steps") or {}
    return {**retraining, "model_steps": {m: s for m, s in steps.items() if m in models}}


def _config_differences(a, b, path: str = "") -> list[tuple]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in sorted(set(a) | set(b), key=str)
                for d in _config_differences(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))]
    return [] if a == b else [(path, a, b)]


def run_identity(run: dict) -> tuple:
    return run["model"], run["variant"], run.get("seed"), run.get("scale")


def _retrained(inputs: dict) -> list[dict]:
    return retrained_runs(inputs) + list(inputs["robustness"])


def _with_all_runs(section: dict, sections: list) -> dict:
    """``section`` (a part's record with a ``"runs"`` list) holding the runs of every part's same section."""
    return {**section, "runs": [run for other in sections for run in ((other or {}).get("runs") or [])]}


def merge(group: list[dict]) -> dict:
    """One inputs dict holding the runs of every workdir in ``group`` (one experiment, ``differences`` empty for
    each pair with the first): the first's stores, restarts, manipulation and analyses, every part's runs, factor
    capture and runs on the random-ψ control's m; ``PARTS`` lists the parts."""
    first = group[0]
    seen: dict[tuple, str] = {}
    for inputs in group:
        for run in _retrained(inputs):
            key = run_identity(run)
            if key in seen:
                model, variant, seed, scale = key
                raise UserError(f"{model} on {variant}, seed {seed}{'' if scale is None else f', scale {scale}'} is "
                                f"in both {seen[key]} and {inputs['_path']}: pooled workdirs must hold different "
                                "seeds (train the second with `--set retrain.first_seed=...`)")
            seen[key] = inputs["_path"]
    merged = {**first, "runs": [r for i in group for r in i["runs"]],
              "robustness": [r for i in group for r in i["robustness"]], PARTS: list(group)}
    if first.get("factor_capture") and "runs" in first["factor_capture"]:
        merged["factor_capture"] = _with_all_runs(first["factor_capture"], [i.get("factor_capture") for i in group])
    random_ms = [i["random_m"] for i in group if i.get("random_m")]
    if random_ms:  # the first part that retrained on the random-ψ control's m gives its store (equal where several did)
        merged["random_m"] = _with_all_runs(random_ms[0], random_ms)
        if (random_ms[0].get("factor_capture") or {}).get("runs") is not None:
            merged["random_m"]["factor_capture"] = _with_all_runs(
                random_ms[0]["factor_capture"], [r.get("factor_capture") for r in random_ms])
    return merged


def pool(all_inputs: list[dict]) -> list[dict]:
    """The report's column groups: workdirs on the same stores merged (``merge``), the others as given, in the order
    of their first workdir. UserError when workdirs on the same stores differ in anything else (``differences``)."""
    groups: list[list[dict]] = []
    for inputs in all_inputs:
        for group in groups:
            if same_data(group[0], inputs):
                # every member, not the first alone: what two later parts share and the first lacks (a model it
                # did not train, that model's steps and settings) is compared between them
                for member in group:
                    found = differences(member, inputs)
                    if found:
                        raise UserError(f"{member['_path']} and {inputs['_path']} trained on the same stores but are "
                                        "not one experiment, so their runs cannot be pooled: " + "; ".join(found)
                                        + ". Report them one at a time.")
                group.append(inputs)
                break
        else:
            groups.append([inputs])
    return [merge(group) if len(group) > 1 else group[0] for group in groups]


def pooled_legs(inputs: dict) -> list[dict]:
    """The legs that computed the parts of one column group, each once (parts share the legs that computed their
    common stages: a second workdir copied from the first lists the first's legs as well), oldest first."""
    legs: dict = {}
    for part in parts(inputs):
        for leg in (part.get("provenance") or {}).get("legs") or []:
            # a part records a leg's wall time as it stood when that part's report stage ran: keep the longest
            seen = legs.get(leg.get("started"))
            if seen is None or float(leg.get("wall_time_s") or 0) > float(seen.get("wall_time_s") or 0):
                legs[leg.get("started")] = leg
    return [legs[k] for k in sorted(legs, key=str)]


def parts(inputs: dict) -> list[dict]:
    """The workdirs behind one column group: the pooled parts, or the inputs itself."""
    return inputs.get(PARTS) or [inputs]
