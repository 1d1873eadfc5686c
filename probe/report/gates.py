"""Validity gates: is the experiment in the regime where the paper's claim can be tested at all?

Checked per model before the verdict rule (``probe.report.stats.verdict``); a model that fails a gate gets
the gate's label instead of a verdict, with the reason. Pure functions over plain numbers and lists, so the
tests call them on constructed inputs (tests/test_report_gates.py).

* **Regime** (Zietlow et al. 2021 §5.3: runs whose active latents, E[σ²] < 0.8, sink below the number of
  generating factors "intrinsically prevent the models from recovering all true generating factors"; and the
  paper's claim is about models that disentangle the factors on the original data): a model is
  ``outside the paper's regime (k of n factors encoded)`` when the median over its orig runs of the factors some
  single latent holds at least ``CAPTURE_THRESHOLD`` of (normalised MI, ``probe.metrics.mig.factor_capture``) is
  below n, or ``(k of n latents active)`` when the median of its active latents (the ``active_units`` metric) is;
  a run with enough active latents can still leave factors out (hues split over two latents, small factors in
  none), so both are checked wherever both are known. Models without a posterior variance (AE, PCL) have only the
  first, and only when the report could encode their runs; a model with neither count is not gated, and the
  reason says so.
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
    f"**{REGIME_LABEL}**: its orig runs do not encode every factor the data has (factors with more than one value "
    f"in the orig store): the median over its orig runs of the {CAPTURE_MEASURE} is below that number, or the "
    f"median of its {ACTIVE_MEASURE} is (Zietlow et al. §5.3 discard such over-pruned runs); both are checked "
    "where both are known (a model without a posterior variance, AE or PCL, has only the first, when its runs "
    "could be encoded, and is not gated otherwise). "
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


def regime_gate(num_factors: int | None, *, active=(), captured=(), missing: str = "no posterior variance") -> dict:
    """The regime gate for one model. ``active``: per orig run, its active latents (None where the model has no
    posterior variance); ``captured``: per orig run, the factors some latent holds ≥ ``CAPTURE_THRESHOLD`` of
    (``encoded_factor_count``; empty when the runs were not encoded); ``num_factors``: factors with more than one
    value in the orig store, None when unknown; ``missing``: why a model with neither count is not gated.
    Returns {"gate", "status": "passed" | "failed" | "not checked", "label" and "outcome" (when failed), "reason",
    "num_factors", "checks": {"captured", "active"} (each {"median", "runs", "measure", "passed"}, for the counts
    that are known)}."""
    out = {"gate": "regime", "num_factors": num_factors, "checks": {}}
    if num_factors is None:
        return {**out, "status": "not checked",
                "reason": "not gated: how many factors the data has is unknown (orig store unreadable, not recorded)"}
    wording = {"captured": ("factors encoded", CAPTURE_MEASURE), "active": ("latents active", ACTIVE_MEASURE)}
    for name, values in (("captured", captured), ("active", active)):
        known = [v for v in (values or []) if v is not None]
        if known:
            median = float(statistics.median(known))
            out["checks"][name] = {"median": median, "runs": len(known), "measure": wording[name][1],
                                   "passed": median >= num_factors}
    if not out["checks"]:
        return {**out, "status": "not checked", "reason": f"not gated ({missing})"}

    def where(check, outcome):
        runs = check["runs"]
        return (f"median {_number(check['median'])} {check['measure']} over {runs} orig run{'s' if runs != 1 else ''}"
                f", {outcome} the {num_factors} factors")

    failed = {k: c for k, c in out["checks"].items() if not c["passed"]}
    passed = [where(c, "at least") for c in out["checks"].values() if c["passed"]]
    if failed:
        # a failed median is below n, so it is the k of "k of n" as it stands
        counts = ", ".join(f"{_number(c['median'])} of {num_factors} {wording[k][0]}" for k, c in failed.items())
        reason = "; ".join(where(c, "fewer than") for c in failed.values())
        return {**out, "status": "failed", "outcome": "outside-regime", "label": f"{REGIME_LABEL} ({counts})",
                "reason": reason + "".join(f" (while {p})" for p in passed)}
    return {**out, "status": "passed", "reason": "; ".join(passed)}


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
