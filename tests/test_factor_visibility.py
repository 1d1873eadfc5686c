"""probe.data.visibility (and benchmarks/factor_visibility.py's per-value view) on hand-made grids: the ceiling on a
factor's normalised MI is what the images determine of it (the regime gate's 0.2 is only reachable where they do)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np

_SPEC = importlib.util.spec_from_file_location(
    "factor_visibility", Path(__file__).resolve().parents[1] / "benchmarks" / "factor_visibility.py")
factor_visibility = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(factor_visibility)


def _grid_store(render):
    """A 2-factor grid (a: 4 values, b: 2 values) whose image of row (a, b) is ``render(a, b)`` (uint8 [2, 2, 1])."""
    factors = np.array([(a, b) for a in range(4) for b in range(2)], dtype=np.int64)
    images = np.stack([render(a, b) for a, b in factors]).astype(np.uint8)
    return SimpleNamespace(factor_sizes=[4, 2], factor_names=["a", "b"], factors=factors, read=lambda idx: images[idx],
                           num_images=len(factors))


def test_a_factor_the_images_do_not_show_has_ceiling_zero_and_a_visible_one_ceiling_one():
    from probe.data.visibility import factor_ceilings

    store = _grid_store(lambda a, b: np.full((2, 2, 1), a))  # b never changes the image
    assert factor_ceilings(store) == [1.0, 0.0]
    assert factor_visibility.visibility(store)["distinct_images"] == 4


def test_a_two_fold_symmetry_halves_the_information_of_a_four_valued_factor():
    # a and a + 2 render alike (a 180° turn of a two-fold symmetric sprite): H(a | x) = log 2 of H(a) = log 4
    store = _grid_store(lambda a, b: np.array([[a % 2, b], [0, 0]])[..., None])
    out = factor_visibility.visibility(store, by=1)
    assert out["ceiling"] == [0.5, 1.0]
    assert out["by"]["ceiling"] == {0: [0.5, None], 1: [0.5, None]}  # within one value of b, b has no entropy


def test_datasets_info_prints_the_ceilings_on_request(make_toy_store, capsys):
    import json

    from conftest import run_probe
    from probe.data.visibility import factor_ceilings

    store = make_toy_store()
    code, out, _ = run_probe(["datasets", "info", str(store.path), "--ceilings"], capsys)
    assert code == 0
    printed = json.loads(out)["factor_ceiling"]
    assert list(printed) == list(store.factor_names)
    assert list(printed.values()) == factor_ceilings(store)
    code, out, _ = run_probe(["datasets", "info", str(store.path)], capsys)
    assert code == 0 and "factor_ceiling" not in json.loads(out)
