"""Value tests of the pure metric functions: disentanglement_lib's analytic cases, invariances,
hand-computed information quantities and agreement with the sklearn calls they replace."""

from __future__ import annotations

import numpy as np
import pytest

from probe.metrics import (active_units, dci, discrete_entropy, discrete_mutual_info, gaussian_tc, histogram_discretize,
                           infomec, mcc, mig, normalized_mutual_info, modularity_explicitness, reconstruction, sap)
from probe.metrics.dci import completeness_from_importance, disentanglement_from_importance
from probe.metrics.infomec import active_latents, infom_infoc
from probe.metrics.information import histogram_nmi, ksg_mutual_info, mutual_info_classif_1d

N, K, SIZE = 2000, 4, 10


def _factors(n=N, k=K, size=SIZE, seed=0):
    return np.random.RandomState(seed).randint(size, size=(n, k))


@pytest.fixture(scope="module")
def data():
    train, test = _factors(seed=0), _factors(n=1000, seed=1)
    rng = np.random.RandomState(2)
    identity = (train + 0.01 * rng.randn(*train.shape), test + 0.01 * rng.randn(*test.shape))
    noise = (rng.randn(N, K), rng.randn(1000, K))
    return {"train": train, "test": test, "identity": identity, "noise": noise}


# -- building blocks --------------------------------------------------------------------------------

def test_histogram_discretize_matches_numpy_construction_and_reference_example():
    x = np.array([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]).T
    assert histogram_discretize(x, 3)[:, 0].tolist() == [1, 1, 2, 2, 3, 3]
    codes = np.random.RandomState(0).randn(500, 3) * [1, 10, 0.1]
    out = histogram_discretize(codes, 20)
    for j in range(3):
        expected = np.digitize(codes[:, j], np.histogram(codes[:, j], 20)[1][:-1])
        np.testing.assert_array_equal(out[:, j], expected)
        assert out[:, j].min() == 1 and out[:, j].max() == 20
        assert out[np.argmax(codes[:, j]), j] == 20


def test_entropy_and_mutual_information_hand_values():
    np.testing.assert_allclose(discrete_entropy(np.array([[0, 0, 1, 1], [0, 1, 2, 3]]).T), [np.log(2), np.log(4)])
    a = np.array([0, 0, 1, 1])
    b = np.array([0, 1, 0, 1])
    m = discrete_mutual_info(np.stack([a, a], 1), np.stack([a, b], 1))
    np.testing.assert_allclose(m, [[np.log(2), 0.0], [np.log(2), 0.0]], atol=1e-15)
    # joint p = [[1/2, 0], [1/4, 1/4]]: I = H(x) + H(y) - H(x, y)
    x = np.array([0, 0, 1, 1])
    y = np.array([0, 0, 0, 1])
    hx, hy = np.log(2), -(0.75 * np.log(0.75) + 0.25 * np.log(0.25))
    hxy = -(0.5 * np.log(0.5) + 2 * 0.25 * np.log(0.25))
    np.testing.assert_allclose(discrete_mutual_info(x[:, None], y[:, None])[0, 0], hx + hy - hxy, rtol=1e-12)


def test_mutual_info_matches_sklearn():
    from sklearn.metrics import mutual_info_score

    rng = np.random.RandomState(0)
    codes, factors = rng.randint(20, size=(3000, 3)), rng.randint(7, size=(3000, 2))
    codes[:, 0] = factors[:, 0] * 2 + rng.randint(2, size=3000)
    m = discrete_mutual_info(codes, factors)
    for i in range(3):
        for j in range(2):
            assert abs(m[i, j] - mutual_info_score(factors[:, j], codes[:, i])) < 1e-12


