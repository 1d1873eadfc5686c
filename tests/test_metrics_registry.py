"""The metric list (probe.metrics.registry): the built-in specs, and a toy metric added in one file that
evaluation and the report pick up without any other edit."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

import probe.metrics
from probe.errors import UserError
from conftest import toy_encoder
from probe.metrics import Encoder, MetricSpec, ReportColumn, evaluate_encoder, register_metric
from probe.metrics import registry

PLUGIN_METRICS = Path(__file__).parent / "plugins" / "metrics"


@pytest.fixture
def own_registry(monkeypatch):
    """The registry restored after the test (registration is process-wide)."""
    registry.metric_specs()
    monkeypatch.setattr(registry, "_specs", dict(registry._specs))


@pytest.fixture
def toy_metric_file(monkeypatch):
    """tests/plugins/metrics/code_spread.py as one more module of probe.metrics, found by a fresh sweep."""
    monkeypatch.setattr(probe.metrics, "__path__", [*probe.metrics.__path__, str(PLUGIN_METRICS)])
    monkeypatch.setattr(registry, "_specs", {})
    monkeypatch.setattr(registry, "_discovered", False)
    yield
    sys.modules.pop("probe.metrics.code_spread", None)


def _encoder(images):
    return toy_encoder(images)["codes"]


def test_builtin_specs_give_the_metric_list_settings_and_report_columns():
    assert registry.default_metrics() == ("mig", "dci", "sap", "factor_vae_score", "beta_vae_score",
                                          "modularity_explicitness", "infomec", "gaussian_tc", "active_units", "mcc",
                                          "reconstruction")
    assert registry.fast_metrics() == ("mig", "sap", "modularity_explicitness", "infomec", "gaussian_tc",
                                       "active_units", "mcc", "reconstruction")
    settings = registry.default_settings()
    assert list(settings)[:5] == ["num_train", "num_test", "draw_batch_size", "num_bins", "dci_predictor"]
    assert list(settings)[-3:] == ["encode_batch_size", "n_jobs", "device"]
    assert settings["num_train"] == 10000 and settings["factor_vae_batch_size"] == 64
    assert registry.small_settings() == {
        "num_train": 2000, "num_test": 1000, "dci_n_estimators": 20, "factor_vae_num_variance_estimate": 2000,
        "factor_vae_num_train": 1000, "factor_vae_num_eval": 500, "beta_vae_num_train": 1000, "beta_vae_num_eval": 500,
        "num_reconstruction": 1000}
    assert [(c.key, c.metric, c.field, c.higher_is_better) for c in registry.report_columns()] == [
        ("mig", "mig", "mig", True), ("dci_d", "dci", "disentanglement", True),
        ("factor_vae", "factor_vae_score", "eval_accuracy", True), ("sap", "sap", "sap", True),
        ("infom", "infomec", "infom", True), ("infoe", "infomec", "infoe", True), ("infoc", "infomec", "infoc", True),
        ("recon_bce", "reconstruction", "bce", False), ("recon_mse", "reconstruction", "mse", False)]


def test_a_metric_in_one_file_reaches_evaluation_and_the_report(toy_metric_file, make_toy_store, tmp_path):
    from probe.report import make_report
    from probe.report.inputs import tidy_rows

    assert registry.default_metrics()[-1] == "code_spread" and "code_spread" in registry.fast_metrics()
    assert registry.small_settings()["spread_scale"] == 2.0
    store = make_toy_store(factor_sizes=(3, 4, 5, 5), resolution=16)
    sizes = {"num_train": 300, "num_test": 100}
    out = evaluate_encoder(store, Encoder(_encoder), metrics=["mig", "code_spread"], seed=0, settings=sizes)
    spread = out["metrics"]["code_spread"]["spread"]
    assert spread > 0 and out["settings"]["metrics"] == ["mig", "code_spread"]
    assert list(out["settings"])[list(out["settings"]).index("spread_scale") + 1] == "encode_batch_size"
    doubled = evaluate_encoder(store, Encoder(_encoder), metrics="fast", seed=0, settings={**sizes, "spread_scale": 2})
    assert doubled["metrics"]["code_spread"]["spread"] == pytest.approx(2 * spread)

    # the report: runs with the toy metric get its table, its runs.csv rows and its summary numbers
    runs = [{"model": "toy", "variant": variant, "seed": seed, "run_dir": None,
             "metrics": {"mig": out["metrics"]["mig"], "code_spread": {"spread": 0.3 + 0.1 * seed}}}
            for variant in ("orig", "mod", "noise") for seed in (0, 1)]
    workdir = tmp_path / "wd"
    workdir.mkdir()
    (workdir / "report_inputs.json").write_text(json.dumps({"dataset": "toy", "runs": runs}))
    report = make_report(workdir, tmp_path / "report")
    markdown = report["markdown"].read_text()
    table = markdown.split("### Code spread", 1)[1]
    assert "| toy | 0.35 ± 0.07 | 0.35 ± 0.07 | 0.35 ± 0.07 |" in table  # mean ± std of seeds 0 and 1
    with open(report["csv"], newline="") as f:
        spread_rows = [r for r in csv.DictReader(f) if r["metric"] == "spread"]
    assert sorted(float(r["value"]) for r in spread_rows) == pytest.approx([0.3, 0.3, 0.3, 0.4, 0.4, 0.4])
    summary = json.loads(report["summary"].read_text())
    assert summary["tables"]["spread"]["label"] == "Code spread"
    assert {r["metric"] for r in tidy_rows({"runs": runs})} == {"mig", "spread"}


def test_register_metric_skips_what_the_encoder_lacks(own_registry, make_toy_store):
    register_metric(MetricSpec("needs_discrete", lambda context: {"value": 1.0}, needs=("discrete",)))
    store = make_toy_store(factor_sizes=(3, 4, 5, 5), resolution=16)
    out = evaluate_encoder(store, Encoder(_encoder), metrics=["mig", "needs_discrete"],
                           settings={"num_train": 300, "num_test": 100})
    assert out["skipped"] == {"needs_discrete": "the model has no discrete codes"} and "mig" in out["metrics"]
    assert "needs_discrete" not in out["settings"]["timings_s"]


@pytest.mark.parametrize("spec, message", [
    (MetricSpec("mig", lambda c: {}), "registered already"),
    (MetricSpec("fast", lambda c: {}), "invalid name"),
    (MetricSpec("toy", lambda c: {}, settings={"num_train": 5}), "setting 'num_train' is taken"),
    (MetricSpec("toy", lambda c: {}, settings={"toy_n": 5}, small={"toy_m": 1}), "not one of its settings"),
    (MetricSpec("toy", lambda c: {}, needs=("gpu",)), "unknown requirement 'gpu'"),
    (MetricSpec("toy", lambda c: {}, report=(ReportColumn("mig", "MIG again", "x"),)), "report key 'mig' is taken"),
])
def test_register_metric_refuses_clashes(own_registry, spec, message):
    with pytest.raises(UserError, match=message):
        register_metric(spec)
    assert "toy" not in registry.default_metrics()
