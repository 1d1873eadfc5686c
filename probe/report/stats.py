"""Statistics of the comparison: Welch t-tests, bootstrap confidence intervals, Holm adjustment, effect
size, detectable drop and the verdict rule.

Verdict rule (stated verbatim in every report; ``VERDICT_RULE``), for one model and its primary
metric (MIG unless told otherwise), with Δ_mod = mean(mod) − mean(orig), Δ_noise likewise. The one
primary test per model is the two-sided Welch t-test of orig vs mod; its p is Holm–Bonferroni adjusted
over the models the report gives a verdict (``holm_adjust``; one model: p unchanged):

* **relies on local structure** iff the orig→mod change is a significant drop: adjusted p < α (0.05)
  AND the bootstrap 95% CI of Δ_mod lies entirely below 0 AND the drop is larger than the noise
  control's: Δ_mod < Δ_noise (this last clause is waived, and the waiver stated, when there are no
  noise runs);
* **no drop larger than 25 %** iff not the above and a substantial drop is ruled out: the lower end of
  the bootstrap 95% CI of Δ_mod is above −margin·|mean(orig)| (margin 0.25: the modification costs less
  than a quarter of the original score). It says what was tested: not that the model is unaffected;
* **inconclusive at n seeds** otherwise (including fewer than 2 seeds in a group, where neither a
  t-test nor a bootstrap is possible).

Beside each verdict: Hedges' g of orig vs mod and the smallest drop the test could detect at this n
(``detectable_drop``). The validity gates that come before the rule are in ``probe.report.gates``.
"""

from __future__ import annotations

import math

import numpy as np

ALPHA = 0.05
MARGIN = 0.25
BOOTSTRAP_RESAMPLES = 10000

POWER = 0.8
NO_DROP_LABEL = "no drop larger than {pct} %"

VERDICT_RULE = (
    "Verdict per model on the primary metric, with Δ_mod = mean(mod) − mean(orig) and Δ_noise = "
    "mean(noise) − mean(orig). One primary test per model: the two-sided Welch t-test of orig vs mod; its p is "
    "Holm–Bonferroni adjusted over the m models given a verdict in this report (p_Holm; m = 1 leaves p unchanged). "
    "**relies on local structure** iff p_Holm < {alpha} AND the bootstrap 95% CI of Δ_mod lies entirely below 0 "
    "AND Δ_mod < Δ_noise (the modification hurts more than uniform noise of the same magnitude; waived when there "
    "are no noise runs); **no drop larger than {pct} %** iff not the above and the lower end of the 95% CI of "
    "Δ_mod is above −{margin}·|mean(orig)| (a drop of more than {pct}% of the original score is ruled out; "
    "this is all it says); **inconclusive at n seeds** otherwise, including groups with fewer than 2 seeds. "
    "Bootstrap: {boot} percentile resamples of the difference of means, each group resampled with replacement on "
    "its own. Effect size: Hedges' g = J·Δ_mod/s_p with the pooled SD s_p and J = 1 − 3/(4(n_orig + n_mod) − 9) "
    "(negative: a drop). Smallest detectable drop at this n: (t_(1−α/2, df) + t_({power}, df))·s_p·√(1/n_orig + "
    "1/n_mod), df = n_orig + n_mod − 2, two-sided α = {alpha}, power {power} (the pooled-SD approximation of the "
    "test's power; a true drop smaller than this is likely to be missed)."
)


def verdict_rule_text(alpha: float = ALPHA, margin: float = MARGIN, resamples: int = BOOTSTRAP_RESAMPLES) -> str:
    return VERDICT_RULE.format(alpha=alpha, margin=margin, pct=int(round(margin * 100)), boot=resamples, power=POWER)


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


