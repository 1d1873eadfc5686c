"""Self-describing Zarr v3 stores of ground-truth datasets (format: ../shared/DESIGN.md, docs/ARCHITECTURE.md).

Layout::

    NAME.zarr/
      images   uint8 [N, H, W, C]   sharded: one inner chunk per image, SHARD_BYTES per shard file
      factors  int32 [N, K]
      attrs["probe"] = {format, name, factor_names, factor_sizes, factor_values, grid, origin, digest}

Chunking serves both access patterns: a full sequential load reads whole shard files (few, large
files), while a random batch read touches only the inner chunks (single images) it needs through each
shard's index. Stores are written under a temporary sibling directory and renamed when complete.

``images`` is stored without compression: zarr-python's per-inner-chunk overhead (~30 µs per zstd call,
plus its async machinery) capped random reads at ~1k img/s, so the store reads and writes the shard files
directly (:class:`ShardLayout`: the sharding codec's documented layout, inner chunks followed by an index
of (offset, nbytes) uint64 pairs and a crc32c) and falls back to zarr for any layout it does not know.
Plain ``zarr.open_group`` reads every store (tests check the fast path against it); see docs/notes/data.md.

The digest is sha256 over a small header (shapes, dtypes) followed by the C-order bytes of ``images``
and of ``factors`` (int32, little endian). ``verify`` recomputes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from probe.data.state_space import Rng, StateSpace
from probe.errors import UserError
from probe.provenance import atomic_path, code_version

FORMAT_VERSION = 1
SHARD_BYTES = 8 << 20  # ~8 MiB per shard file
ORIGIN_KINDS = ("official", "synthetic", "perturbed", "noise")
VERIFIED_MARKER = ".probe-verified.json"  # Store.ensure_intact's record of a successful verify


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


MAX_UINT64 = np.uint64(2**64 - 1)
_MAX = 2**64 - 1


class ShardLayout:
    """Direct access to the shard files of a sharded ``uint8`` images array (Zarr v3 ``sharding_indexed``).

    Handles exactly the layout :func:`create_store` writes (one image per inner chunk, inner codecs
    ``bytes`` optionally followed by ``zstd``, index at the end encoded as little-endian uint64 pairs plus
    crc32c, default chunk keys); :meth:`from_array_dir` returns None for anything else and callers use zarr.
    A shard file is ``chunk_0 … chunk_{S-1}`` followed by the index ``[(offset, nbytes)] * S`` and the crc32c
    of the index; empty chunks have offset = nbytes = 2**64 - 1 and read as the fill value (0).
    """

    max_open_files = 256  # shard files kept open (pread needs no seek, so they are shared safely)

    def __init__(self, array_dir: Path, shape, shard_n: int, compressed: bool, separator: str):
        self.dir = Path(array_dir)
        self.shape = tuple(int(s) for s in shape)
        self.image_shape = self.shape[1:]
        self.chunk_bytes = int(np.prod(self.image_shape))
        self.shard_n = int(shard_n)
        self.compressed = compressed
        self.separator = separator
        self._index: dict[int, np.ndarray] = {}
        self._fds: dict[int, int] = {}

    @classmethod
    def from_array_dir(cls, array_dir) -> "ShardLayout | None":
        import json

        try:
            meta = json.loads((Path(array_dir) / "zarr.json").read_text())
            (codec,) = meta["codecs"]
            conf = codec["configuration"]
            shape = meta["shape"]
            shard_shape = meta["chunk_grid"]["configuration"]["chunk_shape"]
            key = meta["chunk_key_encoding"]
            inner = [c["name"] for c in conf["codecs"]]
            index_codecs = conf["index_codecs"]
            ok = (meta["data_type"] == "uint8" and meta.get("fill_value", 0) == 0 and len(shape) == 4
                  and codec["name"] == "sharding_indexed" and conf.get("index_location", "end") == "end"
                  and list(conf["chunk_shape"]) == [1, *shape[1:]] and list(shard_shape[1:]) == list(shape[1:])
                  and inner in (["bytes"], ["bytes", "zstd"])
                  and [c["name"] for c in index_codecs] == ["bytes", "crc32c"]
                  and index_codecs[0].get("configuration", {}).get("endian", "little") == "little"
                  and key["name"] == "default")
            if not ok:
                return None
            return cls(Path(array_dir), shape, shard_shape[0], inner == ["bytes", "zstd"],
                       key.get("configuration", {}).get("separator", "/"))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def __getstate__(self):  # file descriptors do not travel to other processes
        state = dict(self.__dict__)
        state["_fds"] = {}
        return state

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()

    def __del__(self):
        self.close()

    def shard_path(self, j: int) -> Path:
        return self.dir / self.separator.join(["c", str(j), "0", "0", "0"])

    def _fd(self, j: int) -> int | None:
        fd = self._fds.get(j)
        if fd is None:
            try:
                fd = os.open(self.shard_path(j), os.O_RDONLY)
            except FileNotFoundError:
                return None
            if len(self._fds) >= self.max_open_files:
                self.close()
            self._fds[j] = fd
        return fd

    def index(self, j: int) -> np.ndarray | None:
        """(offset, nbytes) uint64 [S, 2] of shard j (None when the shard file does not exist)."""
        idx = self._index.get(j)
        if idx is None:
            fd = self._fd(j)
            if fd is None:
                return None
            size = 16 * self.shard_n + 4
            raw = os.pread(fd, size, os.fstat(fd).st_size - size)
            if len(raw) != size or _crc32c(raw[:-4]) != int.from_bytes(raw[-4:], "little"):
                raise UserError(f"{self.shard_path(j)}: shard index is corrupt (checksum mismatch); the store is damaged")
            idx = np.frombuffer(raw[:-4], dtype="<u8").reshape(self.shard_n, 2)
            self._index[j] = idx
        return idx

    def _decode_into(self, data: bytes, dest: np.ndarray) -> None:
        if self.compressed:
            import numcodecs

            numcodecs.Zstd().decode(data, out=dest)
        else:
            dest.reshape(-1)[:] = np.frombuffer(data, dtype=np.uint8)

    def read_sorted(self, indices: np.ndarray, out: np.ndarray) -> None:
        """out[p] = image indices[p] for sorted, unique ``indices``."""
        indices = np.asarray(indices, dtype=np.int64)
        shards = indices // self.shard_n
        starts = np.flatnonzero(np.r_[True, shards[1:] != shards[:-1]]).tolist()
        bounds = starts[1:] + [indices.size]
        flat = out.reshape(out.shape[0], -1)
        for lo, hi in zip(starts, bounds):
            j = int(shards[lo])
            idx = self.index(j)
            if idx is None:
                out[lo:hi] = 0
                continue
            fd = self._fd(j)
            entries = idx[indices[lo:hi] - j * self.shard_n]
            for p, (off, nb) in enumerate(entries.tolist(), start=lo):  # Python ints: no numpy scalars per image
                if off == _MAX:
                    out[p] = 0
                elif not self.compressed and nb == self.chunk_bytes:
                    if os.preadv(fd, [flat[p]], off) != nb:
                        raise UserError(f"{self.shard_path(j)} is truncated; the store is damaged")
                else:
                    self._decode_into(os.pread(fd, nb, off), out[p])

    def read_range(self, start: int, stop: int, out: np.ndarray) -> None:
        """out[:] = images[start:stop], reading whole shards at once."""
        pos = start
        while pos < stop:
            j = pos // self.shard_n
            lo = pos - j * self.shard_n
            hi = min(stop - j * self.shard_n, self.shard_n, self.shape[0] - j * self.shard_n)
            dest = out[pos - start: pos - start + (hi - lo)]
            idx = self.index(j)
            if idx is None:
                dest[...] = 0
            else:
                offs, nbs = idx[lo:hi, 0], idx[lo:hi, 1]
                expected = idx[lo, 0] + self.chunk_bytes * np.arange(hi - lo, dtype=np.uint64)
                if not self.compressed and np.array_equal(offs, expected) and np.all(nbs == self.chunk_bytes):
                    nbytes = (hi - lo) * self.chunk_bytes  # contiguous, in order: one read straight into out
                    if os.preadv(self._fd(j), [memoryview(dest).cast("B")], int(offs[0])) != nbytes:
                        raise UserError(f"{self.shard_path(j)} is truncated; the store is damaged")
                else:
                    self.read_sorted(np.arange(j * self.shard_n + lo, j * self.shard_n + hi), dest)
            pos += hi - lo

    def write_shard(self, j: int, block: np.ndarray) -> None:
        """Write shard j from ``block`` (all its images: shard_n, or fewer for the last shard). Uncompressed only."""
        count = block.shape[0]
        idx = np.full((self.shard_n, 2), MAX_UINT64, dtype="<u8")
        idx[:count, 0] = np.arange(count, dtype=np.uint64) * np.uint64(self.chunk_bytes)
        idx[:count, 1] = self.chunk_bytes
        index_bytes = idx.tobytes()
        path = self.shard_path(j)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(memoryview(np.ascontiguousarray(block)).cast("B"))
            f.write(index_bytes)
            f.write(_crc32c(index_bytes).to_bytes(4, "little"))
        self._index.pop(j, None)
        fd = self._fds.pop(j, None)
        if fd is not None:
            os.close(fd)


def _crc32c(data: bytes) -> int:
    import google_crc32c  # a zarr dependency (its crc32c codec)

    return int(google_crc32c.value(data))


class _FastImages:
    """Array-like view (shape, [start:stop]) used to digest a store through its shard layout."""

    def __init__(self, layout: ShardLayout):
        self.layout, self.shape = layout, layout.shape

    def __getitem__(self, sl: slice) -> np.ndarray:
        start, stop, _ = sl.indices(self.shape[0])
        out = np.empty((max(stop - start, 0), *self.shape[1:]), dtype=np.uint8)
        self.layout.read_range(start, stop, out)
        return out


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
        layout = ShardLayout.from_array_dir(_array_dir(self.images)) if _is_local(self.images) else None
        self._layout = layout if layout is not None and not layout.compressed else None

    def write(self, start: int, block: np.ndarray) -> None:
        """Write ``block`` (uint8 [n, H, W, C]) at ``start``. Align blocks to ``shard_size`` for speed."""
        block = np.asarray(block)
        if block.dtype != np.uint8 or tuple(block.shape[1:]) != self.image_shape:
            raise ValueError(f"block must be uint8 [n, {', '.join(map(str, self.image_shape))}], got {block.dtype} {list(block.shape)}")
        stop = start + block.shape[0]
        if start < 0 or stop > self.num_images:
            raise ValueError(f"block [{start}, {stop}) outside [0, {self.num_images})")
        if self._layout is not None and start % self.shard_size == 0 and (
                block.shape[0] % self.shard_size == 0 or stop == self.num_images):
            for s in range(0, block.shape[0], self.shard_size):  # whole shards: write the files directly
                self._layout.write_shard((start + s) // self.shard_size, block[s:s + self.shard_size])
        else:
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
        images = _FastImages(self._layout) if self._layout is not None else self.images
        return compute_digest(images, factors)


def _array_dir(array) -> Path:
    return Path(str(array.store_path.store.root)) / array.store_path.path


def _is_local(array) -> bool:
    from zarr.storage import LocalStore

    return isinstance(array.store, LocalStore)


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
                compressors=None, fill_value=0, dimension_names=("image", "height", "width", "channel"),
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
        self._layout = ShardLayout.from_array_dir(_array_dir(self.images)) if _is_local(self.images) else None

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
        if indices.min() < 0 or indices.max() >= len(self):
            raise IndexError(f"image indices must lie in [0, {len(self)})")
        uniq, inverse = np.unique(indices, return_inverse=True)
        if self._layout is not None:
            block = np.empty((uniq.size, *self.image_shape), dtype=np.uint8)
            self._layout.read_sorted(uniq, block)
        else:
            block = self.images.get_orthogonal_selection((uniq,))
        if uniq.size == indices.size and np.array_equal(uniq, indices.reshape(-1)):
            return block.reshape(*indices.shape, *self.image_shape)
        return block[inverse.reshape(indices.shape)]

    def load_numpy(self) -> np.ndarray:
        """The whole images array in memory (uint8 [N, H, W, C])."""
        if self._layout is None:
            return np.asarray(self.images[:])
        out = np.empty((len(self), *self.image_shape), dtype=np.uint8)
        self._layout.read_range(0, len(self), out)
        return out

    def load(self, device: str | None = None):
        """The whole images array as a uint8 torch tensor [N, H, W, C] on ``device`` (default cpu)."""
        import torch

        tensor = torch.from_numpy(self.load_numpy())
        return tensor.to(device) if device is not None else tensor

    # -- integrity --------------------------------------------------------------------------------
    def compute_digest(self) -> str:
        images = _FastImages(self._layout) if self._layout is not None else self.images
        return compute_digest(images, self.factors)

    def verify(self) -> dict:
        """Recompute the content digest and re-check the grid; raises UserError on any mismatch."""
        try:
            _validate_meta(self.factor_names, self.factor_sizes, self.factor_values, self.factors, self.grid)
        except UserError as exc:
            raise UserError(f"{self.path}: {exc}; the store's metadata does not match its factors") from None
        try:
            actual = self.compute_digest()
        except (OSError, ValueError, KeyError) as exc:  # a truncated or unreadable shard file
            raise UserError(f"{self.path}: the images cannot be read ({type(exc).__name__}: {exc}); "
                            "the store is corrupt") from None
        if actual != self.digest:
            raise UserError(f"{self.path}: content digest mismatch (recorded {self.digest[:16]}…, actual {actual[:16]}…); the store is corrupt")
        return {"path": str(self.path), "digest": actual, "num_images": self.num_images, "ok": True}

    def _file_stats(self) -> list[list]:
        """[relative path, size, mtime_ns] of every file of the store (the marker itself left out), sorted."""
        stats = []
        for root, _, files in os.walk(self.path):
            for name in files:
                if name.startswith(VERIFIED_MARKER):
                    continue
                path = Path(root) / name
                st = path.stat()
                stats.append([path.relative_to(self.path).as_posix(), st.st_size, st.st_mtime_ns])
        return sorted(stats)

    def ensure_intact(self) -> "Store":
        """Prove the store intact before training or evaluating on it; UserError naming the store if not.

        A full :meth:`verify` (grid and content digest) runs once; its success is recorded in a marker file
        keyed to every file's size and modification time, so later opens cost one ``stat`` per file. Any
        change to a file (a flipped bit, a deleted or truncated shard, an edited attribute) invalidates the
        marker and the next open verifies again. The marker guards against accidents, not tampering:
        ``probe datasets verify`` always recomputes. A store that cannot take the marker (read-only) is
        verified on every open."""
        stats = self._file_stats()
        marker = self.path / VERIFIED_MARKER
        try:
            record = json.loads(marker.read_text())
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict) and record.get("digest") == self.digest and record.get("files") == stats:
            return self
        self.verify()
        try:  # temporary sibling + rename: a concurrent opener never reads half a marker
            fd, tmp = tempfile.mkstemp(prefix=VERIFIED_MARKER, dir=self.path)
            with os.fdopen(fd, "w") as f:
                json.dump({"digest": self.digest, "files": stats}, f)
            os.replace(tmp, marker)
        except OSError:
            pass
        return self

    def info(self) -> dict:
        return {
            "path": str(self.path), "name": self.name, "images": list(self.images.shape),
            "factor_names": self.factor_names, "factor_sizes": self.factor_sizes, "grid": self.grid,
            "origin": self.origin, "digest": self.digest,
        }


def open_store(path: str | os.PathLike, *, verify: bool = False) -> Store:
    """Open a store; ``verify=True`` also proves it intact (:meth:`Store.ensure_intact`), as everything that
    trains or evaluates on a store must."""
    store = Store(path)
    return store.ensure_intact() if verify else store
