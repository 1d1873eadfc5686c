"""probe.report: statistics on constructed inputs, and a full report from a realistic fake workdir whose
report_inputs.json gets the sections the pipeline's report stage computes (probe.pipeline.report_data)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from click.testing import CliRunner

from probe.errors import UserError
from probe.report import compare, make_report, verdict, welch_t_test
from probe.report.schema import inputs_path, write_inputs
from probe.report.stats import bootstrap_ci

# -- statistics ------------------------------------------------------------------------------------


def test_welch_matches_hand_formula_and_scipy():
    from scipy.stats import ttest_ind

    a = np.array([0.61, 0.55, 0.70, 0.64])
    b = np.array([0.30, 0.41, 0.22])
    res = welch_t_test(a, b)
    va, vb = a.var(ddof=1) / 4, b.var(ddof=1) / 3
    t = (b.mean() - a.mean()) / np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 2)
    assert res["t"] == pytest.approx(t)
    assert res["df"] == pytest.approx(df)
    assert res["p"] == pytest.approx(ttest_ind(b, a, equal_var=False).pvalue)


def test_known_effect_gives_small_p_and_ci_below_zero():
    rng = np.random.default_rng(0)
    orig = 0.6 + 0.03 * rng.standard_normal(5)
    mod = 0.2 + 0.03 * rng.standard_normal(5)
    c = compare(orig, mod)
    assert c["p"] < 1e-4
    assert c["ci"][1] < 0 and c["ci"][0] < c["delta"] < c["ci"][1]
    assert c["delta"] == pytest.approx(mod.mean() - orig.mean())


def test_no_effect_gives_large_p_and_ci_covering_zero():
    rng = np.random.default_rng(1)
    base = 0.4 + 0.05 * rng.standard_normal(8)
    other = base[::-1] + 1e-3  # same distribution, tiny shift
    c = compare(base, other)
    assert c["p"] > 0.5
    assert c["ci"][0] < 0 < c["ci"][1]


def test_bootstrap_ci_is_seeded_and_shrinks_with_n():
    rng = np.random.default_rng(2)
    a3, b3 = rng.normal(0, 1, 3), rng.normal(0, 1, 3)
    a30, b30 = rng.normal(0, 1, 30), rng.normal(0, 1, 30)
    assert bootstrap_ci(a3, b3, seed=5) == bootstrap_ci(a3, b3, seed=5)
    w3 = np.diff(bootstrap_ci(a3, b3))[0]
    w30 = np.diff(bootstrap_ci(a30, b30))[0]
    assert w30 < w3


def test_degenerate_groups():
    assert math.isnan(welch_t_test([0.5], [0.1, 0.2])["p"])
    assert welch_t_test([0.5, 0.5], [0.5, 0.5])["p"] == 1.0
    assert welch_t_test([0.5, 0.5], [0.2, 0.2])["p"] == 0.0


def test_verdict_rule():
    orig = [0.60, 0.62, 0.58, 0.61, 0.59]
    mod = [0.20, 0.22, 0.18, 0.21, 0.19]
    small_noise = [0.57, 0.60, 0.58, 0.59, 0.56]
    assert verdict(orig, mod, small_noise)["label"] == "relies on local structure"
    # the noise control drops as much: not attributable to the manipulation
    big_noise = [0.10, 0.12, 0.11, 0.09, 0.10]
    assert verdict(orig, mod, big_noise)["label"].startswith("inconclusive")
    # no noise runs: clause waived, and the reason says so
    v = verdict(orig, mod, None)
    assert v["label"] == "relies on local structure" and "waived" in v["reason"]
    # unchanged scores, tight: a drop larger than the margin is ruled out (the label says no more than that)
    assert verdict(orig, [0.61, 0.60, 0.59, 0.62, 0.58], small_noise)["label"] == "no drop larger than 25 %"
    # noisy, 3 seeds, moderate drop: inconclusive
    v = verdict([0.6, 0.2, 0.4], [0.3, 0.5, 0.1], [0.5, 0.4, 0.3])
    assert v["label"] == "inconclusive at n=3 seeds"
    assert verdict([0.6], [0.1], [0.5])["label"] == "inconclusive at n=1 seeds"


# -- a realistic workdir ------------------------------------------------------------------------------

MODELS = {  # model -> (hyperparameter, mean MIG per variant)
    "beta-vae": (("beta", 8), {"orig": 0.40, "mod": 0.08, "noise": 0.36}),
    "pcl": ((None, None), {"orig": 0.25, "mod": 0.25, "noise": 0.24}),
    "ae": ((None, None), {"orig": 0.10, "mod": 0.09, "noise": 0.10}),
}


def _metrics(mig: float, rng, active: int = 4) -> dict:
    """A metrics dict of the evaluate_run shape (INTERFACES.md) around a given MIG."""
    j = lambda s: float(np.clip(s + 0.02 * rng.standard_normal(), 0, 1))  # noqa: E731
    return {
        "mig": {"mig": j(mig)},
        "dci": {"disentanglement": j(mig + 0.2), "completeness": j(mig + 0.1), "informativeness_train": 0.9,
                "informativeness_test": 0.85},
        "sap": {"sap": j(mig / 4)},
        "factor_vae_score": {"train_accuracy": j(mig + 0.4), "eval_accuracy": j(mig + 0.4), "num_active_dims": active},
        "infomec": {"infom": j(mig + 0.3), "infoe": 0.8, "infoc": j(mig + 0.2)},
        "active_units": {"active_units": active, "mean_variance": [0.01] * active + [1.0] * (4 - active)},
        "reconstruction": {"bce": 30 + 5 * rng.random(), "mse": 0.01, "psnr": 20.0},
    }


def write_fake_workdir(root, *, store_path=None, restart_dirs=None, robustness=True, seeds=(0, 1, 2), preset="quick",
                       config=None, computed=True) -> dict:
    """A workdir with report_inputs.json around constructed metrics. ``computed``: add what the report stage computes
    from the stores and run folders named (``add_report_data``; runs without a folder are recorded as not encoded),
    as the pipeline does; without it, a file of schema 1."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    runs = []
    for model, ((hname, hval), means) in MODELS.items():
        for variant, mean in means.items():
            for seed in seeds:
                run_dir = root / "retrain" / f"{model}-{variant}-{seed}"
                run_dir.mkdir(parents=True)
                steps = np.arange(0, 1000, 100)
                curve = run_dir / "metrics.jsonl"
                curve.write_text("".join(json.dumps({"step": int(s), "loss": float(100 * np.exp(-s / 300) + 30 + rng.random()),
                                                     "kl": 3.0}) + "\n" for s in steps))
                runs.append({"model": model, "variant": variant, "seed": seed, "run_dir": str(run_dir),
                             "hyperparameter": {"name": hname, "value": hval},
                             "metrics": _metrics(mean, rng), "curve": str(curve)})
    rob = []
    if robustness:
        for scale in (0.5, 1.0, 2.0, 4.0):
            for variant in ("orig", "mod"):
                for seed in seeds:
                    active = 4 if scale < 4.0 or seed == 0 else 2  # two over-pruned at the largest scale per variant
                    base = MODELS["beta-vae"][1][variant]
                    rob.append({"model": "beta-vae", "variant": variant, "seed": seed, "scale": scale,
                                "run_dir": str(root / "rob" / f"{scale}-{variant}-{seed}"),
                                "hyperparameter": {"name": "beta", "value": 8 * scale},
                                "metrics": _metrics(base + 0.02 * scale, rng, active=active), "curve": None})
    losses = root / "manipulate" / "losses.jsonl"
    losses.parent.mkdir(parents=True)
    losses.write_text("".join(json.dumps({"step": s, "loss_ent": 50 - s / 100, "loss_dis": 50 + s / 200}) + "\n"
                              for s in range(0, 1000, 50)))
    restarts = []
    for i, (sel, mig) in enumerate((("entangled", 0.02), (None, 0.15), ("disentangled", 0.45))):
        run_dir = (restart_dirs or {}).get(sel) or root / "restarts" / f"r{i}"
        restarts.append({"run_dir": str(run_dir), "seed": i, "mig": mig, "selected": sel})
    inputs = {
        "pipeline": "modify-dsprites", "preset": preset, "dataset": "dsprites", "workdir": str(root),
        "provenance": {"code_version": {"probe_version": "0.1.0", "git_commit": "abc123", "source_digest": "f" * 64},
                       "environment": {"python": "3.11", "torch": "2.13.0", "cuda": None},
                       "started": "2025-01-01T00:00:00", "wall_time_s": 123.4, "config": config or {"restarts": 3}},
        "stores": {"orig": {"path": str(store_path or root / "missing.zarr"), "digest": "a" * 64},
                   "mod": {"path": str(root / "mod.zarr"), "digest": "b" * 64, "epsilon": 0.1},
                   "noise": {"path": str(root / "noise.zarr"), "digest": "c" * 64, "epsilon": 0.1}},
        "restarts": restarts,
        "manipulation": {"dir": str(root / "manipulate"), "losses": str(losses), "figure4": None},
        "runs": runs,
        "robustness": rob,
        "linear_pca": None,
    }
    if computed:
        from probe.pipeline.report_data import add_report_data

        inputs = add_report_data(inputs, root=root)
    write_inputs(root, inputs)
    return inputs


