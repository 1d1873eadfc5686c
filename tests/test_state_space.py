import numpy as np
import pytest

from probe.data import StateSpace


def test_ravel_unravel_matches_numpy():
    sizes = [3, 2, 4, 5]
    space = StateSpace(sizes)
    idx = np.arange(space.num_states)
    factors = space.unravel(idx)
    np.testing.assert_array_equal(factors, np.stack(np.unravel_index(idx, sizes), axis=1))
    np.testing.assert_array_equal(space.ravel(factors), idx)
    assert space.strides.tolist() == [40, 20, 5, 1]


def test_ravel_rejects_out_of_range():
    with pytest.raises(ValueError):
        StateSpace([2, 2]).ravel(np.array([[0, 2]]))


def test_sample_factors_uses_randomstate_factor_by_factor():
    sizes = [3, 6, 40]
    got = StateSpace(sizes).sample_factors(7, np.random.RandomState(0))
    rs = np.random.RandomState(0)
    expected = np.stack([rs.randint(s, size=7) for s in sizes], axis=1)
    np.testing.assert_array_equal(got, expected)
    assert StateSpace(sizes).sample_factors(5, np.random.default_rng(0)).shape == (5, 3)


def test_traversal():
    t = StateSpace([2, 3, 4]).traversal([1, 2, 3], 1)
    np.testing.assert_array_equal(t, [[1, 0, 3], [1, 1, 3], [1, 2, 3]])
