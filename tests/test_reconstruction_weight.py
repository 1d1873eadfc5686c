"""``reconstruction_weight`` w of the GaussianVAE models: w = 1 is the loss of before bit for bit, w·Rec + β·KL
trains like Rec + (β/w)·KL under Adam, the models with their own loss weight only their reconstruction, bad values
are UserErrors, and ``probe train --set reconstruction_weight=4`` is recorded in the run's config.json."""

from __future__ import annotations

import json

import pytest
import torch

from probe.errors import UserError
from probe.models.ae import AE
from probe.models.base import Batch, bernoulli_reconstruction, gaussian_kl, resolve_config
from probe.models.beta_tcvae import BetaTCVAE, total_correlation
from probe.models.beta_vae import BetaVAE
from probe.models.dip_vae import DIPVAEI, DIPVAEII
from probe.models.factor_vae import FactorVAE
from probe.models.pcl import PCL
from probe.models.registry import get_model_class
from probe.models.rtc_vae import RTCVAE
from probe.models.slow_vae import SlowVAE, laplace_transition_kl
from probe.train import train_run
from conftest import run_probe

IMAGE = (1, 16, 16)
WEIGHTED = ["beta-vae", "beta-tcvae", "dip-vae-i", "dip-vae-ii", "factor-vae", "slow-vae", "rtc-vae"]
UNWEIGHTED = ["ae", "pcl", "linear-vae", "qlae", "tripod", "factor-qvae"]  # no summed-pixel Rec vs a regulariser
NARROW = {"factor-vae": {"disc_width": 32}, "rtc-vae": {"disc_width": 32}}


def build(cls, seed=0, drop_weight=False, **overrides):
    config = resolve_config(cls, None, {**NARROW.get(cls.name, {}), **overrides})
    if drop_weight:  # the config of a run folder written before the key existed
        del config["reconstruction_weight"]
    torch.manual_seed(seed)
    return cls(config, IMAGE, num_factors=3)


def toy_batch(b=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(b, *IMAGE, generator=g) > 0.7).float()
    return Batch(x=x, x_next=torch.roll(x, 1, dims=3))


def grads_of(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_models_with_a_summed_bernoulli_reconstruction_and_a_regulariser_have_the_key():
    for name in WEIGHTED:
        assert get_model_class(name).default_config()["reconstruction_weight"] == 1.0, name
    for name in UNWEIGHTED:
        assert "reconstruction_weight" not in get_model_class(name).default_config(), name


# -- (1) w = 1 is the loss of before, exactly ------------------------------------------------------------

def _by_hand(model, batch, noise_seed):
    """The loss as written before the weight existed (recon + penalty), from the same draws."""
    x = torch.cat([batch.x, batch.x_next]) if isinstance(model, SlowVAE) else batch.x
    torch.manual_seed(noise_seed)
    mean, logvar = model.encode_distribution(x)
    z = mean + torch.exp(0.5 * logvar) * torch.randn_like(mean)
    recon = bernoulli_reconstruction(model.decode(z), x)
    kl = gaussian_kl(mean, logvar)
    c = model.config
    if isinstance(model, BetaVAE):
        return recon + float(c["beta"]) * kl
    if isinstance(model, BetaTCVAE):
        return recon + (kl + (c["beta"] - 1.0) * total_correlation(z, mean, logvar))
    if isinstance(model, DIPVAEI):
        penalty, _ = model.regularizer(mean, logvar, z, batch, 0)
        return recon + penalty
    if isinstance(model, SlowVAE):
        b = batch.x.shape[0]
        mean, logvar = mean.float(), logvar.float()
        kl_l = laplace_transition_kl(mean[:b], logvar[:b], mean[b:], logvar[b:], float(c["rate_prior"]))
        return 2.0 * recon + c["beta"] * kl + c["gamma"] * kl_l
    logits = model.discriminator(z).float()
    loss = recon + kl + model.tc_weight * (logits[:, 0] - logits[:, 1]).mean()
    if isinstance(model, RTCVAE):
        loss = loss + model.extra_penalty(mean, logvar)[0]
    return loss


@pytest.mark.parametrize("cls", [BetaVAE, BetaTCVAE, DIPVAEI, DIPVAEII, FactorVAE, SlowVAE, RTCVAE])
@pytest.mark.parametrize("drop_weight", [False, True], ids=["default", "old-config"])
def test_weight_one_is_the_unweighted_loss_and_gradients_bit_for_bit(cls, drop_weight):
    model = build(cls, drop_weight=drop_weight, beta=3.0) if cls in (BetaVAE, BetaTCVAE) else \
        build(cls, drop_weight=drop_weight)
    batch = toy_batch()
    torch.manual_seed(7)
    loss, logs = model.loss(batch, 0)
    got = grads_of(model, loss)
    expected = _by_hand(model, batch, 7)
    want = grads_of(model, expected)
    assert torch.equal(loss.detach(), expected.detach())
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)


