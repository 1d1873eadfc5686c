"""Readers of the official dataset files. Each returns a :class:`Source`: the factor grid it found and a
generator of uint8 image blocks in C order of that grid. ``probe.data.sources.build`` writes them to a store.

Every reader accepts reduced grids (tests write tiny files in the exact official layout): factor sizes are
inferred from the labels where the file has them (dSprites, Shapes3D, Falcor3D, Isaac3D, Cars3D) and taken
from the card or ``factor_sizes`` where it has none (MPI3D). Anything unexpected (missing keys, wrong dtypes or
shapes, an incomplete or misordered grid, a truncated file) raises UserError naming the file.
"""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from probe.data.state_space import StateSpace
from probe.errors import UserError

# exceptions that mean "this file is not what it claims to be"
FORMAT_ERRORS = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error, tarfile.TarError,
                 IndexError, TypeError)


@dataclass
class Source:
    factors: np.ndarray                      # int64 [N, K], already in C order (== unravel(arange(N)))
    factor_sizes: list[int]
    factor_values: list[list[float]]
    image_shape: tuple[int, int, int]
    blocks: Callable[[int], Iterator[np.ndarray]]   # block_size -> uint8 [b, H, W, C] blocks in index order
    files: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)

    @property
    def num_images(self) -> int:
        return int(self.factors.shape[0])


# -- helpers ------------------------------------------------------------------------------------------------
def classes_from_values(values: np.ndarray, path, what: str) -> tuple[np.ndarray, list[int], list[list[float]]]:
    """Float labels [N, K] -> class indices [N, K] (np.unique per column), sizes, physical values."""
    values = np.asarray(values)
    if values.ndim != 2 or not np.issubdtype(values.dtype, np.number):
        raise UserError(f"{path}: {what} must be a numeric [N, K] array, got {values.dtype} {list(values.shape)}")
    classes = np.empty(values.shape, dtype=np.int64)
    uniques = []
    for k in range(values.shape[1]):
        u, inv = np.unique(values[:, k], return_inverse=True)
        classes[:, k] = inv.reshape(-1)
        uniques.append(u.astype(np.float64).tolist())
    return classes, [len(u) for u in uniques], uniques


def grid_order(classes: np.ndarray, sizes: Sequence[int], path) -> np.ndarray | None:
    """None if rows are already the complete C-order grid; else the permutation that sorts them into it."""
    space = StateSpace(sizes)
    if classes.shape[0] != space.num_states:
        raise UserError(f"{path}: incomplete grid: {classes.shape[0]} images but the factor sizes {list(sizes)} "
                        f"found in the labels need {space.num_states}")
    flat = space.ravel(classes)
    if np.array_equal(flat, np.arange(space.num_states)):
        return None
    order = np.argsort(flat, kind="stable")
    if not np.array_equal(flat[order], np.arange(space.num_states)):
        raise UserError(f"{path}: incomplete grid: some factor combinations are missing or repeated")
    return order


def check_c_order(classes: np.ndarray, sizes: Sequence[int], path) -> None:
    if grid_order(classes, sizes, path) is not None:
        raise UserError(f"{path}: images are not stored in C order of the factors {list(sizes)} (misordered grid)")


class NpyStream:
    """Read an ``.npy`` member of an ``.npz`` block by block (never materialises the whole array)."""

    def __init__(self, zf: zipfile.ZipFile, key: str, path):
        self.path, self.key = path, key
        try:
            self.f = zf.open(key + ".npy")
            version = np.lib.format.read_magic(self.f)
            reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            self.shape, fortran, self.dtype = reader(self.f)
        except KeyError:
            raise UserError(f"{path}: key {key!r} missing (keys: {_npz_keys(zf)})") from None
        except FORMAT_ERRORS as exc:
            raise UserError(f"{path}: cannot read {key!r} ({type(exc).__name__}: {exc}); the file is corrupt") from None
        if fortran:
            raise UserError(f"{path}: {key!r} is stored in Fortran order; expected the official C-order array")
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def read(self, rows: int) -> np.ndarray:
        try:
            raw = self.f.read(rows * self.row_bytes)
        except FORMAT_ERRORS as exc:
            raise UserError(f"{self.path}: {self.key!r} is corrupt ({type(exc).__name__}: {exc})") from None
        if len(raw) != rows * self.row_bytes:
            raise UserError(f"{self.path}: {self.key!r} is truncated")
        return np.frombuffer(raw, dtype=self.dtype).reshape(rows, *self.shape[1:])


def _npz_keys(zf: zipfile.ZipFile) -> list[str]:
    return sorted(n[:-4] for n in zf.namelist() if n.endswith(".npy"))


