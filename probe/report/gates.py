"""Validity gates: is the experiment in the regime where the paper's claim can be tested at all?

Checked per model before the verdict rule (``probe.report.stats.verdict``); a model that fails a gate gets
the gate's label instead of a verdict, with the reason. Pure functions over plain numbers and lists, so the
tests call them on constructed inputs (tests/test_report_gates.py).

* **Regime** (Zietlow et al. 2021 §5.3: runs whose active latents, E[σ²] < 0.8, sink below the number of
  generating factors "intrinsically prevent the models from recovering all true generating factors"):
  a model whose orig runs encode fewer factors than the data has (median over its orig runs) is
  ``outside the paper's regime (k of n factors encoded)``. Models with a posterior variance are measured by
  their active latents (the ``active_units`` metric); models without one (AE, PCL) by the number of factors
  some single latent holds at least ``CAPTURE_THRESHOLD`` of (normalised MI, ``probe.metrics.mig.factor_capture``),
  when the report could encode their runs; otherwise they are not gated, and the reason says so.
* **Noise control** (§5.2: uniform noise of the manipulation's magnitude "should not drop significantly" the
  scores): when noise alone lowers the primary score by more than the verdict rule's margin (Δ_noise <
  −MARGIN·|mean(orig)|) or leaves no active latent (median active latents 0 on noise), the control that
  separates "relies on local structure" from "breaks on any perturbation" has failed: ``noise control failed``.
"""

from __future__ import annotations

import statistics

import numpy as np

from probe.report.stats import MARGIN

# A factor counts as encoded by a run when one latent holds at least this share of its entropy (normalised
# MI, 20-bin histograms as MIG). The plug-in MI of an unrelated latent is biased upwards by about
# (bins − 1)(classes − 1)/(2N) nats: 0.02 of H for a 10-class factor at N = 2,000 (quick), 0.12 at N = 300
# (smoke). 0.2 sits clear of that floor at every preset while a factor that a latent carries (even entangled
# with others) scores well above it.
CAPTURE_THRESHOLD = 0.2
# The active_units metric's threshold (Zietlow et al. §5.3), quoted in the gate texts.
ACTIVE_VARIANCE = 0.8

ACTIVE_MEASURE = f"active latents (E[σ²] < {ACTIVE_VARIANCE})"
CAPTURE_MEASURE = f"factors with a latent holding ≥ {CAPTURE_THRESHOLD} of their entropy (normalised MI)"
REGIME_LABEL = "outside the paper's regime"
NOISE_LABEL = "noise control failed"

GATE_RULE = (
    "Before the rule, two validity gates per model; a model failing one gets the gate's label instead of a verdict. "
    f"**{REGIME_LABEL}**: its orig runs encode fewer factors than the data has (factors with more than one "
    f"value in the orig store): the median over its orig runs of the {ACTIVE_MEASURE} is below that number "
    "(Zietlow et al. §5.3 discard such over-pruned runs); a model without a posterior variance (AE, PCL) is "
    f"measured by its {CAPTURE_MEASURE}, when its runs could be encoded, and is not gated otherwise. "
    f"**{NOISE_LABEL}**: noise alone lowers the primary score by more than {int(round(MARGIN * 100))} % of "
    f"mean(orig) (Δ_noise < −{MARGIN}·|mean(orig)|) or leaves no active latent (median 0 over the noise runs): "
    "the control of §5.2 does not hold, so a drop on mod cannot be told apart from a breakdown under any perturbation."
)


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def encoded_factor_count(best_nmi, threshold: float = CAPTURE_THRESHOLD) -> int:
    """Factors of one run that some latent holds at least ``threshold`` of (``factor_capture``'s ``best_nmi``;
    None entries, constant factors, do not count)."""
    return sum(1 for v in best_nmi if v is not None and v >= threshold)


def regime_gate(encoded_per_run, num_factors: int | None, *, measure: str = ACTIVE_MEASURE,
                missing: str = "no posterior variance") -> dict:
    """The regime gate for one model. ``encoded_per_run``: per orig run, the active latents (or the encoded
    factors for models without a posterior variance), None where unknown; ``num_factors``: factors with more
    than one value in the orig store, None when unknown; ``missing``: why a model with no known count is not
    gated. Returns {"gate", "status": "passed" | "failed" | "not checked", "label" and "outcome" (when failed),
    "reason", "median", "encoded", "num_factors", "runs", "measure"}."""
    known = [v for v in encoded_per_run if v is not None]
    out = {"gate": "regime", "median": None, "encoded": None, "num_factors": num_factors, "runs": len(known),
           "measure": measure}
    if num_factors is None:
        return {**out, "status": "not checked",
                "reason": "not gated: how many factors the data has is unknown (orig store unreadable, not recorded)"}
    if not known:
        return {**out, "status": "not checked", "reason": f"not gated ({missing})"}
    median = float(statistics.median(known))
    encoded = min(median, float(num_factors))  # more active latents than factors still encode only n factors
    out.update(median=median, encoded=encoded)
    where = f"median {_number(median)} {measure} over {len(known)} orig run{'s' if len(known) != 1 else ''}"
    if median < num_factors:
        return {**out, "status": "failed", "outcome": "outside-regime",
                "label": f"{REGIME_LABEL} ({_number(encoded)} of {num_factors} factors encoded)",
                "reason": f"{where}, fewer than the {num_factors} factors"}
    return {**out, "status": "passed", "reason": f"{where}, at least the {num_factors} factors"}


def noise_gate(orig, noise, noise_active=None, *, margin: float = MARGIN) -> dict:
    """The noise-control gate for one model. ``orig``, ``noise``: primary-metric values per seed;
    ``noise_active``: active latents per noise run (None entries where unknown). Returns {"gate", "status",
    "label" and "outcome" (when failed), "reason", "delta_noise", "threshold", "median_active"}."""
    orig = np.asarray(orig, dtype=np.float64)
    noise = np.asarray(noise if noise is not None else [], dtype=np.float64)
    active = [v for v in (noise_active or []) if v is not None]
    out = {"gate": "noise_control", "delta_noise": None, "threshold": None,
           "median_active": float(statistics.median(active)) if active else None}
    if len(noise) == 0 or len(orig) == 0:
        return {**out, "status": "not checked", "reason": "not gated: no noise runs"}
    delta = float(noise.mean() - orig.mean())
    threshold = -margin * abs(float(orig.mean()))
    out.update(delta_noise=delta, threshold=threshold)
    failures = []
    if delta < threshold:
        failures.append(f"noise alone lowers the score by {delta:+.3f}, more than {margin:.0%} of mean(orig) "
                        f"({threshold:+.3f})")
    if out["median_active"] == 0:
        failures.append(f"no active latent on noise (median 0 over {len(active)} runs)")
    if failures:
        return {**out, "status": "failed", "outcome": "noise-control-failed", "label": NOISE_LABEL,
                "reason": "; ".join(failures)}
    return {**out, "status": "passed",
            "reason": f"Δ_noise {delta:+.3f} ≥ {threshold:+.3f}"
                      + (f", median {_number(out['median_active'])} active latents on noise" if active else "")}


def failed_gate(gates: list[dict]) -> dict | None:
    """{"label", "outcome", "reason"} of the first failed gate, the reason naming every failed gate; None if none
    failed."""
    failed = [g for g in gates if g["status"] == "failed"]
    if not failed:
        return None
    reason = failed[0]["reason"] + "".join(f"; also {g['label']}: {g['reason']}" for g in failed[1:])
    return {"label": failed[0]["label"], "outcome": failed[0]["outcome"], "reason": reason}
