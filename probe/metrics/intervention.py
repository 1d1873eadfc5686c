"""Scores that need images generated with a factor held fixed: the FactorVAE score (Kim & Mnih 2018)
and the β-VAE score (Higgins et al. 2017), as disentanglement_lib's ``factor_vae.py`` and
``beta_vae.py``.

Both take ``codes_of(factors [n, K]) -> codes [n, D]`` (e.g. :meth:`probe.metrics.sampler.CodeCache.codes_of`)
and draw every factor batch from ``np.random.RandomState(seed)`` in disentanglement_lib's order. The
draws never depend on the codes, so all batches are drawn first and encoded in a few large calls.
Factors of size 1 are not latent factors (dSprites' colour): they are held at 0 and never drawn,
as ``SplitDiscreteStateSpace`` does.
"""

from __future__ import annotations

import warnings

import numpy as np

from probe.metrics._common import factor_sizes_of
from probe.metrics.registry import MetricSpec, ReportColumn

CHUNK_IMAGES = 1 << 17  # factor rows per codes_of call: bounds the memory of image batches


def sample_latent_factors(sizes: np.ndarray, n: int, rng: np.random.RandomState) -> np.ndarray:
    """n uniform draws over the factors of size > 1, factor by factor (disentanglement_lib order)."""
    out = np.zeros((n, sizes.size), dtype=np.int64)
    for k in np.flatnonzero(sizes > 1):
        out[:, k] = rng.randint(int(sizes[k]), size=n)
    return out


def _codes_in_chunks(codes_of, factors: np.ndarray) -> np.ndarray:
    parts = [np.asarray(codes_of(factors[s:s + CHUNK_IMAGES]), dtype=np.float64)
             for s in range(0, factors.shape[0], CHUNK_IMAGES)]
    return np.concatenate(parts, axis=0)


# -- FactorVAE score --------------------------------------------------------------------------------

def draw_factor_vae_batches(sizes, num_votes: int, batch_size: int, rng: np.random.RandomState):
    """(fixed factor index among latent factors [V], factors [V, batch_size, K])."""
    sizes = factor_sizes_of(sizes)
    latent = np.flatnonzero(sizes > 1)
    fixed = np.empty(num_votes, dtype=np.int64)
    factors = np.empty((num_votes, batch_size, sizes.size), dtype=np.int64)
    for v in range(num_votes):
        k = rng.randint(latent.size)
        batch = sample_latent_factors(sizes, batch_size, rng)
        batch[:, latent[k]] = batch[0, latent[k]]
        fixed[v], factors[v] = k, batch
    return fixed, factors


def _votes(codes: np.ndarray, fixed: np.ndarray, global_var: np.ndarray, active: np.ndarray, num_factors: int):
    local_var = np.var(codes, axis=1, ddof=1)  # [V, D]
    argmin = np.argmin(local_var[:, active] / global_var[active], axis=1)
    votes = np.zeros((num_factors, int(active.sum())), dtype=np.int64)
    np.add.at(votes, (fixed, argmin), 1)
    return votes


def factor_vae_score(codes_of, factor_sizes, seed: int = 0, num_variance_estimate: int = 10000,
                     num_train: int = 10000, num_eval: int = 5000, batch_size: int = 64,
                     prune_threshold: float = 0.05) -> dict:
    """FactorVAE score: majority-vote classifier from "which code varies least when factor k is fixed".

    Global variances from ``num_variance_estimate`` samples (ddof=1); codes with std < ``prune_threshold``
    are pruned. ``num_train`` votes build the classifier, ``num_eval`` new votes score it.
    Deviation: ``num_active_dims`` is the number of *active* codes (disentanglement_lib reports the
    length of the mask, i.e. all codes).
    """
    sizes = factor_sizes_of(factor_sizes)
    num_latent = int((sizes > 1).sum())
    rng = np.random.RandomState(seed)
    var_factors = sample_latent_factors(sizes, num_variance_estimate, rng)
    global_var = np.var(_codes_in_chunks(codes_of, var_factors), axis=0, ddof=1)
    active = np.sqrt(global_var) >= prune_threshold
    if not active.any():
        return {"train_accuracy": 0.0, "eval_accuracy": 0.0, "num_active_dims": 0.0}
    fixed_train, f_train = draw_factor_vae_batches(sizes, num_train, batch_size, rng)
    fixed_eval, f_eval = draw_factor_vae_batches(sizes, num_eval, batch_size, rng)
    d = global_var.size
    codes_train = _codes_in_chunks(codes_of, f_train.reshape(-1, sizes.size)).reshape(num_train, batch_size, d)
    codes_eval = _codes_in_chunks(codes_of, f_eval.reshape(-1, sizes.size)).reshape(num_eval, batch_size, d)
    votes_train = _votes(codes_train, fixed_train, global_var, active, num_latent)
    votes_eval = _votes(codes_eval, fixed_eval, global_var, active, num_latent)
    classifier = np.argmax(votes_train, axis=0)
    cols = np.arange(votes_train.shape[1])
    return {
        "train_accuracy": float(votes_train[classifier, cols].sum() / votes_train.sum()),
        "eval_accuracy": float(votes_eval[classifier, cols].sum() / votes_eval.sum()),
        "num_active_dims": float(active.sum()),
    }


