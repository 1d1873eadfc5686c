"""Evaluating a trained run: the run's encoder (``probe.train.run_encoder``) through the metrics
(``probe.metrics.evaluate_encoder``), with the run's provenance. Restart selection, the pipeline's
evaluate stage and ``probe evaluate`` all evaluate runs through here."""

from __future__ import annotations

from pathlib import Path

from probe.errors import UserError


def evaluate_run(run_dir, store_path, metrics=None, seed: int = 0, **sample_sizes) -> dict:
    """``{"metrics": {...}, "skipped": {...}, "settings": {...}}`` for the trained run in ``run_dir``.

    ``sample_sizes`` are evaluation settings (``probe.metrics.default_settings()``, e.g. ``num_train=2000``,
    ``device="cuda"``).
    """
    from probe.data import open_store
    from probe.metrics.evaluate import evaluate_encoder, resolve_settings
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
