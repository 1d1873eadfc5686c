"""Quantized-latent models: quantizers, Tripod's KLM/NHP, FactorQVAE pieces, and short training runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from probe.errors import UserError
from probe.models import registry
from probe.models.base import resolve_config
from probe.models.factor_qvae import cosine_lr
from probe.models.factor_vae import permute_dims
from probe.models.quantize import (RelaxedScalarQuantizer, ScalarCodebooks, finite_scalar_quantize, gumbel_temperature,
                                   straight_through, uniform_prior_kl)
from probe.models.tripod import kernel_multiinformation, normalized_hessian_penalty
from probe.train import load_run, train_run

QUANTIZED = ["qlae", "tripod", "factor-qvae", "qvae", "dvae"]

# small widths so that 16×16 runs take seconds; paper widths stay the defaults
SMALL = {
    "qlae": {"enc_widths": [8, 16], "dec_widths": [16, 8], "dense_width": 32},
    "tripod": {"enc_widths": [8, 16, 16], "enc_hidden": 32, "dec_widths": [16, 16], "cond_dim": 32},
    "factor-qvae": {"channels": 8, "hidden": 32, "dec_input_channels": 8, "disc_width": 64, "disc_hidden_layers": 2},
    "qvae": {"channels": 8, "hidden": 32, "dec_input_channels": 8},
    "dvae": {"channels": 8, "hidden": 32, "dec_input_channels": 8},
}


# -- quantizers ---------------------------------------------------------------------------------------

def test_straight_through_gradient_is_identity():
    x = torch.randn(5, 3, requires_grad=True)
    y = straight_through(x, torch.round(x * 3) / 3)
    assert torch.equal(y, torch.round(x.detach() * 3) / 3)
    upstream = torch.randn(5, 3)
    (y * upstream).sum().backward()
    assert torch.equal(x.grad, upstream)


def test_scalar_codebooks_nearest_value_losses_and_gradients():
    cb = ScalarCodebooks(num_latent=2, num_values=10)
    assert torch.allclose(cb.values[1], torch.linspace(-0.5, 0.5, 10))
    z = torch.tensor([[0.0, -0.9], [0.31, 0.52]], requires_grad=True)
    out, q_loss, c_loss = cb(z)
    grid = torch.linspace(-0.5, 0.5, 10)
    expect = torch.stack([grid[(z.detach()[:, j:j + 1] - grid).abs().argmin(1)] for j in range(2)], 1)
    assert torch.allclose(out.values, expect) and torch.allclose(out.quantized, expect)
    assert torch.equal(out.indices, torch.tensor([[4, 0], [7, 9]]))  # 0.0 is equidistant: argmin takes the first
    assert torch.isclose(q_loss, (z.detach() - expect).pow(2).mean()) and torch.isclose(c_loss, q_loss)
    (out.values.sum() + c_loss).backward()
    # straight-through part gives ones, the commitment loss 2 (z - q) / N
    assert torch.allclose(z.grad, 1 + 2 * (z.detach() - expect) / 4)
    cb.values.grad = None
    q_loss.backward()
    assert cb.values.grad.abs().sum() > 0


@pytest.mark.parametrize("levels", [12, 5])
def test_fsq_outputs_on_grid_in_unit_interval(levels):
    raw = torch.randn(4000, 3) * 3
    raw[0, 0], raw[1, 0] = 50.0, -50.0
    out = finite_scalar_quantize(raw, levels)
    grid = torch.linspace(-1, 1, levels)
    dist = (out.values.unsqueeze(-1) - grid).abs().min(-1).values
    assert dist.max() < 1e-6
    assert out.values.min() >= -1 - 1e-6 and out.values.max() <= 1 + 1e-6
    assert out.values[0, 0] == 1 and out.values[1, 0] == -1
    assert torch.allclose(grid[out.indices], out.values, atol=1e-6)
    assert len(torch.unique(out.indices)) == levels            # every level reachable
    assert (out.values - out.continuous).abs().max() <= 1 / (levels - 1) + 1e-6  # rounding to nearest


def test_fsq_gradient_is_tanh_derivative():
    raw = torch.randn(10, 2, requires_grad=True)
    finite_scalar_quantize(raw, 12).values.sum().backward()
    assert torch.allclose(raw.grad, 1 - torch.tanh(raw.detach()) ** 2, atol=1e-6)


def test_gumbel_temperature_schedule():
    assert gumbel_temperature(0) == 1.0
    assert math.isclose(gumbel_temperature(100_000), math.exp(-1.0))
    assert math.isclose(gumbel_temperature(50_000), math.exp(-0.5))
    assert gumbel_temperature(10) > gumbel_temperature(11)
    assert math.isclose(gumbel_temperature(1000, rate=1e-3), math.exp(-1.0))


def test_cosine_lr_holds_at_minimum():
    assert cosine_lr(0, 1e-3, 1e-6, 100) == 1e-3
    assert math.isclose(cosine_lr(50, 1e-3, 1e-6, 100), (1e-3 + 1e-6) / 2)
    assert cosine_lr(100, 1e-3, 1e-6, 100) == cosine_lr(250, 1e-3, 1e-6, 100) == pytest.approx(1e-6)


def test_uniform_prior_kl_analytic():
    assert abs(float(uniform_prior_kl(torch.zeros(3, 4, 8)))) < 1e-6   # uniform posterior
    peaked = torch.full((2, 1, 8), -1e4)
    peaked[..., 3] = 0
    assert math.isclose(float(uniform_prior_kl(peaked)), math.log(8), rel_tol=1e-5)  # one-hot: log K


def test_permute_dims_shuffles_each_latent_independently():
    g = torch.Generator().manual_seed(0)
    w = torch.arange(64 * 3 * 2, dtype=torch.float32).view(64, 3, 2)
    p = permute_dims(w, g)
    for j in range(3):  # each latent's one-hots are a permutation of the originals, kept whole
        assert sorted(p[:, j, 0].tolist()) == sorted(w[:, j, 0].tolist())
        assert torch.equal(p[:, j, 1] - p[:, j, 0], torch.ones(64))
    rows = lambda t, j: (t[:, j, 0] - w[0, j, 0]) / 6  # noqa: E731  original row index per latent
    assert not torch.equal(rows(p, 0), rows(p, 1))       # different permutations per latent


def test_relaxed_quantizer_hard_and_relaxed():
    q = RelaxedScalarQuantizer(num_codes=5)
    with torch.no_grad():
        q.codebook.copy_(torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0]))
    h = torch.tensor([[0.9, -1.8]])
    idx, values = q.hard(q.logits(h))
    assert idx.tolist() == [[3, 0]] and values.tolist() == [[1.0, -2.0]]
    w, z = q.relaxed(q.logits(h), temperature=1e-3)   # near-zero temperature: nearly one-hot
    assert torch.allclose(w.sum(-1), torch.ones(1, 2)) and z.shape == (1, 2)
    absolute = RelaxedScalarQuantizer(num_codes=5, distance="absolute")
    with torch.no_grad():
        absolute.codebook.copy_(q.codebook)
    assert torch.allclose(absolute.logits(h), -(h.unsqueeze(-1) - q.codebook).abs())


# -- Tripod: kernel multiinformation ------------------------------------------------------------------

def _shuffle_columns(z, g):
    return torch.stack([z[torch.randperm(z.shape[0], generator=g), j] for j in range(z.shape[1])], 1)


def test_klm_small_for_independent_latents_and_large_for_dependent():
    g = torch.Generator().manual_seed(0)
    indep = torch.randn(1000, 2, generator=g)
    dep = indep.clone()
    dep[:, 1] = indep[:, 0] + 0.1 * indep[:, 1]
    k_indep, k_dep = float(kernel_multiinformation(indep)), float(kernel_multiinformation(dep))
    assert 0 <= k_indep < 0.3          # the KDE's positive bias (joint bandwidth < marginal), no dependence
    assert k_dep > 1.2 and k_dep > 4 * k_indep
    # the part due to dependence: destroying it by shuffling each column leaves independent data unchanged
    assert abs(k_indep - float(kernel_multiinformation(_shuffle_columns(indep, g)))) < 0.05
    assert k_dep - float(kernel_multiinformation(_shuffle_columns(dep, g))) > 0.9
    # monotone in the strength of the dependence
    ks = []
    for rho in (0.0, 0.5, 0.9, 0.99):
        z = indep.clone()
        z[:, 1] = rho * indep[:, 0] + math.sqrt(1 - rho ** 2) * indep[:, 1]
        ks.append(float(kernel_multiinformation(z)))
    assert ks == sorted(ks) and ks[-1] - ks[0] > 0.8


def test_klm_invariant_to_rescaling_a_latent():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(300, 3, generator=g)
    z[:, 2] += z[:, 0] ** 2
    scaled = z * torch.tensor([1.0, 7.0, 0.01])
    assert math.isclose(float(kernel_multiinformation(z)), float(kernel_multiinformation(scaled)), rel_tol=1e-4)
    # explicit sigma: rescaling latent and sigma together
    s = torch.tensor([0.5, 1.0, 2.0])
    assert math.isclose(float(kernel_multiinformation(z, s)),
                        float(kernel_multiinformation(z * torch.tensor([3.0, 1, 1]), s * torch.tensor([3.0, 1, 1]))),
                        rel_tol=1e-4)


# -- Tripod: normalized Hessian penalty ---------------------------------------------------------------

def _nhp(fn, z, sigma=None, seed=0, p=2):
    return float(normalized_hessian_penalty(fn, z, sigma, num_perturbations=p, generator=torch.Generator().manual_seed(seed)))


def test_nhp_zero_for_additive_decoder_and_positive_with_interactions():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(64, 3, generator=g)
    additive = lambda z: [torch.stack([torch.sin(z[:, 0]) + z[:, 1] ** 2 - torch.exp(0.3 * z[:, 2]),  # noqa: E731
                                       torch.tanh(z[:, 1]) + z[:, 2] ** 3], 1)]
    interacting = lambda z: [torch.stack([torch.sin(z[:, 0] * z[:, 1]) + z[:, 2] ** 2,  # noqa: E731
                                          torch.tanh(z[:, 1] + z[:, 2]) ** 2], 1)]
    assert _nhp(additive, z) < 1e-6
    assert _nhp(interacting, z) > 0.1


def test_nhp_matches_analytic_normalized_penalty_for_quadratic():
    # f = z0² + z1² + c z0 z1: H = [[2, c], [c, 2]], σ = 1 -> off-diagonal mass 2c² / total (8 + 2c²)
    c = 2.0
    z = torch.randn(200, 2, generator=torch.Generator().manual_seed(0))
    fn = lambda z: z[:, 0] ** 2 + z[:, 1] ** 2 + c * z[:, 0] * z[:, 1]  # noqa: E731
    value = _nhp(fn, z, torch.ones(2), p=400)
    assert value == pytest.approx(2 * c ** 2 / (8 + 2 * c ** 2), abs=0.06)


def test_nhp_invariant_to_output_and_latent_rescaling():
    z = torch.randn(32, 3, generator=torch.Generator().manual_seed(3))

    def decoder(z):
        h = torch.tanh(z @ torch.tensor([[1.0, -0.5], [0.3, 0.8], [0.7, 0.2]]))
        return [h, (h[:, :1] * h[:, 1:] + torch.sin(z[:, 2:]))]

    base = _nhp(decoder, z, seed=5)
    assert base > 0
    assert _nhp(lambda z: [10.0 * a for a in decoder(z)], z, seed=5) == pytest.approx(base, rel=1e-4)
    scale = torch.tensor([4.0, 1.0, 0.2])
    assert _nhp(lambda zs: decoder(zs / scale), z * scale, seed=5) == pytest.approx(base, rel=1e-3)


def test_nhp_gradient_flows_to_latents():
    z = torch.randn(16, 2, requires_grad=True)
    normalized_hessian_penalty(lambda z: [torch.sin(z[:, :1] * z[:, 1:])], z).backward()
    assert torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0


def test_nhp_reuses_given_centre_and_subbatch_matches_penalty_on_those_rows():
    z = torch.randn(32, 3, generator=torch.Generator().manual_seed(4))

    def decoder(z):
        h = torch.tanh(z @ torch.tensor([[1.0, -0.5], [0.3, 0.8], [0.7, 0.2]]))
        return [h, (h[:, :1] * h[:, 1:] + torch.sin(z[:, 2:]))]

    def nhp(*args, seed=7, **kw):
        return float(normalized_hessian_penalty(*args, generator=torch.Generator().manual_seed(seed), **kw))

    # the centre from the caller's forward pass gives the value of the recomputed one
    assert nhp(decoder, z, center=decoder(z)) == pytest.approx(nhp(decoder, z), rel=1e-5)
    # num_points = the penalty on the first rows, with σ still from the whole batch
    sigma = z.std(0) + 1e-6
    sub = nhp(decoder, z, num_points=8)
    assert sub == pytest.approx(nhp(decoder, z[:8], sigma), rel=1e-5)
    assert sub != pytest.approx(nhp(decoder, z[:8]), rel=1e-3)
    assert nhp(decoder, z, num_points=8, center=decoder(z)) == pytest.approx(sub, rel=1e-5)


# -- models -------------------------------------------------------------------------------------------

def test_registry_lists_quantized_models():
    available = registry.available_models()
    for name in QUANTIZED:
        assert name in available
        cls = registry.get_model_class(name)
        assert cls.name == name and cls.code_kind == "discrete"


def test_presets_follow_papers():
    get = lambda name, ds: resolve_config(registry.get_model_class(name), ds)  # noqa: E731
    assert get("qlae", "mpi3d")["weight_decay"] == 0.001 and get("qlae", "falcor3d")["weight_decay"] == 0.1
    assert (get("tripod", "falcor3d")["klm_weight"], get("tripod", "falcor3d")["nhp_weight"]) == (1e-10, 1e-2)
    assert (get("tripod", "isaac3d")["klm_weight"], get("tripod", "isaac3d")["nhp_weight"]) == (1e-4, 1e-8)
    assert (get("factor-qvae", "mpi3d")["beta"], get("factor-qvae", "mpi3d")["gamma"]) == (5e-5, 1e-6)
    assert get("dvae", "isaac3d")["beta"] == 1e-5 and get("qvae", "shapes3d")["beta"] == 1e-3
    assert "gamma" not in get("qvae", None)
    assert get("qlae", "shapes3d")["num_latent"] == 12
    with pytest.raises(UserError):
        resolve_config(registry.get_model_class("qvae"), None, {"gamma": 1.0})


def test_unknown_arch_is_user_error():
    cls = registry.get_model_class("qlae")
    with pytest.raises(UserError):
        cls(resolve_config(cls, None, {"arch": "tripod"}), (1, 16, 16), 4)


def test_qlae_optimizer_groups():
    cls = registry.get_model_class("qlae")
    model = cls(resolve_config(cls, "shapes3d", SMALL["qlae"]), (1, 16, 16), 4)
    decayed, plain = model.configure_optimizers()["main"].param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    plain_ids = {id(p) for p in plain["params"]}
    assert id(model.quantizer.values) in plain_ids
    for name, p in model.named_parameters():
        assert (id(p) in plain_ids) == (name.endswith("bias") or name.startswith("quantizer")), name


def _run_config(name, arch, steps=50, **train):
    overrides = dict(SMALL[name]) if arch == "own" else {"arch": "locatello", **{k: v for k, v in SMALL[name].items()
                                                                                 if k.startswith("disc")}}
    return {"model": name, "model_config": overrides, "seed": 0,
            "train": {"steps": steps, "batch_size": 16, "log_every": 10, "checkpoint_every": 10, **train}}


def _params(run_dir):
    return torch.load(Path(run_dir) / "checkpoint.pt", weights_only=True)["model"]


@pytest.mark.parametrize("arch", ["own", "locatello"])
@pytest.mark.parametrize("name", QUANTIZED)
def test_trains_50_steps_with_finite_losses(make_toy_store, tmp_path, name, arch):
    store = make_toy_store(factor_sizes=(2, 3, 4, 4), resolution=16, channels=3)
    run = train_run(_run_config(name, arch), store, tmp_path / "run", progress=False)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20, 30, 40, 50]
    assert all(math.isfinite(v) for r in rows for v in r.values())
    assert rows[-1]["reconstruction"] < rows[0]["reconstruction"]        # it learns something
    if name == "factor-qvae":
        assert {"tc", "discriminator_loss", "discriminator_accuracy"} <= set(rows[-1])
    model, config = load_run(run)
    assert config["model_config"]["arch"] == ("locatello" if arch == "locatello" else model.default_config()["arch"])
    x = torch.from_numpy(store.read(np.arange(32))).permute(0, 3, 1, 2).float() / 255
    with torch.no_grad():
        codes, idx, recon = model.encode(x), model.discrete_codes(x), model.reconstruct(x)
    assert codes.shape == (32, model.num_latent) and codes.dtype == torch.float32
    assert idx.shape == (32, model.num_latent) and idx.dtype == torch.long
    assert recon.shape == x.shape and recon.min() >= 0 and recon.max() <= 1
    # the float codes are the values of the integer codes
    if name == "qlae":
        assert torch.equal(codes, model.quantizer.lookup(idx))
    elif name == "tripod":
        assert torch.allclose(codes, idx.float() * 2 / 11 - 1, atol=1e-6)
    else:
        assert torch.equal(codes, model.quantizer.codebook[idx])


def test_factor_qvae_resume_is_exact(make_toy_store, tmp_path):
    # two optimizers, step-derived lr/temperature schedules and Gumbel/permutation noise from the global RNG
    store = make_toy_store(factor_sizes=(2, 3, 4, 4), resolution=16, channels=3)
    config = _run_config("factor-qvae", "own", steps=30)
    config["model_config"]["lr_anneal_steps"] = 40
    straight = train_run(config, store, tmp_path / "straight", progress=False)
    killed = train_run(config, store, tmp_path / "killed", progress=False, stop_after=25)
    train_run(config, store, killed, progress=False)
    a, b = _params(straight), _params(killed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_tripod_standardises_raw_latents_on_the_shared_architecture():
    """On arch=locatello the raw latents are batch-standardised before tanh, so they cannot all saturate
    (the collapse measured without it, docs/notes/quantized.md); Tripod's own architecture is untouched."""
    from probe.models.tripod import Tripod

    torch.manual_seed(0)
    model = Tripod({**Tripod.default_config(), "arch": "locatello", "num_latent": 4}, (1, 16, 16), 2)
    x = torch.rand(32, 1, 16, 16)
    with torch.no_grad():
        model.encoder[0].means.bias.fill_(20.0)  # a drifted head: tanh(raw) would be +1 for every image
        raw = model.encoder(x)
    assert torch.allclose(raw.mean(0), torch.zeros(4), atol=1e-3)  # float32: a mean of ~20 removed from values ±0.02
    assert torch.allclose(raw.std(0, unbiased=False), torch.ones(4), atol=0.05)  # BatchNorm eps on a small variance
    assert len(torch.unique(model.quantize(x).indices, dim=0)) > 1  # the codes still vary across images
    off = Tripod({**Tripod.default_config(), "arch": "locatello", "num_latent": 4, "latent_norm": False}, (1, 16, 16), 2)
    assert not isinstance(off.encoder, torch.nn.Sequential)
