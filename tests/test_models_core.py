"""AE, β-VAE, linear VAE and the shared locatello nets: hand-computable losses and shapes."""

from __future__ import annotations

import math

import pytest
import torch

from probe.models.ae import AE
from probe.models.base import Batch, bernoulli_reconstruction, gaussian_kl, resolve_config
from probe.models.beta_vae import BetaVAE
from probe.models.linear_vae import LinearVAE
from probe.models.nets import build_decoder, build_encoder
from test_quantized import SMALL as _SMALL_QUANTIZED  # 16×16 widths: the quantized models built in milliseconds


# -- shared loss pieces ------------------------------------------------------------------------------

def test_bernoulli_reconstruction_hand_values():
    # logits 0 -> ln 2 per pixel whatever the target; summed over 2×2×1 pixels, mean over the batch
    assert bernoulli_reconstruction(torch.zeros(3, 1, 2, 2), torch.rand(3, 1, 2, 2)).item() == pytest.approx(4 * math.log(2))
    # one pixel: logit a, target t -> softplus(a) - a·t
    a, t = 2.0, 0.25
    got = bernoulli_reconstruction(torch.full((1, 1, 1, 1), a), torch.full((1, 1, 1, 1), t)).item()
    assert got == pytest.approx(math.log1p(math.exp(a)) - a * t, rel=1e-6)
    # batch mean: two images with per-image sums 4·ln2 and 4·(softplus(2) - 2·0.25)
    logits = torch.stack([torch.zeros(1, 2, 2), torch.full((1, 2, 2), a)])
    target = torch.full((2, 1, 2, 2), t)
    expected = 0.5 * (4 * math.log(2) + 4 * (math.log1p(math.exp(a)) - a * t))
    assert bernoulli_reconstruction(logits, target).item() == pytest.approx(expected, rel=1e-6)


def test_gaussian_kl_closed_form():
    mean = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    logvar = torch.tensor([[0.0, math.log(2.0)], [0.0, 0.0]])
    # row 0: ½(1 + 1 - 0 - 1) + ½(4 + 2 - ln2 - 1); row 1: 0 (posterior equals the prior)
    row0 = 0.5 + 0.5 * (5 - math.log(2))
    assert gaussian_kl(mean, logvar).item() == pytest.approx(row0 / 2, rel=1e-6)
    # KL against a Monte-Carlo estimate for one univariate Gaussian
    g = torch.Generator().manual_seed(0)
    m, s = 0.7, 0.5
    z = m + s * torch.randn(400_000, generator=g)
    log_q = -0.5 * ((z - m) / s) ** 2 - math.log(s)
    log_p = -0.5 * z ** 2
    mc = (log_q - log_p).mean().item()
    exact = gaussian_kl(torch.tensor([[m]]), torch.tensor([[2 * math.log(s)]])).item()
    assert exact == pytest.approx(mc, abs=5e-3)


# -- β-VAE ---------------------------------------------------------------------------------------------

def test_beta_vae_presets_follow_zietlow_table2():
    assert resolve_config(BetaVAE, "dsprites")["beta"] == 8
    assert resolve_config(BetaVAE, "shapes3d")["beta"] == 32
    assert resolve_config(BetaVAE, "toy")["beta"] == 1.0
    assert resolve_config(BetaVAE, "dsprites", {"beta": 4})["beta"] == 4
    assert resolve_config(BetaVAE, None)["lr"] == 1e-4  # disentanglement_lib's Adam