def test_report_with_trained_restarts(tmp_path, toy_restarts_20):
    import matplotlib.pyplot as plt

    from probe.report.figures import read_tiles

    store, runs = toy_restarts_20  # a small store and two 20-step β-VAE runs (stand-ins for the selected restarts)
    workdir = tmp_path / "wd"
    inputs = write_fake_workdir(workdir, store_path=store.path, robustness=False,
                                restart_dirs={"entangled": runs[0], "disentangled": runs[1]})
    fig4 = workdir / "figure4.png"
    plt.imsave(fig4, np.random.default_rng(0).random((40, 120)))
    inputs["manipulation"]["figure4"] = str(fig4)
    write_inputs(workdir, inputs)
    latents = inputs["restart_latents"]
    assert [p["selected"] for p in latents["panels"]] == ["disentangled", "entangled"]
    for panel in latents["panels"]:  # the report stage decoded each traversal into a PNG of 7 × 7 tiles of 16 px
        assert read_tiles(panel["traversal_png"], 7).shape == (7, 7, 16, 16, 1)
    out = make_report(workdir, tmp_path / "rep")
    names = {p.name for p in out["figures"]}
    assert {"nmi_dsprites.png", "traversals_dsprites.png", "figure4_dsprites.png"} <= names
    summary = json.loads(out["summary"].read_text())
    nmi = list(summary["nmi"]["dsprites"].values())
    assert len(nmi) == 2
    for matrix in nmi:
        m = np.asarray(matrix)
        assert m.shape == (4, 4)  # factors × latents (num_latent defaults to the number of factors)
        assert np.all(m >= 0) and np.all(m <= 1 + 1e-9)
    for path in out["figures"]:
        if path.name.startswith("figure4"):
            assert path.read_bytes() == fig4.read_bytes()  # copied as is
            continue
        h, w = _png_size(path)[:2]
        assert h > 100 and w > 100, path
    assert "could not be loaded" not in out["markdown"].read_text()


