"""Validity gates before the verdict (issue 23): regime, noise control, Holm adjustment, effect size, detectable
drop, per-factor capture (probe.metrics.mig.factor_capture) and a report that applies them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from probe.metrics.mig import factor_capture, mig
from probe.report.gates import failed_gate, noise_gate, regime_gate
from probe.report.stats import detectable_drop, hedges_g, holm_adjust, verdict

ORIG = [0.60, 0.62, 0.58, 0.61, 0.59]


def test_fewer_active_latents_than_factors_is_outside_the_regime():
    gate = regime_gate(6, active=[2, 2, 3, 2, 2])
    assert gate["status"] == "failed"
    assert gate["label"] == "outside the paper's regime (2 of 6 latents active)"
    assert "5 orig runs" in gate["reason"] and gate["checks"]["active"]["median"] == 2
    # more active latents than factors: passed
    assert regime_gate(6, active=[8, 10, 9])["status"] == "passed"
    # unknown counts (no posterior variance, runs not encoded) or an unknown number of factors: not gated, and said so
    unknown = regime_gate(6, active=[None, None], missing="no posterior variance")
    assert unknown["status"] == "not checked" and unknown["reason"] == "not gated (no posterior variance)"
    assert regime_gate(None, active=[2, 2])["status"] == "not checked"


def test_active_latents_that_leave_factors_out_are_outside_the_regime():
    # every latent active, but the factors encoded are the hues only: the case the active-latent count alone passed
    gate = regime_gate(6, active=[6, 6, 5, 6, 6], captured=[3, 3, 4, 3, 3])
    assert gate["status"] == "failed" and gate["outcome"] == "outside-regime"
    assert gate["label"] == "outside the paper's regime (3 of 6 factors encoded)"
    assert gate["checks"]["active"]["passed"] and not gate["checks"]["captured"]["passed"]
    assert "median 3 factors with a latent holding ≥ 0.2" in gate["reason"]
    assert "median 6 active latents" in gate["reason"]  # the count that passed is named too
    both = regime_gate(6, active=[5, 5, 4, 5, 5], captured=[4, 3, 3, 3, 3])
    assert both["label"] == "outside the paper's regime (3 of 6 factors encoded, 5 of 6 latents active)"
    # a model without a posterior variance is gated by its encoded factors alone
    assert regime_gate(6, active=[None] * 3, captured=[6, 6, 5])["status"] == "passed"
    assert regime_gate(6, captured=[2, 2, 3])["label"] == "outside the paper's regime (2 of 6 factors encoded)"
    passed = regime_gate(2, active=[2, 2, 2], captured=[2, 2, 2])
    assert passed["status"] == "passed" and set(passed["checks"]) == {"active", "captured"}


def test_collapsed_noise_run_fails_the_noise_control_and_gets_no_verdict():
    collapsed = [0.02, 0.01, 0.03, 0.02, 0.02]
    gate = noise_gate(ORIG, collapsed, [0, 0, 0, 0, 0])
    assert gate["status"] == "failed" and gate["label"] == "noise control failed"
    assert gate["delta_noise"] == pytest.approx(np.mean(collapsed) - np.mean(ORIG))
    assert gate["threshold"] == pytest.approx(-0.25 * np.mean(ORIG))
    assert "no active latent on noise" in gate["reason"] and "more than 25%" in gate["reason"]
    # no active latent alone fails it too, even when the score holds up
    assert noise_gate(ORIG, ORIG, [0, 0, 1])["status"] == "failed"
    # the rule alone would say "no drop larger than 25 %" here; the gate replaces it
    unchanged = [0.61, 0.60, 0.59, 0.62, 0.58]
    assert verdict(ORIG, unchanged, collapsed)["label"] == "no drop larger than 25 %"
    chosen = failed_gate([regime_gate(6, active=[10] * 5), gate])
    assert chosen["label"] == "noise control failed" and chosen["outcome"] == "noise-control-failed"
    assert noise_gate(ORIG, [], None)["status"] == "not checked"


def test_clean_case_passes_the_gates_and_relies_on_local_structure():
    mod = [0.20, 0.22, 0.18, 0.21, 0.19]
    noise = [0.57, 0.60, 0.58, 0.59, 0.56]
    gates = [regime_gate(6, active=[10] * 5, captured=[6] * 5), noise_gate(ORIG, noise, [10, 10, 9, 10, 10])]
    assert [g["status"] for g in gates] == ["passed", "passed"] and failed_gate(gates) is None
    v = verdict(ORIG, mod, noise, p_adjusted=holm_adjust([1e-6, 0.5])[0], family_size=2)
    assert v["label"] == "relies on local structure" and v["outcome"] == "relies"
    assert v["test"] == "two-sided Welch t-test, orig vs mod" and v["family_size"] == 2
    assert v["p_holm"] == pytest.approx(2e-6) and v["hedges_g"] < -10


def test_holm_adjustment_on_known_p_values():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04; running max 0.02, 0.03, 0.06, 0.06
    assert holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_adjust([0.3, 0.9]) == pytest.approx([0.6, 0.9])  # capped at 1 and monotone
    assert holm_adjust([0.4]) == [0.4]  # one test: unchanged
    adjusted = holm_adjust([0.01, math.nan, 0.02])  # NaN is not counted in m and stays NaN
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.02)


def test_holm_adjusted_p_decides_the_verdict():
    orig, mod = [0.60, 0.55, 0.65, 0.58, 0.62], [0.52, 0.50, 0.57, 0.49, 0.55]
    raw = verdict(orig, mod)
    assert raw["p"] < 0.05 and raw["label"] == "relies on local structure"
    v = verdict(orig, mod, p_adjusted=min(1.0, 20 * raw["p"]), family_size=20)
    assert v["p"] == raw["p"] and not v["label"] == "relies on local structure"


def test_detectable_drop_and_hedges_g_by_hand():
    a, b = [1, 2, 3, 4, 5], [2, 3, 4, 5, 6]
    # pooled SD √2.5, SE = √2.5·√(2/5) = 1; df 8: t_0.975 = 2.306004, t_0.8 = 0.888890 (t tables)
    assert detectable_drop(a, b) == pytest.approx(2.306004135 + 0.888889518, rel=1e-8)
    # d = 1/√2.5, J = 1 − 3/(4·10 − 9)
    assert hedges_g(a, b) == pytest.approx(1 / math.sqrt(2.5) * (1 - 3 / 31))
    assert hedges_g(b, a) == pytest.approx(-hedges_g(a, b))
    assert math.isnan(detectable_drop([1.0], b)) and math.isnan(hedges_g([1.0, 1.0], [1.0, 1.0]))


def test_factor_capture_of_a_copied_factor():
    grid = np.stack(np.meshgrid(np.arange(4), np.arange(5), np.arange(3), indexing="ij"), -1).reshape(-1, 3)
    factors = np.repeat(grid, 100, 0)
    factors = np.concatenate([factors, np.zeros((len(factors), 1), np.int64)], 1)  # a constant factor
    rng = np.random.default_rng(0)
    codes = np.stack([factors[:, 1] + 0.01 * rng.standard_normal(len(factors)), rng.standard_normal(len(factors)),
                      factors[:, 0] + factors[:, 2] + 0.5 * rng.standard_normal(len(factors))], 1)
    capture = factor_capture(codes, factors)
    assert capture["gap"][1] == pytest.approx(1.0, abs=0.03) and capture["latent"][1] == 0
    assert capture["best_nmi"][1] == pytest.approx(1.0, abs=1e-9)  # z0 determines factor 1
    assert capture["gap"][3] is None and capture["latent"][3] is None  # constant: left out, as MIG does
    gaps = [g for g in capture["gap"] if g is not None]
    assert np.mean(gaps) == pytest.approx(mig(codes, factors)["mig"], abs=1e-12) == capture["mig"]
    assert all(capture["best_nmi"][k] >= capture["gap"][k] for k in range(3))


def test_report_gates_label_models_instead_of_verdicts(tmp_path):
    from probe.report import make_report
    from probe.report.schema import write_inputs
    from test_report import write_fake_workdir

    # no store on disk: the number of factors comes from the recorded store config (size-1 factors do not count)
    config = {"store": {"factor_sizes": [1, 10, 10, 10, 4, 4, 4]}, "retrain": {"train": {"steps": 3000}}}
    workdir = tmp_path / "wd"
    inputs = write_fake_workdir(workdir, robustness=False, seeds=(0, 1, 2, 3, 4), config=config, computed=False)
    for r in inputs["runs"]:
        active = {"beta-vae": 6, "ae": 2}.get(r["model"])
        if r["model"] == "beta-vae" and r["variant"] == "noise":  # noise alone collapses it
            r["metrics"]["mig"]["mig"], active = 0.01, 0
        if r["model"] == "pcl":  # no posterior variance: the active_units metric is skipped
            del r["metrics"]["active_units"]
        else:
            r["metrics"]["active_units"]["active_units"] = active
    write_inputs(workdir, inputs)
    out = make_report(workdir, tmp_path / "rep")
    md = out["markdown"].read_text()
    models = json.loads(out["summary"].read_text())["datasets"][0]["models"]
    assert models["beta-vae"]["label"] == "noise control failed"
    assert models["ae"]["label"] == "outside the paper's regime (2 of 6 latents active)"
    assert models["pcl"]["gates"]["regime"]["status"] == "not checked"
    # an inputs file without the report stage's factor capture (schema 1): pcl is not gated, and the reason says why
    reason = models["pcl"]["gates"]["regime"]["reason"]
    assert "its runs were not encoded: report_inputs.json has no 'factor_capture'" in reason
    verdict_rows = md.split("## Verdicts", 1)[1].split("\n## ", 1)[0]
    beta_row = next(line for line in verdict_rows.splitlines() if line.startswith("| dsprites | beta-vae |"))
    assert "relies" not in beta_row and "no drop larger" not in beta_row and "unaffected" not in beta_row
    # only pcl reaches the rule: a family of one, its p unchanged; the gated models show their p, untested
    assert models["pcl"]["family_size"] == 1 and models["pcl"]["p_holm"] == models["pcl"]["p"]
    assert models["beta-vae"]["p_holm"] is None and models["beta-vae"]["p"] < 0.05
    for key in ("hedges_g", "detectable_drop", "test"):
        assert key in models["pcl"]
    # the gates table lists active latents per seed, and the capture section says why it is missing
    assert "| dsprites | ae | 6 | 2, 2, 2, 2, 2 | 2, 2, 2, 2, 2 | 2, 2, 2, 2, 2 |" in md
    assert "— (no posterior variance)" in md
    assert "Not computed: report_inputs.json has no 'factor_capture' (written before schema 2" in md


def test_run_capture_reproduces_the_evaluated_mig(tmp_path):
    from conftest import toy_dsprites_restarts

    from probe.data import open_store
    from probe.metrics import evaluate_run
    from probe.pipeline.report_data import run_capture

    store, (run,) = toy_dsprites_restarts(tmp_path, steps=10, count=1)
    sample = {"seed": 3, "num_train": 200, "num_test": 50, "draw_batch_size": 16, "num_bins": 20}
    capture = run_capture(run, open_store(store.path), sample)
    evaluated = evaluate_run(run, store.path, metrics=["mig", "active_units"], seed=3, num_train=200, num_test=50)
    assert capture["mig"] == pytest.approx(evaluated["metrics"]["mig"]["mig"], abs=1e-9)
    assert capture["active"] == evaluated["metrics"]["active_units"]["active_units"]
    assert len(capture["gap"]) == 4 and all(0 <= z < 4 for z in capture["latent"])


def test_run_names_and_why_image_count():
    from probe.report.build import _run_name
    from probe.report.why import images_used

    assert _run_name("/w/restarts/abc/restart-seed3/run") == "restart-seed3"  # the job, not "run"
    assert _run_name("/w/runs/r0") == "r0"
    # the store cannot be read: the global-PCA record's count, not the requested 1500
    assert images_used({"stores": {}}, 1500, {"num_images": 96}) == 96
    assert images_used({"stores": {}}, 1500, {}) == "up to 1500"