def test_beta_vae_loss_is_recon_plus_beta_kl():
    torch.manual_seed(0)
    cfg = resolve_config(BetaVAE, None, {"beta": 3.0, "num_latent": 4})
    model = BetaVAE(cfg, image_shape=(1, 16, 16), num_factors=4)
    x = torch.rand(5, 1, 16, 16)
    torch.manual_seed(123)
    loss, logs = model.loss(Batch(x=x), step=0)
    mean, logvar = model.encode_distribution(x)
    torch.manual_seed(123)
    z = mean + torch.exp(0.5 * logvar) * torch.randn_like(mean)
    recon = bernoulli_reconstruction(model.decode(z), x)
    kl = gaussian_kl(mean, logvar)
    assert loss.item() == pytest.approx((recon + 3.0 * kl).item(), rel=1e-6)
    assert logs["kl"].item() == pytest.approx(kl.item(), rel=1e-6)
    assert logs["reconstruction"].item() == pytest.approx(recon.item(), rel=1e-6)
    codes = model.encode(x)
    assert codes.shape == (5, 4) and torch.equal(codes, mean)
    assert torch.allclose(model.posterior_variance(x), logvar.exp())
    rec = model.reconstruct(x)
    assert rec.shape == x.shape and rec.min() >= 0 and rec.max() <= 1


# -- AE ------------------------------------------------------------------------------------------------

def test_ae_is_deterministic_bernoulli_autoencoder():
    torch.manual_seed(0)
    model = AE(resolve_config(AE, None, {"num_latent": 3}), image_shape=(3, 32, 32), num_factors=5)
    x = torch.rand(4, 3, 32, 32)
    codes = model.encode(x)
    assert codes.shape == (4, 3) and torch.equal(codes, model.encode(x))
    assert model.posterior_variance(x) is None
    loss, logs = model.loss(Batch(x=x), step=0)
    assert loss.item() == pytest.approx(bernoulli_reconstruction(model.decode(codes), x).item(), rel=1e-6)
    assert set(logs) == {"reconstruction"}


# -- linear VAE -----------------------------------------------------------------------------------------

def test_linear_vae_loss_hand_computed_and_accessors():
    cfg = resolve_config(LinearVAE, None, {"num_latent": 2, "beta": 2.0})
    model = LinearVAE(cfg, image_shape=(1, 1, 3), num_factors=2)
    sigma2 = 0.25
    with torch.no_grad():
        model.encoder.weight.zero_()
        model.encoder.bias.zero_()
        model.encoder_log_var.fill_(math.log(sigma2))
        model.decoder.weight.zero_()
        model.decoder.bias.copy_(torch.tensor([0.5, -1.0, 2.0]))
    x = torch.tensor([[[[1.0, 0.0, 2.0]]], [[[0.0, 0.0, 0.0]]]])
    loss, logs = model.loss(Batch(x=x), step=0)
    # z has no effect (zero decoder weights): recon = mean_i ‖b - x_i‖²
    recon = 0.5 * ((0.25 + 1.0 + 0.0) + (0.25 + 1.0 + 4.0))
    kl = 0.5 * 2 * (sigma2 - math.log(sigma2) - 1)
    assert logs["reconstruction"].item() == pytest.approx(recon, rel=1e-6)
    assert logs["kl"].item() == pytest.approx(kl, rel=1e-6)
    assert loss.item() == pytest.approx(recon + 2.0 * kl, rel=1e-6)
    assert model.decoder_matrix().shape == (3, 2)
    assert model.encoder_matrix().shape == (2, 3)
    assert torch.allclose(model.encoder_std(), torch.full((2,), 0.5))


def test_linear_vae_variance_is_independent_of_x_and_decoder_is_linear():
    torch.manual_seed(0)
    model = LinearVAE(resolve_config(LinearVAE, None), image_shape=(1, 4, 4), num_factors=3)
    x = torch.rand(6, 1, 4, 4)
    var = model.posterior_variance(x)
    assert var.shape == (6, 3) and torch.allclose(var, var[:1].expand_as(var))
    z1, z2 = torch.randn(2, 3), torch.randn(2, 3)
    d = model.decode
    assert torch.allclose(d(z1 + z2) - d(torch.zeros(2, 3)), (d(z1) - d(torch.zeros(2, 3))) + (d(z2) - d(torch.zeros(2, 3))), atol=1e-5)
    assert torch.allclose(model.encode(x), x.flatten(1) @ model.encoder_matrix().T + model.encoder.bias, atol=1e-6)