def test_histogram_nmi_of_a_copied_factor_is_one():
    factors = np.stack(np.meshgrid(np.arange(4), np.arange(5), indexing="ij"), -1).reshape(-1, 2)
    factors = np.repeat(factors, 10, 0)
    rng = np.random.default_rng(0)
    codes = np.stack([factors[:, 1] + 0.01 * rng.standard_normal(len(factors)), rng.standard_normal(len(factors))], 1)
    nmi = histogram_nmi(codes, factors)
    assert nmi[1, 0] == pytest.approx(1.0, abs=1e-9)  # z0 determines factor 1
    assert nmi[0, 0] < 0.05 and nmi[0, 1] < 0.2  # unrelated pairs carry (almost) nothing


def test_histogram_nmi_keeps_the_report_heatmap_values():
    # the report's NMI heatmaps had their own copy (report/latents.py: sklearn mutual_info_score per pair over
    # its own histogram binning) until issue 25; these are that copy's values on this array, to the last bit
    rng = np.random.default_rng(25)
    factors = np.stack([rng.integers(0, 3, 60), rng.integers(0, 4, 60), np.zeros(60, int)], 1)
    codes = np.stack([factors[:, 0] + 0.3 * rng.standard_normal(60), rng.standard_normal(60)], 1)
    assert histogram_nmi(codes, factors, num_bins=5).tolist() == [
        [0.8284557285497638, 0.09002889102608463], [0.08266836809842942, 0.10007765904041753], [0.0, 0.0]]
    assert histogram_nmi(codes, factors).tolist() == [
        [0.9190542394695415, 0.23297272370033376], [0.3466699034582135, 0.3894845790899759], [0.0, 0.0]]
    # and MIG reads the same matrix: its per-factor best NMI is the heatmap's row maximum (constant factor: None)
    from probe.metrics.mig import factor_capture

    best = factor_capture(codes, factors)["best_nmi"]
    assert best[:2] == pytest.approx(histogram_nmi(codes, factors).max(1)[:2], abs=1e-12) and best[2] is None


@pytest.mark.parametrize("k", [3, 10])
def test_knn_mutual_info_identical_to_sklearn(k):
    from sklearn.feature_selection import mutual_info_classif

    rng = np.random.RandomState(1)
    y = rng.randint(8, size=2000)
    c = y + rng.randn(2000)
    expected = mutual_info_classif(c[:, None], y, n_neighbors=k, random_state=np.random.RandomState(5))[0]
    assert mutual_info_classif_1d(c, y, k, np.random.RandomState(5)) == expected
    # tiny classes take sklearn's brute-force branch; ties come from rounding
    y2 = rng.randint(60, size=400)
    c2 = np.round(rng.randn(400), 1)
    expected = mutual_info_classif(c2[:, None], y2, n_neighbors=k, random_state=np.random.RandomState(5))[0]
    assert mutual_info_classif_1d(c2, y2, k, np.random.RandomState(5)) == expected
    assert ksg_mutual_info(rng.randn(3000), rng.randint(4, size=3000), k) < 0.02


# -- MIG --------------------------------------------------------------------------------------------

def test_mig_analytic_cases(data):
    f = data["train"]
    assert mig(data["identity"][0], f)["mig"] >= 0.9
    assert mig(data["noise"][0], f)["mig"] <= 0.2
    assert mig(np.concatenate([f, f], axis=1).astype(float), f)["mig"] == pytest.approx(0.0, abs=1e-12)


def test_mig_invariant_to_permutation_and_rescaling(data):
    codes, f = data["identity"][0] + 0.5 * data["noise"][0], data["train"]
    base = mig(codes, f)["mig"]
    assert mig(codes[:, [2, 0, 3, 1]], f)["mig"] == pytest.approx(base, abs=1e-12)
    scaled = codes.copy()
    scaled[:, 1] *= 4.0
    scaled[:, 2] = scaled[:, 2] * 0.5 + 8.0
    assert mig(scaled, f)["mig"] == pytest.approx(base, abs=1e-12)


# -- DCI --------------------------------------------------------------------------------------------

