"""Modularity and explicitness (Ridgeway & Mozer 2018), as disentanglement_lib's
``modularity_explicitness.py``.

Modularity: MI matrix of the 20-bin histogram-discretised train codes; per code
1 − (Σ_j m_ij² − max_j m_ij²) / (max_j m_ij² · (K − 1)), 0 for codes with no information; mean over codes.
Explicitness: codes standardised with the train mean/std, one ``LogisticRegression()`` (sklearn
defaults) per factor on all codes, macro ROC-AUC of ``predict_proba`` against the one-hot labels on
train and test; mean over factors. Deviation: classes missing from an evaluation sample are left out
of that AUC (disentanglement_lib would crash on them).
"""

from __future__ import annotations

import warnings

import numpy as np

from probe.metrics._common import as_codes, as_factors, thread_map, varying_factors
from probe.metrics.information import discrete_mutual_info, histogram_discretize
from probe.metrics.registry import MetricSpec


def modularity_from_matrix(mi: np.ndarray) -> float:
    squared = np.asarray(mi, dtype=np.float64) ** 2
    max_sq = squared.max(axis=1)
    k = squared.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = (squared.sum(axis=1) - max_sq) / (max_sq * (k - 1))
    score = 1.0 - delta
    score[max_sq == 0.0] = 0.0
    return float(np.mean(score))


def _auc(classes: np.ndarray, y: np.ndarray, proba: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    onehot = (y[:, None] == classes[None, :]).astype(int)
    usable = (onehot.sum(axis=0) > 0) & (onehot.sum(axis=0) < len(y))
    return float(roc_auc_score(onehot[:, usable], proba[:, usable]))


def _explicitness_one(x_train, y_train, x_test, y_test) -> tuple[float, float]:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = LogisticRegression().fit(x_train, y_train)
    return (_auc(model.classes_, y_train, model.predict_proba(x_train)),
            _auc(model.classes_, y_test, model.predict_proba(x_test)))


def modularity_explicitness(codes, factors, test_codes, test_factors, num_bins: int = 20,
                            n_jobs: int | None = -1) -> dict:
    codes = as_codes(codes).astype(np.float64)
    factors = as_factors(factors, codes.shape[0])
    test_codes = as_codes(test_codes, "test_codes").astype(np.float64)
    test_factors = as_factors(test_factors, test_codes.shape[0], "test_factors")
    keep = varying_factors(factors)
    factors, test_factors = factors[:, keep], test_factors[:, keep]
    mi = discrete_mutual_info(histogram_discretize(codes, num_bins), factors)
    mean, std = codes.mean(axis=0), codes.std(axis=0)
    std = np.where(std > 0, std, 1.0)  # a constant code carries nothing; avoid 0/0
    x_train, x_test = (codes - mean) / std, (test_codes - mean) / std
    scores = thread_map(lambda j: _explicitness_one(x_train, factors[:, j], x_test, test_factors[:, j]),
                        range(factors.shape[1]), n_jobs)
    return {
        "modularity": modularity_from_matrix(mi),
        "explicitness_train": float(np.mean([s[0] for s in scores])),
        "explicitness_test": float(np.mean([s[1] for s in scores])),
    }


def _evaluate(context) -> dict:
    return modularity_explicitness(context.train_codes, context.train_factors, context.test_codes,
                                   context.test_factors, num_bins=context.settings["num_bins"],
                                   n_jobs=context.settings["n_jobs"])


METRIC_SPECS = (MetricSpec("modularity_explicitness", _evaluate, order=60, fast=True),)
