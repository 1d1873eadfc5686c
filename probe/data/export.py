"""Export any store (official, synthetic, perturbed, noise) in the official file layout of its dataset, so other
code bases load probe's (perturbed) benchmarks unchanged.

- dSprites, ``npz``: ``imgs`` [N, H, W], ``latents_classes`` int64 [N, 6], ``latents_values`` float64 [N, 6]
  (colour column first: class 0, value 1.0; shape values 1, 2, 3), ``metadata`` (a pickled dict, as the official
  file). ``imgs`` is uint8 0/1 when every pixel is 0 or 255 (the official encoding); otherwise (perturbed and noise
  stores) float32 pixel/255 in [0, 1], which the reference loaders' ``imgs[i].astype(float32)`` reads unchanged and
  ``probe datasets build dsprites`` maps back to the same uint8 pixels. ``h5`` writes the same arrays as
  ``imgs``, ``latents/classes``, ``latents/values`` (the official .hdf5 sibling).
- Shapes3D, ``h5``: ``images`` uint8 [N, 64, 64, 3] and ``labels`` float64 [N, 6] physical values (3dshapes.h5).
- MPI3D, ``npz``: ``images`` uint8 [N, 64, 64, 3] in C order.
Everything is streamed block by block (no full copy of the images in memory) and written atomically.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from probe.data.store import Store, open_store
from probe.errors import UserError
from probe.provenance import atomic_path

BLOCK = 8192
DSPRITES_LATENTS = ("color", "shape", "scale", "orientation", "posX", "posY")


def _blocks(store: Store, transform=None):
    for start in range(0, len(store), BLOCK):
        block = store.read(np.arange(start, min(start + BLOCK, len(store))))
        yield transform(block) if transform else block


def _is_binary(store: Store) -> bool:
    for block in _blocks(store):
        if np.any((block != 0) & (block != 255)):
            return False
    return True


def _npy_header(f, dtype, shape) -> None:
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_2_0(f, header)


def _write_npz(path: Path, arrays: dict, compress: bool) -> None:
    """arrays: name -> ndarray, or (dtype, shape, block iterator) for streamed arrays; None values are pickled objects."""
    comp = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=comp, compresslevel=1 if compress else None, allowZip64=True) as zf:
        for name, arr in arrays.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as f:
                if isinstance(arr, tuple):
                    dtype, shape, blocks = arr
                    _npy_header(f, dtype, shape)
                    for block in blocks:
                        f.write(np.ascontiguousarray(block, dtype=dtype).tobytes())
                else:
                    np.lib.format.write_array(f, np.asarray(arr), allow_pickle=arr.dtype == object)


def _dsprites_arrays(store: Store):
    n, (h, w, _c) = len(store), store.image_shape
    binary = _is_binary(store)
    if binary:
        imgs = (np.uint8, (n, h, w), _blocks(store, lambda b: (b[..., 0] // 255).astype(np.uint8)))
    else:
        imgs = (np.float32, (n, h, w), _blocks(store, lambda b: b[..., 0].astype(np.float32) / np.float32(255.0)))
    classes = np.zeros((n, 6), dtype=np.int64)
    classes[:, 1:] = store.factors
    values = np.ones((n, 6), dtype=np.float64)
    values[:, 1:] = store.factor_physical_values(store.factors)
    meta = {
        "title": f"dSprites layout exported by probe from {store.path.name} ({store.origin.get('kind')})",
        "description": "Exported by `probe datasets export`; store digest " + store.digest,
        "version": 1, "author": "probe",
        "latents_names": DSPRITES_LATENTS,
        "latents_sizes": np.array([1, *store.factor_sizes]),
        "latents_possible_values": {"color": np.array([1.0]), **{
            name: np.asarray(v) for name, v in zip(DSPRITES_LATENTS[1:], store.factor_values)}},
        "pixels": "uint8 0/1" if binary else "float32 in [0, 1] (pixel / 255)",
    }
    return imgs, classes, values, meta, binary


def export_store(store_path: str | os.PathLike, fmt: str, out_path: str | os.PathLike) -> Path:
    """Write the store at ``store_path`` as ``fmt`` ("h5" or "npz") in its dataset's official layout."""
    store = open_store(store_path)
    out = Path(out_path)
    name = store.name
    if fmt not in ("h5", "npz"):
        raise UserError(f"--format must be h5 or npz, got {fmt!r}")
    if name == "dsprites":
        if store.num_factors != 5 or store.num_channels != 1:
            raise UserError(f"{store.path}: not a dSprites store (factors {store.factor_names}, {store.num_channels} channels)")
        imgs, classes, values, meta, _ = _dsprites_arrays(store)
        with atomic_path(out) as tmp:
            if fmt == "npz":
                _write_npz(tmp, {"imgs": imgs, "latents_classes": classes, "latents_values": values,
                                 "metadata": np.array(meta, dtype=object)}, compress=True)
            else:
                import h5py

                with h5py.File(tmp, "w") as f:
                    dtype, shape, blocks = imgs
                    ds = f.create_dataset("imgs", shape=shape, dtype=dtype, chunks=(min(BLOCK, shape[0]), *shape[1:]))
                    for i, block in enumerate(blocks):
                        ds[i * BLOCK:i * BLOCK + block.shape[0]] = block
                    f.create_dataset("latents/classes", data=classes)
                    f.create_dataset("latents/values", data=values)
        return out
    if name == "shapes3d":
        if fmt != "h5":
            raise UserError("Shapes3D's official layout is HDF5 (3dshapes.h5): use --format h5")
        import h5py

        labels = store.factor_physical_values(store.factors)
        with atomic_path(out) as tmp:
            with h5py.File(tmp, "w") as f:
                n = len(store)
                ds = f.create_dataset("images", shape=(n, *store.image_shape), dtype=np.uint8,
                                      chunks=(min(1024, n), *store.image_shape))
                for i, block in enumerate(_blocks(store)):
                    ds[i * BLOCK:i * BLOCK + block.shape[0]] = block
                f.create_dataset("labels", data=labels)
        return out
    if name.startswith("mpi3d"):
        if fmt != "npz":
            raise UserError("MPI3D's official layout is npz with key `images`: use --format npz")
        with atomic_path(out) as tmp:
            _write_npz(tmp, {"images": (np.uint8, (len(store), *store.image_shape), _blocks(store))}, compress=False)
        return out
    raise UserError(f"no official single-file layout known for dataset {name!r} (supported: dsprites, shapes3d, mpi3d_*)")
