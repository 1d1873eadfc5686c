"""The store's direct shard-file reader/writer agrees with plain zarr reads in every case it handles."""

import numpy as np
import pytest

import probe.data.store as store_mod
from probe.data import create_store, open_store, write_store
from probe.errors import UserError


def _meta(n):
    return dict(name="toy", factor_names=["i"], factor_sizes=[n], factor_values=[list(range(n))], origin={"kind": "synthetic"})


@pytest.fixture
def small_shards(monkeypatch):
    monkeypatch.setattr(store_mod, "images_per_shard", lambda shape: 7)  # several shards, a partial last one


def test_fast_paths_match_plain_zarr(tmp_path, small_shards):
    import zarr

    n = 30
    images = np.random.default_rng(0).integers(0, 256, (n, 5, 4, 3), dtype=np.uint8)
    images[9] = 0  # an all-zero image (zarr itself would not write such a chunk)
    store = write_store(tmp_path / "s.zarr", images, np.arange(n)[:, None], **_meta(n))
    assert store._layout is not None and store.images.shards[0] == 7
    plain = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")["images"]
    np.testing.assert_array_equal(plain[:], images)
    np.testing.assert_array_equal(store.load_numpy(), images)
    idx = np.array([[29, 0, 9], [7, 7, 13]])
    np.testing.assert_array_equal(store.read(idx), images[idx])
    np.testing.assert_array_equal(store.read(np.arange(n)), plain[:])
    assert store.verify()["ok"] and store.compute_digest() == store_mod.compute_digest(plain, store.factors)
    with pytest.raises(IndexError):
        store.read([n])
    store._layout.max_open_files = 2  # file handles are recycled; cached shard indices stay valid
    for _ in range(3):
        np.testing.assert_array_equal(store.read(np.array([0, 8, 15, 22, 29])), images[[0, 8, 15, 22, 29]])


def test_unaligned_writes_go_through_zarr_and_read_back(tmp_path, small_shards):
    n = 20
    images = np.random.default_rng(1).integers(0, 256, (n, 3, 3, 1), dtype=np.uint8)
    with create_store(tmp_path / "s.zarr", num_images=n, image_shape=(3, 3, 1), factors=np.arange(n)[:, None], **_meta(n)) as w:
        for start in (5, 0, 11, 16):  # unaligned, out of order
            stop = {5: 11, 0: 5, 11: 16, 16: 20}[start]
            w.write(start, images[start:stop])
    store = open_store(tmp_path / "s.zarr")
    np.testing.assert_array_equal(store.load_numpy(), images)
    np.testing.assert_array_equal(store.read([19, 2, 6]), images[[19, 2, 6]])
    assert store.digest == write_store(tmp_path / "t.zarr", images, np.arange(n)[:, None], **_meta(n)).digest


def test_reads_zstd_sharded_arrays_written_by_zarr(tmp_path):
    import zarr
    from zarr.codecs import ZstdCodec

    images = np.random.default_rng(2).integers(0, 4, (10, 6, 6, 1), dtype=np.uint8)
    images[3] = 0
    g = zarr.open_group(str(tmp_path / "z.zarr"), mode="w", zarr_format=3)
    arr = g.create_array("images", shape=images.shape, dtype="uint8", chunks=(1, 6, 6, 1), shards=(4, 6, 6, 1),
                         compressors=ZstdCodec(level=1), fill_value=0)
    arr[:] = images
    layout = store_mod.ShardLayout.from_array_dir(tmp_path / "z.zarr" / "images")
    assert layout is not None and layout.compressed
    assert layout.index(0)[3, 0] == store_mod.MAX_UINT64  # zarr skipped the empty chunk
    out = np.empty_like(images)
    layout.read_range(0, 10, out)
    np.testing.assert_array_equal(out, images)
    part = np.empty((3, 6, 6, 1), np.uint8)
    layout.read_sorted(np.array([1, 3, 9]), part)
    np.testing.assert_array_equal(part, images[[1, 3, 9]])
    # a layout the fast path does not know (no sharding) is left to zarr
    g.create_array("plain", shape=(4, 2, 2, 1), dtype="uint8", chunks=(2, 2, 2, 1))
    assert store_mod.ShardLayout.from_array_dir(tmp_path / "z.zarr" / "plain") is None


def test_corrupt_shard_index_is_a_user_error(tmp_path):
    images = np.ones((4, 4, 4, 1), np.uint8)
    write_store(tmp_path / "s.zarr", images, np.arange(4)[:, None], **_meta(4))
    shard = tmp_path / "s.zarr" / "images" / "c" / "0" / "0" / "0" / "0"
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(UserError, match="corrupt"):
        open_store(tmp_path / "s.zarr").read([1])
