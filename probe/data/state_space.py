"""Vectorised factor algebra for a complete C-order grid of discrete factors.

Image ``i`` of a complete store has factors ``np.unravel_index(i, factor_sizes)``; the inverse is a dot
product with the C-order strides (disentanglement_lib's ``factor_bases``). Every function works on whole
arrays: no per-sample Python.

Random draws accept either a legacy ``np.random.RandomState`` (the metrics use one, as
disentanglement_lib does, so draws happen factor by factor in the same order) or a ``np.random.Generator``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

Rng = np.random.RandomState | np.random.Generator


def _randint(rng: Rng, high: int, size) -> np.ndarray:
    if isinstance(rng, np.random.Generator):
        return rng.integers(0, high, size=size)
    return rng.randint(high, size=size)


class StateSpace:
    """The factor grid ``Π factor_sizes`` with index ↔ factor conversions and samplers."""

    def __init__(self, factor_sizes: Sequence[int]):
        sizes = np.asarray(factor_sizes, dtype=np.int64)
        if sizes.ndim != 1 or sizes.size == 0 or np.any(sizes < 1):
            raise ValueError(f"factor_sizes must be a non-empty list of positive ints, got {factor_sizes!r}")
        self.factor_sizes = sizes
        self.num_factors = int(sizes.size)
        self.num_states = int(np.prod(sizes))
        # C-order strides: base_k = Π_{m>k} size_m
        self.strides = np.concatenate([np.cumprod(sizes[::-1])[::-1][1:], [1]]).astype(np.int64)

    def __repr__(self) -> str:
        return f"StateSpace({self.factor_sizes.tolist()})"

    # -- index <-> factors ----------------------------------------------------------------------
    def ravel(self, factors: np.ndarray) -> np.ndarray:
        """Factor class indices [..., K] -> flat grid index [...] (int64)."""
        factors = np.asarray(factors)
        if factors.shape[-1] != self.num_factors:
            raise ValueError(f"expected {self.num_factors} factors, got shape {factors.shape}")
        if np.any(factors < 0) or np.any(factors >= self.factor_sizes):
            raise ValueError("factor index out of range for factor_sizes " f"{self.factor_sizes.tolist()}")
        return factors.astype(np.int64) @ self.strides

    def unravel(self, index: np.ndarray) -> np.ndarray:
        """Flat grid index [...] -> factor class indices [..., K] (int64)."""
        index = np.asarray(index, dtype=np.int64)
        return (index[..., None] // self.strides) % self.factor_sizes

    def all_factors(self) -> np.ndarray:
        return self.unravel(np.arange(self.num_states))

    # -- sampling --------------------------------------------------------------------------------
    def sample_factors(self, n: int, rng: Rng) -> np.ndarray:
        """n uniform draws from the grid, factor by factor (disentanglement_lib's draw order)."""
        out = np.empty((n, self.num_factors), dtype=np.int64)
        for k, size in enumerate(self.factor_sizes):
            out[:, k] = _randint(rng, int(size), n)
        return out

    def traversal(self, base_factors: Sequence[int], factor_index: int) -> np.ndarray:
        """All values of one factor with the others held at ``base_factors``: [size_k, K]."""
        base = np.asarray(base_factors, dtype=np.int64)
        size = int(self.factor_sizes[factor_index])
        out = np.repeat(base[None, :], size, axis=0)
        out[:, factor_index] = np.arange(size)
        return out

    def traversals(self, base_factors: Sequence[int]) -> list[np.ndarray]:
        return [self.traversal(base_factors, k) for k in range(self.num_factors)]
