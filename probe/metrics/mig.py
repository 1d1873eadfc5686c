"""Mutual Information Gap (Chen et al. 2018), as disentanglement_lib's ``mig.py``.

Codes are discretised with a 20-bin equal-width histogram per code; the MI matrix is plug-in (nats);
MIG = mean over factors of (largest − second largest MI) / H(factor).
"""

from __future__ import annotations

import numpy as np

from probe.metrics._common import as_codes, as_factors, varying_factors
from probe.metrics.information import discrete_entropy, discrete_mutual_info, histogram_discretize
from probe.metrics.registry import MetricSpec, ReportColumn


def mig_from_matrix(mi: np.ndarray, entropy: np.ndarray) -> float:
    """MIG from an MI matrix [D, K] and factor entropies [K]. With one code the gap is the top MI."""
    sorted_m = np.sort(mi, axis=0)[::-1]
    second = sorted_m[1] if sorted_m.shape[0] > 1 else np.zeros(sorted_m.shape[1])
    return float(np.mean((sorted_m[0] - second) / entropy))


def _mutual_information(codes, factors, num_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(MI matrix [D, K'] of the binned codes, entropies [K'], indices of the K' varying factors): what MIG
    and ``factor_capture`` both read, so the two agree by construction."""
    codes = as_codes(codes)
    factors = as_factors(factors, codes.shape[0])
    keep = varying_factors(factors)
    if keep.size == 0:
        raise ValueError("every factor is constant in this sample; MIG is undefined")
    factors = factors[:, keep]
    mi = discrete_mutual_info(histogram_discretize(codes, num_bins), factors)
    return mi, discrete_entropy(factors), keep


def mig(codes, factors, num_bins: int = 20) -> dict:
    """MIG of ``codes [N, D]`` against ``factors [N, K]`` (constant factors are left out).

    Integer codes are binned like float ones, as disentanglement_lib does (with fewer distinct values
    than bins the histogram keeps them apart).
    """
    mi, entropy, _ = _mutual_information(codes, factors, num_bins)
    return {"mig": mig_from_matrix(mi, entropy)}


def factor_capture(codes, factors, num_bins: int = 20) -> dict:
    """Which latent carries each factor: the per-factor terms MIG averages.

    For factor k: ``gap[k]`` = (largest − second-largest I(z_j; w_k)) / H(w_k), ``latent[k]`` = the j with the
    largest MI, ``best_nmi[k]`` = that largest MI / H(w_k) (how much of the factor any single latent holds,
    disentangled or not). Lists have one entry per column of ``factors``; a factor constant in the sample
    gets None in each (MIG leaves it out). ``mig`` = mean of the gaps = ``mig(codes, factors)["mig"]``.
    """
    mi, entropy, keep = _mutual_information(codes, factors, num_bins)
    num_factors = np.asarray(factors).shape[1]
    sorted_m = np.sort(mi, axis=0)[::-1]
    second = sorted_m[1] if sorted_m.shape[0] > 1 else np.zeros(sorted_m.shape[1])
    gap, latent, best = [None] * num_factors, [None] * num_factors, [None] * num_factors
    for column, k in enumerate(keep):
        gap[k] = float((sorted_m[0, column] - second[column]) / entropy[column])
        latent[k] = int(mi[:, column].argmax())
        best[k] = float(sorted_m[0, column] / entropy[column])
    return {"gap": gap, "latent": latent, "best_nmi": best, "mig": mig_from_matrix(mi, entropy)}


def _evaluate(context) -> dict:
    return mig(context.train_codes, context.train_factors, num_bins=context.settings["num_bins"])


METRIC_SPECS = (MetricSpec("mig", _evaluate, order=10, fast=True, report=(ReportColumn("mig", "MIG", "mig"),)),)