# -- β-VAE score ----------------------------------------------------------------------------------

def draw_beta_vae_pairs(sizes, num_points: int, batch_size: int, rng: np.random.RandomState):
    """(labels [P], factors1 [P, B, K], factors2 [P, B, K]) with factor ``labels[p]`` shared by the pair."""
    sizes = factor_sizes_of(sizes)
    latent = np.flatnonzero(sizes > 1)
    labels = np.empty(num_points, dtype=np.int64)
    f1 = np.empty((num_points, batch_size, sizes.size), dtype=np.int64)
    f2 = np.empty_like(f1)
    for p in range(num_points):
        k = rng.randint(latent.size)
        a = sample_latent_factors(sizes, batch_size, rng)
        b = sample_latent_factors(sizes, batch_size, rng)
        b[:, latent[k]] = a[:, latent[k]]
        labels[p], f1[p], f2[p] = k, a, b
    return labels, f1, f2


def _pair_features(codes_of, f1: np.ndarray, f2: np.ndarray) -> np.ndarray:
    p, b, k = f1.shape
    both = np.concatenate([f1.reshape(-1, k), f2.reshape(-1, k)], axis=0)
    codes = _codes_in_chunks(codes_of, both)
    c1, c2 = codes[: p * b].reshape(p, b, -1), codes[p * b:].reshape(p, b, -1)
    return np.mean(np.abs(c1 - c2), axis=1)


def beta_vae_score(codes_of, factor_sizes, seed: int = 0, batch_size: int = 64, num_train: int = 10000,
                   num_eval: int = 5000) -> dict:
    """β-VAE score: accuracy of ``LogisticRegression(random_state=rng)`` (sklearn defaults) predicting the
    shared factor from the mean |z1 − z2| of a pair of batches.

    The defaults of LogisticRegression changed in sklearn 0.22 (liblinear/OvR → lbfgs/multinomial);
    we use the installed version's defaults and record the version with every result.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    sizes = factor_sizes_of(factor_sizes)
    rng = np.random.RandomState(seed)
    y_train, a_train, b_train = draw_beta_vae_pairs(sizes, num_train, batch_size, rng)
    x_train = _pair_features(codes_of, a_train, b_train)
    model = LogisticRegression(random_state=rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(x_train, y_train)
    y_eval, a_eval, b_eval = draw_beta_vae_pairs(sizes, num_eval, batch_size, rng)
    x_eval = _pair_features(codes_of, a_eval, b_eval)
    return {
        "train_accuracy": float(np.mean(model.predict(x_train) == y_train)),
        "eval_accuracy": float(np.mean(model.predict(x_eval) == y_eval)),
    }


def _evaluate_factor_vae(context) -> dict:
    s = context.settings
    return factor_vae_score(context.codes_of, context.factor_sizes, seed=context.seed,
                            num_variance_estimate=s["factor_vae_num_variance_estimate"],
                            num_train=s["factor_vae_num_train"], num_eval=s["factor_vae_num_eval"],
                            batch_size=s["factor_vae_batch_size"], prune_threshold=s["factor_vae_prune_threshold"])


def _evaluate_beta_vae(context) -> dict:
    s = context.settings
    return beta_vae_score(context.codes_of, context.factor_sizes, seed=context.seed,
                          batch_size=s["beta_vae_batch_size"], num_train=s["beta_vae_num_train"],
                          num_eval=s["beta_vae_num_eval"])


METRIC_SPECS = (
    MetricSpec("factor_vae_score", _evaluate_factor_vae, order=40,
               settings={"factor_vae_num_variance_estimate": 10000, "factor_vae_num_train": 10000,
                         "factor_vae_num_eval": 5000, "factor_vae_batch_size": 64,
                         "factor_vae_prune_threshold": 0.05},  # factor_vae_metric.gin
               small={"factor_vae_num_variance_estimate": 2000, "factor_vae_num_train": 1000,
                      "factor_vae_num_eval": 500},
               # the report's tables show the FactorVAE score between DCI and SAP
               report=(ReportColumn("factor_vae", "FactorVAE score", "eval_accuracy"),), report_order=25),
    MetricSpec("beta_vae_score", _evaluate_beta_vae, order=50,
               settings={"beta_vae_num_train": 10000, "beta_vae_num_eval": 5000,  # beta_vae_sklearn.gin
                         "beta_vae_batch_size": 64},
               small={"beta_vae_num_train": 1000, "beta_vae_num_eval": 500}),
)