def test_dci_importance_cases():
    diag = np.diag(5.0 * np.ones(5))
    assert disentanglement_from_importance(diag) == pytest.approx(1.0, abs=1e-6)
    assert completeness_from_importance(diag) == pytest.approx(1.0, abs=1e-6)
    dup = np.vstack([diag, diag])  # 10 codes, each factor in two of them
    assert disentanglement_from_importance(dup) == pytest.approx(1.0, abs=1e-6)
    assert completeness_from_importance(dup) == pytest.approx(1 - np.log(2) / np.log(10), abs=1e-6)
    uniform = np.ones((5, 5))
    assert disentanglement_from_importance(uniform) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("predictor", ["gbt", "rf"])
def test_dci_identity_and_noise(data, predictor):
    f, tf = data["train"], data["test"]
    kw = {"predictor": predictor, "n_estimators": 5}
    good = dci(*data["identity"][:1], f, data["identity"][1], tf, **kw)
    # Tripod's forest (max_features="sqrt", depth 10) also splits on uninformative codes once the
    # informative one is used up, so its D and C sit lower than the boosted trees' (QLAE paper, Fig. 7)
    floor = 0.9 if predictor == "gbt" else 0.75
    assert good["disentanglement"] >= floor and good["completeness"] >= floor
    assert good["informativeness_test"] >= 0.9
    bad = dci(data["noise"][0], f, data["noise"][1], tf, **kw)
    assert bad["disentanglement"] <= 0.2 and bad["informativeness_test"] <= 0.2


def test_dci_rf_splits_one_sample_and_threads_do_not_change_values(data):
    codes = data["identity"][0] + 0.3 * data["noise"][0]
    one = dci(codes, data["train"], predictor="rf", n_estimators=10, n_jobs=1)
    two = dci(codes, data["train"], predictor="rf", n_estimators=10, n_jobs=2)
    assert one == two and one["disentanglement"] >= 0.5


def test_dci_invariant_to_latent_permutation(data):
    codes = data["identity"][0] + 0.3 * data["noise"][0]
    perm = [3, 1, 0, 2]
    a = dci(codes[:1000], data["train"][:1000], data["identity"][1], data["test"], n_estimators=5)
    b = dci(codes[:1000, perm], data["train"][:1000], data["identity"][1][:, perm], data["test"], n_estimators=5)
    for key in a:
        # sklearn visits features in a seeded random order, so near-ties between splits on the
        # (small) residuals may resolve differently after a permutation: equal up to that
        assert b[key] == pytest.approx(a[key], abs=5e-3)


# -- SAP --------------------------------------------------------------------------------------------

def test_sap_analytic_cases(data):
    f, tf = data["train"], data["test"]
    # a linear classifier on one code separates only ordered two-way splits: with balanced binary
    # factors the matching code scores 1 and every other code 0.5 (chance), so SAP = 0.5 exactly
    fb, tfb = f % 2, tf % 2
    rng = np.random.RandomState(3)
    assert sap(fb + 0.01 * rng.randn(*fb.shape), fb, tfb + 0.01 * rng.randn(*tfb.shape), tfb)["sap"] == \
        pytest.approx(0.5, abs=0.04)
    assert sap(data["noise"][0], f, data["noise"][1], tf)["sap"] <= 0.2
    dup_train = np.concatenate([data["identity"][0]] * 2, axis=1)
    dup_test = np.concatenate([data["identity"][1]] * 2, axis=1)
    assert sap(dup_train, f, dup_test, tf)["sap"] == pytest.approx(0.0, abs=1e-12)
    assert sap(data["identity"][0], f, continuous=True)["sap"] >= 0.9
    assert sap(data["noise"][0], f, continuous=True)["sap"] <= 0.2


