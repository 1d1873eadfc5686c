"""The sampler / encoder cache, the FactorVAE and β-VAE scores, evaluate_encoder/evaluate_run and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from probe.data import StateSpace
from conftest import toy_encoder
from probe.metrics import (CodeCache, Encoder, beta_vae_score, draw_factors, evaluate_encoder, factor_vae_score,
                           small_settings)

SIZES = np.array([4, 3, 5, 4, 6, 3, 4, 5, 3, 4])  # 10 factors: chance for the vote scores is ~0.1
SMALL = {"num_variance_estimate": 1000, "num_train": 300, "num_eval": 300}


def identity_codes(factors):
    return np.asarray(factors, dtype=np.float64)


def table_codes(seed=0):
    """A 'model' whose codes are noise: a random lookup table over the grid."""
    space = StateSpace(SIZES)
    table = np.random.RandomState(seed).randn(space.num_states, SIZES.size)
    return lambda factors: table[space.ravel(factors)]


def test_draw_factors_reproduces_disentanglement_lib_batches():
    rng = np.random.RandomState(0)
    expected = []
    for size in (16, 16, 8):  # generate_batch_factor_code: batches of 16, each factor by factor
        expected.append(np.stack([rng.randint(s, size=size) for s in SIZES], axis=1))
    out = draw_factors(SIZES, 40, np.random.RandomState(0), batch_size=16)
    np.testing.assert_array_equal(out, np.concatenate(expected))


def test_factor_vae_score_cases_and_invariances():
    good = factor_vae_score(identity_codes, SIZES, seed=0, **SMALL)
    assert good["eval_accuracy"] == 1.0 and good["train_accuracy"] == 1.0 and good["num_active_dims"] == 10
    bad = factor_vae_score(table_codes(), SIZES, seed=0, **SMALL)
    assert bad["eval_accuracy"] <= 0.2
    perm = np.random.RandomState(1).permutation(SIZES.size)
    noisy = table_codes(3)
    mixed = lambda f: identity_codes(f) + 0.6 * noisy(f)
    base = factor_vae_score(mixed, SIZES, seed=0, **SMALL)
    assert factor_vae_score(lambda f: mixed(f)[:, perm], SIZES, seed=0, **SMALL) == base
    assert factor_vae_score(lambda f: mixed(f) * 2.0, SIZES, seed=0, **SMALL) == base
    # pruning: a code with std < 0.05 is ignored, so a constant extra code changes nothing
    extra = factor_vae_score(lambda f: np.concatenate([mixed(f), np.zeros((len(f), 1))], 1), SIZES, seed=0, **SMALL)
    assert extra == base
    assert factor_vae_score(lambda f: np.zeros((len(f), 3)), SIZES, seed=0, **SMALL)["eval_accuracy"] == 0.0


def test_beta_vae_score_cases_and_permutation():
    small = {"num_train": 300, "num_eval": 200}
    assert beta_vae_score(identity_codes, SIZES, seed=0, **small)["eval_accuracy"] >= 0.9
    assert beta_vae_score(table_codes(), SIZES, seed=0, **small)["eval_accuracy"] <= 0.2
    perm = np.random.RandomState(2).permutation(SIZES.size)
    a = beta_vae_score(identity_codes, SIZES, seed=1, **small)
    b = beta_vae_score(lambda f: identity_codes(f)[:, perm], SIZES, seed=1, **small)
    assert a["eval_accuracy"] == pytest.approx(b["eval_accuracy"], abs=0.02)


def test_code_cache_encodes_each_image_once_in_sorted_batches():
    space = StateSpace([3, 4, 5])
    calls = []

    def encode(images):
        calls.append(images.copy())
        return {"codes": images.reshape(len(images), -1)[:, :2].astype(np.float32), "variance": np.ones((len(images), 2))}

    images = np.arange(space.num_states * 4, dtype=np.uint8).reshape(space.num_states, 2, 2, 1)
    cache = CodeCache(space.ravel, lambda idx: images[idx], encode, space.num_states, batch_size=7)
    f = draw_factors(space.factor_sizes, 200, np.random.RandomState(0))
    codes = cache.codes_of(f)
    np.testing.assert_array_equal(codes, images[space.ravel(f)].reshape(200, -1)[:, :2])
    unique = np.unique(space.ravel(f)).size
    assert cache.images_encoded == unique and sum(len(c) for c in calls) == unique
    assert max(len(c) for c in calls) <= 7
    cache.codes_of(f[::-1])  # all cached: no new encoder calls
    assert sum(len(c) for c in calls) == unique
    assert cache.codes_of(f, "variance").shape == (200, 2)
    with pytest.raises(KeyError):
        cache.codes_of(f, "discrete")


def test_factor_vae_through_cache_equals_direct_encoder(make_toy_store):
    store = make_toy_store(factor_sizes=(2, 3, 4, 4), resolution=8)
    table = np.random.RandomState(0).randn(store.num_images, 3)
    encode = lambda images: table[images.reshape(len(images), -1).astype(np.int64).sum(1) % store.num_images]
    direct = lambda f: encode(store.read(store.index_of(f)))
    cache = CodeCache.for_store(store, encode)
    kw = {"num_variance_estimate": 500, "num_train": 200, "num_eval": 100}
    assert factor_vae_score(cache.codes_of, store.factor_sizes, seed=3, **kw) == \
        factor_vae_score(direct, store.factor_sizes, seed=3, **kw)
    assert cache.images_encoded <= store.num_images




def test_evaluate_encoder_result_shape_and_values(make_toy_store):
    store = make_toy_store(factor_sizes=(3, 4, 5, 5), resolution=16)
    settings = {**small_settings(), "num_train": 600, "num_test": 300, "dci_n_estimators": 5,
                "factor_vae_num_variance_estimate": 500, "factor_vae_num_train": 200, "factor_vae_num_eval": 100,
                "beta_vae_num_train": 200, "beta_vae_num_eval": 100, "num_reconstruction": 100}
    recon = lambda images: images.astype(np.float64) / 255.0 * 0.9
    out = evaluate_encoder(store, Encoder(toy_encoder, reconstruct=recon), seed=0, settings=settings)
    m = out["metrics"]
    assert set(m) == {"mig", "dci", "sap", "factor_vae_score", "beta_vae_score", "modularity_explicitness", "infomec",
                      "gaussian_tc", "active_units", "mcc", "reconstruction"}
    assert set(m["dci"]) == {"disentanglement", "completeness", "informativeness_train", "informativeness_test"}
    assert set(m["factor_vae_score"]) == {"train_accuracy", "eval_accuracy", "num_active_dims"}
    assert {"infom", "infoe", "infoc"} <= set(m["infomec"])
    assert {"explicitness_train", "explicitness_test", "modularity"} == set(m["modularity_explicitness"])
    assert m["mig"]["mig"] >= 0.5 and m["factor_vae_score"]["eval_accuracy"] >= 0.9
    assert m["active_units"]["active_units"] == 4.0
    assert m["active_units"]["mean_variance"] == pytest.approx([0.1] * 4)
    assert m["reconstruction"]["psnr"] > 15
    s = out["settings"]
    assert s["num_train"] == 600 and s["seed"] == 0 and s["sklearn"] and s["store"]["digest"] == store.digest
    assert s["images_encoded"] <= store.num_images
    json.dumps(out)  # JSON-able
    again = evaluate_encoder(store, Encoder(toy_encoder), metrics="mig,sap", seed=0, settings=settings)
    assert again["metrics"]["mig"] == m["mig"] and again["metrics"]["sap"] == m["sap"]
    nov = evaluate_encoder(store, Encoder(lambda im: toy_encoder(im)["codes"]), metrics=["active_units", "mig"],
                           settings=settings)
    assert "active_units" in nov["skipped"] and "mig" in nov["metrics"]


def test_bad_metric_or_setting_is_a_user_error(make_toy_store, tmp_path, capsys):
    from probe.cli import main
    from probe.errors import UserError

    store = make_toy_store()
    with pytest.raises(UserError, match="unknown metric"):
        evaluate_encoder(store, Encoder(toy_encoder), metrics="mig,nope")
    with pytest.raises(UserError, match="unknown evaluation setting"):
        evaluate_encoder(store, Encoder(toy_encoder), settings={"num_trian": 5})
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", str(tmp_path / "run"), "--data", str(store.path), "--metrics", "mig,nope"])
    assert exc.value.code == 2
    assert "unknown metric" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", str(tmp_path / "missing-run"), "--data", str(store.path), "--metrics", "mig"])
    assert exc.value.code == 2
    assert not (tmp_path / "metrics.json").exists()


def test_evaluate_run_and_cli_on_a_trained_run(make_toy_store, tmp_path):
    from probe.cli import main
    from probe.train import train_run

    store = make_toy_store(factor_sizes=(2, 3, 4, 4), resolution=16)
    run = train_run({"model": "beta-vae", "model_config": {"arch": "mlp"}, "seed": 0,
                     "train": {"steps": 2, "batch_size": 8}}, store.path, tmp_path / "run", progress=False)
    sizes = {"num_train": 300, "num_test": 100, "num_reconstruction": 50}
    from probe.metrics import evaluate_run

    out = evaluate_run(run, store.path, metrics=["mig", "active_units", "reconstruction", "gaussian_tc"], **sizes)
    m = out["metrics"]
    assert set(m) == {"mig", "active_units", "reconstruction", "gaussian_tc"}
    assert len(m["active_units"]["mean_variance"]) == 4  # num_latent defaults to the number of factors
    assert "gaussian_tc_sampled" in m["gaussian_tc"] and np.isfinite(m["reconstruction"]["bce"])
    assert out["settings"]["run_config"] and out["settings"]["code_version"]
    target = tmp_path / "metrics.json"
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", str(run), "--data", str(store.path), "--metrics", "mig", "--out", str(target),
              "--set", "num_train=300", "--set", "num_test=100"])
    assert exc.value.code == 0
    saved = json.loads(target.read_text())
    assert saved["metrics"]["mig"] == m["mig"] and saved["settings"]["num_train"] == 300
