"""Input checks and the thread pool shared by the metric functions."""

from __future__ import annotations

import os
from typing import Callable, Iterable, Sequence

import numpy as np

from probe.errors import UserError


def as_codes(codes, name: str = "codes") -> np.ndarray:
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[0] == 0 or codes.shape[1] == 0:
        raise UserError(f"{name} must be a non-empty [N, D] array, got shape {codes.shape}")
    if codes.dtype.kind == "f" and not np.all(np.isfinite(codes)):
        raise UserError(f"{name} contains NaN or infinite values")
    return codes


def as_factors(factors, n: int, name: str = "factors") -> np.ndarray:
    factors = np.asarray(factors)
    if factors.ndim != 2 or factors.shape[0] != n:
        raise UserError(f"{name} must be an integer [N, K] array with N={n} rows, got shape {factors.shape}")
    if factors.dtype.kind not in "iu":
        if not np.all(np.equal(np.mod(factors, 1), 0)):
            raise UserError(f"{name} must hold integer class indices, got dtype {factors.dtype}")
        factors = factors.astype(np.int64)
    return factors


def varying_factors(factors: np.ndarray) -> np.ndarray:
    """Indices of factors that take more than one value in the sample.

    A constant factor has zero entropy; disentanglement_lib never sees one (dSprites' colour is not a
    latent factor there) and would divide by zero. probe leaves such factors out of every score.
    """
    return np.flatnonzero([np.unique(factors[:, j]).size > 1 for j in range(factors.shape[1])])


def resolve_jobs(n_jobs: int | None) -> int:
    if n_jobs is None or n_jobs == 0:
        return 1
    if n_jobs < 0:
        return max(1, (os.cpu_count() or 1) + 1 + n_jobs)
    return int(n_jobs)


def thread_map(fn: Callable, items: Iterable, n_jobs: int | None) -> list:
    """``[fn(x) for x in items]`` on a thread pool (sklearn's tree builders, liblinear and BLAS release the GIL)."""
    items = list(items)
    jobs = min(resolve_jobs(n_jobs), len(items)) if items else 1
    if jobs <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(fn, items))


def factor_sizes_of(space_or_sizes) -> np.ndarray:
    sizes = getattr(space_or_sizes, "factor_sizes", space_or_sizes)
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.ndim != 1 or sizes.size == 0 or np.any(sizes < 1):
        raise UserError(f"factor sizes must be a non-empty list of positive ints, got {space_or_sizes!r}")
    return sizes


def sklearn_version() -> str:
    import sklearn

    return sklearn.__version__


def unpenalised_logistic_regression(**kwargs):
    """``LogisticRegression`` without a penalty, spelled for the installed sklearn (C=inf from 1.8 on)."""
    from sklearn.linear_model import LogisticRegression

    major, minor = (int(p) for p in sklearn_version().split(".")[:2])
    if (major, minor) >= (1, 8):
        return LogisticRegression(C=np.inf, **kwargs)
    return LogisticRegression(penalty=None, **kwargs)


__all__: Sequence[str] = ["as_codes", "as_factors", "varying_factors", "thread_map", "factor_sizes_of"]
