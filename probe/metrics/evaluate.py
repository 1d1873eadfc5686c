"""Evaluate one encoder (or one trained run) on a store with every metric, from one shared sample.

Sampling follows disentanglement_lib's evaluation configs (``unsupervised_study_v1/metric_configs``):
10,000 train / 5,000 test points drawn in batches of 16 from ``RandomState(seed)`` for MIG, DCI, SAP,
modularity/explicitness, InfoMEC, Gaussian TC, MCC and active units; the FactorVAE and β-VAE scores
draw their own fixed-factor batches from their own ``RandomState(seed)``. Every image any metric needs
is encoded once (``CodeCache``). Presets may pass smaller sizes through ``settings``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np

from probe.errors import UserError
from probe.metrics._common import sklearn_version

DEFAULT_METRICS = ("mig", "dci", "sap", "factor_vae_score", "beta_vae_score", "modularity_explicitness", "infomec",
                   "gaussian_tc", "active_units", "mcc", "reconstruction")
# Cheap subset for presets: no boosted trees, no fixed-factor batches.
FAST_METRICS = ("mig", "sap", "modularity_explicitness", "infomec", "gaussian_tc", "active_units", "mcc",
                "reconstruction")

DEFAULT_SETTINGS = {
    "num_train": 10000, "num_test": 5000, "draw_batch_size": 16,          # mig/dci/sap/modularity gins
    "num_bins": 20,                                                      # histogram discretizer
    "dci_predictor": "gbt", "dci_n_estimators": None,                    # dci.gin (None = sklearn default)
    "sap_continuous": False,                                             # sap_score.gin
    "factor_vae_num_variance_estimate": 10000, "factor_vae_num_train": 10000, "factor_vae_num_eval": 5000,
    "factor_vae_batch_size": 64, "factor_vae_prune_threshold": 0.05,     # factor_vae_metric.gin
    "beta_vae_num_train": 10000, "beta_vae_num_eval": 5000, "beta_vae_batch_size": 64,  # beta_vae_sklearn.gin
    "infomec_n_neighbors": 3, "infomec_prune": "range", "infomec_encoding": "auto", "infomec_max_iter": 100,
    "active_threshold": 0.8,                                             # Zietlow et al. §6
    "num_reconstruction": 5000,                                          # first images of the test sample
    "encode_batch_size": 2048, "n_jobs": -1, "device": None,
}

# Sizes for quick presets and tests (not the reference protocol; recorded with every result).
SMALL_SETTINGS = {
    "num_train": 2000, "num_test": 1000, "dci_n_estimators": 20,
    "factor_vae_num_variance_estimate": 2000, "factor_vae_num_train": 1000, "factor_vae_num_eval": 500,
    "beta_vae_num_train": 1000, "beta_vae_num_eval": 500, "num_reconstruction": 1000,
}


def resolve_settings(overrides: dict | None) -> dict:
    settings = dict(DEFAULT_SETTINGS)
    unknown = sorted(set(overrides or {}) - set(settings))
    if unknown:
        raise UserError(f"unknown evaluation setting(s) {', '.join(unknown)}; known: {', '.join(sorted(settings))}")
    settings.update(overrides or {})
    return settings


def resolve_metrics(metrics) -> tuple[str, ...]:
    if metrics is None:
        return DEFAULT_METRICS
    if isinstance(metrics, str):
        metrics = [m.strip() for m in metrics.split(",") if m.strip()]
    metrics = tuple(metrics)
    if metrics == ("fast",):
        return FAST_METRICS
    unknown = [m for m in metrics if m not in DEFAULT_METRICS]
    if unknown or not metrics:
        raise UserError(f"unknown metric(s) {', '.join(unknown) or '(none given)'}; choose from "
                        f"{', '.join(DEFAULT_METRICS)} (or 'fast')")
    return metrics


def evaluate_encoder(store, encode_fn: Callable, *, metrics=None, seed: int = 0, settings: dict | None = None,
                     reconstruct_fn: Callable | None = None, discrete: bool = False) -> dict:
    """All requested metrics for ``encode_fn`` on ``store``.

    ``encode_fn(uint8 [n, H, W, C])`` returns codes [n, D] or a dict with ``"codes"`` and optionally
    ``"variance"`` (posterior σ², for active units and sampled-code TC) and ``"discrete"`` (integer code
    indices, used by InfoMEC when ``discrete``). ``reconstruct_fn(uint8 images) -> float [n, H, W, C]`` in
    [0, 1] enables the reconstruction metrics. Metrics that need a missing piece are listed under
    ``"skipped"`` with the reason.
    """
    from probe.metrics.reconstruction import reconstruction_from_sums, reconstruction_sums
    from probe.metrics.unsupervised import active_units, gaussian_tc, mcc
    from probe.metrics.dci import dci
    from probe.metrics.infomec import infomec
    from probe.metrics.intervention import beta_vae_score, factor_vae_score
    from probe.metrics.mig import mig
    from probe.metrics.modularity import modularity_explicitness
    from probe.metrics.sap import sap
    from probe.metrics.sampler import CodeCache, draw_train_test

    metrics = resolve_metrics(metrics)
    s = resolve_settings(settings)
    sizes = np.asarray(store.factor_sizes, dtype=np.int64)
    cache = CodeCache.for_store(store, encode_fn, batch_size=s["encode_batch_size"])
    train_f, test_f = draw_train_test(sizes, s["num_train"], s["num_test"], seed, s["draw_batch_size"])
    cache.ensure(np.concatenate([store.index_of(train_f), store.index_of(test_f)]))
    train_c, test_c = cache.codes_of(train_f), cache.codes_of(test_f)
    results: dict = {}
    skipped: dict = {}
    timings: dict = {}
    jobs = s["n_jobs"]
    for name in metrics:
        t0 = time.perf_counter()
        if name == "mig":
            results[name] = mig(train_c, train_f, num_bins=s["num_bins"])
        elif name == "dci":
            if s["dci_predictor"] == "rf":  # Tripod: 90/10 split of the one sample
                results[name] = dci(train_c, train_f, predictor="rf", seed=seed,
                                            n_estimators=s["dci_n_estimators"], n_jobs=jobs)
            else:
                results[name] = dci(train_c, train_f, test_c, test_f, predictor=s["dci_predictor"], seed=seed,
                                            n_estimators=s["dci_n_estimators"], n_jobs=jobs)
        elif name == "sap":
            results[name] = sap(train_c, train_f, test_c, test_f, continuous=s["sap_continuous"], seed=seed,
                                    n_jobs=jobs)
        elif name == "modularity_explicitness":
            results[name] = modularity_explicitness(train_c, train_f, test_c, test_f,
                                                               num_bins=s["num_bins"], n_jobs=jobs)
        elif name == "infomec":
            use_discrete = discrete and cache.has("discrete")
            codes = cache.codes_of(train_f, "discrete") if use_discrete else train_c
            results[name] = infomec(codes, train_f, discrete=use_discrete,
                                                n_neighbors=s["infomec_n_neighbors"], prune=s["infomec_prune"],
                                                infoe_encoding=s["infomec_encoding"], max_iter=s["infomec_max_iter"],
                                                seed=seed, n_jobs=jobs)
        elif name == "factor_vae_score":
            results[name] = factor_vae_score(
                cache.codes_of, sizes, seed=seed, num_variance_estimate=s["factor_vae_num_variance_estimate"],
                num_train=s["factor_vae_num_train"], num_eval=s["factor_vae_num_eval"],
                batch_size=s["factor_vae_batch_size"], prune_threshold=s["factor_vae_prune_threshold"])
        elif name == "beta_vae_score":
            results[name] = beta_vae_score(
                cache.codes_of, sizes, seed=seed, batch_size=s["beta_vae_batch_size"],
                num_train=s["beta_vae_num_train"], num_eval=s["beta_vae_num_eval"])
        elif name == "gaussian_tc":
            out = gaussian_tc(train_c)
            if cache.has("variance"):  # sampled codes z = μ + σ·ε (Cheng et al. 2020), ε from RandomState(seed)
                var = cache.codes_of(train_f, "variance")
                eps = np.random.RandomState(seed).standard_normal(var.shape)
                out["gaussian_tc_sampled"] = gaussian_tc(train_c + np.sqrt(var) * eps)["gaussian_tc"]
            results[name] = out
        elif name == "active_units":
            if not cache.has("variance"):
                skipped[name] = "the model has no posterior variance"
                continue
            results[name] = active_units(cache.codes_of(train_f, "variance"), s["active_threshold"])
        elif name == "mcc":
            results[name] = mcc(train_c, train_f)
        elif name == "reconstruction":
            if reconstruct_fn is None:
                skipped[name] = "no reconstruct function"
                continue
            idx = store.index_of(test_f[: s["num_reconstruction"]])
            sums = np.zeros(2)
            count, per_image = 0, 0
            for start in range(0, idx.size, s["encode_batch_size"]):
                images = store.read(idx[start:start + s["encode_batch_size"]])
                bce, se, n, per_image = reconstruction_sums(images, reconstruct_fn(images))
                sums += (bce, se)
                count += n
            results[name] = reconstruction_from_sums(sums[0], sums[1], count, per_image)
        timings[name] = round(time.perf_counter() - t0, 4)
    return {
        "metrics": results,
        "skipped": skipped,
        "settings": {**s, "metrics": list(metrics), "seed": seed, "sklearn": sklearn_version(),
                     "store": {"path": str(getattr(store, "path", "")), "digest": getattr(store, "digest", None),
                               "name": getattr(store, "name", None)},
                     "images_encoded": int(cache.images_encoded), "timings_s": timings},
    }


def model_functions(model, device: str = "cpu", batch_size: int = 2048):
    """(encode_fn, reconstruct_fn, discrete) for a probe model (``probe.models.base`` protocol)."""
    import torch

    def to_tensor(images: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(images)).to(device).permute(0, 3, 1, 2).float().div_(255.0)

    @torch.no_grad()
    def encode_fn(images: np.ndarray) -> dict:
        parts: dict[str, list] = {}
        for s in range(0, images.shape[0], batch_size):
            x = to_tensor(images[s:s + batch_size])
            out = {"codes": model.encode(x)}
            var = model.posterior_variance(x)
            if var is not None:
                out["variance"] = var
            disc = model.discrete_codes(x)
            if disc is not None:
                out["discrete"] = disc
            for k, v in out.items():
                parts.setdefault(k, []).append(v.detach().float().cpu().numpy() if k != "discrete"
                                               else v.detach().cpu().numpy().astype(np.int64))
        return {k: np.concatenate(v) for k, v in parts.items()}

    @torch.no_grad()
    def reconstruct_fn(images: np.ndarray) -> np.ndarray:
        outs = []
        for s in range(0, images.shape[0], batch_size):
            outs.append(model.reconstruct(to_tensor(images[s:s + batch_size])).float().clamp(0, 1)
                        .permute(0, 2, 3, 1).cpu().numpy())
        return np.concatenate(outs)

    # Models without a decoder (PCL) declare it by raising NotImplementedError from reconstruct():
    # their reconstruction metrics are then listed as skipped instead of failing the evaluation.
    shape = getattr(model, "image_shape", None)
    if not callable(getattr(model, "reconstruct", None)):
        reconstruct_fn = None
    elif shape is not None:
        try:
            with torch.no_grad():
                model.reconstruct(torch.zeros((1, *shape), device=device))
        except NotImplementedError:
            reconstruct_fn = None
    return encode_fn, reconstruct_fn, getattr(model, "code_kind", "continuous") == "discrete"


def evaluate_run(run_dir, store_path, metrics=None, seed: int = 0, **sample_sizes) -> dict:
    """``{"metrics": {...}, "skipped": {...}, "settings": {...}}`` for the trained run in ``run_dir``.

    ``sample_sizes`` are keys of :data:`DEFAULT_SETTINGS` (e.g. ``num_train=2000``, ``device="cuda"``).
    """
    from probe.data import open_store
    from probe.provenance import code_version, environment
    from probe.train import load_run

    settings = resolve_settings(sample_sizes)
    store = open_store(store_path)
    device = settings["device"] or "cpu"
    model, config = load_run(run_dir, device=device)
    model_shape = tuple(getattr(model, "image_shape", ()))
    h, w, c = store.image_shape
    if model_shape and model_shape != (c, h, w):
        raise UserError(f"run {run_dir} was trained on images of shape {model_shape} (C, H, W) but store "
                        f"{store_path} holds {(c, h, w)}")
    encode_fn, reconstruct_fn, discrete = model_functions(model, device, settings["encode_batch_size"])
    result = evaluate_encoder(store, encode_fn, metrics=metrics, seed=seed, settings=sample_sizes,
                              reconstruct_fn=reconstruct_fn, discrete=discrete)
    result["settings"].update({"run_dir": str(Path(run_dir)), "run_config": config, "code_version": code_version(),
                               "environment": environment(), "code_kind": getattr(model, "code_kind", "continuous")})
    return result