def _png_size(path):
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    return img.shape


def test_report_from_fake_workdir(tmp_path, make_toy_store):
    store = make_toy_store()
    workdir = tmp_path / "wd"
    write_fake_workdir(workdir, store_path=store.path)
    out = make_report(workdir, tmp_path / "rep")
    md = out["markdown"].read_text()
    html = out["html"].read_text()

    # Table 1 style: one row per model, all three variants as columns
    mig_table = md.split("### MIG\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert mig_table[0] == "| model | dsprites orig | dsprites mod | dsprites noise |"
    body = mig_table[2:]
    assert len(body) == len(MODELS)
    assert body[0].startswith("| beta-vae (beta=8) |")
    for row in body:
        assert len(re.findall(r"\d\.\d\d ± \d\.\d\d", row)) == 3
    for label in ("DCI-D", "FactorVAE score", "SAP", "InfoM", "InfoE", "InfoC", "Reconstruction (BCE"):
        assert f"### {label}" in md
    assert "### Modularity" not in md  # absent metrics are not shown

    # verdicts: the constructed effect is detected, the rule is stated
    summary = json.loads(out["summary"].read_text())
    labels = {m: v["label"] for m, v in summary["datasets"][0]["models"].items()}
    assert labels["beta-vae"] == "relies on local structure"
    assert labels["pcl"] != "relies on local structure"
    assert "Welch" in md and "bootstrap 95% CI" in md and "relies on local structure" in md

    # robustness: over-pruned runs (2 active units < 4 factors) dropped and counted
    rob = summary["robustness"]["dsprites"]
    assert rob["num_factors"] == 4
    assert rob["counts"]["beta-vae/orig"] == {"kept": 10, "dropped": 2, "unknown_active": 0}

    # restarts unloadable here (no run dirs): stated, not a crash
    assert "could not be loaded" in md
    assert "No linear-PCA result" in md

    # figures: every PNG renders with a sane size and is embedded in the HTML
    names = {p.name for p in out["figures"]}
    assert {"bars_dsprites.png", "linesearch_dsprites.png", "curves_dsprites.png",
            "manipulation_losses_dsprites.png"} <= names
    for path in out["figures"]:
        h, w = _png_size(path)[:2]
        assert h > 100 and w > 150, path
        assert f"figures/{path.name}" in md
    assert html.count("data:image/png;base64,") == len(out["figures"])
    assert "<table>" in html and "figures/" not in html

    # provenance
    assert "abc123" in md and "123 s" in md and "ε=0.1" in md


def test_report_missing_pieces_and_rerun(tmp_path):
    workdir = tmp_path / "wd"
    inputs = write_fake_workdir(workdir, robustness=False)
    inputs["restarts"] = []
    inputs["manipulation"] = None
    inputs["runs"] = [r for r in inputs["runs"] if r["variant"] != "noise"]
    write_inputs(workdir, inputs)
    out = make_report(workdir)
    md = out["markdown"].read_text()
    assert out["markdown"].parent == workdir / "report"
    assert "no robustness runs" in md and "No restarts" in md and "No manipulation" in md
    assert "number of factors is unknown" not in md  # no robustness section body at all
    assert "no runs" in md  # orig→noise column
    # a second run replaces the earlier report
    make_report(workdir)
    assert (workdir / "report" / "report.md").exists()


def test_report_user_errors(tmp_path):
    with pytest.raises(UserError, match="report_inputs.json"):
        make_report(tmp_path)
    inputs_path(tmp_path).write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        make_report(tmp_path)
    inputs_path(tmp_path).write_text(json.dumps({"runs": [{"model": "x", "variant": "bogus"}]}))
    with pytest.raises(UserError, match="variant"):
        make_report(tmp_path)
    wd = tmp_path / "wd"
    write_fake_workdir(wd, robustness=False)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "precious.txt").write_text("keep")
    with pytest.raises(UserError, match="not empty"):
        make_report(wd, busy)
    with pytest.raises(UserError, match="higher is better"):
        make_report(wd, tmp_path / "r2", primary_metric="recon_bce")
    assert (busy / "precious.txt").read_text() == "keep"


