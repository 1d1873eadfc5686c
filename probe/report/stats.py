"""Statistics of the comparison: Welch t-tests, bootstrap confidence intervals and the verdict rule.

Verdict rule (stated verbatim in every report; ``VERDICT_RULE``), for one model and its primary
metric (MIG unless told otherwise), with Δ_mod = mean(mod) − mean(orig), Δ_noise likewise:

* **relies on local structure** iff the orig→mod change is a significant drop: two-sided Welch
  p < α (0.05) AND the bootstrap 95% CI of Δ_mod lies entirely below 0 AND the drop is larger than
  the noise control's: Δ_mod < Δ_noise (this last clause is waived, and the waiver stated, when
  there are no noise runs);
* **unaffected** iff not the above and a substantial drop is ruled out: the lower end of the
  bootstrap 95% CI of Δ_mod is above −margin·|mean(orig)| (margin 0.25: the modification costs less
  than a quarter of the original score);
* **inconclusive at n seeds** otherwise (including fewer than 2 seeds in a group, where neither a
  t-test nor a bootstrap is possible).
"""

from __future__ import annotations

import math

import numpy as np

ALPHA = 0.05
MARGIN = 0.25
BOOTSTRAP_RESAMPLES = 10000

VERDICT_RULE = (
    "Verdict per model on the primary metric, with Δ_mod = mean(mod) − mean(orig) and Δ_noise = "
    "mean(noise) − mean(orig): **relies on local structure** iff the two-sided Welch t-test of orig vs mod "
    "gives p < {alpha} AND the bootstrap 95% CI of Δ_mod lies entirely below 0 AND Δ_mod < Δ_noise (the "
    "modification hurts more than uniform noise of the same magnitude; waived when there are no noise runs); "
    "**unaffected** iff not the above and the lower end of the 95% CI of Δ_mod is above −{margin}·|mean(orig)| "
    "(a drop of more than {pct}% of the original score is ruled out); **inconclusive at n seeds** otherwise, "
    "including groups with fewer than 2 seeds. Bootstrap: {boot} percentile resamples of the difference of "
    "means, each group resampled with replacement on its own."
)


def verdict_rule_text(alpha: float = ALPHA, margin: float = MARGIN, resamples: int = BOOTSTRAP_RESAMPLES) -> str:
    return VERDICT_RULE.format(alpha=alpha, margin=margin, pct=int(round(margin * 100)), boot=resamples)


def welch_t_test(a, b) -> dict:
    """Two-sided Welch t-test of mean(b) − mean(a) ≠ 0. Returns t, Welch–Satterthwaite df and p
    (NaN when a group has fewer than 2 values). Identical constant groups: p = 1 if the means are
    equal, 0 otherwise (zero variance, any difference is exact)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(a) < 2 or len(b) < 2:
        return {"t": math.nan, "df": math.nan, "p": math.nan}
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff = b.mean() - a.mean()
    if va + vb == 0:
        return {"t": math.nan if diff == 0 else math.copysign(math.inf, diff), "df": math.nan,
                "p": 1.0 if diff == 0 else 0.0}
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    from scipy.stats import t as t_dist

    p = float(2 * t_dist.sf(abs(t), df))
    return {"t": float(t), "df": float(df), "p": p}


def bootstrap_ci(a, b, *, level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(b) − mean(a), resampling each group with replacement on its own."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(a) < 2 or len(b) < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    ma = a[rng.integers(0, len(a), size=(resamples, len(a)))].mean(1)
    mb = b[rng.integers(0, len(b), size=(resamples, len(b)))].mean(1)
    lo, hi = np.quantile(mb - ma, [(1 - level) / 2, 1 - (1 - level) / 2])
    return (float(lo), float(hi))


def compare(a, b, *, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> dict:
    """Change from group ``a`` to group ``b``: Δ = mean(b) − mean(a), Welch test, bootstrap CI."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    delta = float(b.mean() - a.mean()) if len(a) and len(b) else math.nan
    test = welch_t_test(a, b)
    lo, hi = bootstrap_ci(a, b, seed=seed, resamples=resamples)
    return {"delta": delta, "p": test["p"], "t": test["t"], "df": test["df"], "ci": [lo, hi],
            "n": [int(len(a)), int(len(b))]}


def verdict(orig, mod, noise=None, *, alpha: float = ALPHA, margin: float = MARGIN, seed: int = 0,
            resamples: int = BOOTSTRAP_RESAMPLES) -> dict:
    """Apply the verdict rule (module docstring) to the primary metric's values per seed."""
    orig = np.asarray(orig, dtype=np.float64)
    mod = np.asarray(mod, dtype=np.float64)
    noise = None if noise is None or len(noise) == 0 else np.asarray(noise, dtype=np.float64)
    n = int(min(len(orig), len(mod)))
    to_mod = compare(orig, mod, seed=seed, resamples=resamples)
    to_noise = compare(orig, noise, seed=seed + 1, resamples=resamples) if noise is not None else None
    out = {"to_mod": to_mod, "to_noise": to_noise, "n": n}
    if n < 2 or math.isnan(to_mod["p"]):
        out.update(label=f"inconclusive at n={n} seeds", reason="fewer than 2 seeds in a group")
        return out
    lo, hi = to_mod["ci"]
    significant_drop = to_mod["p"] < alpha and hi < 0
    if significant_drop:
        if to_noise is None:
            out.update(label="relies on local structure",
                       reason="significant drop orig→mod; no noise runs, so the noise comparison is waived")
            return out
        if to_mod["delta"] < to_noise["delta"]:
            out.update(label="relies on local structure",
                       reason=f"significant drop orig→mod (p={to_mod['p']:.2g}) larger than the noise drop")
            return out
        out.update(label=f"inconclusive at n={n} seeds",
                   reason="significant drop orig→mod, but the noise control drops at least as much")
        return out
    if lo > -margin * abs(float(orig.mean())):
        out.update(label="unaffected", reason=f"95% CI of Δ_mod excludes a drop larger than {margin:.0%} of the original score")
        return out
    out.update(label=f"inconclusive at n={n} seeds", reason="no significant drop, but a substantial drop is not ruled out")
    return out
