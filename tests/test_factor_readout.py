"""benchmarks/factor_readout.py on codes built by hand: a factor on one latent, the same factor spread over two
latents by a rotation, and a factor the code does not hold read as MIG's two failure modes should."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

_SPEC = importlib.util.spec_from_file_location(
    "factor_readout", Path(__file__).resolve().parents[1] / "benchmarks" / "factor_readout.py")
factor_readout = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(factor_readout)


def _codes(factors, rng):
    """Latent 0 holds factor a alone; latents 1-2 hold factors b and c rotated by 45° (each spread over both);
    latent 3 is noise; factor d is in no latent."""
    a, b, c = (factors[:, k].astype(float) for k in range(3))
    r = np.sqrt(0.5)
    return np.stack([a, r * (b + c), r * (b - c), np.zeros_like(a)], axis=1) + 0.05 * rng.standard_normal(
        (len(factors), 4))


def test_readout_tells_an_aligned_factor_a_spread_one_and_a_missing_one_apart():
    rng = np.random.default_rng(0)
    train, test = (rng.integers(0, 4, size=(n, 4)) for n in (2000, 1000))
    row = factor_readout.readout(_codes(train, rng), train, _codes(test, rng), test, seed=0, n_estimators=30)
    accuracy, share = row["accuracy"], row["top_share"]
    assert accuracy[0] > 0.95 and share[0] > 0.9 and row["top_latent"][0] == 0  # aligned
    for k in (1, 2):  # held, but by two latents: high accuracy, importance split between latents 1 and 2
        assert accuracy[k] > 0.9 and share[k] < 0.75 and row["top_latent"][k] in (1, 2)
    assert abs(accuracy[3] - 0.25) < 0.06 and accuracy[3] <= row["chance"][3] + 0.03  # missing: chance
    assert all(0.2 < c < 0.3 for c in row["chance"])


def test_explain_finds_a_latent_that_is_an_interaction_of_two_factors():
    rng = np.random.default_rng(1)
    train, test = (rng.integers(0, 4, size=(n, 3)) for n in (2000, 1000))

    def codes(f):  # latent 0 = factor a; latent 1 = b with its sign set by c (an interaction: no main effect of b)
        sign = np.where(f[:, 2] % 2 == 0, 1.0, -1.0)
        return np.stack([f[:, 0] - 1.5, sign * (f[:, 1] - 1.5)], axis=1) + 0.05 * rng.standard_normal((len(f), 2))

    rows = factor_readout.latent_explained(codes(train), train, codes(test), test, subsets=[(0,), (1,), (1, 2)],
                                           n_estimators=30)
    assert rows[0]["r2_all"] > 0.95 and rows[0]["r2_subsets"][0] > 0.95 and rows[0]["r2_subsets"][1] < 0.05
    assert rows[1]["r2_all"] > 0.95 and rows[1]["r2_subsets"][1] < 0.05 and rows[1]["r2_subsets"][2] > 0.95
    assert rows[1]["importance"][0] < 0.05 < rows[1]["importance"][2]


def test_a_factor_constant_in_the_sample_is_left_out_as_every_metric_leaves_it():
    rng = np.random.default_rng(2)
    train, test = (np.c_[rng.integers(0, 4, size=(n, 1)), np.zeros((n, 1), dtype=int)] for n in (500, 200))
    codes = lambda f: f[:, :1] + 0.05 * rng.standard_normal((len(f), 1))  # noqa: E731
    row = factor_readout.readout(codes(train), train, codes(test), test, n_estimators=10)
    assert row["accuracy"][0] > 0.95 and row["top_latent"][0] == 0
    assert row["accuracy"][1] is None and row["top_share"][1] is None and row["chance"][1] == 1.0