def test_report_cli(tmp_path):
    from probe.cli import cli

    wd = tmp_path / "wd"
    write_fake_workdir(wd, robustness=False)
    res = CliRunner().invoke(cli, ["report", str(wd), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r" / "report.html").exists()
    assert "could not be encoded" in (tmp_path / "r" / "report.md").read_text()  # the fake runs have no folders


def test_untrained_runs_rule():
    from probe.pipeline.report_data import mean_image_mse
    from probe.report.inputs import untrained_runs

    images = np.stack([np.zeros((4, 4, 1), np.uint8), np.full((4, 4, 1), 255, np.uint8)])
    assert mean_image_mse(images) == pytest.approx(0.25)  # mean image 0.5 everywhere
    assert mean_image_mse(np.full((3, 2, 2, 3), 0.7)) == pytest.approx(0.0, abs=1e-12)

    def run(model, variant, mse):
        return {"model": model, "variant": variant, "seed": 0, "metrics": {"reconstruction": {"mse": mse}}}

    runs = [run("ae", "orig", 0.01), run("tripod", "mod", 0.13), run("tripod", "orig", 0.11),
            run("pcl", "orig", None), run("ae", "noise", 0.5)]
    flagged = untrained_runs(runs, {"orig": 0.13, "mod": 0.14})  # no noise baseline: noise runs not judged
    assert [(f["model"], f["variant"]) for f in flagged] == [("tripod", "mod")]  # 0.13 >= 0.9·0.14; 0.11 < 0.117


def test_report_flags_a_model_that_did_not_train(tmp_path, make_toy_store):
    from probe.data import open_store
    from probe.pipeline.report_data import mean_image_mse

    store = make_toy_store()
    workdir = tmp_path / "wd"
    write_fake_workdir(workdir, store_path=store.path)
    inputs = json.loads(inputs_path(workdir).read_text())
    baseline = mean_image_mse(open_store(store.path).load_numpy())
    assert inputs["stores"]["orig"]["mean_image_mse"] == pytest.approx(baseline)  # the stage's, all 96 images
    for r in inputs["runs"]:  # beta-vae's orig runs reconstruct no better than the mean image
        if r["model"] == "beta-vae" and r["variant"] == "orig":
            r["metrics"]["reconstruction"]["mse"] = baseline
    inputs_path(workdir).write_text(json.dumps(inputs))
    out = make_report(workdir, tmp_path / "rep")
    labels = {m: v["label"] for m, v in json.loads(out["summary"].read_text())["datasets"][0]["models"].items()}
    assert labels["beta-vae"] == "did not train"  # not "relies on local structure", as without the guard
    assert labels["pcl"] != "did not train"
    assert "did not train" in out["markdown"].read_text()


# -- tidy CSV, numeric summary, Table 1 figure, alignment, manipulation coverage ----------------------


def _add_alignment_and_coverage(workdir) -> dict:
    """Constructed alignment numbers: beta-vae's mod runs sit near the entangled restart, PCL's do not."""
    path = inputs_path(workdir)
    inputs = json.loads(path.read_text())
    for r in inputs["runs"]:
        towards_ent = r["model"] == "beta-vae" and r["variant"] == "mod"
        ent, dis = (0.9, 0.4) if towards_ent else (0.5, 0.8)
        r["alignment"] = {"entangled": {"best_match_corr": ent + 0.01 * r["seed"], "best_match_nmi": ent - 0.3,
                                        "linear_r2": 0.7, "members": ["x"]},
                          "disentangled": {"best_match_corr": dis, "best_match_nmi": dis - 0.3, "linear_r2": 0.6,
                                           "members": ["y"]}}
        if r["model"] == "beta-vae":  # the global PCA's target (evaluate since session 37): mod runs fall into it
            r["alignment"]["global_pca"] = {"span_r2": 0.88 if towards_ent else 0.4, "mean_block_r2": 0.85 if
                                            towards_ent else 0.3 + 0.01 * r["seed"], "block_r2": [0.3], "blocks": [[0]]}
    inputs["runs"][-1]["alignment"] = None  # older runs may lack it
    # two beta-vae seeds on the random-ψ control's m, as far from the entangled restart as orig
    random_runs = [{**r, "variant": "mod-random", "run_dir": f"{r['run_dir']}-random",
                    "alignment": {t: {**r["alignment"][t], "best_match_corr": c}
                                  for t, c in (("entangled", 0.55), ("disentangled", 0.75))}}
                   for r in inputs["runs"] if r["model"] == "beta-vae" and r["variant"] == "mod"][:2]
    inputs["random_m"] = {"store": {"path": "/w/mod-random.zarr", "digest": "d" * 64, "epsilon": 0.175},
                          "runs": random_runs}
    inputs["manipulation"]["coverage"] = {
        "threshold": 0.05, "fraction_small": 0.25, "fraction_covered": 0.75, "num_images": 737280,
        "linf_quantiles": {"p05": 0.01, "p50": 0.08, "p95": 0.1},
        "variation": {"mean_pairwise_rms": 0.031, "rms_mean": 0.02}}
    path.write_text(json.dumps(inputs))
    return inputs


def test_runs_csv_summary_numbers_table1_alignment_coverage(tmp_path):
    import csv

    from probe.report.inputs import TIDY_COLUMNS, metric_columns
    from probe.report.paper import TABLE1_MIG

    workdir = tmp_path / "wd"
    write_fake_workdir(workdir)
    inputs = _add_alignment_and_coverage(workdir)
    out = make_report(workdir, tmp_path / "rep")
    md = out["markdown"].read_text()

    # runs.csv: header + one row per run × metric present (+ alignment numbers where present)
    with open(out["csv"], newline="") as f:
        rows = list(csv.DictReader(f))
        f.seek(0)
        assert next(csv.reader(f)) == list(TIDY_COLUMNS)
    keys = list(metric_columns())
    retrain = [r for r in rows if r["kind"] == "retrain"]
    robust = [r for r in rows if r["kind"] == "robustness"]
    assert {r["metric"] for r in retrain if not r["metric"].startswith("alignment_")} == set(keys)  # all present
    retrained = inputs["runs"] + inputs["random_m"]["runs"]  # the runs on the random m are retrain rows too
    n_aligned = sum(1 for r in retrained if r.get("alignment"))
    n_pca = sum(1 for r in retrained if (r.get("alignment") or {}).get("global_pca"))
    assert n_pca and len(retrain) == len(retrained) * len(keys) + 6 * n_aligned + 2 * n_pca  # 2 restarts × 3, PCA 2
    pca_rows = [float(r["value"]) for r in retrain if r["metric"] == "alignment_global_pca_mean_block_r2"
                and r["model"] == "beta-vae" and r["variant"] == "orig"]
    assert sorted(pca_rows) == pytest.approx([0.30, 0.31, 0.32])
    assert len(robust) == len(inputs["robustness"]) * len(keys)
    assert {r["scale"] for r in robust} == {"0.5", "1.0", "2.0", "4.0"} and {r["scale"] for r in retrain} == {""}
    first_beta = next(r for r in retrain if r["model"] == "beta-vae" and r["metric"] == "mig")
    assert first_beta["hyperparameter"] == "beta" and float(first_beta["hyperparameter_value"]) == 8
    assert first_beta["dataset"] == "dsprites" and first_beta["seed"] == "0"
    assert float(first_beta["value"]) == pytest.approx(
        next(r for r in inputs["runs"] if r["model"] == "beta-vae" and r["variant"] == "orig")["metrics"]["mig"]["mig"])
    assert any(r["metric"] == "alignment_entangled_best_match_corr" for r in retrain)
    nmi = [float(r["value"]) for r in retrain if r["metric"] == "alignment_entangled_best_match_nmi"
           and r["model"] == "beta-vae" and r["variant"] == "mod"]
    assert nmi and all(v == pytest.approx(0.6) for v in nmi)

    # summary.json: numbers, not strings
    summary = json.loads(out["summary"].read_text())
    cell = summary["tables"]["mig"]["models"]["beta-vae"]["datasets"]["dsprites"]["orig"]
    assert cell["n"] == 3 and len(cell["values"]) == 3 and cell["seeds"] == [0, 1, 2]
    assert cell["mean"] == pytest.approx(np.mean(cell["values"]))
    assert cell["std"] == pytest.approx(np.std(cell["values"], ddof=1))
    assert summary["tables"]["mig"]["models"]["beta-vae"]["label"] == "beta-vae (beta=8)"
    assert summary["manipulation"]["dsprites"]["coverage"]["fraction_covered"] == 0.75

    # Table 1 figure with the paper's values and the setting caveat
    assert "figures/table1_dsprites.png" in md
    assert "300k" in md and "64×64" in md and "preset `quick`" in md
    assert TABLE1_MIG["dsprites"]["beta-vae"]["orig"] == (0.23, 0.08)
    h, w = _png_size(tmp_path / "rep" / "figures" / "table1_dsprites.png")[:2]
    assert h > 100 and w > 150

    # alignment: table per model × variant; beta-vae mod moves towards the entangled restart
    assert "## Alignment with the selected restarts" in md and "PCL should not" in md
    al = summary["alignment"]["dsprites"]
    assert al["beta-vae"]["mod"]["difference"]["mean"] == pytest.approx(0.4 - 0.91, abs=1e-9)
    assert al["pcl"]["mod"]["difference"]["mean"] == pytest.approx(0.8 - 0.51)
    assert al["ae"]["noise"]["difference"]["n"] == 2  # the run without alignment is left out
    assert al["beta-vae"]["mod"]["entangled_nmi"]["mean"] == pytest.approx(0.6)
    # the runs on the random m get rows of their own (the control for the move towards the entangled restart)
    assert al["beta-vae"]["mod-random"]["difference"]["mean"] == pytest.approx(0.75 - 0.55)
    assert al["beta-vae"]["mod-random"]["difference"]["n"] == 2 and "mod-random" not in al["pcl"]
    assert "| beta-vae | mod-random |" in md
    assert "best-match NMI to entangled" in md
    assert al["beta-vae"]["mod"]["pca_block_r2"]["mean"] == pytest.approx(0.85)
    assert al["beta-vae"]["orig"]["pca_span_r2"]["values"] == pytest.approx([0.4] * 3)
    assert al["pcl"]["mod"]["pca_span_r2"]["n"] == 0      # a run without the PCA target reads —, not 0
    assert "global PCA: span R²" in md and "Theorem 1" in md
    assert "figures/alignment_dsprites.png" in md

    # manipulation coverage line
    assert "m(w) is non-zero (|m|∞ ≥ 0.05) on 75.0 % of the images (737280 images)" in md
    assert "median |m|∞ 0.080" in md and "mean pairwise rms 0.031" in md


def test_report_without_alignment_coverage_or_mig(tmp_path):
    workdir = tmp_path / "wd"
    write_fake_workdir(workdir, robustness=False)
    out = make_report(workdir, tmp_path / "rep", primary_metric="dci_d")
    md = out["markdown"].read_text()
    assert "Alignment with the selected restarts" not in md
    assert "is non-zero" not in md
    assert "figures/table1_dsprites.png" in md and "Zietlow et al. 2021 (mean" not in md
    assert "300k" not in md  # no paper markers for a metric Table 1 does not report
    assert "alignment" not in json.loads(out["summary"].read_text())


def test_coverage_line_prints_what_exists():
    from probe.report.build import _coverage_line

    assert _coverage_line({"threshold": 0.05, "fraction_small": 0.9}) == \
        "m(w) is non-zero (|m|∞ ≥ 0.05) on 10.0 % of the images."
    line = _coverage_line({"linf_quantiles": {"p50": 0.2}, "variation": {"rms_mean": None, "mean_pairwise_rms": 0.5}})
    assert line == "median |m|∞ 0.200; variation across the factor space: mean pairwise rms 0.5."
    assert "no known keys" in _coverage_line({"something_else": 1})
    # estimated on a sample of the store's images (probe.perturb.manipulation.COVERAGE_SAMPLE): the line says so
    assert _coverage_line({"threshold": 0.05, "fraction_covered": 0.25, "num_images": 8192, "of_images": 64000}) == \
        "m(w) is non-zero (|m|∞ ≥ 0.05) on 25.0 % of the images (a random sample of 8192 of the 64000 images)."
    assert _coverage_line({"threshold": 0.05, "fraction_covered": 0.25, "num_images": 96, "of_images": 96}) == \
        "m(w) is non-zero (|m|∞ ≥ 0.05) on 25.0 % of the images (96 images)."


def test_figures_with_many_models_stay_readable(tmp_path):
    # 14 models once gave a 3,787 px row of curve panels and colliding bar labels: both now wrap into rows
    import matplotlib.image as mpimg

    from probe.report import figures as fig

    models = [f"model-{i}" for i in range(14)]
    curves = {m: [(v, [0.0, 1.0], [1.0, 0.5]) for v in ("orig", "mod", "noise")] for m in models}
    width = mpimg.imread(fig.training_curves(curves, tmp_path / "curves.png")).shape[1]
    assert width <= 1600
    groups = {(m, v): [0.1, 0.2] for m in models for v in ("orig", "mod", "noise")}
    bars = mpimg.imread(fig.grouped_bars([("MIG", groups), ("DCI-D", groups)], models, tmp_path / "bars.png"))
    assert bars.shape[1] <= 1700 and bars.shape[0] >= 500  # one panel a row: two rows of ~290 px


def test_smoke_and_too_short_reports_withhold_verdicts(tmp_path, make_toy_store):
    store = make_toy_store()
    write_fake_workdir(tmp_path / "smoke", store_path=store.path, robustness=False, preset="smoke")
    out = make_report(tmp_path / "smoke", tmp_path / "smoke-rep")
    md = out["markdown"].read_text()
    # the first lines after the title say it is a smoke run; the constructed effect gets no verdict
    assert md.split("\n\n")[1].startswith("**Smoke run: these are not results.**")
    labels = {m: v["label"] for m, v in json.loads(out["summary"].read_text())["datasets"][0]["models"].items()}
    assert set(labels.values()) == {"withheld"}
    assert "**relies on local structure** (" not in md and "**withheld** (smoke run" in md

    # quick preset, but one model trained fewer than MIN_VERDICT_STEPS steps: only its verdict is withheld
    config = {"retrain": {"train": {"steps": 2000}, "model_train": {"pcl": {"steps": 100}}}}
    write_fake_workdir(tmp_path / "short", store_path=store.path, robustness=False, config=config)
    out = make_report(tmp_path / "short", tmp_path / "short-rep")
    md = out["markdown"].read_text()
    labels = {m: v["label"] for m, v in json.loads(out["summary"].read_text())["datasets"][0]["models"].items()}
    assert labels["pcl"] == "withheld" and labels["beta-vae"] == "relies on local structure"
    assert "**Too short to mean anything:** on dsprites, pcl (100 steps)" in md
    assert "training steps beta-vae 2000, pcl 100" in md


def test_step_costs_record_the_host_speed_beside_the_wall_time(tmp_path):
    """The report stage reads each retrained run's logged intervals (``report_data.step_costs``); the report's
    provenance states them, or why it cannot."""
    from probe.pipeline.report_data import step_costs
    from probe.report.build import step_costs_text

    runs = []
    for i, (model, seconds_per_step) in enumerate((("beta-vae", 0.03), ("beta-vae", 0.05), ("pcl", 0.01))):
        run_dir = tmp_path / f"run{i}"
        run_dir.mkdir()
        (run_dir / "metrics.jsonl").write_text("".join(
            json.dumps({"step": s, "wall_time_s": s * seconds_per_step}) + "\n" for s in range(0, 1100, 100)))
        runs.append({"model": model, "variant": "orig", "seed": i, "run_dir": str(run_dir)})
    runs.append({"model": "ae", "variant": "orig", "seed": 0, "run_dir": str(tmp_path / "never-trained")})
    costs = step_costs(runs, tmp_path)
    assert sorted(costs) == ["beta-vae", "pcl"]  # the AE logged nothing
    assert costs["beta-vae"]["intervals"] == 20 and costs["beta-vae"]["runs"] == 2
    assert costs["beta-vae"]["median_s"] == pytest.approx(0.04)
    assert costs["beta-vae"]["fastest_decile_s"] == pytest.approx(0.03)
    assert costs["pcl"]["median_s"] == pytest.approx(0.01)
    text = step_costs_text(costs)
    assert "beta-vae 0.040 s (0.030)" in text and "pcl 0.010 s (0.010)" in text
    assert "schema 4" in step_costs_text(None)
    assert "no retrained run" in step_costs_text({})