# -- architecture ----------------------------------------------------------------------------------------

def _count(module):
    return sum(p.numel() for p in module.parameters())


def test_locatello_64_matches_disentanglement_lib_layers():
    enc = build_encoder("locatello", (1, 64, 64), 10)
    dec = build_decoder("locatello", (1, 64, 64), 10)
    convs = [(m.out_channels, m.kernel_size[0], m.stride[0]) for m in enc.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs == [(32, 4, 2), (32, 4, 2), (64, 2, 2), (64, 2, 2)]
    deconvs = [(m.out_channels, m.kernel_size[0], m.stride[0]) for m in dec.modules() if isinstance(m, torch.nn.ConvTranspose2d)]
    assert deconvs == [(64, 4, 2), (32, 4, 2), (32, 4, 2), (1, 4, 2)]
    # hand count of conv_encoder / deconv_decoder parameters (kernels + biases), 10 latents, 1 channel
    enc_expected = (16 * 1 * 32 + 32) + (16 * 32 * 32 + 32) + (4 * 32 * 64 + 64) + (4 * 64 * 64 + 64) \
        + (1024 * 256 + 256) + 2 * (256 * 10 + 10)
    dec_expected = (10 * 256 + 256) + (256 * 1024 + 1024) + (16 * 64 * 64 + 64) + (16 * 64 * 32 + 32) \
        + (16 * 32 * 32 + 32) + (16 * 32 * 1 + 1)
    assert _count(enc) == enc_expected == 309204
    assert _count(dec) == dec_expected == 381313


@pytest.mark.parametrize("arch", ["locatello", "mlp"])
@pytest.mark.parametrize("resolution,channels", [(16, 1), (32, 3), (64, 1)])
def test_nets_round_trip_shapes(arch, resolution, channels):
    enc = build_encoder(arch, (channels, resolution, resolution), 6)
    dec = build_decoder(arch, (channels, resolution, resolution), 6)
    x = torch.rand(2, channels, resolution, resolution)
    mean, logvar = enc(x)
    assert mean.shape == logvar.shape == (2, 6)
    assert dec(mean).shape == x.shape


def test_locatello_rejects_bad_resolution():
    with pytest.raises(ValueError):
        build_encoder("locatello", (1, 24, 24), 4)
    with pytest.raises(ValueError):
        build_encoder("locatello", (1, 8, 8), 4)


# -- the representation the metrics read: one encoder pass, the protocol's values ---------------------

def _built_model(name: str):
    from probe.models.registry import BUILTIN_MODELS, get_model_class

    assert name in BUILTIN_MODELS
    cls = get_model_class(name)
    torch.manual_seed(0)
    model = cls(resolve_config(cls, None, _SMALL_QUANTIZED.get(name, {})), (1, 16, 16), 3)
    return model.eval()


@pytest.mark.parametrize("name", ["ae", "beta-vae", "beta-tcvae", "factor-vae", "dip-vae-i", "dip-vae-ii", "slow-vae",
                                  "rtc-vae", "pcl", "linear-vae", "qlae", "tripod", "factor-qvae", "qvae", "dvae"])
def test_representation_is_the_three_methods_from_one_encoder_pass(name):
    from probe.models.base import composed_representation

    model = _built_model(name)
    x = torch.rand(7, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    calls = []
    model.encoder.register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        one_pass = model.representation(x)
        passes = len(calls)
        composed = composed_representation(model, x)
    assert passes == 1  # evaluation encodes each image once (was two passes for every Gaussian encoder)
    assert sorted(one_pass) == sorted(composed) and "codes" in one_pass
    for key, value in composed.items():
        assert torch.equal(one_pass[key], value), key  # bit for bit: the metrics cannot change
    if name in ("ae", "pcl"):
        assert sorted(one_pass) == ["codes"]
    elif name in _SMALL_QUANTIZED:
        assert sorted(one_pass) == ["codes", "discrete"]
    else:
        assert sorted(one_pass) == ["codes", "variance"]


def test_one_pass_is_kept_only_where_no_class_below_its_owner_redefines_what_it_reads():
    """A plug-in deriving from a built-in and redefining ``encode`` must not get the parent's one-pass shortcut. The
    rule lives in one place (``one_pass_applies``): read on the MRO, for every built-in at once."""
    from probe.models.base import ProbeModel, one_pass_applies, representation_of
    from probe.models.tripod import Tripod

    class Child(BetaVAE):
        pass

    class ShiftedChild(Child):  # two levels below GaussianVAE, which defines the one pass
        def encode(self, x):
            return super().encode(x) + 1.0

    class Grandchild(ShiftedChild):  # inherits the redefined encode: still composed
        pass

    class OwnOnePass(ShiftedChild):  # defines its own one pass below the redefinition: taken at its word
        def one_pass_representation(self, x):
            return {"codes": self.encode(x)}

    class OwnQuantize(Tripod):  # Tripod's encode reads quantize (its one_pass_reads names it)
        def quantize(self, x):
            return super().quantize(x)

    class OwnDecode(BetaVAE):  # decode is not read by the representation
        def decode(self, z):
            return super().decode(z)

    assert one_pass_applies(BetaVAE) and one_pass_applies(Child) and one_pass_applies(OwnDecode)
    assert not one_pass_applies(ShiftedChild) and not one_pass_applies(Grandchild)
    assert one_pass_applies(OwnOnePass)
    assert one_pass_applies(Tripod) and not one_pass_applies(OwnQuantize)
    assert not one_pass_applies(ProbeModel) and not one_pass_applies(AE)  # no one pass: the three methods

    torch.manual_seed(0)
    model = Grandchild(resolve_config(Grandchild, None, None), (1, 16, 16), 3).eval()
    x = torch.rand(4, 1, 16, 16)
    with torch.no_grad():
        out = model.representation(x)
        mean, logvar = model.encode_distribution(x)
    assert torch.equal(out["codes"], mean + 1.0) and torch.equal(out["variance"], logvar.exp())

    class EncodeOnly(torch.nn.Module):  # a plug-in module that defines only encode
        def encode(self, x):
            return x.flatten(1)[:, :2]

    assert sorted(representation_of(EncodeOnly(), x)) == ["codes"]


def test_model_encoder_splits_cpu_batches_without_changing_codes(monkeypatch):
    """On a CPU the encoder runs forward passes of at most CPU_FORWARD_BATCH images (faster: the activations stay in
    cache); the codes are those of one large batch, and an accelerator keeps the caller's batch."""
    import numpy as np

    from probe.train import encoder as encoder_module

    assert encoder_module.forward_batch(2048, "cpu") == encoder_module.CPU_FORWARD_BATCH
    assert encoder_module.forward_batch(64, "cpu") == 64
    assert encoder_module.forward_batch(2048, "cuda") == 2048  # a device string only: nothing is allocated there

    model = _built_model("beta-vae")
    images = (np.random.default_rng(0).random((37, 16, 16, 1)) * 255).astype(np.uint8)
    seen = []
    model.encoder.register_forward_hook(lambda _m, inputs, _o: seen.append(inputs[0].shape[0]))
    monkeypatch.setattr(encoder_module, "CPU_FORWARD_BATCH", 16)
    encode = encoder_module.model_encoder(model, "cpu", batch_size=2048).encode
    seen.clear()  # model_encoder probes reconstruct() on one image
    split = encode(images)
    assert seen == [16, 16, 5]
    monkeypatch.setattr(encoder_module, "CPU_FORWARD_BATCH", 4096)
    encode = encoder_module.model_encoder(model, "cpu", batch_size=2048).encode
    seen.clear()
    whole = encode(images)
    assert seen == [37]
    for key in ("codes", "variance"):
        np.testing.assert_allclose(split[key], whole[key], rtol=1e-6, atol=1e-7)