# -- (2) Adam: w·Rec + β·KL trains like Rec + (β/w)·KL ----------------------------------------------------

def _adam_params(weight, beta, steps=5, adam_eps=1e-30):
    model = build(BetaVAE, seed=0, reconstruction_weight=weight, beta=beta, lr=1e-3, adam_eps=adam_eps)
    optimizers = model.configure_optimizers()
    torch.manual_seed(1)   # the reparameterisation noise, the same draws for both models
    for step in range(steps):
        model.training_step(toy_batch(seed=step), step, optimizers)
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_adam_makes_weight_4_beta_32_train_like_weight_1_beta_8():
    """Loss L₄ = 4·Rec + 32·KL = 4·L₁ with L₁ = Rec + 8·KL, so every gradient is g₄ = 4·g₁, Adam's moments are
    m₄ = 4·m₁ and v₄ = 16·v₁, and its update is lr·4m̂₁/(4√v̂₁ + ε) = lr·m̂₁/(√v̂₁ + ε/4): the updates differ only
    through ε, by at most lr·(3/4)·ε/√v̂₁ relative. With ε = 1e-30 that is < 1e-20 for every gradient above 1e-10,
    far below float32's resolution (6e-8); 4 is a power of two, so the float products scale exactly and the
    parameters come out equal bit for bit here (measured). The tolerance, 1e-6·lr absolute, leaves room for a kernel
    whose rounding does not commute with the factor 4; the gap between β = 8 and β = 32 at the same weight is over
    1000 times larger. At the default ε = 1e-8 the equivalence is loose where gradients are tiny: elements whose
    |g| is near ε moved by up to half a step (lr/2) differently (measured on a toy like this, lr 1e-3, 5 steps)."""
    lr = 1e-3
    weighted = _adam_params(4.0, 32.0)
    rebalanced = _adam_params(1.0, 8.0)
    for key in weighted:
        torch.testing.assert_close(weighted[key], rebalanced[key], rtol=0, atol=1e-6 * lr, msg=key)
    plain = _adam_params(1.0, 32.0)   # the test's teeth: β = 32 unweighted trains measurably differently
    assert max((plain[k] - rebalanced[k]).abs().max().item() for k in plain) > 1e-3 * lr


# -- (3) the models with their own loss: loss = w·recon + rest ---------------------------------------------

@pytest.mark.parametrize("cls,recon_factor", [(FactorVAE, 1.0), (RTCVAE, 1.0), (SlowVAE, 2.0)])
def test_own_loss_models_weight_only_the_reconstruction(cls, recon_factor):
    batch = toy_batch()
    results = {}
    for w in (1.0, 4.0):
        model = build(cls, seed=0, reconstruction_weight=w)
        torch.manual_seed(7)
        loss, logs = model.loss(batch, 0)
        results[w] = (loss.item(), logs)
    (loss_1, logs_1), (loss_4, logs_4) = results[1.0], results[4.0]
    recon = logs_1["reconstruction"].item()
    # the logs are the unweighted nats, the same in both
    assert all(torch.equal(logs_1[k], logs_4[k]) for k in logs_1)
    rest = loss_1 - recon_factor * recon
    assert loss_4 == pytest.approx(recon_factor * 4.0 * recon + rest, rel=1e-6)
    # w = 0 leaves only the regularisers
    zero = build(cls, seed=0, reconstruction_weight=0)
    torch.manual_seed(7)
    assert zero.loss(batch, 0)[0].item() == pytest.approx(rest, rel=1e-5, abs=1e-4)


