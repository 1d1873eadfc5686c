"""The one sampler and encoder cache every metric reads from.

``draw_factors`` reproduces disentanglement_lib's sampling (``generate_batch_factor_code``: batches of
16, each drawn factor by factor from one ``RandomState``), so at equal seeds probe evaluates the same
factor configurations as the reference code. ``CodeCache`` maps factor rows to image indices
(``Store.index_of``), fetches each image that is not yet encoded (``Store.read``), encodes it once in
large batches and keeps the result by image index, so the MIG/DCI/SAP/... sample and the hundreds of
thousands of fixed-factor images of the FactorVAE and β-VAE scores share one pass of the encoder.

``encode_fn(images uint8 [n, H, W, C])`` returns codes [n, D], or a dict of named per-image arrays
(``{"codes": ..., "variance": ..., "discrete": ...}``), so the cache is testable without torch.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from probe.metrics.intervention import sample_latent_factors


def draw_factors(factor_sizes, n: int, rng: np.random.RandomState, batch_size: int = 16) -> np.ndarray:
    """n factor rows drawn as disentanglement_lib draws them: batches of ``batch_size``, each factor by factor."""
    sizes = np.asarray(factor_sizes, dtype=np.int64)
    parts = []
    remaining = n
    while remaining > 0:
        m = min(remaining, batch_size)
        parts.append(sample_latent_factors(sizes, m, rng))
        remaining -= m
    return np.concatenate(parts, axis=0) if parts else np.zeros((0, sizes.size), dtype=np.int64)


def draw_train_test(factor_sizes, num_train: int, num_test: int, seed: int, batch_size: int = 16):
    """(train factors, test factors): the train draws then the test draws from ``RandomState(seed)``.

    MIG, DCI, SAP, modularity and the unsupervised metrics each start a fresh RandomState(seed) in
    disentanglement_lib and draw their train set first, so they all see these same train rows.
    """
    rng = np.random.RandomState(seed)
    train = draw_factors(factor_sizes, num_train, rng, batch_size)
    test = draw_factors(factor_sizes, num_test, rng, batch_size)
    return train, test


class CodeCache:
    """Encode each image at most once; look codes up by factor rows or image indices.

    ``index_fn(factors [n, K]) -> indices [n]``, ``fetch_fn(sorted unique indices) -> uint8 images``,
    ``encode_fn(images) -> array | dict``. ``num_images`` sizes the dense cache arrays.
    """

    def __init__(self, index_fn: Callable, fetch_fn: Callable, encode_fn: Callable, num_images: int,
                 batch_size: int = 4096):
        self.index_fn = index_fn
        self.fetch_fn = fetch_fn
        self.encode_fn = encode_fn
        self.num_images = int(num_images)
        self.batch_size = int(batch_size)
        self.have = np.zeros(self.num_images, dtype=bool)
        self.arrays: dict[str, np.ndarray] = {}
        self.images_encoded = 0  # how many images went through encode_fn (each once)

    @classmethod
    def for_store(cls, store, encode_fn: Callable, batch_size: int = 4096) -> "CodeCache":
        return cls(store.index_of, store.read, encode_fn, store.num_images, batch_size)

    def _store(self, indices: np.ndarray, out) -> None:
        if not isinstance(out, dict):
            out = {"codes": out}
        for name, value in out.items():
            value = np.asarray(value)
            if value.shape[0] != indices.size:
                raise ValueError(f"encode_fn returned {value.shape[0]} rows of {name!r} for {indices.size} images")
            if name not in self.arrays:
                self.arrays[name] = np.zeros((self.num_images, *value.shape[1:]), dtype=value.dtype)
            self.arrays[name][indices] = value

    def ensure(self, indices: np.ndarray) -> None:
        """Encode the images among ``indices`` that are not cached yet, in sorted batches."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        missing = np.unique(indices)
        missing = missing[~self.have[missing]]
        for s in range(0, missing.size, self.batch_size):
            chunk = missing[s:s + self.batch_size]
            self._store(chunk, self.encode_fn(self.fetch_fn(chunk)))
            self.have[chunk] = True
            self.images_encoded += chunk.size

    def get(self, indices: np.ndarray, name: str = "codes") -> np.ndarray:
        indices = np.asarray(indices, dtype=np.int64)
        self.ensure(indices)
        if name not in self.arrays:
            raise KeyError(f"encode_fn returns no {name!r} array (has {sorted(self.arrays)})")
        return self.arrays[name][indices]

    def codes_of(self, factors: np.ndarray, name: str = "codes") -> np.ndarray:
        """Codes [n, ...] of the images with the given factor rows [n, K]."""
        return self.get(self.index_fn(np.asarray(factors)), name)

    def has(self, name: str) -> bool:
        return name in self.arrays

