"""Procedural generators through the CLI: shapes, dtypes, factor order, determinism, looks."""

import numpy as np
import pytest

from probe.cli import main
from probe.data import StateSpace, open_store


def run_cli(args):
    with pytest.raises(SystemExit) as exc:
        main(args)
    return exc.value.code


def assert_options_recorded_and_checked(tmp_path, name: str, factor_sizes: str, good: dict, bads: list[dict]):
    """`probe datasets generate NAME --option K=V ...`: the store records ``good``; each of ``bads`` is a user error
    (exit 2) that leaves no store behind."""
    def generate(out, options):
        return run_cli(["datasets", "generate", name, "--out", str(out), "--factor-sizes", factor_sizes,
                        "--resolution", "16", *[a for k, v in options.items() for a in ("--option", f"{k}={v}")]])

    assert generate(tmp_path / "good.zarr", good) == 0
    assert open_store(tmp_path / "good.zarr").origin["config"]["options"] == good
    for bad in bads:
        assert generate(tmp_path / "bad.zarr", bad) == 2
        assert not (tmp_path / "bad.zarr").exists()


def test_generate_dsprites_cli_acceptance(tmp_path):
    out = tmp_path / "ds.zarr"
    assert run_cli(["datasets", "generate", "dsprites", "--out", str(out), "--factor-sizes", "3,2,4,8,8"]) == 0
    store = open_store(out)
    images = store.load_numpy()
    assert images.shape == (1536, 64, 64, 1) and images.dtype == np.uint8
    assert store.group["factors"].shape == (1536, 5) and store.group["factors"].dtype == np.int32
    assert store.factor_names == ["shape", "scale", "orientation", "posX", "posY"]
    np.testing.assert_array_equal(store.factors, np.stack(np.unravel_index(np.arange(1536), (3, 2, 4, 8, 8)), 1))
    assert set(np.unique(images)) == {0, 255}  # binary like the official data
    assert store.origin["kind"] == "synthetic" and store.name == "dsprites"
    # every image has a sprite, and sprites of scale 1 are bigger than sprites of scale 0.5
    area = (images > 0).sum(axis=(1, 2, 3))
    assert area.min() > 0
    assert area[store.factors[:, 1] == 1].mean() > 3 * area[store.factors[:, 1] == 0].mean()
    # square at scale 1, orientation 0: about 18 px wide
    sq = images[store.index_of(np.array([[0, 1, 0, 4, 4]]))[0], ..., 0]
    assert 17 <= (sq.max(axis=0) > 0).sum() <= 19
    # posX moves the sprite to the right over pixels ~8..56
    xs = [np.nonzero(images[store.index_of(np.array([[0, 1, 0, x, 4]]))[0], ..., 0].max(0))[0].mean() for x in (0, 7)]
    assert 6 <= xs[0] <= 10 and 54 <= xs[1] <= 58


def test_dsprites_geometry_options_size_and_move_the_sprite(tmp_path):
    from probe.data.synth import dsprites

    # square, scale 1, orientation 0, at posX 0 / 1 (posY 0.5)
    values = np.array([[1.0, 1.0, 0.0, 0.0, 0.5], [1.0, 1.0, 0.0, 1.0, 0.5]])
    np.testing.assert_array_equal(dsprites.render(values, 64, sprite_side=18 / 64, position_span=48 / 64),
                                  dsprites.render(values, 64))  # the defaults are the official geometry
    big = dsprites.render(values, 64, sprite_side=0.5, position_span=0.5)[..., 0]
    columns = [np.nonzero(image.max(0))[0] for image in big]
    assert all(31 <= len(c) <= 33 for c in columns)  # side 0.5 of 64 px
    assert 15 <= columns[0].mean() <= 17 and 47 <= columns[1].mean() <= 49  # centre over 16..48 (span 0.5, centred)
    assert_options_recorded_and_checked(tmp_path, "dsprites", "1,1,1,2,2", {"sprite_side": 0.5, "position_span": 0.5},
                                        [{"sprite_side": 0.9}, {"position_span": 0}])


def test_generate_shapes3d_cli_acceptance(tmp_path):
    out = tmp_path / "s3.zarr"
    sizes = [2, 2, 2, 2, 4, 2]
    assert run_cli(["datasets", "generate", "shapes3d", "--out", str(out), "--factor-sizes", ",".join(map(str, sizes)),
                    "--resolution", "32", "--seed", "3"]) == 0
    store = open_store(out)
    n = int(np.prod(sizes))
    images = store.load_numpy()
    assert images.shape == (n, 32, 32, 3) and store.group["factors"].dtype == np.int32
    assert store.factor_names == ["floor_hue", "wall_hue", "object_hue", "scale", "shape", "orientation"]
    np.testing.assert_array_equal(store.factors, StateSpace(sizes).all_factors())
    assert store.origin["seed"] == 3
    # floor hue 0 (red) vs 0.5 (cyan): the bottom rows change colour, the top rows do not
    a = store.read(store.index_of(np.array([[0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]])))
    assert a[0, -2, 16, 0] > 100 and a[0, -2, 16, 1] < 60 and a[1, -2, 16, 0] < 60
    np.testing.assert_array_equal(a[0, :4], a[1, :4])
    # the four shapes differ
    shapes = store.read(store.index_of(np.array([[0, 1, 1, 1, s, 0] for s in range(4)])).astype(int)).astype(int)
    assert all(np.abs(shapes[i] - shapes[j]).sum() > 0 for i in range(4) for j in range(i))


