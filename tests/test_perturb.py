"""probe.perturb without training: selection, folding, m(w)'s scalar bottleneck, noise stores, CLI help."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from probe.errors import UserError
from probe.perturb import (DEFAULT_EPSILON, ManipulationNet, fold, make_noise_store, manipulate, noise_block,
                           normalised_factors, posterior_variance_order, resolve_manipulation_config, select_restarts)
from probe.perturb.manipulation import fold_numpy, to_uint8


# -- selection -------------------------------------------------------------------------------------------

def test_select_restarts_picks_lowest_and_highest():
    mig = {"r0": 0.21, "r1": 0.05, "r2": 0.33, "r3": 0.12, "r4": 0.02}
    sel = select_restarts(mig)
    assert sel["entangled"] == ["r4"] and sel["disentangled"] == ["r2"]
    assert sel["mig"] == mig
    ens = select_restarts(mig, k=2)
    assert ens["entangled"] == ["r4", "r1"] and ens["disentangled"] == ["r2", "r0"]


def test_select_restarts_ties_and_errors():
    sel = select_restarts({"b": 0.1, "a": 0.1, "c": 0.1, "d": 0.1}, k=2)
    assert sel["entangled"] == ["a", "b"] and sel["disentangled"] == ["c", "d"]  # ties: by name, sides disjoint
    sel = select_restarts({"b": 0.1, "a": 0.1, "c": 0.2, "d": 0.0}, k=2)
    assert sel["entangled"] == ["d", "a"] and sel["disentangled"] == ["c", "b"]
    with pytest.raises(UserError, match="at least 4"):
        select_restarts({"a": 0.1, "b": 0.2, "c": 0.3}, k=2)
    with pytest.raises(UserError, match="finite"):
        select_restarts({"a": float("nan"), "b": 0.2})
    with pytest.raises(UserError):
        select_restarts({"a": 0.1, "b": 0.2}, k=0)


def test_posterior_variance_order_eq14():
    res = posterior_variance_order([0.9, 0.01, 1.0, 0.3])
    assert res["order"] == [1, 3, 0, 2]
    assert res["active_units"] == 2  # ⟨σ²⟩ < 0.8


# -- folding and m(w) ------------------------------------------------------------------------------------

def test_fold_identity_inside_and_bounded_outside():
    inside = torch.linspace(0, 1, 1001)
    assert torch.equal(fold(inside), inside)
    outside = torch.linspace(-1, 2, 3001)
    y = fold(outside)
    assert y.min() >= 0 and y.max() <= 1
    assert torch.allclose(fold(torch.tensor([1.2, -0.3, 1.0, 0.0])), torch.tensor([0.8, 0.3, 1.0, 0.0]))
    np.testing.assert_allclose(fold_numpy(outside.numpy()), y.numpy(), atol=1e-7)


def test_manipulation_stays_within_epsilon():
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(2000, generator=gen)
    x[:500] = torch.round(x[:500])  # binary pixels, as in dSprites
    m = torch.rand(2000, generator=gen) * 2 - 1
    for eps in (0.1, 0.175, 0.5):
        y = manipulate(x, m, eps)
        assert y.min() >= 0 and y.max() <= 1
        assert (y - x).abs().max() <= eps * m.abs().max() + 1e-6
        q = to_uint8(y.numpy()).astype(np.float64) / 255
        assert np.abs(q - x.numpy()).max() <= eps + 0.5 / 255 + 1e-9


def test_normalised_factors_range():
    w = normalised_factors(np.array([[0, 0, 0], [2, 1, 0], [1, 0, 0]]), [3, 2, 1])
    assert torch.allclose(w, torch.tensor([[-1.0, -1.0, 0.0], [1.0, 1.0, 0.0], [0.0, -1.0, 0.0]]))


def test_m_depends_on_w_only_through_one_scalar():
    torch.manual_seed(0)
    net = ManipulationNet(num_factors=4, image_shape=(1, 16, 16))
    with torch.no_grad():
        net.render.deconv[-1].bias.fill_(0.3)  # a non-trivial output, not only the zero-bias init
        a = net.to_scalar[0].weight[0]  # the single neuron's weights
        w1 = torch.tensor([[0.2, -0.5, 0.9, -0.1]])
        v = torch.tensor([1.0, 2.0, -1.0, 0.5])
        v = v - (v @ a) / (a @ a) * a  # a direction the bottleneck cannot see
        w2 = w1 + 0.7 * v
        w3 = w1 + 0.7 * a / a.norm()  # a direction it does see
        s1, s2, s3 = net.bottleneck(w1), net.bottleneck(w2), net.bottleneck(w3)
        assert s1.shape == (1, 1)
        assert torch.allclose(s1, s2, atol=1e-6) and not torch.allclose(s1, s3, atol=1e-3)
        m1, m2, m3 = net(w1), net(w2), net(w3)
        assert torch.allclose(m1, m2, atol=1e-5)
        assert (m1 - m3).abs().max() > 1e-4
        assert torch.equal(m1, net.from_bottleneck(s1))
        assert m1.shape == (1, 1, 16, 16) and m1.abs().max() <= 1
    deep = ManipulationNet(num_factors=4, image_shape=(3, 32, 32), input_hidden=[8], bottleneck_activation="tanh")
    assert deep.bottleneck(torch.zeros(5, 4)).shape == (5, 1)
    assert deep(torch.zeros(5, 4)).shape == (5, 3, 32, 32)


def test_manipulation_config_resolution():
    cfg = resolve_manipulation_config({"steps": 3}, "shapes3d")
    assert cfg["epsilon"] == DEFAULT_EPSILON["shapes3d"] == 0.175 and cfg["steps"] == 3
    assert cfg["z_samples"] == 5 and cfg["decoder_batches_per_step"] == 3 and cfg["adam_eps"] == 1e-7
    assert cfg["manipulation_lr"] == cfg["lr"] == 1e-4
    assert resolve_manipulation_config({"manipulation_lr": 0}, "dsprites")["manipulation_lr"] == 0.0
    assert resolve_manipulation_config({"epsilon": 0.05}, "toy")["epsilon"] == 0.05
    with pytest.raises(UserError, match="no default epsilon"):
        resolve_manipulation_config({}, "toy")
    with pytest.raises(UserError, match="unknown manipulation setting"):
        resolve_manipulation_config({"stpes": 3}, "dsprites")
    with pytest.raises(UserError, match="epsilon"):
        resolve_manipulation_config({"epsilon": 1.5}, "dsprites")


# -- noise baseline ----------------------------------------------------------------------------------------

def test_noise_block_is_uniform_and_seeded():
    from scipy import stats

    eps = 0.1
    u = noise_block(7, 0, (200, 16, 16, 1), eps).ravel()
    assert u.min() >= -eps and u.max() <= eps
    assert abs(u.mean()) < 3 * eps / np.sqrt(3 * u.size)
    assert abs(u.var() - eps ** 2 / 3) < 0.02 * eps ** 2 / 3
    assert stats.kstest(u, stats.uniform(loc=-eps, scale=2 * eps).cdf).pvalue > 1e-3
    assert np.array_equal(noise_block(7, 0, (3, 4), eps), noise_block(7, 0, (3, 4), eps))
    assert not np.array_equal(noise_block(7, 0, (3, 4), eps), noise_block(8, 0, (3, 4), eps))
    assert not np.array_equal(noise_block(7, 0, (3, 4), eps), noise_block(7, 100, (3, 4), eps))


def test_noise_store(make_toy_store, tmp_path):
    from probe.data import open_store

    parent = make_toy_store(factor_sizes=(2, 3, 4, 4), resolution=16, channels=1)
    eps = 0.1
    store = make_noise_store(parent.path, tmp_path / "noise.zarr", epsilon=eps, seed=3)
    store = open_store(store.path)  # reopens from disk
    assert store.origin["kind"] == "noise"
    assert store.origin["parent"] == {"path": str(parent.path), "digest": parent.digest}
    assert store.origin["config"]["epsilon"] == eps and store.origin["seed"] == 3
    assert np.array_equal(store.factors, parent.factors) and store.factor_values == parent.factor_values
    store.verify()
    x = parent.load_numpy()
    y = store.load_numpy()
    # exactly the documented recipe: one block here, seeded with (seed, 0)
    assert store.origin["config"]["block_images"] == parent.num_images
    expected = to_uint8(fold_numpy(x / 255.0 + noise_block(3, 0, x.shape, eps)))
    assert np.array_equal(y, expected)
    diff = np.abs(y.astype(int) - x.astype(int)) / 255
    assert diff.max() <= eps + 1 / 255 and store.origin["max_abs_diff"] == pytest.approx(diff.max())
    # black pixels are folded: they become |u|, i.e. U[0, ε] up to rounding
    black = y[x == 0] / 255
    assert black.mean() == pytest.approx(eps / 2, abs=0.005)
    with pytest.raises(UserError, match="exists"):
        make_noise_store(parent.path, tmp_path / "noise.zarr", epsilon=eps, seed=3)
    with pytest.raises(UserError, match="epsilon"):
        make_noise_store(parent.path, tmp_path / "bad.zarr", epsilon=0.0, seed=3)
    assert not (tmp_path / "bad.zarr").exists()


# -- CLI -----------------------------------------------------------------------------------------------------

def test_cli_help_and_user_errors(make_toy_store, tmp_path):
    from probe.cli import cli, main

    runner = CliRunner()
    for sub in ("train", "apply", "noise", "select", "figure"):
        res = runner.invoke(cli, ["perturb", sub, "--help"])
        assert res.exit_code == 0 and "Example" in res.output, sub
    parent = make_toy_store()
    with pytest.raises(SystemExit) as exit_info:
        main(["perturb", "noise", "--data", str(parent.path), "--out", str(tmp_path / "n.zarr"), "--epsilon", "2"])
    assert exit_info.value.code == 2 and not (tmp_path / "n.zarr").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["perturb", "train", "--data", str(parent.path), "--out", str(tmp_path / "m")])
    assert exit_info.value.code == 2 and not (tmp_path / "m").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["perturb", "noise", "--data", str(parent.path), "--out", str(tmp_path / "n.zarr"), "--epsilon", "0.1"])
    assert exit_info.value.code == 0 and (tmp_path / "n.zarr").exists()


# -- coverage of m ---------------------------------------------------------------------------------------

class _ConstructedManipulation(torch.nn.Module):
    """m(w) = sign-pattern·relu(s) with s = w[:, 0]: exactly zero for every w with w_0 ≤ 0 (the degenerate case)."""

    def __init__(self, shape=(1, 4, 4)):
        super().__init__()
        self.pattern = torch.ones(shape)
        self.pattern[..., ::2] = -1

    def bottleneck(self, w):
        return w[:, :1]

    def from_bottleneck(self, s):
        return torch.relu(s)[:, :, None, None] * self.pattern

    def forward(self, w):
        return self.from_bottleneck(self.bottleneck(w))


def test_coverage_of_a_constructed_manipulation():
    from probe.perturb.manipulation import manipulation_coverage

    sizes = [5, 3]
    factors = np.array([[i, j] for i in range(5) for j in range(3)])
    w = normalised_factors(factors, sizes)  # w_0 in {-1, -0.5, 0, 0.5, 1}
    cov = manipulation_coverage(_ConstructedManipulation(), w, threshold=0.05, factors=factors, factor_sizes=sizes)
    # m = 0 for w_0 ∈ {-1, -0.5, 0}: 9 of 15 images; |m|∞ = w_0 ≥ 0.5 for the other 6
    assert cov["fraction_small"] == pytest.approx(9 / 15)
    assert cov["fraction_covered"] == pytest.approx(6 / 15)
    assert cov["num_images"] == 15
    # per pixel m ∈ {0 (9), ±0.5 (3), ±1 (3)}: mean pattern = (3·0.5 + 3·1)/15 = 0.3 in magnitude
    assert cov["variation"]["rms_mean"] == pytest.approx(0.3, abs=1e-6)
    assert cov["variation"]["rms_about_mean"] == pytest.approx(np.sqrt((3 * 0.25 + 3 * 1) / 15 - 0.09), abs=1e-6)
    # m follows factor 0 only: a step in factor 1 never changes it
    assert cov["variation"]["per_factor_rms"][1] == 0.0
    assert cov["variation"]["per_factor_rms"][0] > 0.0
    # a constant manipulation covers everything and varies nowhere
    class Constant(_ConstructedManipulation):
        def from_bottleneck(self, s):
            return torch.ones_like(s)[:, :, None, None] * self.pattern
    cov = manipulation_coverage(Constant(), w, factors=factors, factor_sizes=sizes)
    assert cov["fraction_covered"] == 1.0
    assert cov["variation"]["mean_pairwise_rms"] == 0.0 and cov["variation"]["rms_about_mean"] == pytest.approx(0.0, abs=1e-6)


def test_render_bias_init_breaks_homogeneity():
    torch.manual_seed(0)
    zeros = ManipulationNet(2, (1, 16, 16))
    torch.manual_seed(0)
    uniform = ManipulationNet(2, (1, 16, 16), render_bias_init="uniform")
    s = torch.tensor([[0.5], [1.0]])
    # zero biases + ReLU: render(2s) = 2·render(s) for s > 0, and render(0) = 0
    r = zeros.render(s)
    assert torch.allclose(r[1], 2 * r[0], atol=1e-5)
    assert torch.count_nonzero(zeros.render(torch.zeros(1, 1))) == 0
    r = uniform.render(s)
    assert not torch.allclose(r[1], 2 * r[0], atol=1e-3)
    assert torch.count_nonzero(uniform.render(torch.zeros(1, 1))) > 0
    with pytest.raises(ValueError):
        ManipulationNet(2, (1, 16, 16), render_bias_init="ones")


def test_coverage_varying_share():
    from probe.perturb.manipulation import manipulation_coverage

    factors = np.array([[i, j] for i in range(5) for j in range(3)])
    w = normalised_factors(factors, [5, 3])

    class Constant(_ConstructedManipulation):
        def from_bottleneck(self, s):
            return torch.ones_like(s)[:, :, None, None] * self.pattern

    class Odd(_ConstructedManipulation):  # m = w_0 · pattern: mean 0 over the symmetric grid, all of it varies
        def from_bottleneck(self, s):
            return s[:, :, None, None] * self.pattern

    assert manipulation_coverage(Constant(), w)["variation"]["varying_share"] == pytest.approx(0.0, abs=1e-9)
    assert manipulation_coverage(Odd(), w)["variation"]["varying_share"] == pytest.approx(1.0, abs=1e-6)


# -- the renderer's upsampling and the smoothness of m (issue 24) -------------------------------------------------
def test_resize_upsampling_has_the_shape_and_no_checkerboard_on_a_constant_input():
    """Analytic: resize ×2 (nearest or bilinear), a 3×3 convolution with replicate padding and ReLU each map a
    spatially constant map to a constant one, so the resize renderer turns a constant 4×4 feature map into an
    exactly constant image; a stride-2 4×4 transposed convolution does not (even and odd output pixels see different
    kernel taps: a period-2 pattern)."""
    from probe.perturb.manipulation import ResizeConvDecoder, manipulation_smoothness

    for upsample in ("resize", "resize-bilinear"):
        torch.manual_seed(0)
        net = ManipulationNet(3, (3, 32, 32), bottleneck_embedding="odd", upsample=upsample)
        m = net(torch.rand(5, 3) * 2 - 1)
        assert m.shape == (5, 3, 32, 32) and m.abs().max() <= 1 and net.upsample == upsample
        assert not any(isinstance(x, torch.nn.ConvTranspose2d) for x in net.modules())
        renderer = net.render
        assert isinstance(renderer, ResizeConvDecoder)
        with torch.no_grad():
            for conv in (x for x in renderer.deconv if isinstance(x, torch.nn.Conv2d)):
                conv.bias.uniform_(-0.5, 0.5)  # not only the zero-bias init
            out = renderer.deconv(torch.full((2, 64, 4, 4), 0.7))
        assert out.shape == (2, 3, 32, 32)
        spread = out - out[..., :1, :1]
        assert float(spread.abs().max()) <= 1e-6 * float(out.abs().max()) + 1e-7, upsample
        assert manipulation_smoothness(out)["high_frequency_share"] == pytest.approx(0.0, abs=1e-9)
    torch.manual_seed(0)
    transposed = ManipulationNet(3, (3, 32, 32), upsample="transposed")  # the default, the paper's renderer
    assert transposed.upsample == "transposed"
    first = transposed.render.deconv[0]
    assert isinstance(first, torch.nn.ConvTranspose2d)
    with torch.no_grad():
        y = first(torch.full((1, 64, 4, 4), 0.7))[0, 0, 2:6, 2:6]  # interior: away from the border
    w = first.weight.detach()[:, 0].sum(0) * 0.7  # summed over input channels: the taps each output pixel sees
    bias = float(first.bias.detach()[0])
    even, odd = w[1::2, 1::2].sum() + bias, w[0::2, 0::2].sum() + bias
    assert torch.allclose(y[0::2, 0::2], even.expand(2, 2), atol=1e-5)  # output pixel 2i sees taps 1 and 3
    assert torch.allclose(y[1::2, 1::2], odd.expand(2, 2), atol=1e-5)   # output pixel 2i+1 sees taps 0 and 2
    assert abs(float(even - odd)) > 1e-3  # a checkerboard from a constant input
    with pytest.raises(ValueError):
        ManipulationNet(3, (3, 32, 32), upsample="pixel-shuffle")


def test_default_renderer_is_unchanged_by_the_upsample_option():
    torch.manual_seed(3)
    old = ManipulationNet(4, (1, 16, 16), bottleneck_embedding="odd")
    torch.manual_seed(3)
    new = ManipulationNet(4, (1, 16, 16), bottleneck_embedding="odd", upsample="transposed", normalise_linf=False)
    assert old.state_dict().keys() == new.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(old.state_dict().values(), new.state_dict().values()))


def test_normalise_linf_spends_the_whole_budget():
    torch.manual_seed(0)
    net = ManipulationNet(4, (1, 16, 16), bottleneck_embedding="odd", normalise_linf=True)
    m = net(torch.tensor([[0.3, -0.2, 0.9, 0.1], [-0.8, 0.5, -0.1, 0.4]]))
    assert torch.allclose(m.flatten(1).abs().amax(1), torch.ones(2))
    assert torch.count_nonzero(net(torch.zeros(1, 4))) == 0  # s = 0: the odd m is 0 and stays 0


def test_smoothness_of_known_patterns():
    from probe.perturb.manipulation import manipulation_smoothness

    checker = torch.ones(2, 3, 8, 8)
    checker[..., ::2, 1::2] = -1
    checker[..., 1::2, ::2] = -1
    s = manipulation_smoothness(0.3 * checker)
    assert s["neighbour_diff_ratio"] == pytest.approx(2.0) and s["high_frequency_share"] == pytest.approx(1.0)
    const = manipulation_smoothness(torch.full((1, 1, 8, 8), 0.4))
    assert const["neighbour_diff_ratio"] == 0.0 and const["high_frequency_share"] == pytest.approx(0.0, abs=1e-12)
    # one cosine period across 16 pixels: all energy at 1/16 cycle per pixel; vertical steps are 0 and as many as
    # the 15 horizontal ones per row, whose mean |step| over the RMS 1/√2 gives the ratio (≈ 0.18)
    x = np.cos(2 * np.pi * np.arange(16) / 16)
    wave = torch.tensor(x, dtype=torch.float32).expand(1, 1, 16, 16).clone()
    smooth = manipulation_smoothness(wave)
    assert smooth["neighbour_diff_ratio"] == pytest.approx(0.5 * np.abs(np.diff(x)).mean() * np.sqrt(2), rel=1e-5)
    assert smooth["neighbour_diff_ratio"] < 0.2
    assert smooth["high_frequency_share"] == pytest.approx(0.0, abs=1e-9)
    # white noise: the share is the fraction of DFT bins above ¼ cycle/pixel (1 − (7/16)² on 16 pixels)
    noise = manipulation_smoothness(torch.randn(64, 1, 16, 16, generator=torch.Generator().manual_seed(0)))
    assert noise["white_noise_high_frequency_share"] == pytest.approx(1 - (7 / 16) ** 2)
    assert noise["high_frequency_share"] == pytest.approx(noise["white_noise_high_frequency_share"], abs=0.02)
    assert noise["neighbour_diff_ratio"] == pytest.approx(2 / np.sqrt(np.pi), abs=0.03)


def test_new_manipulation_settings_resolve_and_list_their_deviations():
    from probe.perturb.adversarial import _identity_of, appendix_b1_deviations

    cfg = resolve_manipulation_config({}, "shapes3d")
    assert cfg["upsample"] == "transposed" and cfg["freeze_psi"] is False and cfg["normalise_linf"] is False
    with pytest.raises(UserError, match="upsample"):
        resolve_manipulation_config({"upsample": "deconv"}, "shapes3d")
    with pytest.raises(UserError, match="freeze_psi"):
        resolve_manipulation_config({"freeze_psi": "yes"}, "shapes3d")
    text = "; ".join(appendix_b1_deviations({"upsample": "resize"}, "shapes3d"))
    assert "resize-convolution (nearest" in text and "Odena" in text
    assert "resize-convolution" not in "; ".join(appendix_b1_deviations({}, "shapes3d"))
    # a run recorded before these settings existed keeps its identity (it still resumes / is found complete)
    old = {k: v for k, v in cfg.items() if k not in ("upsample", "freeze_psi", "normalise_linf")}
    assert _identity_of({"config": old}) == _identity_of({"config": cfg})
    assert _identity_of({"config": {**cfg, "upsample": "resize"}}) != _identity_of({"config": cfg})


def test_coverage_from_a_sample_of_images_estimates_the_whole_set():
    # m = relu(w_0)·pattern on a 40 × 25 grid: exactly 19/40 of the images have w_0 > 0 (|m|∞ = w_0 ≥ 0.05 there)
    from probe.perturb.manipulation import manipulation_coverage

    sizes = [40, 25]
    factors = np.array([[i, j] for i in range(40) for j in range(25)])
    w = normalised_factors(factors, sizes)
    whole = manipulation_coverage(_ConstructedManipulation(), w, factors=factors, factor_sizes=sizes, sample=None)
    assert whole["num_images"] == whole["of_images"] == 1000
    assert whole["fraction_covered"] == pytest.approx(19 / 40)
    part = manipulation_coverage(_ConstructedManipulation(), w, factors=factors, factor_sizes=sizes, sample=400,
                                 pairs=300, factor_pairs=200)
    assert part["num_images"] == 400 and part["of_images"] == 1000 and part["pairs"] == 300
    # a sample of 400 without replacement from 1,000: SD of the fraction ≈ 0.019; 4 SD
    assert part["fraction_covered"] == pytest.approx(19 / 40, abs=0.08)
    assert part["variation"]["per_factor_rms"][1] == 0.0 and part["variation"]["per_factor_rms"][0] > 0.0
    # the same seed draws the same sample
    again = manipulation_coverage(_ConstructedManipulation(), w, factors=factors, factor_sizes=sizes, sample=400,
                                  pairs=300, factor_pairs=200)
    assert again == part
