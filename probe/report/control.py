"""The positive-control section of a control pipeline's report (modify-control.toml, docs/notes/control.md).

A measuring instrument is validated on a case whose answer is known. Three levels, each with what must hold:

* **L1, plumbing.** Models retrained on a store rendered from the factors rotated before rendering (variant
  ``rotated``). The rotation is a known entangling transformation of the images' preferred axes, so the β-VAE must
  read "relies on local structure" by the same verdict rule (p < 0.05) as the main table. If not, the retraining,
  evaluation or verdict code is wrong, and nothing else in the report can be trusted.
* **L2, mechanism.** The learned manipulation (appendix B) against a constructed entangled partner (the disentangled
  restart with its latent space rotated). Expected: the β-VAE drops by at least the paper's smallest VAE drop
  (``PAPER_SMALLEST_DROP``, relative), its noise runs stay within ``NOISE_TOLERANCE`` of orig, it moves towards the
  partner in the alignment diagnostic, and the AE and PCL do not read "relies". If L1 holds and L2 does not, the
  manipulation is at fault; the section lists the manipulation's own measurements beside the criteria.
* **L3, dose–response.** The same m(w) at ε × {0, 0.5, 1, 2}: the β-VAE's score against dose, as a figure.

Pure over the report inputs (``inputs["control"]``, the runs, the manipulation record) and the verdict labels the
main table gave; the verdict rule itself is ``probe.report.stats.verdict``.
"""

from __future__ import annotations

import math

import numpy as np

from probe.data.variants import dose_scale
from probe.report import figures as fig
from probe.report.inputs import alignment_value, metric_label, metric_value
from probe.report.stats import verdict

# Table 1 of Zietlow et al. 2021: the smallest relative drop orig → mod of a VAE-based model, FactorVAE on dSprites
# (0.27 → 0.20, −26 %); the bar for L2.
PAPER_SMALLEST_DROP = 0.26
# §5.2: noise "leads to very little effect on Shapes3D"; the control asks noise to stay within 0.1 (absolute) of orig.
NOISE_TOLERANCE = 0.1
RELIES = "relies on local structure"
CONTROL_MODEL = "beta-vae"            # the model the control's expectations are about
NON_VARIATIONAL = ("ae", "pcl")      # expected not to rely (Table 1: AE is the random baseline, PCL holds)


def _values(runs, model, variant, primary):
    """{seed: value} of ``model`` on ``variant``."""
    return {r["seed"]: v for r in runs if r["model"] == model and r["variant"] == variant
            for v in [metric_value(r.get("metrics"), primary)] if v is not None}


def _mean(values) -> float | None:
    return float(np.mean(list(values))) if values else None


