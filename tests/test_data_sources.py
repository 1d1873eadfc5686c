"""Importers on small files written in the exact official layouts (reduced grids), export round trips,
bad input through the CLI (exit 2, one message, nothing at the output path)."""

import io
import tarfile
import zipfile

import numpy as np
import pytest

from probe.cli import main
from probe.data import StateSpace, open_store, write_store
from probe.data.sources import build


def run_cli(args):
    with pytest.raises(SystemExit) as exc:
        main(args)
    return exc.value.code


def pattern(n, shape, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


# -- official-format writers (reduced grids) ----------------------------------------------------------------
def write_dsprites_npz(path, sizes=(3, 2, 2, 2, 2), drop_last=False):
    space = StateSpace(sizes)
    f = space.all_factors()
    n = len(f)
    imgs = (pattern(n, (64, 64)) > 127).astype(np.uint8)
    classes = np.concatenate([np.zeros((n, 1), np.int64), f], 1)
    values = np.concatenate([np.ones((n, 1)), f[:, :1] + 1.0, 0.5 + f[:, 1:2] * 0.5, f[:, 2:3] * 0.3, f[:, 3:] / 2], 1)
    meta = {"latents_sizes": np.array([1, *sizes]), "latents_names": ("color", "shape", "scale", "orientation", "posX", "posY")}
    sl = slice(0, n - 1 if drop_last else n)
    np.savez_compressed(path, imgs=imgs[sl], latents_classes=classes[sl], latents_values=values[sl],
                        metadata=np.array(meta, dtype=object))
    return imgs, f, values


def write_shapes3d_h5(path, sizes=(2, 2, 1, 2, 2, 2), labels_cols=6):
    import h5py

    f = StateSpace(sizes).all_factors()
    images = pattern(len(f), (64, 64, 3), 1)
    labels = (f / np.maximum(np.array(sizes) - 1, 1)).astype(np.float64)[:, :labels_cols]
    with h5py.File(path, "w") as h:
        h.create_dataset("images", data=images, chunks=(4, 64, 64, 3), compression="gzip")
        h.create_dataset("labels", data=labels)
    return images, f


def png_bytes(rgb):
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((128, 128, 3), rgb, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def colour_of(factors):  # a distinct flat colour per grid point (survives the 128 -> 64 resize)
    return [int(20 + 30 * factors[0]), int(20 + 30 * factors[-1]), int(20 + 10 * factors.sum())]


# -- importers ------------------------------------------------------------------------------------------------
def test_dsprites_importer(tmp_path, capsys):
    src = tmp_path / "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz"
    imgs, f, values = write_dsprites_npz(src)
    assert run_cli(["datasets", "build", "dsprites", "--source", str(src), "--out", str(tmp_path / "d.zarr")]) == 0
    store = open_store(tmp_path / "d.zarr")
    np.testing.assert_array_equal(store.load_numpy()[..., 0], imgs * 255)
    np.testing.assert_array_equal(store.factors, f)
    assert store.factor_sizes == [3, 2, 2, 2, 2] and store.factor_values[0] == [1.0, 2.0, 3.0]
    assert store.factor_values[1] == [0.5, 1.0] and store.origin["kind"] == "official"
    assert store.origin["files"][0]["name"] == src.name and len(store.origin["files"][0]["sha256"]) == 64
    assert run_cli(["datasets", "verify", str(tmp_path / "d.zarr")]) == 0
    assert store.digest in capsys.readouterr().out
    assert run_cli(["datasets", "build", "dsprites", "--source", str(src), "--out", str(tmp_path / "e.zarr"),
                    "--require-full"]) == 2


def test_shapes3d_importer(tmp_path):
    src = tmp_path / "3dshapes.h5"
    images, f = write_shapes3d_h5(src)
    store = build("shapes3d", src, tmp_path / "s.zarr", progress=False)
    np.testing.assert_array_equal(store.load_numpy(), images)
    np.testing.assert_array_equal(store.factors, f)
    assert store.factor_sizes == [2, 2, 1, 2, 2, 2] and store.factor_values[3] == [0.0, 1.0]
    assert store.verify()["ok"]


def test_mpi3d_importer_needs_sizes_for_reduced_files(tmp_path):
    src = tmp_path / "mpi3d_toy.npz"
    sizes = [1, 2, 1, 1, 1, 2, 2]
    images = pattern(8, (64, 64, 3), 2)
    np.savez(src, images=images)
    store = build("mpi3d_toy", src, tmp_path / "m.zarr", progress=False, factor_sizes=sizes)
    np.testing.assert_array_equal(store.load_numpy(), images)
    np.testing.assert_array_equal(store.factors, StateSpace(sizes).all_factors())
    assert store.factor_names[0] == "object_color"
    assert run_cli(["datasets", "build", "mpi3d_toy", "--source", str(src), "--out", str(tmp_path / "n.zarr")]) == 2


@pytest.mark.parametrize("name,labels_name,k", [("falcor3d", "train-rec.labels", 7), ("isaac3d", "labels.npy", 9)])
@pytest.mark.parametrize("as_zip", [True, False])
def test_image_folder_importers(tmp_path, name, labels_name, k, as_zip):
    sizes = [2] + [1] * (k - 2) + [2]
    f = StateSpace(sizes).all_factors()
    perm = np.array([2, 0, 3, 1])  # the release's rows need not be in C order: the importer sorts them
    rows = f[perm]
    labels = rows * 0.25 + 0.1
    prefix = {"falcor3d": "Falcor3D_down128", "isaac3d": "Isaac3D_down128"}[name]
    buf = io.BytesIO()
    np.save(buf, labels)
    files = {f"{prefix}/{labels_name}": buf.getvalue()}
    for i, row in enumerate(rows):
        files[f"{prefix}/images/{i:06d}.png"] = png_bytes(colour_of(row))
    if as_zip:
        src = tmp_path / f"{prefix}.zip"
        with zipfile.ZipFile(src, "w") as z:
            for n, data in files.items():
                z.writestr(n, data)
    else:
        src = tmp_path / "release"
        for n, data in files.items():
            (src / n).parent.mkdir(parents=True, exist_ok=True)
            (src / n).write_bytes(data)
    store = build(name, src, tmp_path / "o.zarr", progress=False)
    assert store.images.shape == (4, 64, 64, 3)
    np.testing.assert_array_equal(store.factors, f)
    for i in range(4):
        assert np.all(np.abs(store.read([i])[0].astype(int) - colour_of(f[i])) <= 1)
    assert store.factor_values[0] == [0.1, 0.35]


def test_cars3d_importer(tmp_path):
    from scipy.io import savemat

    n_el, n_az, objs = 2, 3, ["car_a_mesh", "car_b_mesh"]
    src = tmp_path / "nips2015-analogy-data.tar.gz"
    with tarfile.open(src, "w:gz") as tar:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("data/cars/list.txt", ("\n".join(objs) + "\n").encode())
        for o, obj in enumerate(objs):
            im = np.zeros((128, 128, 3, n_az, n_el), np.uint8)
            for e in range(n_el):
                for a in range(n_az):
                    im[:, :, :, a, e] = colour_of(np.array([e, a, o]))
            buf = io.BytesIO()
            savemat(buf, {"im": im, "mask": np.zeros((128, 128, n_az, n_el), np.uint8)})
            add(f"data/cars/{obj}.mat", buf.getvalue())
    store = build("cars3d", src, tmp_path / "c.zarr", progress=False)
    assert store.factor_sizes == [2, 3, 2] and store.images.shape == (12, 64, 64, 3)
    for i, fac in enumerate(store.factors):
        assert np.all(np.abs(store.read([i])[0].astype(int) - colour_of(fac)) <= 1)


# -- export round trips -----------------------------------------------------------------------------------------
def test_export_round_trip_generated_dsprites_and_shapes3d(tmp_path):
    from probe.data.export import export_store
    from probe.data.synth import generate

    d = generate("dsprites", tmp_path / "d.zarr", factor_sizes=[3, 2, 2, 2, 2], progress=False)
    assert run_cli(["datasets", "export", str(d.path), "--format", "npz", "--out", str(tmp_path / "d.npz")]) == 0
    with np.load(tmp_path / "d.npz", allow_pickle=True) as z:  # the reference loaders' view
        assert z["imgs"].dtype == np.uint8 and z["imgs"].max() == 1 and z["latents_classes"].shape == (48, 6)
        assert list(z["metadata"][()]["latents_sizes"]) == [1, 3, 2, 2, 2, 2]
    back = build("dsprites", tmp_path / "d.npz", tmp_path / "d2.zarr", progress=False)
    assert back.digest == d.digest and back.factor_values == d.factor_values

    s = generate("shapes3d", tmp_path / "s.zarr", factor_sizes=[2, 1, 1, 1, 2, 2], resolution=16, progress=False)
    export_store(s.path, "h5", tmp_path / "s.h5")
    back = build("shapes3d", tmp_path / "s.h5", tmp_path / "s2.zarr", progress=False)
    np.testing.assert_array_equal(back.load_numpy(), s.load_numpy())
    np.testing.assert_array_equal(back.factors, s.factors)


def test_export_round_trip_perturbed_dsprites_and_mpi3d(tmp_path):
    from probe.data.export import export_store

    sizes = [3, 1, 2, 2, 2]
    f = StateSpace(sizes).all_factors()
    images = pattern(len(f), (64, 64, 1), 5)  # non-binary pixels, like a perturbed store
    meta = dict(name="dsprites", factor_names=["shape", "scale", "orientation", "posX", "posY"], factor_sizes=sizes,
                factor_values=[[1.0, 2.0, 3.0], [1.0], [0.0, 3.0], [0.0, 1.0], [0.0, 1.0]],
                origin={"kind": "perturbed", "parent": {"path": "x", "digest": "0" * 64}})
    p = write_store(tmp_path / "p.zarr", images, f, **meta)
    export_store(p.path, "npz", tmp_path / "p.npz")
    with np.load(tmp_path / "p.npz") as z:
        assert z["imgs"].dtype == np.float32 and 0 <= z["imgs"].min() and z["imgs"].max() <= 1
    back = build("dsprites", tmp_path / "p.npz", tmp_path / "p2.zarr", progress=False)
    np.testing.assert_array_equal(back.load_numpy(), images)

    msizes = [1, 2, 1, 1, 1, 2, 2]
    m = write_store(tmp_path / "m.zarr", pattern(8, (64, 64, 3), 6), StateSpace(msizes).all_factors(), name="mpi3d_toy",
                    factor_names=[f"f{i}" for i in range(7)], factor_sizes=msizes,
                    factor_values=[list(range(s)) for s in msizes], origin={"kind": "noise"})
    export_store(m.path, "npz", tmp_path / "m.npz")
    back = build("mpi3d_toy", tmp_path / "m.npz", tmp_path / "m2.zarr", progress=False, factor_sizes=msizes)
    np.testing.assert_array_equal(back.load_numpy(), m.load_numpy())
    assert run_cli(["datasets", "export", str(m.path), "--format", "h5", "--out", str(tmp_path / "m.h5")]) == 2
    assert not (tmp_path / "m.h5").exists()


# -- bad input: exit 2, one message, nothing at the output path ------------------------------------------------
def _expect_clean_failure(tmp_path, capsys, args, out, match):
    code = run_cli(args)
    err = capsys.readouterr().err
    assert code == 2, err
    errors = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err and match in errors[0], err
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp")]


def test_bad_inputs_exit_2_and_leave_nothing(tmp_path, capsys):
    out = tmp_path / "out" / "s.zarr"
    out.parent.mkdir()
    good = tmp_path / "d.npz"
    write_dsprites_npz(good)
    data = good.read_bytes()
    truncated = tmp_path / "trunc.npz"
    truncated.write_bytes(data[: len(data) // 2])
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(np.random.default_rng(0).bytes(5000))
    wrong_keys = tmp_path / "keys.npz"
    np.savez(wrong_keys, images=np.zeros((4, 64, 64), np.uint8))
    incomplete = tmp_path / "incomplete.npz"
    write_dsprites_npz(incomplete, drop_last=True)
    wrong_shape = tmp_path / "shape.h5"
    write_shapes3d_h5(wrong_shape, labels_cols=5)
    cases = [("dsprites", truncated, "truncated"), ("dsprites", corrupt, "not a readable"),
             ("dsprites", wrong_keys, "keys"), ("dsprites", incomplete, "incomplete grid"),
             ("shapes3d", wrong_shape, "labels"), ("shapes3d", corrupt, "not a readable HDF5"),
             ("dsprites", tmp_path / "missing.npz", "not found")]
    for name, src, match in cases:
        _expect_clean_failure(tmp_path, capsys, ["datasets", "build", name, "--source", str(src), "--out", str(out)], out, match)
    out.mkdir()  # an output path that exists
    code = run_cli(["datasets", "build", "dsprites", "--source", str(good), "--out", str(out)])
    assert code == 2 and "already exists" in capsys.readouterr().err
    assert list(out.iterdir()) == []


def test_write_failing_midway_exits_2_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    import probe.data.store as store_mod

    monkeypatch.setattr(store_mod, "images_per_shard", lambda shape: 8)  # several shards for a tiny store
    calls = {"n": 0}
    original = store_mod.ShardLayout.write_shard

    def flaky(self, j, block):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        return original(self, j, block)

    monkeypatch.setattr(store_mod.ShardLayout, "write_shard", flaky)
    out = tmp_path / "g.zarr"
    _expect_clean_failure(tmp_path, capsys, ["datasets", "generate", "dsprites", "--out", str(out), "--resolution", "16",
                                             "--factor-sizes", "2,2,2,2,2"], out, "No space left")
    assert calls["n"] == 3
    src = tmp_path / "d.npz"
    write_dsprites_npz(src)
    calls["n"] = 0
    _expect_clean_failure(tmp_path, capsys, ["datasets", "build", "dsprites", "--source", str(src), "--out", str(out)],
                          out, "No space left")


def test_cards_match_repository_files():
    import json
    from pathlib import Path

    from probe.data.sources import DATASETS

    folder = Path(__file__).resolve().parents[1] / "datasets"
    for name, c in DATASETS.items():
        assert json.loads((folder / f"{name}.json").read_text()) == json.loads(json.dumps(c))
        assert int(np.prod(c["factor_sizes"])) > 0 and len(c["factor_names"]) == len(c["factor_sizes"])


def test_fetch_offline_fails_with_instructions(tmp_path, capsys, monkeypatch):
    import urllib.request

    def offline(*a, **k):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    assert run_cli(["datasets", "fetch", "shapes3d", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "https://storage.googleapis.com/3d-shapes/3dshapes.h5" in err and str(tmp_path / "3dshapes.h5") in err
    (tmp_path / "3dshapes.h5").write_bytes(b"not the file")  # put by hand, but wrong: digest mismatch
    assert run_cli(["datasets", "fetch", "shapes3d", "--dir", str(tmp_path)]) == 2
    assert "does not match" in capsys.readouterr().err
