"""Self-describing Zarr v3 stores of ground-truth datasets (format: ../shared/DESIGN.md, docs/ARCHITECTURE.md).

Layout::

    NAME.zarr/
      images   uint8 [N, H, W, C]   sharded: one inner chunk per image, SHARD_BYTES per shard file
      factors  int32 [N, K]
      attrs["probe"] = {format, name, factor_names, factor_sizes, factor_values, grid, origin, digest}

Chunking serves both access patterns: a full sequential load reads whole shard files (few, large
files), while a random batch read touches only the inner chunks (single images) it needs through each
shard's index. Stores are written under a temporary sibling directory and renamed when complete.

The digest is sha256 over a small header (shapes, dtypes) followed by the C-order bytes of ``images``
and of ``factors`` (int32, little endian). ``verify`` recomputes it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from probe.data.state_space import Rng, StateSpace
from probe.errors import UserError
from probe.provenance import atomic_path, code_version

FORMAT_VERSION = 1
SHARD_BYTES = 8 << 20  # ~8 MiB per shard file
ORIGIN_KINDS = ("official", "synthetic", "perturbed", "noise")


def images_per_shard(image_shape: Sequence[int]) -> int:
    per_image = int(np.prod(image_shape))
    return max(1, SHARD_BYTES // per_image)


class StoreDigest:
    """Incremental content digest; feed image blocks in index order, then the factors."""

    def __init__(self, images_shape: Sequence[int], factors_shape: Sequence[int]):
        self._h = hashlib.sha256()
        header = f"probe-store-v{FORMAT_VERSION}|images:uint8{list(images_shape)}|factors:int32{list(factors_shape)}|"
        self._h.update(header.encode())

    def update_images(self, block: np.ndarray) -> None:
        self._h.update(np.ascontiguousarray(block, dtype=np.uint8).tobytes())

    def finish(self, factors: np.ndarray) -> str:
        self._h.update(np.ascontiguousarray(factors, dtype="<i4").tobytes())
        return self._h.hexdigest()


def compute_digest(images: Any, factors: np.ndarray, block: int = 8192) -> str:
    """Digest of an images array-like (numpy or zarr) and factors, reading images in blocks."""
    d = StoreDigest(images.shape, factors.shape)
    for start in range(0, images.shape[0], block):
        d.update_images(np.asarray(images[start:start + block]))
    return d.finish(factors)


def _validate_meta(factor_names, factor_sizes, factor_values, factors: np.ndarray, grid) -> None:
    k = len(factor_names)
    if len(factor_sizes) != k or len(factor_values) != k:
        raise UserError(f"factor metadata disagree: {k} names, {len(factor_sizes)} sizes, {len(factor_values)} value lists")
    for name, size, values in zip(factor_names, factor_sizes, factor_values):
        if len(values) != size:
            raise UserError(f"factor {name!r}: {len(values)} physical values for {size} classes")
    if factors.ndim != 2 or factors.shape[1] != k:
        raise UserError(f"factors must have shape [N, {k}], got {list(factors.shape)}")
    if factors.size and (factors.min() < 0 or np.any(factors.max(0) >= np.asarray(factor_sizes))):
        raise UserError("factor class indices fall outside factor_sizes")
    if grid not in ("C", None):
        raise UserError(f"grid must be 'C' or None, got {grid!r}")
    if grid == "C":
        space = StateSpace(factor_sizes)
        if factors.shape[0] != space.num_states or not np.array_equal(space.ravel(factors), np.arange(space.num_states)):
            raise UserError(
                f"incomplete or misordered grid: expected all {space.num_states} factor combinations of "
                f"{list(factor_sizes)} in C order, got {factors.shape[0]} rows that do not match"
            )


class StoreWriter:
    """Fills the ``images`` array of a store being created; use through :func:`create_store`."""

    def __init__(self, group, num_images: int, image_shape: Sequence[int], factors_shape: Sequence[int]):
        self.images = group["images"]
        self.num_images = num_images
        self.image_shape = tuple(image_shape)
        self.shard_size = self.images.shards[0] if self.images.shards else self.images.chunks[0]
        self._written = np.zeros(num_images, dtype=bool)
        self._digest = StoreDigest((num_images, *image_shape), tuple(factors_shape))
        self._next_in_order = 0

    def write(self, start: int, block: np.ndarray) -> None:
        """Write ``block`` (uint8 [n, H, W, C]) at ``start``. Align blocks to ``shard_size`` for speed."""
        block = np.asarray(block)
        if block.dtype != np.uint8 or tuple(block.shape[1:]) != self.image_shape:
            raise ValueError(f"block must be uint8 [n, {', '.join(map(str, self.image_shape))}], got {block.dtype} {list(block.shape)}")
        stop = start + block.shape[0]
        if start < 0 or stop > self.num_images:
            raise ValueError(f"block [{start}, {stop}) outside [0, {self.num_images})")
        self.images[start:stop] = block
        self._written[start:stop] = True
        if start == self._next_in_order:  # in-order writes hash on the fly; others are re-read at the end
            self._digest.update_images(block)
            self._next_in_order = stop
        else:
            self._next_in_order = -1

    def _finish_digest(self, factors: np.ndarray) -> str:
        if not self._written.all():
            missing = int((~self._written).sum())
            raise UserError(f"store incomplete: {missing} of {self.num_images} images were never written")
        if self._next_in_order == self.num_images:
            return self._digest.finish(factors)
        return compute_digest(self.images, factors)


class _CreateContext:
    def __init__(self, path, images_shape, factors, meta, overwrite):
        self.path, self.images_shape, self.factors, self.meta, self.overwrite = path, images_shape, factors, meta, overwrite

    def __enter__(self) -> StoreWriter:
        import zarr
        from zarr.codecs import ZstdCodec

        self._atomic = atomic_path(self.path, overwrite=self.overwrite)
        tmp = self._atomic.__enter__()
        try:
            group = zarr.open_group(str(tmp), mode="w", zarr_format=3)
            n, h, w, c = self.images_shape
            shard = min(max(n, 1), images_per_shard((h, w, c)))
            group.create_array(
                "images", shape=self.images_shape, dtype="uint8", chunks=(1, h, w, c), shards=(shard, h, w, c),
                compressors=ZstdCodec(level=1), fill_value=0, dimension_names=("image", "height", "width", "channel"),
            )
            factors_arr = group.create_array(
                "factors", shape=self.factors.shape, dtype="int32", chunks=(max(1, min(n, 1 << 16)), self.factors.shape[1]),
                compressors=ZstdCodec(level=1), fill_value=0, dimension_names=("image", "factor"),
            )
            factors_arr[:] = self.factors
            self._group = group
            self._writer = StoreWriter(group, n, (h, w, c), self.factors.shape)
            return self._writer
        except BaseException as exc:
            self._atomic.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            try:
                meta = dict(self.meta)
                meta["digest"] = self._writer._finish_digest(self.factors)
                self._group.attrs["probe"] = meta
            except BaseException as e:
                self._atomic.__exit__(type(e), e, e.__traceback__)
                raise
        return self._atomic.__exit__(exc_type, exc, tb)


def create_store(
    path: str | os.PathLike,
    *,
    num_images: int,
    image_shape: Sequence[int],
    factors: np.ndarray,
    name: str,
    factor_names: Sequence[str],
    factor_sizes: Sequence[int],
    factor_values: Sequence[Sequence[float]],
    origin: dict,
    grid: str | None = "C",
    overwrite: bool = False,
) -> _CreateContext:
    """Context manager creating a store at ``path``; yields a :class:`StoreWriter` for the images.

    Metadata and grid completeness are checked before anything is written. The store appears at
    ``path`` only when the block exits without error and every image was written.

        with create_store(out, num_images=n, image_shape=(64, 64, 1), factors=f, ...) as w:
            for start in range(0, n, w.shard_size):
                w.write(start, render(start, start + w.shard_size))
    """
    factors = np.asarray(factors)
    if factors.dtype.kind not in "iu":
        raise UserError(f"factors must be integer class indices, got dtype {factors.dtype}")
    factors = factors.astype(np.int32)
    image_shape = tuple(int(s) for s in image_shape)
    if len(image_shape) != 3 or image_shape[2] not in (1, 3):
        raise UserError(f"image_shape must be (H, W, C) with C in (1, 3), got {image_shape}")
    if factors.shape[0] != num_images:
        raise UserError(f"{num_images} images but {factors.shape[0]} factor rows")
    _validate_meta(factor_names, factor_sizes, factor_values, factors, grid)
    origin = dict(origin)
    if origin.get("kind") not in ORIGIN_KINDS:
        raise ValueError(f"origin.kind must be one of {ORIGIN_KINDS}, got {origin.get('kind')!r}")
    origin.setdefault("probe_version", code_version())
    meta = {
        "format": FORMAT_VERSION,
        "name": name,
        "factor_names": list(map(str, factor_names)),
        "factor_sizes": [int(s) for s in factor_sizes],
        "factor_values": [[float(v) for v in vals] for vals in factor_values],
        "grid": grid,
        "origin": origin,
    }
    return _CreateContext(path, (num_images, *image_shape), factors, meta, overwrite)


def write_store(path: str | os.PathLike, images: np.ndarray, factors: np.ndarray, **meta) -> "Store":
    """Write an in-memory ``images`` array (uint8 [N, H, W, C]) as a store; returns the opened store."""
    images = np.asarray(images)
    with create_store(path, num_images=images.shape[0], image_shape=images.shape[1:], factors=factors, **meta) as w:
        for start in range(0, images.shape[0], w.shard_size):
            w.write(start, images[start:start + w.shard_size])
    return open_store(path)


def write_store_blocks(path: str | os.PathLike, blocks: Iterable[tuple[int, np.ndarray]], *, num_images: int,
                       image_shape: Sequence[int], factors: np.ndarray, **meta) -> "Store":
    """Write a store from an iterable of ``(start, uint8 block)`` pairs (e.g. rendered in parallel)."""
    with create_store(path, num_images=num_images, image_shape=image_shape, factors=factors, **meta) as w:
        for start, block in blocks:
            w.write(start, block)
    return open_store(path)


class Store:
    """An opened store. ``images`` is the lazy zarr array; ``factors`` is held in memory (int64)."""

    def __init__(self, path: str | os.PathLike):
        import zarr

        self.path = Path(path)
        if not self.path.exists():
            raise UserError(f"no store at {self.path}")
        try:
            self.group = zarr.open_group(str(self.path), mode="r")
            meta = dict(self.group.attrs["probe"])
            self.images = self.group["images"]
            factors = self.group["factors"]
        except UserError:
            raise
        except Exception as exc:  # any zarr/json failure means this is not a readable probe store
            raise UserError(f"{self.path} is not a readable probe store ({type(exc).__name__}: {exc})") from None
        if meta.get("format") != FORMAT_VERSION:
            raise UserError(f"{self.path}: unsupported store format {meta.get('format')!r} (expected {FORMAT_VERSION})")
        self.meta = meta
        self.factors = np.asarray(factors[:], dtype=np.int64)
        self.name: str = meta["name"]
        self.factor_names: list[str] = list(meta["factor_names"])
        self.factor_sizes: list[int] = [int(s) for s in meta["factor_sizes"]]
        self.factor_values: list[list[float]] = [list(v) for v in meta["factor_values"]]
        self.grid: str | None = meta.get("grid")
        self.origin: dict = dict(meta.get("origin", {}))
        self.digest: str = meta["digest"]
        self.state_space = StateSpace(self.factor_sizes)
        self._index_lookup: dict | None = None

    # -- shape ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def num_images(self) -> int:
        return len(self)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(int(s) for s in self.images.shape[1:])  # (H, W, C)

    @property
    def num_channels(self) -> int:
        return self.image_shape[2]

    @property
    def num_factors(self) -> int:
        return len(self.factor_sizes)

    def __repr__(self) -> str:
        return (f"Store({str(self.path)!r}, name={self.name!r}, images={list(self.images.shape)}, "
                f"factors={dict(zip(self.factor_names, self.factor_sizes))}, kind={self.origin.get('kind')!r})")

    # -- factors ----------------------------------------------------------------------------------
    def sample_factors(self, n: int, rng: Rng) -> np.ndarray:
        return self.state_space.sample_factors(n, rng)

    def index_of(self, factors: np.ndarray) -> np.ndarray:
        """Image indices holding the given factor rows [..., K] (vectorised)."""
        flat = self.state_space.ravel(np.asarray(factors))
        if self.grid == "C":
            return flat
        if self._index_lookup is None:
            keys = self.state_space.ravel(self.factors)
            order = np.argsort(keys, kind="stable")
            self._index_lookup = {"keys": keys[order], "order": order}
        keys, order = self._index_lookup["keys"], self._index_lookup["order"]
        pos = np.searchsorted(keys, flat)
        pos_clipped = np.minimum(pos, len(keys) - 1)
        if np.any(keys[pos_clipped] != flat):
            raise KeyError("some factor combinations are not present in this store")
        return order[pos_clipped]

    def factor_physical_values(self, factors: np.ndarray) -> np.ndarray:
        """Class indices [N, K] -> physical values [N, K] (float64)."""
        factors = np.asarray(factors)
        out = np.empty(factors.shape, dtype=np.float64)
        for k, vals in enumerate(self.factor_values):
            out[..., k] = np.asarray(vals, dtype=np.float64)[factors[..., k]]
        return out

    # -- images -----------------------------------------------------------------------------------
    def read(self, indices: np.ndarray) -> np.ndarray:
        """uint8 images [n, H, W, C] at arbitrary indices, in the order given."""
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size == 0:
            return np.empty((0, *self.image_shape), dtype=np.uint8)
        uniq, inverse = np.unique(indices, return_inverse=True)
        block = self.images.get_orthogonal_selection((uniq,))
        return block[inverse.reshape(indices.shape)]

    def images_of(self, factors: np.ndarray) -> np.ndarray:
        return self.read(self.index_of(factors))

    def load_numpy(self) -> np.ndarray:
        """The whole images array in memory (uint8 [N, H, W, C])."""
        return np.asarray(self.images[:])

    def load(self, device: str | None = None):
        """The whole images array as a uint8 torch tensor [N, H, W, C] on ``device`` (default cpu)."""
        import torch

        tensor = torch.from_numpy(self.load_numpy())
        return tensor.to(device) if device is not None else tensor

    # -- integrity --------------------------------------------------------------------------------
    def compute_digest(self) -> str:
        return compute_digest(self.images, self.factors)

    def verify(self) -> dict:
        """Recompute the content digest and re-check the grid; raises UserError on any mismatch."""
        _validate_meta(self.factor_names, self.factor_sizes, self.factor_values, self.factors, self.grid)
        actual = self.compute_digest()
        if actual != self.digest:
            raise UserError(f"{self.path}: content digest mismatch (recorded {self.digest[:16]}…, actual {actual[:16]}…); the store is corrupt")
        return {"path": str(self.path), "digest": actual, "num_images": self.num_images, "ok": True}

    def info(self) -> dict:
        return {
            "path": str(self.path), "name": self.name, "images": list(self.images.shape),
            "factor_names": self.factor_names, "factor_sizes": self.factor_sizes, "grid": self.grid,
            "origin": self.origin, "digest": self.digest,
        }


def open_store(path: str | os.PathLike) -> Store:
    return Store(path)
