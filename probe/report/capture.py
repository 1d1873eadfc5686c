"""Which factors each retrained run encodes: the per-factor terms behind MIG (``probe.metrics.mig.factor_capture``).

Two runs with equal MIG can encode different factors; a β-VAE with two active latents for six factors has a MIG
capped near 2/6 whatever else happens. The pipeline's report stage encodes MIG's own sample of every retrained run's
training store and records, per factor, the normalised MI gap, the latent carrying it and the best normalised MI
(``report_inputs["factor_capture"]``, probe.pipeline.report_data). Here: reading that record, counting the encoded
factors (``gates.CAPTURE_THRESHOLD``), comparing the mean of the gaps with the MIG the pipeline recorded (a check that
the sample is the same), and summarising per model × variant. Pure over the inputs.
"""

from __future__ import annotations

import numpy as np

from probe.report.gates import CAPTURE_THRESHOLD, encoded_factor_count
from probe.report.inputs import metric_value
from probe.report.schema import CAPTURE_FIELDS, CAPTURE_RUN_FIELDS, CAPTURE_SAMPLE_FIELDS, missing_section

# the MIG the per-factor gaps add up to: factor_capture is MIG's decomposition, whatever the primary metric is
CAPTURED_METRIC = "mig"


def capture_of(inputs: dict) -> dict:
    """{"runs": [{model, variant, seed, run_dir, gap, latent, best_nmi, mig, active, mig_recorded, encoded} or
    {model, variant, seed, run_dir, error}], "factor_names", "sample", "device", "wall_time_s"} of one workdir, or
    {"unavailable": why}."""
    if not inputs["runs"]:
        return {"unavailable": "the inputs hold no retrained runs"}
    recorded = inputs.get("factor_capture")
    if not recorded:
        return {"unavailable": missing_section("factor_capture")}
    if "unavailable" in recorded:
        return {"unavailable": recorded["unavailable"]}
    metrics = {(r["model"], r["variant"], r.get("seed")): r.get("metrics") for r in inputs["runs"]}
    entries = []
    for e in recorded["runs"]:
        entry = {k: e.get(k) for k in CAPTURE_RUN_FIELDS}
        if "error" in e:
            entry["error"] = e["error"]
        else:
            entry.update({k: e.get(k) for k in CAPTURE_FIELDS})
            entry["mig_recorded"] = metric_value(metrics.get((e["model"], e["variant"], e.get("seed"))),
                                                 CAPTURED_METRIC)
            entry["encoded"] = encoded_factor_count(e["best_nmi"])
        entries.append(entry)
    sample = {k: recorded["sample"][k] for k in CAPTURE_SAMPLE_FIELDS}
    return {"runs": entries, "factor_names": recorded.get("factor_names"), "sample": sample,
            "device": recorded.get("device"), "wall_time_s": recorded.get("wall_time_s")}


def summarise_capture(entries: list[dict], threshold: float = CAPTURE_THRESHOLD) -> dict:
    """{(model, variant): {"mean_gap": [per factor, None where no run measured it], "encoding": [seeds with gap ≥
    threshold, per factor], "split": [seeds whose second-best latent also holds ≥ threshold of the factor (normalised
    MI best − gap), per factor], "n": runs}} over the entries without an error."""
    groups: dict = {}
    for e in entries:
        if "error" not in e:
            best = e.get("best_nmi") or [None] * len(e["gap"])
            groups.setdefault((e["model"], e["variant"]), []).append(list(zip(e["gap"], best)))
    out = {}
    for key, runs in groups.items():
        columns = list(zip(*runs))
        out[key] = {"mean_gap": [float(np.mean([g for g, _ in c if g is not None]))
                                 if any(g is not None for g, _ in c) else None for c in columns],
                    "encoding": [sum(1 for g, _ in c if g is not None and g >= threshold) for c in columns],
                    "split": [sum(1 for g, b in c if g is not None and b is not None and b - g >= threshold)
                              for c in columns],
                    "n": len(runs)}
    return out


def encoded_by_run(capture: dict | None, model: str, variant: str = "orig") -> list[int]:
    """Encoded-factor counts (best normalised MI ≥ threshold) of one model's runs on one variant."""
    return [e["encoded"] for e in (capture or {}).get("runs", [])
            if e["model"] == model and e["variant"] == variant and "error" not in e]


def best_nmi_on_orig(entries: list[dict]) -> dict[str, list[float | None]]:
    """{model: per factor, the highest best normalised MI over its orig runs} (None where no run measured it)."""
    per_model: dict[str, list] = {}
    for e in entries:
        if "error" not in e and e["variant"] == "orig" and e.get("best_nmi"):
            per_model.setdefault(e["model"], []).append(e["best_nmi"])
    return {model: [max((v for v in column if v is not None), default=None) for column in zip(*rows)]
            for model, rows in per_model.items()}

