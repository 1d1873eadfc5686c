"""VAE-family objectives and PCL: loss pieces on hand-computable values, gradient routing, smoke steps."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch

from probe.models.base import Batch, resolve_config
from probe.models.beta_tcvae import BetaTCVAE, gaussian_log_density, total_correlation
from probe.models.dip_vae import DIPVAEI, DIPVAEII, covariance, dip_regularizer
from probe.models.factor_vae import FactorVAE, discriminator_loss, permute_dims
from probe.models.pcl import PCL
from probe.models.registry import get_model_class
from probe.models.rtc_vae import RTCVAE
from probe.models.slow_vae import SlowVAE, gaussian_entropy, laplace_cross_entropy, laplace_transition_kl

IMAGE = (1, 16, 16)
NAMES = ["beta-tcvae", "factor-vae", "dip-vae-i", "dip-vae-ii", "slow-vae", "rtc-vae", "pcl"]


def build(cls, **overrides):
    return cls(resolve_config(cls, None, overrides), IMAGE, num_factors=3)


def toy_batch(b=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(b, *IMAGE, generator=g) > 0.7).float()
    return Batch(x=x, x_next=torch.roll(x, 1, dims=3))


# -- β-TCVAE -----------------------------------------------------------------------------------------

def naive_tc(z, mean, logvar):
    """Direct transcription of disentanglement_lib's total_correlation ([j, i, l] tensor)."""
    log_q = gaussian_log_density(z[:, None, :], mean[None], logvar[None])
    return (torch.logsumexp(log_q.sum(2), 1) - torch.logsumexp(log_q, 1).sum(1)).mean()


@pytest.mark.slow
def test_total_correlation_disentanglement_lib_value():
    # vae_test.test_total_correlation: standard-normal posterior, B = 10000, L = 10 -> (1 - L)·ln(B)
    z = torch.randn(10000, 10, generator=torch.Generator().manual_seed(0))
    zeros = torch.zeros(10000, 10)
    value = float(total_correlation(z, zeros, zeros))
    assert -82.9 <= value <= -82.89
    assert value == pytest.approx(-9 * math.log(10000), abs=2e-3)
    z1 = z[:, :1]
    assert 0.0 <= float(total_correlation(z1, zeros[:, :1], zeros[:, :1])) <= 0.1     # vae_test, L = 1


def test_total_correlation_constant_scales_with_batch():
    # identical posteriors: TC estimate = (1 - L)·ln(B) exactly, whatever z is
    z = torch.randn(500, 4, generator=torch.Generator().manual_seed(2))
    zeros = torch.zeros_like(z)
    assert float(total_correlation(z, zeros, zeros)) == pytest.approx(-3 * math.log(500), abs=1e-3)


def test_total_correlation_matches_direct_formula_and_chunking():
    g = torch.Generator().manual_seed(3)
    mean = torch.randn(9, 4, generator=g, dtype=torch.float64)
    logvar = torch.randn(9, 4, generator=g, dtype=torch.float64) - 1
    z = mean + torch.exp(0.5 * logvar) * torch.randn(9, 4, generator=g, dtype=torch.float64)
    expected = naive_tc(z, mean, logvar)
    assert float(total_correlation(z, mean, logvar)) == pytest.approx(float(expected), rel=1e-12)
    assert float(total_correlation(z, mean, logvar, max_elements=40)) == pytest.approx(float(expected), rel=1e-12)


def test_gaussian_log_density_reference_values():
    one = torch.ones(1)
    assert float(gaussian_log_density(one, torch.tensor(0.0), torch.tensor(0.0))) == pytest.approx(-1.4189385, abs=1e-6)
    assert float(gaussian_log_density(one, torch.tensor(1.0), torch.tensor(0.0))) == pytest.approx(-0.9189385, abs=1e-6)


def test_beta_tcvae_regularizer_is_kl_plus_weighted_tc():
    g = torch.Generator().manual_seed(4)
    mean, logvar = torch.randn(16, 3, generator=g), torch.randn(16, 3, generator=g) * 0.3
    z = mean + torch.exp(0.5 * logvar) * torch.randn(16, 3, generator=g)
    kl = float((0.5 * (mean ** 2 + logvar.exp() - logvar - 1).sum(1)).mean())
    tc = float(naive_tc(z, mean, logvar))
    for beta in (1.0, 6.0):
        model = build(BetaTCVAE, beta=beta)
        penalty, logs = model.regularizer(mean, logvar, z, None, 0)
        assert float(penalty) == pytest.approx(kl + (beta - 1) * tc, rel=1e-5)
        assert float(logs["tc"]) == pytest.approx(tc, rel=1e-5)