def test_factor_vae_training_step_logs_the_weighted_loss_and_unweighted_reconstruction():
    model = build(FactorVAE, reconstruction_weight=4.0)
    torch.manual_seed(3)
    logs = model.training_step(toy_batch(), 0, model.configure_optimizers())
    model_1 = build(FactorVAE, reconstruction_weight=1.0)
    torch.manual_seed(3)
    logs_1 = model_1.training_step(toy_batch(), 0, model_1.configure_optimizers())
    assert torch.equal(logs["reconstruction"], logs_1["reconstruction"])
    assert logs["loss"].item() == pytest.approx(logs_1["loss"].item() + 3.0 * logs["reconstruction"].item(), rel=1e-6)


# -- (4) bad values ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["abc", True, [4.0]])
def test_a_non_number_is_a_user_error_before_any_model_exists(value):
    with pytest.raises(UserError, match="reconstruction_weight.*must be a number"):
        resolve_config(BetaVAE, None, {"reconstruction_weight": value})


@pytest.mark.parametrize("cls", [BetaVAE, FactorVAE, SlowVAE])
@pytest.mark.parametrize("value", [-1.0, -4, float("nan"), float("inf")])
def test_a_negative_or_non_finite_weight_is_a_user_error(cls, value):
    with pytest.raises(UserError, match=r"reconstruction_weight must be a finite number >= 0"):
        build(cls, reconstruction_weight=value)


@pytest.mark.parametrize("cls", [AE, PCL])
def test_models_without_the_weight_name_it_unknown(cls):
    with pytest.raises(UserError, match="no hyperparameter 'reconstruction_weight'"):
        resolve_config(cls, None, {"reconstruction_weight": 4.0})


# -- the CLI and the run folder ---------------------------------------------------------------------------

def test_cli_set_reconstruction_weight_is_recorded_and_bad_values_exit_2(make_toy_store, tmp_path, capsys):
    store = make_toy_store()
    out = tmp_path / "run"
    code, _, err = run_probe(["train", "beta-vae", "--data", str(store.path), "--out", str(out), "--steps", "4",
                              "--set", "reconstruction_weight=4", "--set", "batch_size=4", "--no-progress"], capsys)
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["model_config"]["reconstruction_weight"] == 4
    for value in ("-1", "abc"):
        code, _, err = run_probe(["train", "beta-vae", "--data", str(store.path), "--out", str(tmp_path / f"x{value}"),
                                  "--steps", "2", "--set", f"reconstruction_weight={value}"], capsys)
        assert code == 2 and "reconstruction_weight" in err and "Traceback" not in err, err
        assert not (tmp_path / f"x{value}").exists()
    code, _, err = run_probe(["train", "ae", "--data", str(store.path), "--out", str(tmp_path / "ae"), "--steps", "2",
                              "--set", "reconstruction_weight=4"], capsys)
    assert code == 2 and "reconstruction_weight" in err


def test_a_run_from_before_the_key_resumes_and_weight_one_is_the_same_run(make_toy_store, tmp_path):
    """A run folder whose config.json predates the key (no reconstruction_weight) continues under the new code:
    the identity leaves the key out at its neutral value 1; another value is another run."""
    store = make_toy_store()
    base = {"model": "beta-vae", "seed": 1, "train": {"steps": 4, "batch_size": 4, "log_every": 2, "checkpoint_every": 2}}
    out = train_run(base, store, tmp_path / "r", progress=False)
    config_path = out / "config.json"
    record = json.loads(config_path.read_text())
    del record["model_config"]["reconstruction_weight"]   # as written before the key existed
    config_path.write_text(json.dumps(record))
    longer = {**base, "train": {**base["train"], "steps": 6}}
    train_run({**longer, "model_config": {"reconstruction_weight": 1}}, store, out, progress=False)
    assert json.loads(config_path.read_text())["model_config"]["reconstruction_weight"] == 1
    with pytest.raises(UserError, match="model_config"):
        train_run({**longer, "model_config": {"reconstruction_weight": 4.0}}, store, out, progress=False)
