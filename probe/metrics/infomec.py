"""InfoMEC (Hsu et al. 2023, "Disentanglement via Latent Quantization", §4): InfoM, InfoE, InfoC.

NMI[i, j] = I(s_i; z_j) / H(s_i) (sources LabelEncoded; entropy in nats). MI is plug-in for discrete
codes and the kNN (KSG/Ross) estimator of ``mutual_info_classif`` for continuous codes (standardised
first, as LQ's ``infomec.py``). Inactive latents (NMI columns) are removed before InfoM and InfoC.

* InfoM = (mean over active latents of max_i NMI / Σ_i NMI − 1/n_s) / (1 − 1/n_s)
* InfoC = (mean over sources of max_j NMI / Σ_j NMI − 1/n_z) / (1 − 1/n_z), n_z = active latents
* InfoE = mean over sources of (H0 − CE) / H0, CE = in-sample log loss of an unpenalised multinomial
  logistic regression (lbfgs, ``class_weight="balanced"``) on all latents, H0 the same with a
  constant input.

Options and defaults (the paper's text): ``n_neighbors=3`` (paper §4; LQ's standalone infomec.py
and Tripod use 10); ``prune="range"`` — discrete: range > 0, continuous: range > max(range)/20 (paper,
LQ infomec.py, FactorQVAE); ``prune="iqr"`` — Tripod: discrete IQR > 0.1, continuous IQR > max(IQR)/10;
``infoe_encoding="auto"`` — one-hot for discrete, standardised for continuous (LQ infomec.py);
``"onehot"`` / ``"standardize"`` force one; ``max_iter=100`` (LQ/Tripod; FactorQVAE uses 500).
Edge cases (the references return NaN or divide by zero): no active latent → all three 0 (Tripod);
an active latent with an all-zero NMI column is left out of InfoM's mean (LQ's logged version does
the same); one active latent makes InfoC's renormalisation 0/0 and one source makes InfoM's 0/0:
both are returned as NaN.
The kNN estimator's 1e-10 jitter is drawn from ``RandomState(seed)`` (pairs in source-major order,
as FactorQVAE passes one RandomState), so results are reproducible.
"""

from __future__ import annotations

import warnings

import numpy as np

from probe.errors import UserError
from probe.metrics._common import as_codes, as_factors, thread_map, unpenalised_logistic_regression, varying_factors
from probe.metrics.information import dense_labels, discrete_entropy, discrete_mutual_info, mutual_info_classif_1d
from probe.metrics.registry import MetricSpec, ReportColumn

PRUNE_RULES = ("range", "iqr", "none")
INFOE_ENCODINGS = ("auto", "onehot", "standardize")


def normalized_mutual_info(codes, factors, discrete: bool = False, n_neighbors: int = 3, seed: int = 0) -> np.ndarray:
    """NMI [K, D] = I(factor_i; code_j) / H(factor_i) (factors must vary)."""
    codes = np.asarray(codes)
    factors = np.asarray(factors)
    sources = np.stack([dense_labels(factors[:, i]) for i in range(factors.shape[1])], axis=1)
    entropy = discrete_entropy(sources)
    if discrete:
        latents = np.stack([dense_labels(codes[:, j]) for j in range(codes.shape[1])], axis=1)
        mi = discrete_mutual_info(latents, sources).T
    else:
        from sklearn.preprocessing import StandardScaler

        latents = StandardScaler().fit_transform(codes.astype(np.float64))
        rng = np.random.RandomState(seed)
        mi = np.zeros((sources.shape[1], latents.shape[1]))
        for i in range(sources.shape[1]):
            for j in range(latents.shape[1]):
                mi[i, j] = mutual_info_classif_1d(latents[:, j], sources[:, i], n_neighbors, rng)
    return mi / entropy[:, None]


def active_latents(codes, discrete: bool, prune: str = "range") -> np.ndarray:
    """Boolean mask [D] of the latents InfoM/InfoC keep."""
    codes = np.asarray(codes, dtype=np.float64)
    if prune == "none":
        return np.ones(codes.shape[1], dtype=bool)
    if prune == "range":
        spread = codes.max(axis=0) - codes.min(axis=0)
        return spread > 0 if discrete else spread > spread.max() / 20
    if prune == "iqr":
        q = np.quantile(codes, q=[0.25, 0.75], axis=0)
        spread = q[1] - q[0]
        return spread > 0.1 if discrete else spread > spread.max() / 10
    raise UserError(f"unknown InfoMEC pruning rule {prune!r} (choose from {', '.join(PRUNE_RULES)})")


