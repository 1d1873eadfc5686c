"""Reconstruction quality of images in [0, 1].

* ``bce``  — Bernoulli cross-entropy summed over pixels and channels, mean over images (nats/image),
  the reconstruction term of disentanglement_lib's ``bernoulli_loss``; probabilities are clipped to
  [1e-7, 1 − 1e-7].
* ``mse``  — mean squared error per pixel and channel.
* ``psnr`` — 10·log10(1 / mse) in dB over the whole sample (peak 1), the QLAE tables' measure.
"""

from __future__ import annotations

import numpy as np

from probe.metrics.registry import MetricSpec, ReportColumn


def reconstruction_sums(images, reconstructions) -> tuple[float, float, int, int]:
    """(Σ bce, Σ squared error, number of images, values per image) for streaming accumulation."""
    x = np.asarray(images, dtype=np.float64)
    if x.dtype.kind == "u" or np.asarray(images).dtype == np.uint8:
        x = x / 255.0
    p = np.clip(np.asarray(reconstructions, dtype=np.float64), 1e-7, 1 - 1e-7)
    if p.shape != x.shape:
        raise ValueError(f"reconstructions {p.shape} and images {x.shape} differ in shape")
    bce = -(x * np.log(p) + (1 - x) * np.log1p(-p))
    return float(bce.sum()), float(((x - np.asarray(reconstructions, dtype=np.float64)) ** 2).sum()), x.shape[0], int(np.prod(x.shape[1:]))


def reconstruction_from_sums(bce_sum: float, se_sum: float, n: int, per_image: int) -> dict:
    mse = se_sum / (n * per_image)
    return {"bce": float(bce_sum / n), "mse": float(mse), "psnr": float(10 * np.log10(1.0 / mse)) if mse > 0 else float("inf")}


def reconstruction(images, reconstructions) -> dict:
    """``images`` uint8 (0..255) or float in [0, 1]; ``reconstructions`` float in [0, 1], same shape."""
    return reconstruction_from_sums(*reconstruction_sums(images, reconstructions))


def _evaluate(context) -> dict:
    """The reconstruction of the first ``num_reconstruction`` images of the test sample, in encode batches."""
    batch = context.settings["encode_batch_size"]
    idx = context.store.index_of(context.test_factors[: context.settings["num_reconstruction"]])
    sums = np.zeros(2)
    count, per_image = 0, 0
    for start in range(0, idx.size, batch):
        images = context.store.read(idx[start:start + batch])
        bce, se, n, per_image = reconstruction_sums(images, context.encoder.reconstruct(images))
        sums += (bce, se)
        count += n
    return reconstruction_from_sums(sums[0], sums[1], count, per_image)


METRIC_SPECS = (MetricSpec(
    "reconstruction", _evaluate, order=110, fast=True, needs=("reconstruct",),
    settings={"num_reconstruction": 5000},  # first images of the test sample
    small={"num_reconstruction": 1000},
    report=(ReportColumn("recon_bce", "Reconstruction (BCE, lower is better)", "bce", higher_is_better=False),
            ReportColumn("recon_mse", "Reconstruction (MSE, lower is better)", "mse", higher_is_better=False))),)