def test_sap_invariances(data):
    f, tf = data["train"], data["test"]
    codes, test = data["identity"][0] + 0.5 * data["noise"][0], data["identity"][1] + 0.5 * data["noise"][1]
    perm = [1, 3, 0, 2]
    a = sap(codes, f, test, tf)["sap"]
    assert sap(codes[:, perm], f, test[:, perm], tf)["sap"] == pytest.approx(a, abs=1e-12)
    assert sap(codes, f, test, tf, n_jobs=1)["sap"] == sap(codes, f, test, tf, n_jobs=2)["sap"]  # threads: same value
    c = sap(codes, f, continuous=True)["sap"]
    scaled = codes * [1.0, 3.0, -0.2, 1.0] + 5.0  # squared correlation ignores affine maps
    assert sap(scaled, f, continuous=True)["sap"] == pytest.approx(c, abs=1e-9)


# -- modularity / explicitness ------------------------------------------------------------------------

def test_modularity_explicitness(data):
    f, tf = data["train"], data["test"]
    good = modularity_explicitness(data["identity"][0], f, data["identity"][1], tf)
    assert good["modularity"] >= 0.9 and good["explicitness_test"] >= 0.9
    bad = modularity_explicitness(data["noise"][0], f, data["noise"][1], tf)
    assert bad["explicitness_test"] == pytest.approx(0.5, abs=0.05)
    perm = [2, 3, 1, 0]
    swapped = modularity_explicitness(data["identity"][0][:, perm], f, data["identity"][1][:, perm], tf)
    for key in good:
        assert swapped[key] == pytest.approx(good[key], abs=1e-6)


# -- InfoMEC ---------------------------------------------------------------------------------------

def test_infom_infoc_of_one_hot_nmi():
    assert infom_infoc(np.eye(4)) == (1.0, 1.0)
    one_hot = np.array([[0.7, 0.0, 0.2], [0.0, 0.5, 0.0]])  # every latent informs one source only
    info_m, info_c = infom_infoc(one_hot)
    assert info_m == 1.0
    # sources: ratios 0.7/0.9 and 1 -> mean 0.8889; renormalised with 3 latents
    assert info_c == pytest.approx(((0.7 / 0.9 + 1) / 2 - 1 / 3) / (1 - 1 / 3))
    assert infom_infoc(np.full((3, 3), 0.2)) == (pytest.approx(0.0), pytest.approx(0.0))


def test_infomec_continuous_and_discrete_analytic_cases(data):
    f = data["train"][:1000]
    good = infomec(data["identity"][0][:1000], f)
    assert good["infom"] >= 0.9 and good["infoc"] >= 0.9 and good["infoe"] >= 0.5
    bad = infomec(data["noise"][0][:1000], f)
    assert bad["infoe"] <= 0.05
    # InfoM/InfoC of pure noise are ratios of estimation noise (KSG clips at 0, so a column may hold a
    # single tiny positive entry): the meaningful check is that every NMI entry is ~0
    assert np.abs(normalized_mutual_info(data["noise"][0][:1000], f)).max() <= 0.05
    disc = infomec(f, f, discrete=True)
    assert disc["infom"] >= 0.9 and disc["infoc"] >= 0.9 and disc["infoe"] >= 0.95


def test_infomec_invariances_and_pruning(data):
    codes = data["identity"][0][:1000] + 0.3 * data["noise"][0][:1000]
    f = data["train"][:1000]
    base = infomec(codes, f, n_neighbors=10)
    perm = [3, 0, 2, 1]
    permuted = infomec(codes[:, perm], f, n_neighbors=10)
    scaled = infomec(codes * [2.0, 1.0, 1.0, 0.5], f, n_neighbors=10)
    for key in ("infom", "infoc", "infoe"):
        assert permuted[key] == pytest.approx(base[key], abs=1e-4)
        assert scaled[key] == pytest.approx(base[key], abs=1e-4)
    with_dead = np.concatenate([codes, 1e-4 * data["noise"][0][:1000, :1]], axis=1)
    for rule in ("range", "iqr"):
        assert active_latents(with_dead, discrete=False, prune=rule).tolist() == [True] * 4 + [False]
    pruned = infomec(with_dead, f, n_neighbors=10)
    assert pruned["num_active_latents"] == 4
    assert pruned["infom"] == pytest.approx(base["infom"], abs=0.02)
    assert active_latents(np.array([[0, 1], [0, 2]]), discrete=True, prune="range").tolist() == [False, True]


