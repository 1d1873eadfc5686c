"""Store performance against the naive reference, in one run on this machine.

    python benchmarks/stores.py [--workdir DIR] [--keep]

Prints (and writes as JSON to WORKDIR/results.json):
1. generation throughput of the full-size procedural dSprites and Shapes3D grids (img/s), timed on a
   representative fraction (the first shards of the full grid; rendering cost does not depend on the index),
   against a naive reference that renders one image per call and writes it with h5py item by item;
2. import throughput of a full-size official-format file (dSprites npz, 737,280 images, written by this script
   with ``np.savez_compressed``-style deflate; pixels are procedural sprites), in MB/s of pixels, against the
   naive reference: h5py per-item reads of an HDF5 copy with one image per chunk (disent's re-saved format)
   written through zarr's own sharded writer, timed on a fraction;
3. random 64-image batch reads from the resulting disk store (img/s), against h5py per-item reads of the
   per-image-chunked HDF5 file and against plain zarr batch reads of the same store; plus a full load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probe.data import open_store  # noqa: E402
from probe.data.sources import build  # noqa: E402
from probe.data.state_space import StateSpace  # noqa: E402
from probe.data.synth import GENERATORS, render_indices  # noqa: E402


def rate(n, seconds):
    return n / seconds if seconds > 0 else float("inf")


def bench_generation(name, workdir: Path, n_shards: int, n_naive: int) -> dict:
    import h5py

    gen = GENERATORS[name]
    sizes = gen.FULL_SIZES
    full = StateSpace(sizes).num_states
    # ours: generate() over a prefix of the full grid = the first shards, same code path as the full run
    from probe.data.store import images_per_shard

    shard = images_per_shard((64, 64, gen.CHANNELS))
    n = min(full, n_shards * shard)
    import dask

    tasks = [dask.delayed(render_indices)(name, np.arange(s, min(s + shard, n)), sizes) for s in range(0, n, shard)]
    t0 = time.perf_counter()
    out = dask.compute(*tasks, scheduler="threads")
    # write them like generate() does (through the store writer) to include the write cost
    from probe.data.store import create_store

    path = workdir / f"gen-{name}.zarr"
    with create_store(path, num_images=n, image_shape=(64, 64, gen.CHANNELS), factors=np.arange(n)[:, None],
                      name=name, factor_names=["index"], factor_sizes=[n], factor_values=[list(range(n))],
                      origin={"kind": "synthetic"}) as w:
        for i, block in enumerate(out):
            w.write(i * shard, block)
    ours = time.perf_counter() - t0
    shutil.rmtree(path)
    # naive: one image per render call, h5py item-by-item writes
    t0 = time.perf_counter()
    with h5py.File(workdir / f"naive-{name}.h5", "w") as f:
        ds = f.create_dataset("images", shape=(n_naive, 64, 64, gen.CHANNELS), dtype=np.uint8, chunks=(1, 64, 64, gen.CHANNELS))
        for i in range(n_naive):
            ds[i] = render_indices(name, np.array([i]), sizes)[0]
    naive = time.perf_counter() - t0
    (workdir / f"naive-{name}.h5").unlink()
    r = {"images_timed": n, "img_per_s": rate(n, ours), "naive_images_timed": n_naive, "naive_img_per_s": rate(n_naive, naive),
         "full_grid": full, "estimated_full_grid_s": full / rate(n, ours)}
    r["ratio"] = r["img_per_s"] / r["naive_img_per_s"]
    return r


def write_official_dsprites_npz(path: Path, unique: int = 16384) -> None:
    """Full-size dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz layout; pixels cycle through ``unique`` rendered images."""
    sizes = GENERATORS["dsprites"].FULL_SIZES
    space = StateSpace(sizes)
    n = space.num_states
    base = (render_indices("dsprites", np.arange(unique) * (n // unique), sizes)[..., 0] // 255).astype(np.uint8)
    classes = np.zeros((n, 6), np.int64)
    classes[:, 1:] = space.all_factors()
    values = np.ones((n, 6), np.float64)
    fv = GENERATORS["dsprites"].factor_values(sizes)
    for k in range(5):
        values[:, k + 1] = np.asarray(fv[k])[classes[:, k + 1]]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        with zf.open("imgs.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_2_0(f, {"descr": "|u1", "fortran_order": False, "shape": (n, 64, 64)})
            for s in range(0, n, unique):
                f.write(base[: min(unique, n - s)].tobytes())
        for key, arr in (("latents_classes", classes), ("latents_values", values),
                         ("metadata", np.array({"latents_sizes": np.array([1, *sizes])}, dtype=object))):
            with zf.open(key + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, arr, allow_pickle=arr.dtype == object)


def naive_import(src_h5: Path, out: Path, n: int) -> float:
    """h5py per-item reads -> zarr's own sharded writer (the store's previous write path)."""
    import h5py
    import zarr
    from zarr.codecs import ZstdCodec

    t0 = time.perf_counter()
    with h5py.File(src_h5, "r") as f:
        ds = f["imgs"]
        g = zarr.open_group(str(out), mode="w", zarr_format=3)
        arr = g.create_array("images", shape=(n, 64, 64, 1), dtype="uint8", chunks=(1, 64, 64, 1), shards=(2048, 64, 64, 1),
                             compressors=ZstdCodec(level=1), fill_value=0)
        for s in range(0, n, 2048):
            block = np.stack([ds[i] for i in range(s, min(s + 2048, n))])[..., None] * np.uint8(255)
            arr[s:s + block.shape[0]] = block
    return time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--skip-generation", action="store_true")
    args = ap.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="probe-bench-stores-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict = {"workdir": str(workdir)}
    try:
        import h5py

        print("== generation (fraction of the full grid; ours = dask threads + store writer) ==", flush=True)
        if args.skip_generation:
            print("skipped", flush=True)
        else:
            results["generate_dsprites"] = bench_generation("dsprites", workdir, n_shards=8, n_naive=1000)
            print("dsprites", json.dumps(results["generate_dsprites"]), flush=True)
            results["generate_shapes3d"] = bench_generation("shapes3d", workdir, n_shards=2, n_naive=100)
            print("shapes3d", json.dumps(results["generate_shapes3d"]), flush=True)

        print("== import: full-size official-format dSprites npz ==", flush=True)
        src = workdir / "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz"
        t0 = time.perf_counter()
        write_official_dsprites_npz(src)
        print(f"wrote {src.name} ({src.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s", flush=True)
        store_path = workdir / "dsprites.zarr"
        t0, c0 = time.perf_counter(), time.process_time()
        store = build("dsprites", src, store_path, progress=False, require_full=True)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        n = len(store)
        pixels_mb = n * 64 * 64 / 1e6
        # naive reference on a fraction: per-image-chunked HDF5 copy (gzip, like disent's re-save)
        n_naive = 20480
        h5 = workdir / "dsprites_per_item.h5"
        with h5py.File(h5, "w") as f:
            ds = f.create_dataset("imgs", shape=(n_naive, 64, 64), dtype=np.uint8, chunks=(1, 64, 64), compression="gzip",
                                  compression_opts=4)
            ds[:] = store.read(np.arange(n_naive))[..., 0] // 255
        naive_s = naive_import(h5, workdir / "naive.zarr", n_naive)
        results["import"] = {"images": n, "seconds": dt, "cpu_seconds": cpu, "pixel_MB_per_s": pixels_mb / dt,
                             "pixel_MB_per_cpu_s": pixels_mb / cpu, "img_per_s": n / dt,
                             "naive_images": n_naive, "naive_pixel_MB_per_s": n_naive * 4096 / 1e6 / naive_s}
        results["import"]["ratio"] = results["import"]["pixel_MB_per_s"] / results["import"]["naive_pixel_MB_per_s"]
        print("import", json.dumps(results["import"]), flush=True)

        print("== random 64-image batch reads from the disk store ==", flush=True)
        rng = np.random.default_rng(0)
        store = open_store(store_path)
        batches = [rng.integers(0, n, 64) for _ in range(args.batches)]
        t0, c0 = time.perf_counter(), time.process_time()
        for b in batches:
            store.read(b)
        ours = rate(64 * len(batches), time.perf_counter() - t0)
        ours_cpu = rate(64 * len(batches), time.process_time() - c0)
        # the same batches restricted to the first n_naive images: the working set of the h5py reference
        small = [b % n_naive for b in batches]
        t0, c0 = time.perf_counter(), time.process_time()
        for b in small:
            store.read(b)
        ours_small = rate(64 * len(small), time.perf_counter() - t0)
        ours_small_cpu = rate(64 * len(small), time.process_time() - c0)
        with h5py.File(h5, "r") as f:
            ds = f["imgs"]
            t0 = time.perf_counter()
            for b in small[:50]:
                np.stack([ds[int(i)] for i in b])
            naive = rate(64 * 50, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for b in batches[:10]:
            store.images.get_orthogonal_selection((np.unique(b),))
        plain_zarr = rate(640, time.perf_counter() - t0)
        t0 = time.perf_counter()
        store.load_numpy()
        load = rate(n, time.perf_counter() - t0)
        results["random_reads"] = {"img_per_s": ours, "img_per_cpu_s": ours_cpu, "same_range_as_naive_img_per_s": ours_small,
                                   "same_range_as_naive_img_per_cpu_s": ours_small_cpu,
                                   "naive_h5py_per_item_img_per_s": naive, "ratio": ours_small / naive,
                                   "plain_zarr_batch_img_per_s": plain_zarr, "ratio_vs_plain_zarr": ours / plain_zarr,
                                   "full_load_img_per_s": load}
        print("random_reads", json.dumps(results["random_reads"]), flush=True)
        (workdir / "results.json").write_text(json.dumps(results, indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\nsummary")
    for key in ("generate_dsprites", "generate_shapes3d"):
        r = results.get(key)
        if r:
            print(f"  {key:20s} {r['img_per_s']:10.0f} img/s  (naive {r['naive_img_per_s']:.0f} img/s, x{r['ratio']:.1f}); "
                  f"full grid ≈ {r['estimated_full_grid_s'] / 60:.1f} min")
    if "import" in results:
        r = results["import"]
        print(f"  import dsprites npz  {r['pixel_MB_per_s']:10.0f} MB/s of pixels ({r['pixel_MB_per_cpu_s']:.0f} per CPU-s; "
              f"target ≥ 200; naive "
              f"{r['naive_pixel_MB_per_s']:.1f} MB/s, x{r['ratio']:.0f})")
    if "random_reads" in results:
        r = results["random_reads"]
        print(f"  random 64-img reads  {r['img_per_s']:10.0f} img/s over all {results['import']['images']} images "
              f"({r['img_per_cpu_s']:.0f} per CPU-s); over the first {results['import']['naive_images']}: "
              f"{r['same_range_as_naive_img_per_s']:.0f} img/s (target ≥ 20000; h5py per item "
              f"{r['naive_h5py_per_item_img_per_s']:.0f}, x{r['ratio']:.0f}; plain zarr {r['plain_zarr_batch_img_per_s']:.0f}, "
              f"x{r['ratio_vs_plain_zarr']:.0f}); full load {r['full_load_img_per_s']:.0f} img/s")
    return results


if __name__ == "__main__":
    main()
