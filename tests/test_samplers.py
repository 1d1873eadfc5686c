"""Laplace transition sampler (SlowVAE / PCL pairs): invariants and exact step distributions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from probe.data.samplers import LaplaceTransitionSampler, resolve_frozen_factors, truncated_laplace_pmf
from probe.errors import UserError

DSPRITES = [3, 6, 40, 32, 32]


def uniform_factors(sizes, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, s, (n,), generator=g) for s in sizes], 1)


def chi_square_pvalue(counts: np.ndarray, expected_probs: np.ndarray) -> float:
    mask = expected_probs > 0
    assert counts[~mask].sum() == 0, "samples landed on zero-probability outcomes"
    expected = expected_probs[mask] * counts.sum()
    return float(stats.chisquare(counts[mask], expected).pvalue)


@pytest.mark.parametrize("rate", [1.0, (1.0, 10.0)])
def test_invariants_frozen_change_range(rate):
    sampler = LaplaceTransitionSampler(DSPRITES, frozen=[0], rate=rate)
    start = uniform_factors(DSPRITES, 20000)
    nxt = sampler.sample_next(start, torch.Generator().manual_seed(1))
    assert nxt.shape == start.shape and nxt.dtype == start.dtype
    assert torch.equal(nxt[:, 0], start[:, 0])                       # shape never changes
    assert bool(((nxt != start).sum(1) >= 1).all())                  # at least one factor changes
    sizes = torch.tensor(DSPRITES)
    assert bool((nxt >= 0).all()) and bool((nxt < sizes).all())      # indices in range
    # the number of changed factors is random (no fixed k)
    assert len(torch.unique((nxt != start).sum(1))) >= 3


def test_no_wrap_around():
    # rate 10 on 40 values: scale ln(40)/10 ≈ 0.37. A wrapping sampler would put ~the same mass on 39 as
    # on 1 from start 0; the truncated one puts ≈ exp(-39/0.37) ≈ 0 there.
    sampler = LaplaceTransitionSampler([40, 40], rate=10.0)
    start = torch.zeros(20000, 2, dtype=torch.long)
    nxt = sampler.sample_next(start, torch.Generator().manual_seed(2))
    assert int((nxt == 39).sum()) == 0
    assert int((nxt == 1).sum()) > 1000
    start = torch.full((20000, 2), 39, dtype=torch.long)
    nxt = sampler.sample_next(start, torch.Generator().manual_seed(3))
    assert int((nxt == 0).sum()) == 0 and int((nxt == 38).sum()) > 1000


def test_pmf_matches_formula_and_reference_stay_probabilities():
    pmf = truncated_laplace_pmf(2, 6, 1.0).numpy()
    scale = np.log(6) / 1.0
    expected = np.exp(-np.abs(np.arange(6) - 2) / scale)
    np.testing.assert_allclose(pmf, expected / expected.sum(), rtol=1e-12)
    # P(unchanged) averaged over uniform starts, as tabulated in anchor-slowvae-pcl.md §2
    def stay(n, r):
        return np.mean([float(truncated_laplace_pmf(s, n, r)[s]) for s in range(n)])
    assert [round(stay(n, 1.0), 2) for n in (6, 40, 32)] == [0.38, 0.15, 0.16]
    assert [round(stay(n, 10.0), 2) for n in (6, 40, 32)] == [0.99, 0.88, 0.90]


def test_step_distribution_fixed_rate_two_factors():
    # Exact joint law with the "at least one change" rule: the both-unchanged mass a0·a1 is moved half to
    # a redraw of factor 0 (current value excluded) and half to a redraw of factor 1.
    sizes, start, rate, n = (7, 5), (1, 2), 2.0, 200_000
    p0 = truncated_laplace_pmf(start[0], sizes[0], rate).numpy()
    p1 = truncated_laplace_pmf(start[1], sizes[1], rate).numpy()
    a0, a1 = p0[start[0]], p1[start[1]]
    joint = np.outer(p0, p1)
    joint[start] = 0.0
    redraw0 = p0.copy(); redraw0[start[0]] = 0; redraw0 /= 1 - a0
    redraw1 = p1.copy(); redraw1[start[1]] = 0; redraw1 /= 1 - a1
    joint[:, start[1]] += 0.5 * a0 * a1 * redraw0
    joint[start[0], :] += 0.5 * a0 * a1 * redraw1
    assert joint.sum() == pytest.approx(1.0)

    sampler = LaplaceTransitionSampler(sizes, rate=rate)
    nxt = sampler.sample_next(torch.tensor([start] * n), torch.Generator().manual_seed(4)).numpy()
    counts = np.zeros(sizes)
    np.add.at(counts, (nxt[:, 0], nxt[:, 1]), 1)
    assert chi_square_pvalue(counts.ravel(), joint.ravel()) > 1e-3
    # and the sampled marginal is close to the exact one in absolute terms
    np.testing.assert_allclose(counts.sum(1) / n, joint.sum(1), atol=0.005)


def test_step_distribution_uniform_rate_mixture():
    # One movable factor (the other frozen): P(v) = E_{r~U(1,10)}[p_r(v) / (1 - p_r(s))] for v != s.
    size, s, n = 9, 3, 100_000
    rates = np.linspace(1, 10, 2001)
    mix = np.zeros(size)
    for r in rates:
        p = truncated_laplace_pmf(s, size, r).numpy()
        q = p.copy(); q[s] = 0
        mix += q / q.sum()
    mix /= len(rates)
    sampler = LaplaceTransitionSampler([size, 4], frozen=[1], rate=(1.0, 10.0))
    start = torch.tensor([[s, 2]] * n)
    nxt = sampler.sample_next(start, torch.Generator().manual_seed(5)).numpy()
    assert (nxt[:, 1] == 2).all() and (nxt[:, 0] != s).all()
    counts = np.bincount(nxt[:, 0], minlength=size)
    assert chi_square_pvalue(counts, mix) > 1e-3
    # a fixed rate of 1 would be far more spread out: the test distinguishes the two
    p1 = truncated_laplace_pmf(s, size, 1.0).numpy(); p1[s] = 0; p1 /= p1.sum()
    assert chi_square_pvalue(counts, p1) < 1e-6


def test_deterministic_given_generator():
    sampler = LaplaceTransitionSampler(DSPRITES, frozen=[0])
    start = uniform_factors(DSPRITES, 500)
    a = sampler.sample_next(start, torch.Generator().manual_seed(7))
    b = sampler.sample_next(start, torch.Generator().manual_seed(7))
    c = sampler.sample_next(start, torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_size_one_factor_never_moves():
    sampler = LaplaceTransitionSampler([1, 3], rate=1.0)
    start = torch.tensor([[0, 1]] * 1000)
    nxt = sampler.sample_next(start, torch.Generator().manual_seed(9))
    assert (nxt[:, 0] == 0).all() and (nxt[:, 1] != 1).all()


def test_bad_configurations_raise_user_error():
    with pytest.raises(UserError):
        LaplaceTransitionSampler([3, 4], frozen=[0, 1])           # nothing can change
    with pytest.raises(UserError):
        LaplaceTransitionSampler([3, 4], frozen=[2])
    with pytest.raises(UserError):
        LaplaceTransitionSampler([3, 4], rate=0.0)
    with pytest.raises(UserError):
        LaplaceTransitionSampler([3, 4], rate=(5.0, 2.0))


def test_resolve_frozen_factors():
    names = ["floor_hue", "wall_hue", "object_hue", "scale", "shape", "orientation"]
    assert resolve_frozen_factors(None, names, 6) == [4]
    assert resolve_frozen_factors(None, ["a", "b"], 2) == []
    assert resolve_frozen_factors(None, None, 2) == []
    assert resolve_frozen_factors([], names, 6) == []
    assert resolve_frozen_factors([0, "scale"], names, 6) == [0, 3]
    with pytest.raises(UserError):
        resolve_frozen_factors(["colour"], names, 6)
    with pytest.raises(UserError):
        resolve_frozen_factors([6], names, 6)