def test_full_size_shapes3d_resolution_64_and_determinism(tmp_path):
    from probe.data.synth import generate, render_indices

    store = generate("shapes3d", tmp_path / "a.zarr", factor_sizes=[1, 1, 2, 1, 1, 3], progress=False)
    assert store.images.shape == (6, 64, 64, 3)
    np.testing.assert_array_equal(store.load_numpy(), render_indices("shapes3d", np.arange(6), [1, 1, 2, 1, 1, 3]))
    again = generate("shapes3d", tmp_path / "b.zarr", factor_sizes=[1, 1, 2, 1, 1, 3], progress=False, seed=5)
    assert again.digest == store.digest  # deterministic; the seed is only recorded


def test_generate_in_processes_writes_the_same_store(tmp_path):
    from probe.data.synth import generate

    sizes = [2, 2, 2, 2, 4, 2]
    threads = generate("shapes3d", tmp_path / "t.zarr", factor_sizes=sizes, resolution=16, progress=False, workers=2)
    procs = generate("shapes3d", tmp_path / "p.zarr", factor_sizes=sizes, resolution=16, progress=False, workers=2,
                     processes=True)
    assert procs.digest == threads.digest
    np.testing.assert_array_equal(procs.load_numpy(), threads.load_numpy())


def test_sub_grid_keeps_official_ranges():
    from probe.data.synth import dsprites, shapes3d

    v = dsprites.factor_values([3, 2, 4, 8, 8])
    assert v[1] == [0.5, 1.0] and v[2][0] == 0 and v[2][-1] < 2 * np.pi and v[3][0] == 0 and v[3][-1] == 1
    full = dsprites.factor_values(dsprites.FULL_SIZES)
    assert len(full[2]) == 40 and np.isclose(full[2][1], 2 * np.pi / 40)
    s = shapes3d.factor_values(shapes3d.FULL_SIZES)
    assert np.allclose(s[0], np.arange(10) / 10) and s[3][0] == 0.75 and s[3][-1] == 1.25 and s[5] == list(np.linspace(-30, 30, 15))


@pytest.mark.parametrize("args", [["dsprites", "--factor-sizes", "4,2,4,8,8"], ["dsprites", "--factor-sizes", "3,2"],
                                  ["dsprites", "--factor-sizes", "a,b"], ["cubes"], ["dsprites", "--resolution", "4"]])
def test_generate_bad_arguments_exit_2(tmp_path, capsys, args):
    out = tmp_path / "x.zarr"
    assert run_cli(["datasets", "generate", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1 and "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_shapes3d_closer_camera_gives_the_object_more_pixels(tmp_path):
    from probe.data.synth import shapes3d

    # two scenes that differ in object hue alone: the pixels that differ are the object's (and its shading)
    values = np.array([[0.0, 0.5, 0.2, 1.0, 0, 10.0], [0.0, 0.5, 0.7, 1.0, 0, 10.0]])
    official = shapes3d.render(values, 32)
    np.testing.assert_array_equal(
        shapes3d.render(values, 32, camera_distance=shapes3d.CAMERA_DISTANCE, fov_deg=shapes3d.FOV_DEG), official)

    def object_pixels(images):
        return int(np.any(images[0] != images[1], axis=-1).sum())

    near = shapes3d.render(values, 32, camera_distance=2.6, fov_deg=40.0)
    # area scales about with (distance · tan(fov/2))^-2: (3.3 tan 23° / 2.6 tan 20°)^2 ≈ 1.9
    assert 1.5 * object_pixels(official) < object_pixels(near) < 2.5 * object_pixels(official)
    assert_options_recorded_and_checked(tmp_path, "shapes3d", "1,1,2,1,1,1", {"camera_distance": 2.6, "fov_deg": 40},
                                        [{"camera_distance": 4}, {"fov_deg": 0}])


def test_shapes3d_hue_span_renders_label_h_as_hue_h_times_span(tmp_path):
    from probe.data.synth import shapes3d

    values = np.array([[0.9, 0.5, 0.0, 1.0, 0, 0.0], [0.0, 0.5, 0.2, 1.0, 2, 0.0]])
    official = shapes3d.render(values, 16)
    np.testing.assert_array_equal(shapes3d.render(values, 16, hue_span=1.0), official)
    scaled = values.copy()
    scaled[:, :3] *= 0.8
    np.testing.assert_array_equal(shapes3d.render(values, 16, hue_span=0.8), shapes3d.render(scaled, 16))
    # the loop stays open: label 0.9 is rendered violet-blue, far from label 0's red (official: next to it)
    floor = lambda im: im[-1, 8].astype(int)  # noqa: E731
    red = floor(shapes3d.render(np.array([[0.0, 0.5, 0.0, 1.0, 0, 0.0]]), 16)[0])
    assert np.abs(floor(official[0]) - red).sum() < np.abs(floor(shapes3d.render(values, 16, hue_span=0.8)[0]) - red).sum() / 2
    # through the CLI: recorded in the store's origin; bad values exit 2 and leave nothing
    out = tmp_path / "s3.zarr"
    assert run_cli(["datasets", "generate", "shapes3d", "--out", str(out), "--factor-sizes", "2,1,1,1,1,1",
                    "--resolution", "16", "--option", "hue_span=0.8"]) == 0
    assert open_store(out).origin["config"]["options"] == {"hue_span": 0.8}
    for bad in (["--option", "hue_span=0"], ["--option", "hue_span"], ["--option", "no_such=1"]):
        bad_out = tmp_path / "bad.zarr"
        assert run_cli(["datasets", "generate", "shapes3d", "--out", str(bad_out), "--factor-sizes", "2,1,1,1,1,1",
                        "--resolution", "16", *bad]) == 2
        assert not bad_out.exists()