def open_zip(path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except FORMAT_ERRORS as exc:
        raise UserError(f"{path}: not a readable npz/zip file ({type(exc).__name__}: {exc}); it may be truncated — "
                        "download it again") from None


def load_small(zf: zipfile.ZipFile, key: str, path) -> np.ndarray:
    s = NpyStream(zf, key, path)
    return s.read(int(s.shape[0])) if s.shape else s.read(1)


def file_entry(path) -> dict:
    from probe.provenance import sha256_file

    path = Path(path)
    return {"name": path.name, "sha256": sha256_file(path), "bytes": path.stat().st_size}


def resize_rgb(img, size: int, method: str) -> np.ndarray:
    from PIL import Image

    pil = img if isinstance(img, Image.Image) else Image.fromarray(np.asarray(img))
    pil = pil.convert("RGB")
    if pil.size != (size, size):
        pil = pil.resize((size, size), {"bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}[method])
    return np.asarray(pil, dtype=np.uint8)


# -- dSprites ------------------------------------------------------------------------------------------------
def read_dsprites(path, card: dict, factor_sizes=None) -> Source:
    zf = open_zip(path)
    keys = _npz_keys(zf)
    missing = {"imgs", "latents_classes", "latents_values", "metadata"} - set(keys)
    if missing:
        raise UserError(f"{path}: not the dSprites npz layout: keys {sorted(missing)} missing (found {keys})")
    classes = load_small(zf, "latents_classes", path)
    values = load_small(zf, "latents_values", path)
    imgs = NpyStream(zf, "imgs", path)
    n = imgs.shape[0] if imgs.shape else 0
    if (len(imgs.shape) != 3 or imgs.shape[1] != imgs.shape[2] or imgs.dtype not in (np.uint8, np.float32)
            or classes.shape != (n, 6) or values.shape != (n, 6) or not np.issubdtype(classes.dtype, np.integer)):
        raise UserError(f"{path}: unexpected shapes/dtypes: imgs {imgs.dtype} {list(imgs.shape)}, latents_classes "
                        f"{classes.dtype} {list(classes.shape)}, latents_values {values.dtype} {list(values.shape)}; "
                        "expected imgs uint8 [N, 64, 64] (0/1) and [N, 6] latents")
    if n == 0 or np.any(classes[:, 0] != 0):
        raise UserError(f"{path}: the colour latent must be constant 0 (dSprites has one colour)")
    factors = classes[:, 1:].astype(np.int64)
    sizes = (factors.max(axis=0) + 1).tolist()
    check_c_order(factors, sizes, path)
    strides = StateSpace(sizes).strides
    fvalues = [values[np.arange(s) * strides[k], k + 1].astype(np.float64).tolist() for k, s in enumerate(sizes)]
    res = int(imgs.shape[1])

    def blocks(size: int):
        for start in range(0, n, size):
            raw = imgs.read(min(size, n - start))
            if raw.dtype == np.uint8:  # official: 0/1
                if raw.max(initial=0) > 1:
                    raise UserError(f"{path}: imgs must hold 0/1 pixels (official dSprites); found values > 1")
                out = raw * np.uint8(255)
            else:  # float32 in [0, 1]: probe's export of non-binary (perturbed / noise) stores
                out = np.rint(np.clip(raw, 0.0, 1.0) * 255.0).astype(np.uint8)
            yield out[..., None]

    return Source(factors, sizes, fvalues, (res, res, 1), blocks, [file_entry(path)], {"pixel_map": "x*255"})


# -- Shapes3D ------------------------------------------------------------------------------------------------
def read_shapes3d(path, card: dict, factor_sizes=None) -> Source:
    import h5py

    try:
        f = h5py.File(path, "r")
    except FORMAT_ERRORS as exc:
        raise UserError(f"{path}: not a readable HDF5 file ({type(exc).__name__}: {exc}); it may be truncated") from None
    if "images" not in f or "labels" not in f:
        raise UserError(f"{path}: not the 3dshapes.h5 layout: needs datasets 'images' and 'labels' (found {sorted(f.keys())})")
    images, labels_ds = f["images"], f["labels"]
    n = images.shape[0]
    if (images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3 or labels_ds.shape != (n, 6)):
        raise UserError(f"{path}: unexpected shapes/dtypes: images {images.dtype} {list(images.shape)}, labels "
                        f"{labels_ds.dtype} {list(labels_ds.shape)}; expected uint8 [N, 64, 64, 3] and [N, 6]")
    try:
        labels = labels_ds[:]
    except FORMAT_ERRORS as exc:
        raise UserError(f"{path}: cannot read labels ({exc}); the file is corrupt") from None
    factors, sizes, fvalues = classes_from_values(labels, path, "labels")
    check_c_order(factors, sizes, path)

    def blocks(size: int):
        for start in range(0, n, size):
            try:
                yield images[start:start + size]
            except FORMAT_ERRORS as exc:
                raise UserError(f"{path}: cannot read images [{start}:{start + size}] ({exc}); the file is corrupt") from None

    return Source(factors, sizes, fvalues, tuple(images.shape[1:]), blocks, [file_entry(path)], {})


# -- MPI3D ---------------------------------------------------------------------------------------------------
def read_mpi3d(path, card: dict, factor_sizes=None) -> Source:
    zf = open_zip(path)
    images = NpyStream(zf, "images", path)
    n = images.shape[0] if images.shape else 0
    if images.dtype != np.uint8 or len(images.shape) != 4 or images.shape[3] != 3:
        raise UserError(f"{path}: 'images' must be uint8 [N, 64, 64, 3], got {images.dtype} {list(images.shape)}")
    candidates = [list(factor_sizes)] if factor_sizes else [card["factor_sizes"], *card.get("alternative_factor_sizes", [])]
    sizes = next((s for s in candidates if int(np.prod(s)) == n), None)
    if sizes is None:
        raise UserError(f"{path}: {n} images do not fill the grid {' or '.join(map(str, candidates))} "
                        "(incomplete grid; pass --factor-sizes for a reduced file)")
    factors = StateSpace(sizes).all_factors()
    fvalues = [list(map(float, range(s))) for s in sizes]

    def blocks(size: int):
        for start in range(0, n, size):
            yield images.read(min(size, n - start))

    return Source(factors, list(sizes), fvalues, tuple(images.shape[1:]), blocks, [file_entry(path)], {})


# -- Falcor3D / Isaac3D: image folders + label arrays ---------------------------------------------------------
class _Folder:
    """An extracted folder or the released zip, addressed by relative member names."""

    def __init__(self, path):
        self.path = Path(path)
        self.zip = open_zip(self.path) if self.path.is_file() else None
        if self.zip is None and not self.path.is_dir():
            raise UserError(f"{path} is neither the released zip nor its extracted folder")
        self.names = (self.zip.namelist() if self.zip else
                      [str(p.relative_to(self.path)).replace(os.sep, "/") for p in self.path.rglob("*") if p.is_file()])

    def find(self, suffix: str) -> str | None:
        hits = sorted(n for n in self.names if n.endswith(suffix))
        return hits[0] if hits else None

    def read(self, name: str) -> bytes:
        if self.zip is not None:
            return self.zip.read(name)
        return (self.path / name).read_bytes()

    def reopen(self) -> "_Folder":  # zipfile handles are not shared between threads
        return _Folder(self.path)


def read_image_folder(path, card: dict, factor_sizes=None, labels_suffix: str = "labels.npy") -> Source:
    folder = _Folder(path)
    label_name = folder.find(labels_suffix)
    if label_name is None:
        raise UserError(f"{path}: no {labels_suffix} found (the {card['title']} release has {card['format']})")
    try:
        labels = np.load(io.BytesIO(folder.read(label_name)), allow_pickle=False)
    except FORMAT_ERRORS as exc:
        raise UserError(f"{path}: cannot read {label_name} ({type(exc).__name__}: {exc})") from None
    k = len(card["factor_names"])
    if labels.ndim != 2 or labels.shape[1] != k:
        raise UserError(f"{path}: {label_name} must be [N, {k}], got {list(labels.shape)}")
    prefix = label_name.rsplit("/", 1)[0] + "/" if "/" in label_name else ""
    images = sorted(n for n in folder.names if n.startswith(prefix + "images/") and n.endswith(".png"))
    if len(images) != labels.shape[0]:
        raise UserError(f"{path}: {len(images)} images but {labels.shape[0]} label rows (incomplete release)")
    factors, sizes, fvalues = classes_from_values(labels, path, label_name)
    order = grid_order(factors, sizes, path)
    if order is not None:  # image files are addressed by their row; reorder them into the C-order grid
        images = [images[i] for i in order]
        factors = factors[order]
    res = int(card["resolution"])

    def decode(names: list[str]) -> np.ndarray:
        from PIL import Image

        local = folder.reopen()
        out = np.empty((len(names), res, res, 3), dtype=np.uint8)
        for i, name in enumerate(names):
            try:
                out[i] = resize_rgb(Image.open(io.BytesIO(local.read(name))), res, "bicubic")
            except FORMAT_ERRORS as exc:
                raise UserError(f"{path}: cannot decode {name} ({type(exc).__name__}: {exc})") from None
        return out

    def blocks(size: int):
        import dask

        workers = os.cpu_count() or 1
        sub = max(1, size // max(1, workers))
        for start in range(0, len(images), size):
            names = images[start:start + size]
            parts = [dask.delayed(decode)(names[s:s + sub]) for s in range(0, len(names), sub)]
            yield np.concatenate(dask.compute(*parts, scheduler="threads", num_workers=workers))

    files = [file_entry(path)] if folder.zip else [{"name": Path(path).name + "/" + label_name,
                                                    **{k2: v for k2, v in file_entry(Path(path) / label_name).items() if k2 != "name"}}]
    return Source(factors, sizes, fvalues, (res, res, 3), blocks, files, {"resize": "PIL bicubic", "resolution": res})


def read_falcor3d(path, card, factor_sizes=None) -> Source:
    return read_image_folder(path, card, factor_sizes, labels_suffix="train-rec.labels")


def read_isaac3d(path, card, factor_sizes=None) -> Source:
    return read_image_folder(path, card, factor_sizes, labels_suffix="labels.npy")


# -- Cars3D --------------------------------------------------------------------------------------------------
def read_cars3d(path, card: dict, factor_sizes=None) -> Source:
    from scipy.io import loadmat

    path = Path(path)
    if path.is_dir():
        members = {str(p.relative_to(path)).replace(os.sep, "/"): p for p in path.rglob("*") if p.is_file()}
        read = lambda name: members[name].read_bytes()  # noqa: E731
        names = list(members)
        files = []
    else:
        try:
            tar = tarfile.open(path, "r:*")
            names = [m.name for m in tar.getmembers() if m.isfile()]
        except FORMAT_ERRORS as exc:
            raise UserError(f"{path}: not a readable tar archive ({type(exc).__name__}: {exc}); it may be truncated") from None

        def read(name):
            try:
                return tar.extractfile(name).read()
            except FORMAT_ERRORS as exc:
                raise UserError(f"{path}: cannot read {name} ({exc}); the archive is corrupt") from None
        files = [file_entry(path)]
    lists = sorted(n for n in names if n.endswith("cars/list.txt"))
    if not lists:
        raise UserError(f"{path}: no cars/list.txt (expected the nips2015-analogy-data layout: {card['format']})")
    base = lists[0][: -len("list.txt")]
    objects = [line.strip() for line in read(lists[0]).decode().splitlines() if line.strip()]
    if not objects:
        raise UserError(f"{path}: cars/list.txt is empty")
    res = int(card["resolution"])
    views = None
    per_object = []
    for obj in objects:
        name = base + obj + ".mat"
        if name not in names:
            raise UserError(f"{path}: {name} listed in list.txt is missing (incomplete grid)")
        try:
            im = loadmat(io.BytesIO(read(name)))["im"]
        except UserError:
            raise
        except (*FORMAT_ERRORS, NotImplementedError) as exc:
            raise UserError(f"{path}: cannot read {name} ({type(exc).__name__}: {exc})") from None
        if im.dtype != np.uint8 or im.ndim != 5 or im.shape[2] != 3:
            raise UserError(f"{path}: {name}: 'im' must be uint8 [H, W, 3, azimuths, elevations], got {im.dtype} {list(im.shape)}")
        if views is None:
            views = im.shape[3:]
        elif im.shape[3:] != views:
            raise UserError(f"{path}: {name} has {im.shape[3:]} views, others {views} (incomplete grid)")
        n_az, n_el = views
        small = np.empty((n_el, n_az, res, res, 3), dtype=np.uint8)
        for e in range(n_el):
            for a in range(n_az):
                small[e, a] = resize_rgb(im[:, :, :, a, e], res, "lanczos")
        per_object.append(small)
    n_az, n_el = views
    sizes = [int(n_el), int(n_az), len(objects)]
    stack = np.stack(per_object, axis=2).reshape(-1, res, res, 3)  # [E, A, O, ...] -> C order (object fastest)
    factors = StateSpace(sizes).all_factors()
    fvalues = [list(map(float, range(s))) for s in sizes]

    def blocks(size: int):
        for start in range(0, stack.shape[0], size):
            yield stack[start:start + size]

    return Source(factors, sizes, fvalues, (res, res, 3), blocks, files,
                  {"resize": "PIL lanczos", "object_order": "list.txt", "objects": objects})


READERS = {"dsprites": read_dsprites, "shapes3d": read_shapes3d, "mpi3d_toy": read_mpi3d, "mpi3d_realistic": read_mpi3d,
           "mpi3d_real": read_mpi3d, "mpi3d_complex": read_mpi3d, "falcor3d": read_falcor3d, "isaac3d": read_isaac3d,
           "cars3d": read_cars3d}