def _fmt(x, digits: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _cell(values) -> str:
    vals = list(values)
    if not vals:
        return "—"
    if len(vals) == 1:
        return f"{vals[0]:.3f} (n=1)"
    return f"{np.mean(vals):.3f} ± {np.std(vals, ddof=1):.3f} (n={len(vals)})"


def control_section(doc, inputs: dict, *, primary: str, verdict_labels: dict, figure_path, seed: int = 0,
                    smoke: bool = False) -> dict:
    """Write the L1/L2/L3 section into ``doc``; returns its numbers for summary.json. ``verdict_labels``: model ->
    the main table's label (orig/mod/noise); ``figure_path(name)``: where a figure goes."""
    control = inputs.get("control") or {}
    runs = list(inputs.get("runs") or []) + list(control.get("runs") or [])
    label = metric_label(primary)
    summary: dict = {"primary_metric": primary}
    doc.heading("Positive control: does the instrument see a known effect?")
    doc.para("This dataset has a known answer (docs/notes/control.md). Three levels are checked, in order; a level "
             "that fails says which part of the instrument is at fault."
             + (" **Smoke run: the checks below are computed for the wiring only and mean nothing.**" if smoke else ""))
    orig = _values(runs, CONTROL_MODEL, "orig", primary)
    noise = _values(runs, CONTROL_MODEL, "noise", primary)
    summary["L1"] = _level1(doc, control, runs, primary, label, orig, noise, seed)
    summary["L2"] = _level2(doc, inputs, runs, primary, label, orig, noise, verdict_labels)
    summary["L3"] = _level3(doc, control, runs, primary, label, orig, figure_path)
    return summary


def _level1(doc, control, runs, primary, label, orig, noise, seed) -> dict:
    rotation = ((control.get("stores") or {}).get("rotated") or {}).get("rotation_deg")
    doc.heading("L1, plumbing: the factors rotated before rendering", level=3)
    doc.para(f"Each model is retrained on a store rendered from the generative factors rotated by {rotation}° "
             "before rendering (variant **rotated**); the images' preferred axes are then the rotated factors. The "
             f"verdict rule of the main table is applied to orig → rotated (one pre-specified contrast per model, "
             f"{label}, noise runs as the control). **Expected: the β-VAE reads \"{RELIES}\".**")
    rows, out = [], {"models": {}}
    for model in sorted({r["model"] for r in runs if r["variant"] == "rotated"}):
        o, rot = _values(runs, model, "orig", primary), _values(runs, model, "rotated", primary)
        nz = _values(runs, model, "noise", primary)
        if not o or not rot:
            continue
        v = verdict(list(o.values()), list(rot.values()), list(nz.values()) or None, seed=seed)
        out["models"][model] = {"orig": list(o.values()), "rotated": list(rot.values()), "label": v["label"],
                                "p": v["to_mod"]["p"], "delta": v["to_mod"]["delta"], "ci": v["to_mod"]["ci"]}
        lo, hi = v["to_mod"]["ci"]
        rows.append([model, _cell(o.values()), _cell(rot.values()),
                     f"{v['to_mod']['delta']:+.3f} [{lo:+.3f}, {hi:+.3f}]", _fmt(v["to_mod"]["p"], 4),
                     f"**{v['label']}**"])
    if not rows:
        doc.para("No runs on the rotated store: L1 was not run.")
        out["status"] = "not run"
        return out
    doc.table(["model", f"orig {label}", f"rotated {label}", "Δ [95% CI]", "Welch p", "verdict"], rows)
    bvae = out["models"].get(CONTROL_MODEL)
    if bvae is None:
        out["status"] = "not run"
        doc.para("The β-VAE was not trained on the rotated store: L1 was not run.")
    elif bvae["label"] == RELIES:
        out["status"] = "holds"
        doc.para(f"**L1 holds**: the β-VAE reads \"{RELIES}\" on the rotated store (p = {_fmt(bvae['p'], 4)}). The "
                 "retraining, evaluation and verdict path detects a known entangling change.")
    else:
        out["status"] = "fails"
        doc.para(f"**L1 fails**: the β-VAE reads \"{bvae['label']}\" on the rotated store. The retraining, "
                 "evaluation or verdict code does not detect a known effect; no verdict in this report can be trusted.")
    return out


def _alignment_difference(runs, model, variant) -> list[float]:
    """Per run: best-match |corr| to the disentangled reference minus to the entangled one (positive = closer to D)."""
    out = []
    for r in runs:
        if r["model"] == model and r["variant"] == variant:
            d, e = (alignment_value(r, t, "best_match_corr") for t in ("disentangled", "entangled"))
            if d is not None and e is not None:
                out.append(d - e)
    return out


def _level2(doc, inputs, runs, primary, label, orig, noise, verdict_labels) -> dict:
    mod = _values(runs, CONTROL_MODEL, "mod", primary)
    manip = inputs.get("manipulation") or {}
    partner = (inputs.get("control") or {}).get("partner") or {}
    doc.heading("L2, mechanism: the learned manipulation against a known entangled partner", level=3)
    doc.para("m(w) is learned as in appendix B, with the entangled side E constructed: the disentangled restart D with "
             f"its latent space rotated (partner: {partner.get('kind') or 'not recorded'}), so the target alignment is "
             "known and exactly expressible (probe/perturb/partner.py). Expected: the β-VAE drops by at least "
             f"{PAPER_SMALLEST_DROP:.0%} of its orig {label} (the paper's smallest VAE drop), its noise runs stay "
             f"within {NOISE_TOLERANCE} of orig, it moves towards E in the alignment diagnostic, and the AE and PCL do "
             f"not read \"{RELIES}\".")
    m_orig, m_mod, m_noise = _mean(orig.values()), _mean(mod.values()), _mean(noise.values())
    drop = (m_mod - m_orig) / abs(m_orig) if m_orig and m_mod is not None else None
    align_orig = _alignment_difference(runs, CONTROL_MODEL, "orig")
    align_mod = _alignment_difference(runs, CONTROL_MODEL, "mod")
    checks = []

    def check(name, value_text, passed):
        checks.append({"check": name, "value": value_text, "holds": passed})

    check(f"β-VAE relative drop orig → mod ≤ −{PAPER_SMALLEST_DROP:.0%}",
          "—" if drop is None else f"{drop:+.1%} ({_fmt(m_orig)} → {_fmt(m_mod)})",
          None if drop is None else drop <= -PAPER_SMALLEST_DROP)
    check(f"β-VAE noise within {NOISE_TOLERANCE} of orig",
          "—" if m_noise is None or m_orig is None else f"{m_noise - m_orig:+.3f} ({_fmt(m_orig)} → {_fmt(m_noise)})",
          None if m_noise is None or m_orig is None else abs(m_noise - m_orig) <= NOISE_TOLERANCE)
    a_o, a_m = _mean(align_orig), _mean(align_mod)
    check("β-VAE moves towards E (alignment: |corr| to D − |corr| to E falls orig → mod)",
          "—" if a_o is None or a_m is None else f"{a_o:+.3f} → {a_m:+.3f}",
          None if a_o is None or a_m is None else a_m < a_o)
    gated = []
    for model in NON_VARIATIONAL:
        lab = verdict_labels.get(model)
        check(f"{model} does not read \"{RELIES}\"", lab or "not trained", None if lab is None else lab != RELIES)
        if lab and lab != RELIES and not lab.startswith(("no drop", "inconclusive")):
            gated.append(f"{model} ({lab})")
    doc.table(["criterion", "measured", "holds"],
              [[c["check"], c["value"], "—" if c["holds"] is None else ("yes" if c["holds"] else "**no**")]
               for c in checks])
    gap = manip.get("dis_minus_ent") or {}
    variation = ((manip.get("coverage") or {}).get("variation") or {})
    names = (manip.get("coverage") or {}).get("factor_names") or []
    per_factor = variation.get("per_factor_rms") or {}
    factor_text = ", ".join(f"{names[int(k)] if k.isdigit() and int(k) < len(names) else k} {v:.3f}"
                            for k, v in per_factor.items())
    doc.para("The manipulation's own measurements: decoder loss gap L_D − L_E (nats; positive = E cheaper) "
             f"{_fmt(gap.get('before'), 2)} before → {_fmt(gap.get('after'), 2)} after training m; m's RMS change per "
             f"one-class step of each factor: {factor_text or 'not recorded'}. The global-variance change of the data "
             "(top eigenvalues, subspace overlap, orig vs mod) is in the \"why\" section.")
    if gated:
        doc.para("Read with care: " + ", ".join(gated) + " do not read \"relies\" because the verdict was not given "
                 "(a validity gate or a training check stopped it), not because they were shown to be unaffected by m.")
    decided = [c for c in checks if c["holds"] is not None]
    status = ("not run" if not decided else "holds" if all(c["holds"] for c in decided) and len(decided) == len(checks)
              else "fails" if any(not c["holds"] for c in decided) else "incomplete")
    failing = [c["check"] for c in decided if not c["holds"]]
    if status == "holds":
        doc.para("**L2 holds**: the learned manipulation makes the β-VAE adopt the constructed entangled alignment, "
                 "noise of the same ε does not, and the non-variational baselines are not moved to \"relies\".")
    elif status == "fails":
        doc.para("**L2 fails** on: " + "; ".join(failing) + ". Read with L1: if L1 holds, the manipulation is at fault "
                 "(see its decoder losses and per-factor change above).")
    else:
        doc.para(f"**L2 {status}**: some criteria could not be measured (—).")
    return {"status": status, "checks": checks, "orig": list(orig.values()), "mod": list(mod.values()),
            "noise": list(noise.values()), "relative_drop": drop, "alignment_difference": {"orig": align_orig,
                                                                                             "mod": align_mod}}


def _level3(doc, control, runs, primary, label, orig, figure_path) -> dict:
    doc.heading("L3, dose–response: the same m(w) at ε × {0, 0.5, 1, 2}", level=3)
    epsilon = control.get("epsilon")
    points = {0.0: orig, 1.0: _values(runs, CONTROL_MODEL, "mod", primary)}
    for variant in {r["variant"] for r in runs}:
        scale = dose_scale(variant)
        if scale is not None:
            points[scale] = _values(runs, CONTROL_MODEL, variant, primary)
    points = {s: v for s, v in sorted(points.items()) if v}
    if len(points) < 2:
        doc.para("Fewer than two doses have β-VAE runs: L3 was not run.")
        return {"status": "not run"}
    doc.para(f"β-VAE {label} against the manipulation's strength (ε = {epsilon} at scale 1; scale 0 is the original "
             "data, scale 1 the mod store of L2, the same runs). Each dot is one seed.")
    rows = [[f"{s:g}", f"{s * epsilon:.3f}" if epsilon is not None else "—", _cell(v.values())]
            for s, v in points.items()]
    doc.table(["ε scale", "ε", f"β-VAE {label}"], rows)
    path = figure_path("dose_response.png")
    _dose_figure(points, label, epsilon, path)
    doc.image(path, f"L3: β-VAE {label} against dose")
    return {"status": "shown", "points": {f"{s:g}": {str(k): v for k, v in vals.items()} for s, vals in points.items()}}


def _dose_figure(points: dict, label: str, epsilon, path):
    plt = fig._plt()
    figure, ax = plt.subplots(figsize=(4.8, 3.4))
    scales = list(points)
    for s, vals in points.items():
        v = np.asarray(list(vals.values()))
        ax.scatter(np.full(v.shape, s) + np.linspace(-0.03, 0.03, v.size), v, s=16, color="#4477aa", zorder=3)
    ax.plot(scales, [np.mean(list(points[s].values())) for s in scales], "-o", color="#ee6677", lw=1.5, ms=5,
            label="mean over seeds", zorder=2)
    ax.set_xlabel("ε scale" + (f" (1 = ε {epsilon:g})" if epsilon is not None else ""))
    ax.set_ylabel(f"β-VAE {label}")
    ax.set_xticks(scales)
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, fontsize=8)
    ax.set_title("dose–response of the learned manipulation", fontsize=9)
    return fig._save(figure, path)