def _ratio_score(ratio: np.ndarray, n: int) -> float:
    ratio = ratio[np.isfinite(ratio)]
    if n < 2 or ratio.size == 0:
        return float("nan")
    return float((np.mean(ratio) - 1.0 / n) / (1.0 - 1.0 / n))


def infom_infoc(nmi: np.ndarray) -> tuple[float, float]:
    """(InfoM, InfoC) from an NMI matrix [K sources, D active latents]."""
    nmi = np.asarray(nmi, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_latent = nmi.max(axis=0) / nmi.sum(axis=0)
        per_source = nmi.max(axis=1) / nmi.sum(axis=1)
    return _ratio_score(per_latent, nmi.shape[0]), _ratio_score(per_source, nmi.shape[1])


def _log_loss_fit(x: np.ndarray, y: np.ndarray, max_iter: int, seed: int) -> float:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.metrics import log_loss

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = unpenalised_logistic_regression(solver="lbfgs", max_iter=max_iter, tol=1e-4, fit_intercept=True,
                                                class_weight="balanced", random_state=seed)
        model.fit(x, y)
    return float(log_loss(y, model.predict_proba(x), labels=model.classes_))


def infoe(codes, factors, discrete: bool = False, encoding: str = "auto", max_iter: int = 100, seed: int = 0,
          n_jobs: int | None = -1) -> float:
    """InfoE: mean over factors of the relative drop in in-sample cross-entropy vs a constant input."""
    if encoding not in INFOE_ENCODINGS:
        raise UserError(f"unknown InfoE encoding {encoding!r} (choose from {', '.join(INFOE_ENCODINGS)})")
    if encoding == "auto":
        encoding = "onehot" if discrete else "standardize"
    codes = np.asarray(codes)
    if encoding == "onehot":
        from sklearn.preprocessing import OneHotEncoder

        x = OneHotEncoder().fit_transform(codes).toarray()
    else:
        from sklearn.preprocessing import StandardScaler

        x = StandardScaler().fit_transform(codes.astype(np.float64))
    zeros = np.zeros_like(x)

    def one(j):
        y = dense_labels(factors[:, j])
        h0 = _log_loss_fit(zeros, y, max_iter, seed)
        ce = _log_loss_fit(x, y, max_iter, seed)
        return (h0 - ce) / h0

    return float(np.mean(thread_map(one, range(factors.shape[1]), n_jobs)))


def infomec(codes, factors, discrete: bool = False, n_neighbors: int = 3, prune: str = "range",
            infoe_encoding: str = "auto", max_iter: int = 100, seed: int = 0, n_jobs: int | None = -1) -> dict:
    """InfoM, InfoE, InfoC of ``codes [N, D]`` (``discrete=True`` for quantized codes) for ``factors [N, K]``.

    Also returns ``num_active_latents``.
    """
    codes = as_codes(codes)
    factors = as_factors(factors, codes.shape[0])
    factors = factors[:, varying_factors(factors)]
    if prune not in PRUNE_RULES:
        raise UserError(f"unknown InfoMEC pruning rule {prune!r} (choose from {', '.join(PRUNE_RULES)})")
    active = active_latents(codes, discrete, prune)
    if not active.any():
        return {"infom": 0.0, "infoe": 0.0, "infoc": 0.0, "num_active_latents": 0.0}
    info_e = infoe(codes, factors, discrete, infoe_encoding, max_iter, seed, n_jobs)
    # NMI over all latents (as the references), then drop the inactive columns
    nmi = normalized_mutual_info(codes, factors, discrete, n_neighbors, seed)
    info_m, info_c = infom_infoc(nmi[:, active])
    return {"infom": info_m, "infoe": info_e, "infoc": info_c, "num_active_latents": float(active.sum())}


def _evaluate(context) -> dict:
    s = context.settings
    use_discrete = context.has("discrete")
    codes = context.codes_of(context.train_factors, "discrete") if use_discrete else context.train_codes
    return infomec(codes, context.train_factors, discrete=use_discrete, n_neighbors=s["infomec_n_neighbors"],
                   prune=s["infomec_prune"], infoe_encoding=s["infomec_encoding"], max_iter=s["infomec_max_iter"],
                   seed=context.seed, n_jobs=s["n_jobs"])


METRIC_SPECS = (MetricSpec(
    "infomec", _evaluate, order=70, fast=True,
    settings={"infomec_n_neighbors": 3, "infomec_prune": "range", "infomec_encoding": "auto", "infomec_max_iter": 100},
    report=(ReportColumn("infom", "InfoM", "infom"), ReportColumn("infoe", "InfoE", "infoe"),
            ReportColumn("infoc", "InfoC", "infoc"))),)