def holm_adjust(pvalues) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the order given: sorted ascending, p_(i) becomes
    max_(j ≤ i) min(1, (m − j + 1)·p_(j)), m = the number of finite p-values (NaN stays NaN and is not counted)."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, math.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = len(finite)
    running = 0.0
    for rank, i in enumerate(finite[np.argsort(p[finite], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def pooled_sd(a, b) -> float:
    """√(((n_a − 1)s_a² + (n_b − 1)s_b²)/(n_a + n_b − 2)); NaN with fewer than 2 values in a group."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(a) < 2 or len(b) < 2:
        return math.nan
    return math.sqrt(((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1)) / (len(a) + len(b) - 2))


def hedges_g(a, b) -> float:
    """Hedges' g of mean(b) − mean(a): Cohen's d with the pooled SD times J = 1 − 3/(4(n_a + n_b) − 9), the
    small-sample correction. NaN with fewer than 2 values in a group or zero spread in both."""
    sd = pooled_sd(a, b)
    if not sd > 0:
        return math.nan
    n = len(a) + len(b)
    return float((np.mean(b) - np.mean(a)) / sd * (1 - 3 / (4 * n - 9)))


def detectable_drop(a, b, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """Smallest difference of means a two-sided test at ``alpha`` detects with probability ``power`` at these
    group sizes: (t_(1−α/2, df) + t_(power, df))·s_p·√(1/n_a + 1/n_b), df = n_a + n_b − 2 (pooled SD s_p).
    NaN with fewer than 2 values in a group."""
    from scipy.stats import t as t_dist

    sd = pooled_sd(a, b)
    if math.isnan(sd):
        return math.nan
    df = len(a) + len(b) - 2
    return float((t_dist.ppf(1 - alpha / 2, df) + t_dist.ppf(power, df)) * sd * math.sqrt(1 / len(a) + 1 / len(b)))


def verdict(orig, mod, noise=None, *, p_adjusted: float | None = None, family_size: int = 1, alpha: float = ALPHA,
            margin: float = MARGIN, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> dict:
    """Apply the verdict rule (module docstring) to the primary metric's values per seed. ``p_adjusted``: the
    Welch p after the Holm adjustment over ``family_size`` models (``holm_adjust``); None: the model is the only
    one (the raw p decides)."""
    orig = np.asarray(orig, dtype=np.float64)
    mod = np.asarray(mod, dtype=np.float64)
    noise = None if noise is None or len(noise) == 0 else np.asarray(noise, dtype=np.float64)
    n = int(min(len(orig), len(mod)))
    to_mod = compare(orig, mod, seed=seed, resamples=resamples)
    to_noise = compare(orig, noise, seed=seed + 1, resamples=resamples) if noise is not None else None
    p_holm = to_mod["p"] if p_adjusted is None else float(p_adjusted)
    out = {"to_mod": to_mod, "to_noise": to_noise, "n": n, "test": "two-sided Welch t-test, orig vs mod",
           "p": to_mod["p"], "p_holm": p_holm, "family_size": int(family_size), "hedges_g": hedges_g(orig, mod),
           "detectable_drop": detectable_drop(orig, mod, alpha=alpha)}
    if n < 2 or math.isnan(to_mod["p"]):
        out.update(label=f"inconclusive at n={n} seeds", outcome="inconclusive", reason="fewer than 2 seeds in a group")
        return out
    lo, hi = to_mod["ci"]
    tested = f"Δ_mod {to_mod['delta']:+.3f}, 95% CI [{lo:+.3f}, {hi:+.3f}], p_Holm = {p_holm:.2g}"
    significant_drop = p_holm < alpha and hi < 0
    if significant_drop:
        if to_noise is None:
            out.update(label="relies on local structure", outcome="relies",
                       reason=f"significant drop orig→mod ({tested}); no noise runs, so the noise comparison is "
                              "waived")
            return out
        if to_mod["delta"] < to_noise["delta"]:
            out.update(label="relies on local structure", outcome="relies",
                       reason=f"significant drop orig→mod ({tested}) larger than the noise drop "
                              f"(Δ_noise {to_noise['delta']:+.3f})")
            return out
        out.update(label=f"inconclusive at n={n} seeds", outcome="inconclusive",
                   reason=f"significant drop orig→mod ({tested}), but the noise control drops at least as much "
                          f"(Δ_noise {to_noise['delta']:+.3f})")
        return out
    floor = -margin * abs(float(orig.mean()))
    if lo > floor:
        out.update(label=NO_DROP_LABEL.format(pct=int(round(margin * 100))), outcome="no-large-drop",
                   reason=f"95% CI of Δ_mod ≥ {lo:+.3f} > −{margin}·|mean(orig)| = {floor:+.3f}; "
                          f"p_Holm = {p_holm:.2g}")
        return out
    out.update(label=f"inconclusive at n={n} seeds", outcome="inconclusive",
               reason=f"no significant drop, but a drop larger than {margin:.0%} is not ruled out ({tested}, "
                      f"lower CI end below {floor:+.3f})")
    return out