# -- unsupervised -------------------------------------------------------------------------------

def test_gaussian_tc_hand_value_and_invariances():
    rng = np.random.RandomState(0)
    rho = 0.6
    z = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=20000)
    cov = np.cov(z, rowvar=False)
    r = cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1])
    assert gaussian_tc(z)["gaussian_tc"] == pytest.approx(-0.5 * np.log(1 - r ** 2), rel=1e-9)
    assert gaussian_tc(z)["gaussian_tc"] == pytest.approx(-0.5 * np.log(1 - rho ** 2), abs=0.02)
    assert gaussian_tc(z[:, ::-1] * [3.0, 0.1])["gaussian_tc"] == pytest.approx(gaussian_tc(z)["gaussian_tc"], rel=1e-9)
    assert gaussian_tc(rng.randn(20000, 4))["gaussian_tc"] < 0.01


def test_active_units_hand_values():
    var = np.array([[0.1, 1.0, 0.79], [0.1, 1.0, 0.81]])
    out = active_units(var)
    assert out["active_units"] == 1.0 and out["mean_variance"] == pytest.approx([0.1, 1.0, 0.8])
    assert active_units(var, threshold=0.9)["active_units"] == 2.0


def test_mcc_identity_permutation_and_monotone_maps(data):
    f = data["train"]
    assert mcc(f.astype(float), f)["mcc"] == pytest.approx(1.0)
    codes = data["identity"][0] + data["noise"][0]
    base = mcc(codes, f)["mcc"]
    warped = np.exp(codes[:, [1, 0, 3, 2]])  # Spearman: monotone maps and permutations change nothing
    assert mcc(warped, f)["mcc"] == pytest.approx(base, abs=1e-12)
    assert mcc(data["noise"][0], f)["mcc"] <= 0.1


def test_reconstruction_hand_values():
    x = np.array([[[[0], [255]]]], dtype=np.uint8)  # one image, 2 pixels
    p = np.array([[[[0.25], [0.5]]]])
    out = reconstruction(x, p)
    assert out["bce"] == pytest.approx(-np.log(0.75) - np.log(0.5))
    assert out["mse"] == pytest.approx((0.25 ** 2 + 0.5 ** 2) / 2)
    assert out["psnr"] == pytest.approx(10 * np.log10(1 / out["mse"]))


def test_latent_match_reads_whose_alignment_a_code_has():
    from probe.metrics.information import latent_match, rank_discretize

    rng = np.random.default_rng(0)
    z = rng.standard_normal((5000, 3))
    assert np.all(np.bincount(rank_discretize(z[:, :1], 20).ravel()) == 250)       # equal-count bins
    np.testing.assert_allclose(latent_match(z, z), 1.0)
    # permuted, flipped, squashed: still that alignment (equal-width bins would read exp(z) far below 1)
    np.testing.assert_allclose(latent_match(z, np.c_[np.exp(z[:, 2]), -z[:, 0] ** 3, z[:, 1]]), 1.0)
    c = np.sqrt(0.5)
    rotated = np.c_[c * (z[:, 0] - z[:, 1]), c * (z[:, 0] + z[:, 1]), z[:, 2]]
    match = latent_match(z, rotated)
    assert match[2] == pytest.approx(1.0) and np.all(match[:2] < 0.2)               # two latents spread over two
    assert np.all(latent_match(z, rng.standard_normal((5000, 4))) < 0.03)          # unrelated: the bias only
    assert latent_match(np.c_[z[:, 0], np.zeros(5000)], z)[1] == 0.0               # a constant latent: 0, no nan