# -- DIP-VAE -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("matrix,expected", [(np.ones((10, 10)), 90.0), (np.zeros((10, 10)), 10.0),
                                             (np.eye(10), 0.0), (2 * np.eye(10), 10.0)])
def test_dip_regularizer_reference_values(matrix, expected):
    assert float(dip_regularizer(torch.tensor(matrix), 1.0, 1.0)) == pytest.approx(expected)


def test_dip_regularizer_weights_on_hand_made_covariance():
    cov = torch.tensor([[2.0, 0.5, 0.0], [0.5, 1.0, -1.0], [0.0, -1.0, 0.5]])
    # off-diagonal: 2·(0.25 + 1) = 2.5; diagonal: (1 + 0 + 0.25) = 1.25
    assert float(dip_regularizer(cov, 2.0, 3.0)) == pytest.approx(2.0 * 2.5 + 3.0 * 1.25)


def test_covariance_is_biased_batch_estimate():
    x = torch.randn(50, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    np.testing.assert_allclose(covariance(x).numpy(), np.cov(x.numpy().T, bias=True), rtol=1e-5, atol=1e-7)


def test_dip_i_and_ii_regularizers():
    mean = torch.tensor([[1.0, 0.0], [-1.0, 2.0], [0.0, -2.0], [0.0, 0.0]])
    logvar = torch.log(torch.tensor([[0.5, 1.0], [0.5, 1.0], [1.5, 1.0], [1.5, 1.0]]))
    cov = torch.tensor([[0.5, -0.5], [-0.5, 2.0]])          # E[μμᵀ] − E[μ]E[μ]ᵀ by hand (E[μ] = 0)
    kl = float((0.5 * (mean ** 2 + logvar.exp() - logvar - 1).sum(1)).mean())
    z = mean.clone()
    m1 = build(DIPVAEI, lambda_od=2.0, lambda_d_factor=10.0)
    p1, _ = m1.regularizer(mean, logvar, z, None, 0)
    assert float(p1) == pytest.approx(kl + 2.0 * 2 * 0.25 + 20.0 * (0.25 + 1.0), rel=1e-6)
    m2 = build(DIPVAEII, lambda_od=2.0)                       # lambda_d_factor defaults to 1 for II
    p2, _ = m2.regularizer(mean, logvar, z, None, 0)
    cov2 = cov + torch.diag(torch.tensor([1.0, 1.0]))        # + mean posterior variances
    assert float(p2) == pytest.approx(kl + float(dip_regularizer(cov2, 2.0, 2.0)), rel=1e-6)
    assert float(dip_regularizer(cov2, 2.0, 2.0)) == pytest.approx(2.0 * 0.5 + 2.0 * (0.25 + 4.0))


# -- FactorVAE / RTC-VAE -----------------------------------------------------------------------------

def test_permutation_keeps_each_column_multiset_and_mixes_columns_independently():
    torch.manual_seed(0)
    z = torch.arange(200.0).reshape(100, 2) * torch.tensor([1.0, -1.0])
    zp = permute_dims(z)
    for d in range(2):
        assert torch.equal(torch.sort(zp[:, d]).values, torch.sort(z[:, d]).values)
    assert not torch.equal(zp, z)
    rows_kept = (zp[:, 0] == -zp[:, 1]).float().mean()        # pairs (2i, -(2i+1)) broken apart
    assert float(rows_kept) < 0.2


def test_discriminator_loss_values_and_clipping():
    zero = torch.zeros(5, 2)
    assert float(discriminator_loss(zero, zero)) == pytest.approx(math.log(2.0))
    confident_wrong = torch.tensor([[-100.0, 100.0]] * 5)
    assert float(discriminator_loss(confident_wrong, -confident_wrong)) == pytest.approx(-math.log(1e-6), rel=1e-5)


def test_factor_vae_gradient_routing_and_separate_updates():
    torch.manual_seed(0)
    model = build(FactorVAE, gamma=7.0)
    twin = copy.deepcopy(model)
    batch = toy_batch()
    opts = model.configure_optimizers()
    vae_params = {id(p) for p in model.vae_parameters()}
    assert {id(p) for g in opts["main"].param_groups for p in g["params"]} == vae_params
    assert opts["discriminator"].param_groups[0]["betas"] == (0.5, 0.9)

    torch.manual_seed(1)
    model.training_step(batch, 0, opts)
    # The same forward pass, by hand: each loss's gradient on its own parameter group only.
    torch.manual_seed(1)
    loss, _, z = twin.vae_loss(batch)
    d_loss, _ = twin.discriminator_step_loss(z)
    vae_grads = torch.autograd.grad(loss, twin.vae_parameters(), retain_graph=True)
    d_grads = torch.autograd.grad(d_loss, list(twin.discriminator.parameters()), retain_graph=True)
    enc_from_d = torch.autograd.grad(d_loss, list(twin.encoder.parameters()), allow_unused=True)
    assert all(g is None for g in enc_from_d)                   # z is detached for the discriminator
    for p, g in zip(model.vae_parameters(), vae_grads):
        torch.testing.assert_close(p.grad, g)
    for p, g in zip(model.discriminator.parameters(), d_grads):
        torch.testing.assert_close(p.grad, g)


@pytest.mark.parametrize("frozen", ["main", "discriminator"])
def test_factor_vae_each_update_leaves_the_other_parameters_unchanged(frozen):
    torch.manual_seed(0)
    model = build(FactorVAE)
    opts = model.configure_optimizers()
    for group in opts[frozen].param_groups:
        group["lr"] = 0.0
    before_vae = [p.detach().clone() for p in model.vae_parameters()]
    before_d = [p.detach().clone() for p in model.discriminator.parameters()]
    model.training_step(toy_batch(), 0, opts)
    vae_same = all(torch.equal(a, p) for a, p in zip(before_vae, model.vae_parameters()))
    d_same = all(torch.equal(a, p) for a, p in zip(before_d, model.discriminator.parameters()))
    if frozen == "main":      # only the discriminator step acted
        assert vae_same and not d_same
    else:                     # only the VAE step acted
        assert d_same and not vae_same


def test_discriminator_architecture():
    model = build(FactorVAE)
    linears = [m for m in model.discriminator.modules() if isinstance(m, torch.nn.Linear)]
    assert [m.out_features for m in linears] == [1000] * 6 + [2]
    slopes = [m.negative_slope for m in model.discriminator.modules() if isinstance(m, torch.nn.LeakyReLU)]
    assert slopes == [0.2] * 6


def test_rtc_vae_eta_and_variance_penalty():
    assert build(RTCVAE, beta=2.0).eta == 10.0
    assert build(RTCVAE, beta=20.0).eta == 20.0
    assert build(RTCVAE, beta=20.0, eta=3.0).eta == 3.0
    model = build(RTCVAE, beta=6.0)
    assert model.tc_weight == 6.0
    logvar = torch.log(torch.tensor([[0.5, 2.0], [1.5, 4.0]]))
    penalty, logs = model.extra_penalty(torch.zeros(2, 2), logvar)
    assert float(logs["variance_trace"]) == pytest.approx(1.0 + 3.0)     # Σ_k E_batch σ_k²
    assert float(penalty) == pytest.approx(10.0 * 4.0)
    # β multiplies the TC term only: with the same draws, RTC loss = FactorVAE loss(γ=β) + penalty
    fvae = build(FactorVAE, gamma=6.0)
    fvae.load_state_dict(model.state_dict())
    batch = toy_batch()
    torch.manual_seed(3)
    loss_rtc, logs_rtc, _ = model.vae_loss(batch)
    torch.manual_seed(3)
    loss_f, _, _ = fvae.vae_loss(batch)
    assert float((loss_rtc - loss_f).detach()) == pytest.approx(10.0 * float(logs_rtc["variance_trace"]), rel=1e-4)


# -- SlowVAE -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("delta,logvar,rate", [(0.0, 0.0, 6.0), (0.7, -1.0, 6.0), (-1.3, 0.5, 2.0), (3.0, -4.0, 1.0)])
def test_laplace_cross_entropy_against_monte_carlo(delta, logvar, rate):
    g = torch.Generator().manual_seed(6)
    sigma = math.exp(0.5 * logvar)
    z = delta + sigma * torch.randn(400_000, generator=g, dtype=torch.float64)   # location m = 0
    samples = -math.log(rate / 2) + rate * z.abs()
    mc, se = float(samples.mean()), float(samples.std()) / math.sqrt(z.numel())
    closed = float(laplace_cross_entropy(torch.tensor(delta, dtype=torch.float64), torch.tensor(logvar, dtype=torch.float64), rate))
    assert abs(closed - mc) < 4 * se + 1e-9


def test_laplace_cross_entropy_point_mass_limit():
    delta = torch.tensor([-2.0, 0.5, 3.0], dtype=torch.float64)
    ce = laplace_cross_entropy(delta, torch.full_like(delta, -30.0), 6.0)
    np.testing.assert_allclose(ce.numpy(), -math.log(3.0) + 6.0 * delta.abs().numpy(), atol=1e-5)


def test_laplace_transition_kl_hand_value_and_symmetry():
    rate = 6.0
    zeros = torch.zeros(1, 1, dtype=torch.float64)
    # σ = 1, δ = 0: CE = −log(λ/2) + λ√(2/π) each way; H = ½ log(2πe)
    expected = 2 * (-math.log(rate / 2) + rate * math.sqrt(2 / math.pi)) - 0.5 * math.log(2 * math.pi * math.e)
    assert float(laplace_transition_kl(zeros, zeros, zeros, zeros, rate)) == pytest.approx(expected)
    g = torch.Generator().manual_seed(7)
    m0, m1, l0, l1 = (torch.randn(5, 3, generator=g, dtype=torch.float64) for _ in range(4))
    a = laplace_transition_kl(m0, l0, m1, l1, rate)
    b = laplace_transition_kl(m1, l1, m0, l0, rate)
    assert float(a) == pytest.approx(float(b))
    assert float(gaussian_entropy(torch.zeros(1))) == pytest.approx(0.5 * math.log(2 * math.pi * math.e))


def test_slow_vae_gamma_zero_is_pair_summed_beta_vae():
    model = build(SlowVAE, gamma=0.0, beta=3.0)
    batch = toy_batch()
    torch.manual_seed(4)
    loss, logs = model.loss(batch, 0)
    loss = loss.detach()
    assert float(loss) == pytest.approx(2 * float(logs["reconstruction"]) + 3.0 * float(logs["kl"]), rel=1e-6)
    model = build(SlowVAE)
    torch.manual_seed(4)
    loss_full, logs_full = model.loss(batch, 0)
    loss_full = loss_full.detach()
    assert float(loss_full) == pytest.approx(2 * float(logs_full["reconstruction"]) + float(logs_full["kl"])
                                             + 10.0 * float(logs_full["kl_laplace"]), rel=1e-6)


def test_slow_vae_and_pcl_pair_samplers():
    names = ["shape", "scale", "orientation", "x", "y"]
    sizes = [3, 6, 40, 32, 32]
    for cls in (SlowVAE, PCL):
        assert cls.needs_pairs
        sampler = build(cls).pair_sampler(sizes, factor_names=names)
        assert sampler.frozen == [0] and sampler.rate == (1.0, 10.0)
        assert build(cls).pair_sampler(sizes).frozen == []
        fixed = build(cls, frozen_factors=[1, "y"], transition_rate=1.0).pair_sampler(sizes, factor_names=names)
        assert fixed.frozen == [1, 4] and fixed.rate == 1.0
        start = torch.zeros(64, 5, dtype=torch.long)
        nxt = sampler.sample_next(start, torch.Generator().manual_seed(0))
        assert (nxt[:, 0] == 0).all() and ((nxt != start).sum(1) >= 1).all()


# -- PCL ---------------------------------------------------------------------------------------------

def test_presets_freeze_the_shape_factor_of_each_dataset():
    from probe.data.synth import dsprites, shapes3d

    for cls in (SlowVAE, PCL):
        for dataset, names in (("dsprites", dsprites.FACTOR_NAMES), ("shapes3d", shapes3d.FACTOR_NAMES)):
            (index,) = cls.presets()[dataset]["frozen_factors"]
            assert names[index] == "shape"


def test_pcl_regression_and_logits_on_known_features():
    model = build(PCL, num_latent=2)
    with torch.no_grad():
        model.coef_t.copy_(torch.tensor([1.0, 2.0]))
        model.coef_prev.copy_(torch.tensor([-1.0, 0.5]))
        model.offset.copy_(torch.tensor([0.0, -1.0]))
        model.bias.fill_(0.25)
    h_t = torch.tensor([[1.0, 2.0], [0.0, -1.0]])
    h_prev = torch.tensor([[3.0, 0.0], [1.0, 2.0]])
    # row 0: Q = |1-3+0| + |4+0-1| = 5, Q̄ = 1+4 = 5 -> r = 0.25
    # row 1: Q = |0-1+0| + |-2+1-1| = 3, Q̄ = 1 -> r = -1.75
    r = model.regression(h_t, h_prev)
    torch.testing.assert_close(r, torch.tensor([0.25, -1.75]))
    # swapped negatives: row 0 with h_prev[1]: Q = |1-1| + |4+1-1| = 4 -> r = 1.25
    #                    row 1 with h_prev[0]: Q = |0-3| + |-2+0-1| = 6 -> r = -4.75
    logits = model.logits(h_t, h_prev, torch.tensor([1, 0]))
    torch.testing.assert_close(logits, torch.tensor([0.25, -1.75, 1.25, -4.75]))


def test_pcl_initial_parameters_and_representation():
    model = build(PCL, num_latent=4)
    assert torch.equal(model.coef_t.data, torch.ones(4)) and torch.equal(model.coef_prev.data, -torch.ones(4))
    assert torch.equal(model.offset.data, torch.zeros(4)) and float(model.bias.detach()) == 0.0
    x = toy_batch().x
    assert model.encode(x).shape == (8, 4)
    assert model.posterior_variance(x) is None
    with pytest.raises(NotImplementedError):
        model.reconstruct(x)
    # a, b, c, m are parameters: trained and checkpointed with the encoder
    names = {n for n, _ in model.named_parameters()}
    assert {"coef_t", "coef_prev", "offset", "bias"} <= names


def test_pcl_loss_is_logistic_on_real_vs_permuted():
    model = build(PCL, num_latent=3)
    batch = toy_batch(b=6)
    torch.manual_seed(5)
    loss, logs = model.loss(batch, 0)
    loss = loss.detach()
    h = model.encoder(torch.cat([batch.x, batch.x_next]))
    torch.manual_seed(5)
    perm = torch.randperm(6)
    logits = model.logits(h[6:], h[:6], perm)
    labels = torch.cat([torch.ones(6), torch.zeros(6)])
    expected = -(labels * torch.nn.functional.logsigmoid(logits) + (1 - labels) * torch.nn.functional.logsigmoid(-logits)).mean()
    assert float(loss) == pytest.approx(float(expected.detach()), rel=1e-5)


# -- every model: config, presets, a few optimisation steps ------------------------------------------

def test_presets_are_the_paper_values():
    assert BetaTCVAE.presets() == {"dsprites": {"beta": 6.0}, "shapes3d": {"beta": 32.0}}
    assert FactorVAE.presets() == {"dsprites": {"gamma": 35.0}, "shapes3d": {"gamma": 7.0}}
    assert SlowVAE.presets()["dsprites"]["beta"] == 1.0 and SlowVAE.presets()["shapes3d"]["beta"] == 1.0
    slow = SlowVAE.default_config()
    assert (slow["beta"], slow["gamma"], slow["rate_prior"]) == (1.0, 10.0, 6.0)
    assert DIPVAEI.default_config()["lambda_d_factor"] == 10.0 and DIPVAEII.default_config()["lambda_d_factor"] == 1.0


@pytest.mark.parametrize("name", NAMES)
def test_registry_config_and_presets_resolve(name):
    cls = get_model_class(name)
    assert cls.name == name
    defaults = cls.default_config()
    json.dumps(defaults)
    assert defaults["num_latent"] is None
    for dataset, preset in cls.presets().items():
        assert set(preset) <= set(defaults)
        assert resolve_config(cls, dataset)[next(iter(preset))] == next(iter(preset.values()))
    model = cls(resolve_config(cls, "dsprites"), IMAGE, num_factors=5)
    assert model.num_latent == 5                                        # latent size = number of factors


@pytest.mark.parametrize("name", NAMES)
def test_few_optimisation_steps_finite(name):
    torch.manual_seed(0)
    cls = get_model_class(name)
    model = cls(resolve_config(cls, "dsprites"), IMAGE, num_factors=3)
    opts = model.configure_optimizers()
    batch = toy_batch()
    before = [p.detach().clone() for p in model.parameters()]
    losses = []
    for step in range(4):
        logs = model.training_step(batch, step, opts)
        assert all(not torch.is_tensor(v) or not v.requires_grad for v in logs.values())
        losses.append(float(logs["loss"]))
    assert all(math.isfinite(v) for v in losses)
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    codes = model.encode(batch.x)
    assert codes.shape == (8, 3) and torch.isfinite(codes).all()
