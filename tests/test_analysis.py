"""probe.analysis: alignment checks, the linear VAE vs PCA, Theorem 1, Fig. 1 local alignment, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from probe.analysis import (
    closed_form_minimum, compare_with_pca, fit_linear_vae, local_vs_global_alignment, match_columns,
    minimise_reduced_objective, pca, random_reconstructions, signed_permutation_error, subspace_match,
    synthetic_data, verify_store, verify_synthetic,
)
from probe.analysis.alignment import sigma_order_matches
from probe.analysis.linear_vae_fit import _objective_analytic, _objective_and_gradient, linear_vae_model
from probe.analysis.theorem1 import _orthogonal, reduced_objective
from probe.errors import UserError


def _rotation(d, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q


# -- alignment helpers --------------------------------------------------------------------------------

def test_alignment_helpers_on_known_matrices():
    basis = _rotation(6, 0)[:, :3]
    perm = np.array([2, 0, 1])
    signs = np.array([1.0, -1.0, 1.0])
    decoder = basis[:, perm] * signs * np.array([3.0, 2.0, 0.5])  # permuted, flipped, scaled columns
    m = match_columns(decoder, basis)
    assert m["mean_abs_cos"] == pytest.approx(1.0)
    assert m["assignment"] == perm.tolist()
    assert subspace_match(decoder, basis)["mean_cos2"] == pytest.approx(1.0)
    # an orthogonal complement shares nothing
    assert subspace_match(_rotation(6, 0)[:, 3:], basis)["mean_cos2"] == pytest.approx(0.0, abs=1e-12)
    # signed permutations have error 0; a 45° rotation does not
    sp = np.eye(3)[[1, 2, 0]] * np.array([1, -1, 1])
    assert signed_permutation_error(sp)["max_abs_error"] == pytest.approx(0.0)
    c = np.cos(np.pi / 4)
    assert signed_permutation_error(np.array([[c, -c], [c, c]]))["max_abs_error"] > 0.29
    # σ ordering: latent j matched to eigen-rank assignment[j]
    assert sigma_order_matches([2, 0, 1], [0.9, 0.1, 0.5])["correct"]
    assert not sigma_order_matches([2, 0, 1], [0.1, 0.9, 0.5])["correct"]


def test_pca_recovers_known_covariance():
    data, lam, basis = synthetic_data(8, 3, 0.0, n=40000, seed=1)
    values, vectors = pca(data)
    assert values[:3] == pytest.approx(lam, rel=0.05)
    assert match_columns(vectors[:, :3], basis)["mean_abs_cos"] > 0.999


# -- the linear VAE -------------------------------------------------------------------------------------

def test_analytic_objective_equals_the_model_loss_in_expectation():
    """The closed-form objective of the analysis is the expectation over ε of LinearVAE.loss."""
    from probe.models.base import Batch

    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 5)) @ rng.standard_normal((5, 5)) + 0.3
    mean = x.mean(0)
    model = linear_vae_model(5, 2, beta=0.7)
    w_enc, w_dec = torch.randn(2, 5, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64)
    logvar = torch.tensor([-1.0, 0.5], dtype=torch.float64)
    with torch.no_grad():
        model.encoder.weight.copy_(w_enc)
        model.encoder.bias.copy_(-(w_enc @ torch.as_tensor(mean)))
        model.decoder.weight.copy_(w_dec)
        model.decoder.bias.copy_(torch.as_tensor(mean))
        model.encoder_log_var.copy_(logvar)
    xc = torch.as_tensor(x - mean)
    analytic, _ = _objective_analytic(w_enc, w_dec, logvar, xc.T @ xc / len(x), 0.7)
    batch = Batch(x=torch.as_tensor(x, dtype=torch.float32).repeat(500, 1).view(-1, 1, 1, 5))
    torch.manual_seed(0)
    with torch.no_grad():
        sampled = np.mean([float(model.loss(batch, 0)[0]) for _ in range(4)])
    assert sampled == pytest.approx(float(analytic), rel=0.01)


def test_the_written_out_gradient_is_autograds():
    # the analytic fit runs L-BFGS-B on the numpy value and gradient: both must be the torch objective's
    rng = np.random.default_rng(1)
    x = rng.standard_normal((200, 7)) @ rng.standard_normal((7, 7))
    s = x.T @ x / len(x)
    w_enc, w_dec, logvar = rng.standard_normal((3, 7)), rng.standard_normal((7, 3)), 0.5 * rng.standard_normal(3)
    value, grad = _objective_and_gradient(w_enc, w_dec, logvar, s, 0.7)
    params = [torch.tensor(a, requires_grad=True) for a in (w_enc, w_dec, logvar)]
    reference, _ = _objective_analytic(*params, torch.as_tensor(s), 0.7)
    reference.backward()
    assert value == pytest.approx(reference.item(), rel=1e-12)
    np.testing.assert_allclose(grad, np.concatenate([p.grad.numpy().ravel() for p in params]), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("data_dim,num_latent,noise", [(4, 2, 0.0), (10, 3, 0.3)])
def test_linear_vae_recovers_pca_aligned_and_sigma_ordered(data_dim, num_latent, noise):
    data, lam, basis = synthetic_data(data_dim, num_latent, noise, n=5000, seed=3)
    fit = fit_linear_vae(data, num_latent, beta=0.5, seed=3)
    values, vectors = pca(data)
    check = compare_with_pca(fit["decoder"], fit["sigma"], values, vectors)
    assert check["subspace"]["mean_cos2"] > 0.999
    assert check["alignment_mean_abs_cos"] >= 0.99
    assert check["sigma_order"]["correct"]
    assert check["v_signed_permutation"]["max_abs_error"] < 0.01
    # the same checks fail for a rotated copy of the decoder (same subspace, different alignment)
    givens = np.eye(num_latent)
    c = np.cos(np.pi / 4)
    givens[:2, :2] = [[c, -c], [c, c]]  # mix latents 0 and 1 by 45°
    rotated = fit["decoder"] @ givens
    bad = compare_with_pca(rotated, fit["sigma"], values, vectors)
    assert bad["subspace"]["mean_cos2"] > 0.999
    assert bad["alignment_mean_abs_cos"] < 0.95
    assert bad["v_signed_permutation"]["max_abs_error"] > 0.1


def test_collapse_below_beta_threshold():
    """pPCA-like collapse: a direction with eigenvalue below β/2 gets σ → 1 and a null decoder column."""
    data, _, _ = synthetic_data(6, 3, 0.0, n=5000, seed=0, eigenvalues=[4.0, 2.0, 0.1])
    fit = fit_linear_vae(data, 3, beta=1.0, seed=0)
    norms = np.linalg.norm(fit["decoder"], axis=0)
    collapsed = int(np.argmin(norms))
    assert norms[collapsed] < 1e-3 and fit["sigma"][collapsed] == pytest.approx(1.0, abs=1e-3)


def test_linear_vae_sampled_estimator_uses_the_model_and_agrees():
    data, _, _ = synthetic_data(4, 2, 0.1, n=4000, seed=0, eigenvalues=[6.0, 2.0])
    fit = fit_linear_vae(data, 2, beta=0.5, seed=0, estimator="sampled", steps=1500, lr=3e-2)
    values, vectors = pca(data)
    check = compare_with_pca(fit["decoder"], fit["sigma"], values, vectors)
    assert check["subspace"]["mean_cos2"] > 0.99
    assert check["alignment_mean_abs_cos"] > 0.98
    assert check["sigma_order"]["correct"]


# -- Theorem 1 -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dim,seed", [(2, 0), (3, 1), (4, 2)])
def test_theorem1_minimiser_is_pca(dim, seed):
    res = minimise_reduced_objective(random_reconstructions(dim, seed=seed), beta=0.5, seed=seed)
    assert res["objective"] == pytest.approx(res["closed_form_minimum"], abs=1e-8)
    assert res["initial_objective"] > res["objective"] + 1e-3
    assert res["v_signed_permutation"]["max_abs_error"] < 1e-4
    assert res["u_alignment_mean_abs_cos"] > 0.9999
    assert res["sigma_order"]["correct"]
    assert res["sigma_squared_times_lambda"] == pytest.approx([0.5] * dim, rel=1e-4)  # σ_j² = β/λ_j


def test_theorem1_objective_is_larger_away_from_pca():
    x = random_reconstructions(3, seed=4)
    cov = torch.as_tensor(x.T @ x / len(x))
    lam = np.linalg.eigvalsh(cov.numpy())
    best = closed_form_minimum(lam, 0.5)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        u = _orthogonal(torch.randn(3, 3, generator=gen, dtype=torch.float64))
        v = _orthogonal(torch.randn(3, 3, generator=gen, dtype=torch.float64))
        s = torch.rand(3, generator=gen, dtype=torch.float64) * 3 + 0.2
        noise = torch.rand(3, generator=gen, dtype=torch.float64) + 0.05
        assert float(reduced_objective(u, s, v, noise, cov, 0.5)[0]) > best


# -- verification entry points ------------------------------------------------------------------------------

def test_verify_synthetic_passes_and_records_settings():
    res = verify_synthetic(dims=[(4, 2), (6, 3)], noise_levels=[0.0, 0.2], n=3000, theorem1_dims=[2])
    assert res["passed"] is True
    assert len(res["cases"]) == 4 and len(res["theorem1"]) == 1
    for case in res["cases"]:
        assert case["alignment_mean_abs_cos"] >= 0.99 and case["sigma_order"]["correct"]
        assert case["alignment_to_generating_basis"] > 0.99
    assert res["settings"]["beta"] == 0.5 and "source_digest" in res["code_version"]
    json.dumps(res)  # JSON-able


def _fig1_point_cloud(seed=0):
    """Fig. 1 in miniature: 80 small clusters, each uniform in an axis-aligned rectangle (local
    principal directions = the axes), with centres spread along the 45° diagonal (global principal
    directions = the diagonals)."""
    rng = np.random.default_rng(seed)
    c = np.cos(np.pi / 4)
    diag = np.array([[c, -c], [c, c]])
    centres = (rng.standard_normal((80, 2)) * np.array([6.0, 2.0])) @ diag.T
    local = rng.uniform(-1, 1, (80, 40, 2)) * np.array([0.2, 0.05])
    return (centres[:, None, :] + local).reshape(-1, 2), diag


def test_local_vs_global_alignment_fig1():
    data, diag = _fig1_point_cloud()
    codes = data.copy()  # latent dim = data dim, as in Fig. 1
    # an axis-aligned decoder (what the paper says nonlinear VAEs do): aligned with the local structure
    axis = local_vs_global_alignment(data, codes, lambda z: np.eye(2), num_anchors=12, neighbours=20)
    assert axis["local_mean_abs_cos"] > 0.97
    assert axis["global_mean_abs_cos"] == pytest.approx(np.cos(np.pi / 4), abs=0.05)
    # a PCA-aligned decoder (linear VAE): aligned with the global structure, not the local one
    pca_like = local_vs_global_alignment(data, codes, lambda z: diag, num_anchors=12, neighbours=20)
    assert pca_like["global_mean_abs_cos"] > 0.99
    assert pca_like["local_mean_abs_cos"] < 0.8
    assert axis["local_minus_global"] > 0.2 > pca_like["local_minus_global"]
    with pytest.raises(UserError, match="neighbourhood"):
        local_vs_global_alignment(data, codes, lambda z: diag, neighbourhood="bogus")


def _linear_pattern_store(path):
    """Images = 128 + Σ_k a_k·w_k·P_k (w_k the factor scaled to [−1, 1], P_k fixed random ±1 patterns,
    a = 30, 20, 12, 6): a linear generative process whose PCA spectrum has distinct eigenvalues.
    (The conftest toy renderer has an exactly degenerate spectrum, where PCA directions are undefined.)"""
    from probe.data import StateSpace, write_store

    sizes = (3, 4, 5, 6)
    factors = StateSpace(sizes).all_factors()
    rng = np.random.default_rng(0)
    patterns = rng.choice([-1.0, 1.0], size=(4, 16 * 16))
    w = factors / (np.array(sizes) - 1) * 2 - 1
    images = 128 + (w * np.array([30.0, 20.0, 12.0, 6.0])) @ patterns
    images = np.round(images).clip(0, 255).astype(np.uint8).reshape(-1, 16, 16, 1)
    return write_store(path, images, factors, name="patterns", factor_names=list("abcd"), factor_sizes=list(sizes),
                       factor_values=[np.linspace(0, 1, s).tolist() for s in sizes],
                       origin={"kind": "synthetic", "config": {"generator": "linear patterns"}, "seed": 0})


def test_verify_store_and_local_alignment_of_a_run(tmp_path):
    from probe.train import train_run

    torch.set_num_threads(1)
    store = _linear_pattern_store(tmp_path / "patterns.zarr")
    run = train_run({"model": "beta-vae", "seed": 0, "model_config": {"beta": 1.0, "lr": 1e-3},
                     "train": {"steps": 20, "batch_size": 16, "log_every": 10, "checkpoint_every": 20}},
                    store.path, tmp_path / "run", progress=False)
    res = verify_store(store.path, num_images=360, run_dir=run, num_anchors=4, neighbours=24)
    assert res["settings"]["num_latent"] == 4 and res["settings"]["project_dims"] == 8
    assert res["store"]["digest"] == store.digest
    check = res["linear_vae"]
    assert check["subspace"]["mean_cos2"] > 0.99
    assert check["alignment_mean_abs_cos"] >= 0.99 and check["sigma_order"]["correct"] and check["passed"]
    local = res["local_alignment"]
    assert local["run_dir"] == str(run)
    if local.get("num_active", 0) > 0 and "local_mean_abs_cos" in local:
        assert 0 <= local["global_mean_abs_cos"] <= 1 and 0 <= local["local_mean_abs_cos"] <= 1
    json.dumps(res)
    with pytest.raises(UserError, match="project_dims"):
        verify_store(store.path, num_images=96, num_latent=5, project_dims=4)
    assert verify_store(store.path, num_images=360)["local_alignment"] is None


def test_pca_verify_cli(tmp_path):
    from probe.cli import cli

    out = tmp_path / "res.json"
    res = CliRunner().invoke(cli, ["pca", "verify", "--dims", "4x2", "--noise", "0,0.2", "--theorem1-dims", "2",
                                       "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.count("PASS") == 3 and "passed: True" in res.output
    assert json.loads(out.read_text())["passed"] is True
    bad = CliRunner().invoke(cli, ["pca", "verify", "--dims", "2x4"])
    assert bad.exit_code != 0


# -- spectral gaps and per-block judgement (Theorem 1 assumes distinct eigenvalues) ------------------------

def _rotation2(angle):
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s], [s, c]])


def test_equal_eigenvalues_are_a_degenerate_block_not_a_failure():
    from probe.analysis import judge
    from probe.analysis.alignment import compare_with_pca, spectral_blocks

    # covariance eigenvalues 9, 4, 4, 1, 0.5 (components 2–3 exactly degenerate) along a random rotation
    rng = np.random.default_rng(0)
    basis, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    values = np.array([9.0, 4.0, 4.0, 1.0, 0.5])
    blocks = spectral_blocks(values, 3)["blocks"]
    assert [(b["start"], b["end"], b["degenerate"]) for b in blocks] == [(0, 0, False), (1, 2, True)]
    # a decoder that matches PCA up to a 45° rotation inside the degenerate eigenspace: optimal by Theorem 1's
    # objective, yet per-direction alignment is only cos 45° there
    dec = basis[:, :3].copy()
    dec[:, 1:3] = dec[:, 1:3] @ _rotation2(np.pi / 4)
    dec = dec * np.array([3.0, 2.0, 2.0])
    check = compare_with_pca(dec, np.array([0.1, 0.2, 0.2]), values, basis)
    assert check["alignment_mean_abs_cos"] < 0.99                       # the per-direction check fails…
    verdict = judge(check)
    assert verdict["status"] == "pass-blocks" and verdict["passed"] and not verdict["strict_passed"]
    assert any("components 2–3" in r and "ratio 1.000" in r for r in verdict["assumption"])
    assert check["spectrum"]["blocks"][1]["mean_score"] == pytest.approx(1.0)
    # …but a decoder that leaves the degenerate span fails, with a reason naming the block
    bad = dec.copy()
    bad[:, 2] = basis[:, 3] * 2.0
    verdict = judge(compare_with_pca(bad, np.array([0.1, 0.2, 0.2]), values, basis))
    assert verdict["status"] == "fail" and any("components 2–3" in r and "mean |cos|" in r for r in verdict["reasons"])


def test_block_columns_groups_the_top_components_and_cuts_a_block_at_the_latents():
    from probe.analysis.alignment import block_columns

    assert block_columns([9.0, 4.0, 4.0, 1.0, 0.5], 3) == [[0], [1, 2]]
    assert block_columns([9.0, 8.5, 4.0, 3.9, 3.8, 1.0], 4) == [[0, 1], [2, 3]]   # the block 2-4 runs past 4: cut
    assert block_columns([5.0, 3.0, 1.0], 3) == [[0], [1], [2]]


def test_principal_scores_are_the_sample_pca_in_float32_and_float64_alike():
    from probe.analysis.verify import principal_scores

    # images with a known spectrum: coordinates of variances 9, 4, 1 along orthonormal directions + a mean, rank 3
    rng = np.random.default_rng(3)
    directions, _ = np.linalg.qr(rng.standard_normal((60, 3)))
    coords = rng.standard_normal((2500, 3)) * np.array([3.0, 2.0, 1.0])
    images = (coords @ directions.T + 0.5).reshape(2500, 6, 10)
    scores, values, total = principal_scores(images, 2)
    sample = np.cov(coords, rowvar=False)
    assert values == pytest.approx(np.linalg.eigvalsh(sample)[::-1][:2], rel=1e-8)
    assert scores.var(0, ddof=1) == pytest.approx(values, rel=1e-8)
    assert abs(scores.mean(0)).max() < 1e-10                      # centred by the sample's mean
    assert total == pytest.approx(np.trace(sample), rel=1e-8)     # rank 3: all variance in the three coordinates
    assert values.sum() / total == pytest.approx(1.0 - np.linalg.eigvalsh(sample)[0] / np.trace(sample), rel=1e-8)
    # the same sample in float32 (as evaluate reads it) and as 8-bit integers: the same scores up to sign
    scores32, values32, total32 = principal_scores(images.astype(np.float32), 2)
    assert scores32.dtype == np.float32
    assert np.abs(np.abs(scores32) - np.abs(scores)).max() < 1e-4 * np.abs(scores).max()
    assert values32 == pytest.approx(values, rel=1e-5) and total32 == pytest.approx(total, rel=1e-5)
    assert principal_scores(np.round(images * 10).clip(0, 255).astype(np.uint8), 1)[0].dtype == np.float32


def test_linear_vae_on_equal_eigenvalues_is_judged_per_block():
    res = verify_synthetic(dims=[(8, 3)], noise_levels=[0.1], n=4000, theorem1_dims=[], eigenvalues=[6.0, 3.0, 3.0])
    case = res["cases"][0]
    blocks = case["spectrum"]["blocks"]
    assert [b["size"] for b in blocks] == [1, 2] and blocks[1]["degenerate"]
    assert case["judgement"]["status"] in ("pass", "pass-blocks") and case["passed"]
    assert blocks[1]["mean_score"] > 0.99


def test_distinct_eigenvalues_pass_per_direction():
    res = verify_synthetic(dims=[(8, 3)], noise_levels=[0.1], n=4000, theorem1_dims=[], eigenvalues=[6.0, 3.0, 1.0])
    case = res["cases"][0]
    assert not any(b["degenerate"] for b in case["spectrum"]["blocks"])
    assert case["judgement"]["status"] == "pass" and case["judgement"]["reasons"] == []


def test_local_alignment_of_a_decoder_built_on_the_local_directions():
    """Each cluster has its own orientation (local principal directions differ from cluster to cluster and
    from the global ones); a decoder whose Jacobian at a point is that point's cluster axes scores ≈ 1."""
    rng = np.random.default_rng(1)
    angles = rng.uniform(0, np.pi, 60)
    centres = rng.standard_normal((60, 2)) * np.array([8.0, 3.0])
    local = rng.uniform(-1, 1, (60, 50, 2)) * np.array([0.3, 0.08])
    data = np.concatenate([centres[k] + local[k] @ _rotation2(angles[k]).T for k in range(60)])
    cluster = np.repeat(np.arange(60), 50)
    codes = np.column_stack([data, cluster])  # the jacobian sees which cluster the anchor is in

    def jacobian(code):
        return _rotation2(angles[int(code[2])]) * np.array([0.3, 0.08])

    res = local_vs_global_alignment(data, data, jacobian, num_anchors=20, neighbours=25, jacobian_inputs=codes)
    assert res["local_mean_abs_cos"] > 0.97
    # in 2-D a random rotation still has max(|cos|, |sin|) ≈ 0.90 on average: the global score stays lower
    assert res["global_mean_abs_cos"] < 0.95 and res["local_minus_global"] > 0.05
