"""Report section "Retrained on the random m": models retrained on the frozen random-ψ control's m(w) (variant
``mod-random``, stage apply-random) beside the same models on mod (issue 24).

The verdict asks whether a model loses its score on mod but not on noise (Zietlow et al. §5). Uniform noise is not
a function of the factors; the learned m is, and so is the random ψ's m — a saturated m(w) of the same budget ε that
was never trained to favour the entangled alignment. If *learning* m is what moves a model, it scores lower on mod
than on mod-random; if it scores as low on both, the verdict's drop is what any saturated m(w) of this budget does
(still a reliance on the images' local structure, but not evidence for the paper's mechanism — an m that makes the
entangled alignment cheaper). Measured where this section was added: two β-VAE seeds on the closer-camera
Shapes3D-like store lost their alignment on the learned m (MIG 0.010 / 0.070 from 0.323 / 0.299), and one of the two
as far on the random m (0.257 / 0.015).

The reading is stated per model from a two-sided Welch test of mod against mod-random at the verdict's α, with the
smallest difference these seeds detect; it is not part of the verdict rule (the paper has no such control). Pure
over the report inputs' ``random_m`` (runs, store, factor capture) and ``runs``.
"""

from __future__ import annotations

import math

from probe.data.variants import RANDOM_M
from probe.report.capture import summarise_capture
from probe.report.cells import cell, change, fmt, fmt_p
from probe.report.inputs import metric_label, model_order, values_by_group
from probe.report.stats import ALPHA, compare, detectable_drop

COMPARED = ("orig", "mod", RANDOM_M)


def reading(mod_minus_random: dict, detectable: float, alpha: float = ALPHA) -> str:
    """What the test of mod against mod-random says, in words (``mod_minus_random``: ``stats.compare(random, mod)``)."""
    p, delta = mod_minus_random["p"], mod_minus_random["delta"]
    if math.isnan(p):
        return "not tested (fewer than 2 seeds on mod or mod-random)"
    if p < alpha:
        return ("lower on mod than on the random m: learning m moved it beyond what a random m of the same budget does"
                if delta < 0 else
                "higher on mod than on the random m: a random m of the same budget moved it more than the learned one")
    return (f"no difference between the learned and the random m detected (p {fmt_p(p)}); a difference of "
            f"{fmt(detectable, 2)} would be found with probability 0.8 at these seeds")


def random_m_section(builder, doc, inputs: dict, *, primary: str, seed: int = 0) -> dict | None:
    """Write the section for one workdir's inputs; returns its numbers (summary.json's ``random_m``), or None when no
    model was retrained on the random m."""
    random_m = inputs.get("random_m") or {}
    random_runs = list(random_m.get("runs") or [])
    if not random_runs:
        return None
    label, metric = builder._label(inputs), metric_label(primary)
    epsilon = (random_m.get("store") or {}).get("epsilon")
    doc.heading(f"Retrained on the random m: is it learning m that moves the models? ({label})")
    control = inputs.get("manipulation_random") or {}
    full = control.get("full_budget", (control.get("config") or {}).get("normalise_linf", True))
    kind = ("a saturated m(w) of the same budget (each image's m rescaled to ‖m‖∞ = 1)" if full else
            "the random m as initialised, not rescaled (it may spend little of the budget)")
    doc.para(f"The same models, seeds and settings as on mod, retrained on the original store with the frozen random-ψ "
             f"control's m(w) applied at the same ε ({fmt(epsilon, 3)}; variant {RANDOM_M}): {kind}, "
             "never trained to make the entangled alignment cheaper. If learning m is what "
             "moves a model, it scores lower on mod than here; if it scores as low on both, the drop on mod is what "
             "any m(w) of this budget does — a reliance on local structure, but not evidence that the learned "
             "manipulation's target is what the model follows. Not part of the verdict rule (the paper has no such "
             f"control); the reading is a two-sided Welch test of mod against {RANDOM_M} at α = {ALPHA}.")
    groups = values_by_group(list(inputs.get("runs") or []) + random_runs, primary)
    models = [m for m in model_order(random_runs + list(inputs.get("runs") or []))
              if (m, RANDOM_M) in groups]
    rows, numbers = [], {}
    for model in models:
        orig, mod, rnd = (groups.get((model, v), []) for v in COMPARED)
        to_mod = compare(orig, mod, seed=seed) if orig and mod else None
        to_random = compare(orig, rnd, seed=seed) if orig and rnd else None
        mod_minus_random = compare(rnd, mod, seed=seed) if mod and rnd else None
        detectable = detectable_drop(rnd, mod) if mod and rnd else math.nan
        said = reading(mod_minus_random, detectable) if mod_minus_random else "no runs on mod to compare with"
        rows.append([model, cell(orig), cell(mod), cell(rnd), change(to_mod), change(to_random),
                     change(mod_minus_random), fmt(detectable, 3), said])
        numbers[model] = {"orig": orig, "mod": mod, RANDOM_M: rnd, "to_mod": to_mod, "to_random_m": to_random,
                          "mod_minus_random_m": mod_minus_random, "detectable_difference": detectable, "reading": said}
    if not rows:
        doc.para(f"The runs on the random m hold no {metric}.")
        return {"epsilon": epsilon, "models": {}}
    doc.table(["model", f"{metric} orig", "mod", RANDOM_M, "Δ orig→mod [95% CI], p", f"Δ orig→{RANDOM_M} [95% CI], p",
               f"mod − {RANDOM_M} [95% CI], p", "smallest detectable difference", "reading"], rows)
    gaps = _gap_rows(builder, inputs, random_m, models)
    if gaps:
        names = gaps["factor_names"]
        doc.para("Per factor (mean MIG gap over seeds, seeds with gap ≥ 0.2 / runs, and the seeds whose second-best "
                 "latent also holds ≥ 0.2 of it: split; the capture section's measures), "
                 f"orig and mod beside {RANDOM_M}:")
        doc.table(["model", "variant"] + names, gaps["rows"])
    return {"epsilon": epsilon, "store": random_m.get("store"), "models": numbers}


def _gap_rows(builder, inputs: dict, random_m: dict, models: list[str]) -> dict | None:
    """Mean per-factor gaps of orig, mod (the main capture) and mod-random (its own capture) per model."""
    capture = random_m.get("factor_capture") or {}
    random_entries = [e for e in capture.get("runs") or [] if "error" not in e]
    if not random_entries:
        return None
    main = builder.capture.get(builder._label(inputs)) or {}  # the capture section's reading of the main runs
    entries = [e for e in main.get("runs") or [] if "error" not in e] + random_entries
    groups = summarise_capture(entries)
    names = capture.get("factor_names") or [f"factor {k}" for k in range(len(random_entries[0]["gap"]))]
    rows = [[model, variant] + [f"{fmt(m)} ({c}/{g['n']}, split {k})" if m is not None else "—"
                                for m, c, k in zip(g["mean_gap"], g["encoding"], g["split"])]
            for model in models for variant in COMPARED for g in [groups.get((model, variant))] if g]
    return {"factor_names": list(names), "rows": rows}
