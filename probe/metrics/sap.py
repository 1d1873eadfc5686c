"""Separated Attribute Predictability (Kumar et al. 2018), as disentanglement_lib's ``sap_score.py``.

``continuous=False`` (the study setting): S[i, j] = test accuracy of
``LinearSVC(C=0.01, class_weight="balanced")`` trained on code i alone to predict factor j.
``continuous=True``: S[i, j] = squared correlation of code i and factor j on the train sample (0 when
the code's variance is <= 1e-12). SAP = mean over factors of (best − second best) score.

Solver: disentanglement_lib ran with the sklearn of 2019, whose LinearSVC used the dual coordinate
descent solver. That solver draws from liblinear's *process-global* C random state, so concurrent fits
are not reproducible. We pin ``dual=False`` (the primal trust-region Newton solver, which is what
sklearn >= 1.3's ``dual="auto"`` picks for n_samples > n_features): the same convex problem, solved
deterministically, so the SVCs can run on threads with identical values.
"""

from __future__ import annotations

import warnings

import numpy as np

from probe.metrics._common import as_codes, as_factors, thread_map, varying_factors
from probe.metrics.registry import MetricSpec, ReportColumn


def sap_from_matrix(score: np.ndarray) -> float:
    sorted_s = np.sort(score, axis=0)
    second = sorted_s[-2] if sorted_s.shape[0] > 1 else np.zeros(sorted_s.shape[1])
    return float(np.mean(sorted_s[-1] - second))


def _svc_accuracy(x_train, y_train, x_test, y_test, seed: int) -> float:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = LinearSVC(C=0.01, class_weight="balanced", dual=False, random_state=seed)
        model.fit(x_train[:, None], y_train)
    return float(np.mean(model.predict(x_test[:, None]) == y_test))


def sap_matrix(codes, factors, test_codes=None, test_factors=None, continuous: bool = False, seed: int = 0,
               n_jobs: int | None = -1) -> np.ndarray:
    """Score matrix S [D, K'] over the varying factors."""
    codes = as_codes(codes).astype(np.float64)
    factors = as_factors(factors, codes.shape[0])
    keep = varying_factors(factors)
    d = codes.shape[1]
    if continuous:
        score = np.zeros((d, keep.size))
        for i in range(d):
            for jj, j in enumerate(keep):
                cov = np.cov(codes[:, i], factors[:, j])
                if cov[0, 0] > 1e-12:
                    score[i, jj] = cov[0, 1] ** 2 / (cov[0, 0] * cov[1, 1])
        return score
    if test_codes is None or test_factors is None:
        raise ValueError("discrete SAP needs test_codes and test_factors")
    test_codes = as_codes(test_codes, "test_codes").astype(np.float64)
    test_factors = as_factors(test_factors, test_codes.shape[0], "test_factors")
    pairs = [(i, j) for i in range(d) for j in keep]
    accs = thread_map(lambda p: _svc_accuracy(codes[:, p[0]], factors[:, p[1]], test_codes[:, p[0]],
                                              test_factors[:, p[1]], seed), pairs, n_jobs)
    return np.asarray(accs).reshape(d, keep.size)


def sap(codes, factors, test_codes=None, test_factors=None, continuous: bool = False, seed: int = 0,
        n_jobs: int | None = -1) -> dict:
    """SAP of ``codes [N, D]`` for ``factors [N, K]`` (constant factors are left out)."""
    return {"sap": sap_from_matrix(sap_matrix(codes, factors, test_codes, test_factors, continuous, seed, n_jobs))}


def _evaluate(context) -> dict:
    return sap(context.train_codes, context.train_factors, context.test_codes, context.test_factors,
               continuous=context.settings["sap_continuous"], seed=context.seed, n_jobs=context.settings["n_jobs"])


METRIC_SPECS = (MetricSpec("sap", _evaluate, order=30, settings={"sap_continuous": False},  # sap_score.gin
                           fast=True, report=(ReportColumn("sap", "SAP", "sap"),)),)
