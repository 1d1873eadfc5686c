"""DCI: disentanglement, completeness, informativeness (Eastwood & Williams 2018).

Two predictors, named by ``predictor``:

* ``"gbt"`` — disentanglement_lib ``dci.py`` (and FactorQVAE's port): one
  ``GradientBoostingClassifier`` per factor with sklearn defaults on the raw codes, trained on the
  train sample, informativeness = train / test accuracy on a separate test sample.
  Deviation: we pass ``random_state=seed`` so that ties between features break the same way in every
  run (disentanglement_lib leaves it unset, so its values are not reproducible bit for bit).
* ``"rf"`` — Tripod ``metrics/dci.py``: ``RandomForestClassifier(n_estimators=100, criterion="entropy",
  max_depth=10)`` per factor on standardised codes, with a 90/10 ``train_test_split(random_state=42)``
  of the one sample when no test sample is given; informativeness = accuracies.

Importance R[i, j] = |feature_importances_| of code i for factor j. D and C use disentanglement_lib's
formulas: per-code (per-factor) 1 − entropy with base K (D) and the 1e-11 offset, weighted by the
code's (factor's) share of the total importance.
"""

from __future__ import annotations

import numpy as np
import scipy.stats

from probe.errors import UserError
from probe.metrics._common import as_codes, as_factors, thread_map, varying_factors
from probe.metrics.registry import MetricSpec, ReportColumn

PREDICTORS = ("gbt", "rf")


def disentanglement_from_importance(importance: np.ndarray) -> float:
    r = np.asarray(importance, dtype=np.float64)
    per_code = 1.0 - scipy.stats.entropy(r.T + 1e-11, base=r.shape[1])
    if r.sum() == 0.0:
        r = np.ones_like(r)
    weights = r.sum(axis=1) / r.sum()
    return float(np.sum(per_code * weights))


def completeness_from_importance(importance: np.ndarray) -> float:
    r = np.asarray(importance, dtype=np.float64)
    per_factor = 1.0 - scipy.stats.entropy(r + 1e-11, base=r.shape[0])
    if r.sum() == 0.0:
        r = np.ones_like(r)
    weights = r.sum(axis=0) / r.sum()
    return float(np.sum(per_factor * weights))


def _fit_one(predictor: str, x_train, y_train, x_test, y_test, seed: int, n_estimators: int | None):
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier

    if predictor == "gbt":
        kw = {} if n_estimators is None else {"n_estimators": n_estimators}
        model = GradientBoostingClassifier(random_state=seed, **kw)
    else:
        model = RandomForestClassifier(n_estimators=100 if n_estimators is None else n_estimators, criterion="entropy",
                                       max_depth=10, min_samples_split=2, random_state=seed)
    model.fit(x_train, y_train)
    importance = np.abs(model.feature_importances_)
    train_acc = float(np.mean(model.predict(x_train) == y_train))
    test_acc = float(np.mean(model.predict(x_test) == y_test))
    return importance, train_acc, test_acc


def dci_importance(codes, factors, test_codes=None, test_factors=None, predictor: str = "gbt", seed: int = 0,
                   n_estimators: int | None = None, n_jobs: int | None = -1):
    """(importance [D, K'], train accuracies [K'], test accuracies [K']) over the varying factors."""
    if predictor not in PREDICTORS:
        raise UserError(f"unknown DCI predictor {predictor!r} (choose from {', '.join(PREDICTORS)})")
    codes = as_codes(codes)
    factors = as_factors(factors, codes.shape[0])
    if (test_codes is None) != (test_factors is None):
        raise UserError("give both test_codes and test_factors, or neither")
    if test_codes is None:
        if predictor == "gbt":
            raise UserError("predictor='gbt' (disentanglement_lib) needs a separate test sample")
        from sklearn.model_selection import train_test_split

        codes, test_codes, factors, test_factors = train_test_split(codes, factors, test_size=0.1, random_state=42)
    else:
        test_codes = as_codes(test_codes, "test_codes")
        test_factors = as_factors(test_factors, test_codes.shape[0], "test_factors")
    keep = varying_factors(factors)
    x_train, x_test = codes.astype(np.float64), test_codes.astype(np.float64)
    if predictor == "rf":  # Tripod standardises float latents
        from sklearn.preprocessing import StandardScaler

        scaler = StandardScaler().fit(x_train)
        x_train, x_test = scaler.transform(x_train), scaler.transform(x_test)
    results = thread_map(
        lambda j: _fit_one(predictor, x_train, factors[:, j], x_test, test_factors[:, j], seed, n_estimators),
        keep, n_jobs)
    importance = np.stack([r[0] for r in results], axis=1)
    return importance, np.array([r[1] for r in results]), np.array([r[2] for r in results])


def dci(codes, factors, test_codes=None, test_factors=None, predictor: str = "gbt", seed: int = 0,
        n_estimators: int | None = None, n_jobs: int | None = -1) -> dict:
    """DCI of ``codes [N, D]`` for ``factors [N, K]``.

    ``predictor="gbt"`` (default, disentanglement_lib) needs the test sample; ``"rf"`` (Tripod) splits
    the sample 90/10 when none is given. ``n_estimators`` overrides the predictor's tree count (tests,
    smoke presets); ``n_jobs`` fits the per-factor predictors on threads (same values as one job).
    """
    importance, train_acc, test_acc = dci_importance(codes, factors, test_codes, test_factors, predictor, seed,
                                                     n_estimators, n_jobs)
    return {
        "disentanglement": disentanglement_from_importance(importance),
        "completeness": completeness_from_importance(importance),
        "informativeness_train": float(np.mean(train_acc)),
        "informativeness_test": float(np.mean(test_acc)),
    }


def _evaluate(context) -> dict:
    s = context.settings
    if s["dci_predictor"] == "rf":  # Tripod: 90/10 split of the one sample
        return dci(context.train_codes, context.train_factors, predictor="rf", seed=context.seed,
                   n_estimators=s["dci_n_estimators"], n_jobs=s["n_jobs"])
    return dci(context.train_codes, context.train_factors, context.test_codes, context.test_factors,
               predictor=s["dci_predictor"], seed=context.seed, n_estimators=s["dci_n_estimators"], n_jobs=s["n_jobs"])


METRIC_SPECS = (MetricSpec(
    "dci", _evaluate, order=20,
    settings={"dci_predictor": "gbt", "dci_n_estimators": None},  # dci.gin (None = sklearn default)
    small={"dci_n_estimators": 20},
    report=(ReportColumn("dci_d", "DCI-D", "disentanglement"),)),)
