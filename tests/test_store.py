import json

import numpy as np
import pytest

from probe.data import StateSpace, create_store, open_store, write_store
from probe.errors import UserError

from conftest import STORE_DAMAGES, damage_store


def _meta(sizes):
    return dict(name="toy", factor_names=[f"f{k}" for k in range(len(sizes))], factor_sizes=list(sizes),
                factor_values=[list(range(s)) for s in sizes], origin={"kind": "synthetic"})


def test_round_trip_and_format_readable_by_plain_zarr(tmp_path):
    import zarr

    sizes = [2, 3, 5]
    factors = StateSpace(sizes).all_factors()
    images = np.random.default_rng(0).integers(0, 256, (30, 8, 8, 3), dtype=np.uint8)
    store = write_store(tmp_path / "s.zarr", images, factors, **_meta(sizes))
    np.testing.assert_array_equal(store.load_numpy(), images)
    np.testing.assert_array_equal(store.factors, factors)
    idx = np.array([7, 3, 3, 29, 0])
    np.testing.assert_array_equal(store.read(idx), images[idx])
    np.testing.assert_array_equal(store.index_of(factors[idx]), idx)
    assert store.load().dtype.is_floating_point is False and tuple(store.load().shape) == images.shape
    assert store.verify()["ok"]
    raw = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    assert raw["images"].dtype == np.uint8 and raw["factors"].dtype == np.int32
    meta = raw.attrs["probe"]
    assert meta["format"] == 1 and meta["grid"] == "C" and meta["factor_sizes"] == sizes
    assert meta["origin"]["kind"] == "synthetic" and len(meta["digest"]) == 64
    json.dumps(meta)


def test_incomplete_grid_rejected_and_nothing_written(tmp_path):
    sizes = [2, 3]
    factors = StateSpace(sizes).all_factors()[:-1]
    with pytest.raises(UserError, match="grid"):
        write_store(tmp_path / "s.zarr", np.zeros((5, 4, 4, 1), np.uint8), factors, **_meta(sizes))
    assert not (tmp_path / "s.zarr").exists()
    assert list(tmp_path.iterdir()) == []


def test_existing_output_refused(tmp_path):
    sizes = [2]
    (tmp_path / "s.zarr").mkdir()
    with pytest.raises(UserError, match="already exists"):
        write_store(tmp_path / "s.zarr", np.zeros((2, 4, 4, 1), np.uint8), np.array([[0], [1]]), **_meta(sizes))


def test_failure_midway_leaves_nothing(tmp_path):
    sizes = [4]
    with pytest.raises(RuntimeError):
        with create_store(tmp_path / "s.zarr", num_images=4, image_shape=(4, 4, 1), factors=np.arange(4)[:, None], **_meta(sizes)) as w:
            w.write(0, np.zeros((2, 4, 4, 1), np.uint8))
            raise RuntimeError("disk full")
    assert list(tmp_path.iterdir()) == []


def test_unwritten_images_refused(tmp_path):
    sizes = [4]
    with pytest.raises(UserError, match="never written"):
        with create_store(tmp_path / "s.zarr", num_images=4, image_shape=(4, 4, 1), factors=np.arange(4)[:, None], **_meta(sizes)) as w:
            w.write(0, np.zeros((2, 4, 4, 1), np.uint8))
    assert list(tmp_path.iterdir()) == []


def test_out_of_order_writes_give_same_digest(tmp_path):
    sizes = [6]
    images = np.random.default_rng(1).integers(0, 256, (6, 4, 4, 1), dtype=np.uint8)
    a = write_store(tmp_path / "a.zarr", images, np.arange(6)[:, None], **_meta(sizes))
    with create_store(tmp_path / "b.zarr", num_images=6, image_shape=(4, 4, 1), factors=np.arange(6)[:, None], **_meta(sizes)) as w:
        w.write(3, images[3:])
        w.write(0, images[:3])
    assert open_store(tmp_path / "b.zarr").digest == a.digest


def test_verify_detects_corruption(tmp_path):
    import zarr

    sizes = [4]
    images = np.zeros((4, 4, 4, 1), np.uint8)
    write_store(tmp_path / "s.zarr", images, np.arange(4)[:, None], **_meta(sizes))
    arr = zarr.open_array(str(tmp_path / "s.zarr" / "images"), mode="r+")
    arr[1] = 7
    with pytest.raises(UserError, match="digest mismatch"):
        open_store(tmp_path / "s.zarr").verify()


def test_open_missing_or_foreign_path(tmp_path):
    with pytest.raises(UserError):
        open_store(tmp_path / "nope.zarr")
    (tmp_path / "junk").mkdir()
    with pytest.raises(UserError):
        open_store(tmp_path / "junk")


def test_toy_fixture(make_toy_store):
    store = make_toy_store((2, 3, 4, 4), resolution=16, channels=3)
    assert store.images.shape == (96, 16, 16, 3)
    assert store.load_numpy().max() > 0


# -- proven intact before use (issue 17) ---------------------------------------------------------------------------
def test_ensure_intact_verifies_once_then_trusts_the_marker(make_toy_store, monkeypatch):
    from probe.data import open_store
    from probe.data.store import VERIFIED_MARKER, Store

    store = make_toy_store()
    assert not (store.path / VERIFIED_MARKER).exists()
    open_store(store.path, verify=True)
    assert (store.path / VERIFIED_MARKER).exists()

    def no_digest(self):
        raise AssertionError("the marker should have spared the digest")

    monkeypatch.setattr(Store, "compute_digest", no_digest)
    open_store(store.path, verify=True)  # unchanged files: no recomputation


@pytest.mark.parametrize("damage", STORE_DAMAGES)
def test_damaged_store_is_refused_naming_it(make_toy_store, damage):
    store = make_toy_store()
    open_store(store.path, verify=True)  # a marker from when it was intact must not hide the damage
    damage_store(store.path, damage)
    with pytest.raises(UserError) as err:
        open_store(store.path, verify=True)
    assert str(store.path) in str(err.value)
