"""Metrics that look at the codes alone (plus MCC, which matches codes to factors one to one).

* ``gaussian_tc`` — disentanglement_lib ``unsupervised_metrics.py``: total correlation of a Gaussian
  with the codes' covariance, 0.5·(Σ log diag Σ − log det Σ) (nats), ``np.cov`` with ddof=1. Cheng et
  al. 2020 (RTC-VAE) report it for the mean codes and for sampled codes z = μ + σ·ε; pass either.
* ``active_units`` — Zietlow et al. 2021 §6: a latent is active when E[σ²] < 0.8 over the sample.
* ``mcc`` — mean correlation coefficient: |Spearman ρ| between every code and factor, one-to-one
  matching by the Hungarian algorithm (maximising), mean over the min(D, K) matched pairs.
"""

from __future__ import annotations

import numpy as np

from probe.metrics._common import as_codes, as_factors
from probe.metrics.registry import MetricSpec


def gaussian_tc(codes) -> dict:
    codes = as_codes(codes).astype(np.float64)
    if codes.shape[1] == 1:
        return {"gaussian_tc": 0.0}
    cov = np.cov(codes, rowvar=False)
    sign, logdet = np.linalg.slogdet(cov)
    diag = np.diag(cov)
    if sign <= 0 or np.any(diag <= 0):  # a constant or collinear code: the Gaussian TC is infinite
        return {"gaussian_tc": float("inf")}
    return {"gaussian_tc": float(0.5 * (np.sum(np.log(diag)) - logdet))}


def active_units(posterior_variance, threshold: float = 0.8) -> dict:
    """``posterior_variance [N, D]`` (σ² per sample and latent) -> number of latents with E[σ²] < threshold."""
    var = as_codes(posterior_variance, "posterior_variance").astype(np.float64)
    mean_var = var.mean(axis=0)
    return {"active_units": float(np.sum(mean_var < threshold)), "mean_variance": mean_var.tolist()}


def mcc(codes, factors) -> dict:
    from scipy.optimize import linear_sum_assignment
    from scipy.stats import rankdata

    codes = as_codes(codes).astype(np.float64)
    factors = as_factors(factors, codes.shape[0])

    def ranks(a):
        r = np.apply_along_axis(rankdata, 0, a)
        r -= r.mean(axis=0)
        norm = np.linalg.norm(r, axis=0)
        return r / np.where(norm > 0, norm, np.inf)

    rho = np.abs(ranks(codes).T @ ranks(factors.astype(np.float64)))  # [D, K] Spearman
    rows, cols = linear_sum_assignment(rho, maximize=True)
    return {"mcc": float(rho[rows, cols].mean())}


def _evaluate_gaussian_tc(context) -> dict:
    out = gaussian_tc(context.train_codes)
    if context.has("variance"):  # sampled codes z = μ + σ·ε (Cheng et al. 2020), ε from RandomState(seed)
        var = context.codes_of(context.train_factors, "variance")
        eps = np.random.RandomState(context.seed).standard_normal(var.shape)
        out["gaussian_tc_sampled"] = gaussian_tc(context.train_codes + np.sqrt(var) * eps)["gaussian_tc"]
    return out


def _evaluate_active_units(context) -> dict:
    return active_units(context.codes_of(context.train_factors, "variance"), context.settings["active_threshold"])


def _evaluate_mcc(context) -> dict:
    return mcc(context.train_codes, context.train_factors)


METRIC_SPECS = (
    MetricSpec("gaussian_tc", _evaluate_gaussian_tc, order=80, fast=True),
    MetricSpec("active_units", _evaluate_active_units, order=90, fast=True, needs=("variance",),
               settings={"active_threshold": 0.8}),  # Zietlow et al. §6
    MetricSpec("mcc", _evaluate_mcc, order=100, fast=True),
)
