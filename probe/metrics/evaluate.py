"""Evaluate one encoder on a store with every registered metric (``probe.metrics.registry``), from one
shared sample.

Sampling follows disentanglement_lib's evaluation configs (``unsupervised_study_v1/metric_configs``):
10,000 train / 5,000 test points drawn in batches of 16 from ``RandomState(seed)`` for MIG, DCI, SAP,
modularity/explicitness, InfoMEC, Gaussian TC, MCC and active units; the FactorVAE and β-VAE scores
draw their own fixed-factor batches from their own ``RandomState(seed)``. Every image any metric needs
is encoded once (``CodeCache``). Presets may pass smaller sizes through ``settings``.

``evaluate_run`` evaluates a trained run folder: the run's encoder (``probe.train.run_encoder``, imported when it is
called: the metric functions themselves import nothing from training) through ``evaluate_encoder``, with the run's
provenance. Restart selection, the pipeline's evaluate stages and ``probe evaluate`` (``probe.metrics.cli``) all
evaluate runs through it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from probe.errors import UserError
from probe.metrics._common import sklearn_version
from probe.metrics.registry import REQUIREMENTS, default_metrics, default_settings, fast_metrics, metric_spec
from probe.metrics.sampler import CodeCache, draw_train_test


@dataclass(frozen=True)
class Encoder:
    """What evaluation reads from a model (``probe.train.run_encoder`` gives these three for a trained run).

    ``encode(uint8 [n, H, W, C])`` returns codes [n, D] or a dict with ``"codes"`` and optionally
    ``"variance"`` (posterior σ², for active units and sampled-code TC) and ``"discrete"`` (integer code
    indices, used by InfoMEC when ``discrete``). ``reconstruct(uint8 images) -> float [n, H, W, C]`` in
    [0, 1], or None: the reconstruction metric is then skipped.
    """

    encode: Callable
    reconstruct: Callable | None = None
    discrete: bool = False


@dataclass(frozen=True)
class EvaluationContext:
    """What every metric's ``compute`` reads: the shared train/test sample of factors and their codes,
    the code cache (any other factor rows, any other array of the encoder), the store, the seed and the
    resolved settings."""

    store: object
    encoder: Encoder
    cache: CodeCache
    factor_sizes: np.ndarray
    train_factors: np.ndarray
    test_factors: np.ndarray
    train_codes: np.ndarray
    test_codes: np.ndarray
    seed: int
    settings: dict

    def has(self, requirement: str) -> bool:
        """Whether the encoder provides a ``registry.REQUIREMENTS`` entry."""
        if requirement == "reconstruct":
            return self.encoder.reconstruct is not None
        if requirement == "discrete":
            return bool(self.encoder.discrete) and self.cache.has("discrete")
        return self.cache.has(requirement)

    def codes_of(self, factors: np.ndarray, name: str = "codes") -> np.ndarray:
        return self.cache.codes_of(factors, name)


def resolve_settings(overrides: dict | None) -> dict:
    settings = default_settings()
    unknown = sorted(set(overrides or {}) - set(settings))
    if unknown:
        raise UserError(f"unknown evaluation setting(s) {', '.join(unknown)}; known: {', '.join(sorted(settings))}")
    settings.update(overrides or {})
    return settings


def resolve_metrics(metrics) -> tuple[str, ...]:
    known = default_metrics()
    if metrics is None:
        return known
    if isinstance(metrics, str):
        metrics = [m.strip() for m in metrics.split(",") if m.strip()]
    metrics = tuple(metrics)
    if metrics == ("fast",):
        return fast_metrics()
    unknown = [m for m in metrics if m not in known]
    if unknown or not metrics:
        raise UserError(f"unknown metric(s) {', '.join(unknown) or '(none given)'}; choose from "
                        f"{', '.join(known)} (or 'fast')")
    return metrics


def evaluate_encoder(store, encoder: Encoder, *, metrics=None, seed: int = 0, settings: dict | None = None) -> dict:
    """All requested metrics for ``encoder`` on ``store``: ``{"metrics", "skipped", "settings"}``.
    Metrics whose ``needs`` the encoder lacks are listed under ``"skipped"`` with the reason."""
    metrics = resolve_metrics(metrics)
    s = resolve_settings(settings)
    sizes = np.asarray(store.factor_sizes, dtype=np.int64)
    cache = CodeCache.for_store(store, encoder.encode, batch_size=s["encode_batch_size"])
    train_f, test_f = draw_train_test(sizes, s["num_train"], s["num_test"], seed, s["draw_batch_size"])
    cache.ensure(np.concatenate([store.index_of(train_f), store.index_of(test_f)]))
    context = EvaluationContext(store, encoder, cache, sizes, train_f, test_f, cache.codes_of(train_f),
                                cache.codes_of(test_f), seed, s)
    results: dict = {}
    skipped: dict = {}
    timings: dict = {}
    for name in metrics:
        spec = metric_spec(name)
        missing = [need for need in spec.needs if not context.has(need)]
        if missing:
            skipped[name] = REQUIREMENTS[missing[0]]
            continue
        t0 = time.perf_counter()
        results[name] = spec.compute(context)
        timings[name] = round(time.perf_counter() - t0, 4)
    return {
        "metrics": results,
        "skipped": skipped,
        "settings": {**s, "metrics": list(metrics), "seed": seed, "sklearn": sklearn_version(),
                     "store": {"path": str(getattr(store, "path", "")), "digest": getattr(store, "digest", None),
                               "name": getattr(store, "name", None)},
                     "images_encoded": int(cache.images_encoded), "timings_s": timings},
    }


def evaluate_run(run_dir, store_path, metrics=None, seed: int = 0, **sample_sizes) -> dict:
    """``{"metrics": {...}, "skipped": {...}, "settings": {...}}`` for the trained run in ``run_dir``.

    ``sample_sizes`` are evaluation settings (``probe.metrics.default_settings()``, e.g. ``num_train=2000``,
    ``device="cuda"``).
    """
    from probe.data import open_store
    from probe.provenance import code_version, environment
    from probe.train import run_encoder

    settings = resolve_settings(sample_sizes)
    store = open_store(store_path, verify=True)
    encoder = run_encoder(run_dir, device=settings["device"] or "cpu", batch_size=settings["encode_batch_size"])
    model_shape = tuple(getattr(encoder.model, "image_shape", ()))
    h, w, c = store.image_shape
    if model_shape and model_shape != (c, h, w):
        raise UserError(f"run {run_dir} was trained on images of shape {model_shape} (C, H, W) but store "
                        f"{store_path} holds {(c, h, w)}")
    result = evaluate_encoder(store, encoder, metrics=metrics, seed=seed, settings=sample_sizes)
    result["settings"].update({"run_dir": str(Path(run_dir)), "run_config": encoder.config,
                               "code_version": code_version(), "environment": environment(),
                               "code_kind": getattr(encoder.model, "code_kind", "continuous")})
    return result
