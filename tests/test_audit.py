"""`probe audit` (issue 9): the example plug-in through the smoke audit (module:Class in-process, entry point in
a subprocess), broken plug-ins (exit 2 naming the plug-in and the problem, cache intact), the verdict files, and
the digest design (shared with modify-dsprites; per-plug-in stages; an edited plug-in gets new runs).

One workdir is shared by the module: the first audit builds the stores and the reference runs; every later
audit must reuse them."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path

import pytest

from probe.cli import main as probe_main
from probe.pipeline.audit import REFERENCE_STAGES as REFERENCE_MODULES
from probe.pipeline.audit import plugin_slug
from probe.pipeline.engine import stage_digests
from probe.pipeline.workdir import STAGE_FILE, final_dir
from probe.report.schema import load_inputs
from conftest import run_probe

pytestmark = pytest.mark.slow  # every audit test shares one audited workdir (module fixture, ~30 s)
REFERENCE_STAGES = [m.NAME for m in REFERENCE_MODULES]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "probe_example_plugin"
TESTS = Path(__file__).resolve().parent
GOOD = "probe_example_plugin.wae:WAEMMD"
SYNC = ("--scheduler", "synchronous", "--quiet")


@pytest.fixture(scope="module")
def plugin_paths():
    added = [str(EXAMPLE), str(TESTS), str(TESTS / "plugins")]
    for p in added:
        sys.path.insert(0, p)
    yield
    for p in added:
        sys.path.remove(p)




def _snapshot(workdir: Path) -> dict:
    """Every complete stage folder with its stage.json's mtime."""
    return {str(p.parent.relative_to(workdir)): p.stat().st_mtime_ns for p in workdir.glob(f"*/*/{STAGE_FILE}")}


@pytest.fixture(scope="module")
def audited(tmp_path_factory, plugin_paths):
    """The expensive part, once: stores, reference runs (AE, β-VAE × 3 variants × 2 seeds) and the example."""
    workdir = tmp_path_factory.mktemp("audit") / "wd"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        probe_main(["audit", "--model", GOOD, "--workdir", str(workdir), *SYNC])
    return {"workdir": workdir, "code": info.value.code, "out": out.getvalue(), "err": err.getvalue()}


def test_example_plugin_audit_module_class(audited):
    assert audited["code"] == 0, audited["err"]
    workdir = audited["workdir"]
    folder = workdir / "audits" / plugin_slug(GOOD)
    result = json.loads((folder / "audit.json").read_text())
    md = (folder / "audit.md").read_text()
    # printed and written: verdict, n seeds, effect size, p-value
    v = result["verdict"]
    assert v["n"] == 2 and v["groups"]["orig"]["n"] == 2 and v["groups"]["mod"]["n"] == 2
    line = next(l for l in audited["out"].splitlines() if l.startswith(f"**verdict for {GOOD}"))
    assert v["label"] in line and "Δ_mod =" in line and "Welch p =" in line and "n = 2 orig / 2 mod seeds" in line
    assert line in md
    assert result["reference_models"] == ["ae", "beta-vae"] and set(result["verdicts"]) == {GOOD, "ae", "beta-vae"}
    for model in ("ae", "beta-vae"):
        assert re.search(rf"^\| {model} \| 2 \|", md, re.M)

    # the verdict is the report's rule applied to the per-seed MIG of the evaluated runs
    from probe.report.stats import verdict

    inputs = load_inputs(folder)  # paths absolute again (probe.report.schema)
    runs = [r for r in inputs["runs"] if r["model"] == GOOD]
    # the plug-in's seeds are the reference's retrain seeds (modify pipelines start them at retrain.first_seed = 100)
    assert sorted((r["variant"], r["seed"]) for r in runs) == sorted((v_, s) for v_ in ("orig", "mod", "noise") for s in (100, 101))
    mig = {var: [r["metrics"]["mig"]["mig"] for r in sorted(runs, key=lambda r: r["seed"]) if r["variant"] == var]
           for var in ("orig", "mod", "noise")}
    expected = verdict(mig["orig"], mig["mod"], mig["noise"])
    assert v["label"] == expected["label"]
    assert v["to_mod"]["delta"] == pytest.approx(expected["to_mod"]["delta"])
    assert v["to_mod"]["p"] == pytest.approx(expected["to_mod"]["p"])
    assert v["groups"]["mod"]["values"] == pytest.approx(mig["mod"])
    assert v["relative_change"] == pytest.approx(expected["to_mod"]["delta"] / abs(sum(mig["orig"]) / 2))

    # the plug-in's identity is in its stage config (so an edited plug-in gets new runs)
    from probe.provenance import sha256_file

    (train_stage,) = list((workdir / "plugin-train").glob(f"*/{STAGE_FILE}"))
    plugin = json.loads(train_stage.read_text())["config"]["plugin"]
    assert plugin == {"target": GOOD, "class": "probe_example_plugin.wae:WAEMMD",
                      "source_sha256": sha256_file(EXAMPLE / "probe_example_plugin" / "wae.py")}
    run_config = json.loads((Path(runs[0]["run_dir"]) / "config.json").read_text())
    assert run_config["seed"] == runs[0]["seed"]


def test_example_plugin_audit_via_entry_point(audited, tmp_path, monkeypatch, capsys):
    """The plug-in found through the entry-point group probe.models (a dist-info on sys.path, as an installed
    package has); the audit reuses the stores and reference runs of the first one and trains only its own jobs.
    (In-process: a subprocess would hash the sources again, and under concurrent edits get other digests.)"""
    dist = tmp_path / "probe_example_plugin-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-example-plugin\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[probe.models]\nwae-mmd = probe_example_plugin.wae:WAEMMD\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = _snapshot(audited["workdir"])
    code, out, err = run_probe(["audit", "--model", "wae-mmd", "--workdir", str(audited["workdir"]), "--scheduler",
                           "synchronous"], capsys)
    assert code == 0, err
    for stage in REFERENCE_STAGES:  # reused, not recomputed
        assert re.search(rf"\] {stage}\s+\d+/\d+ jobs\s+cached", err), (stage, err)
    assert re.search(r"\] plugin-train\s+6/6 jobs\s+done", err)
    after = _snapshot(audited["workdir"])
    assert {k: v for k, v in after.items() if k in before} == before
    new = sorted(k.split("/")[0] for k in set(after) - set(before))
    assert new == ["audit", "plugin-check", "plugin-evaluate", "plugin-train"]
    result = json.loads((audited["workdir"] / "audits" / "wae-mmd" / "audit.json").read_text())
    assert result["plugin"]["target"] == "wae-mmd" and result["plugin"]["class"] == GOOD
    assert "verdict for wae-mmd:" in out


@pytest.mark.parametrize("target, problem", [
    ("broken_import:Model", r"importing module 'broken_import' failed: ModuleNotFoundError"),
    ("plugins.broken_plugins:NoEncode", r"does not implement encode"),
    ("plugins.broken_plugins:WrongShape", r"encode\(x\) must return a tensor \[B, D\] = \[32, D\], got \(160,\)"),
    ("plugins.broken_plugins:NaNLoss", r"the loss is nan \(not finite\) on the first batch"),
    ("plugins.broken_plugins:NaNLater", r"training diverged: the loss became NaN or infinite at step \d+"),
])
def test_broken_plugin_exit_2_names_it_and_keeps_the_cache(audited, capsys, target, problem):
    workdir = audited["workdir"]
    before = _snapshot(workdir)
    code, out, err = run_probe(["audit", "--model", target, "--workdir", str(workdir), *SYNC], capsys)
    assert code == 2, err
    first = err.splitlines()[0]
    assert first.startswith("error: ") and target in first and re.search(problem, err), err
    assert "Traceback" not in err
    after = _snapshot(workdir)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing finished was touched
    if target.endswith("NaNLater"):  # passed the pre-flight check: that stage is finished and kept
        assert "plugin-train" in err and sorted({k.split("/")[0] for k in set(after) - set(before)}) == ["plugin-check"]
        from probe.pipeline.workdir import workdir_status

        st = {s["name"]: s for s in workdir_status(workdir)["stages"]}
        assert st["plugin-train"]["state"] == "failed" and st["retrain"]["state"] == "complete"
    else:
        assert set(after) == set(before)


def test_good_audit_after_broken_ones_reuses_everything(audited, capsys):
    workdir = audited["workdir"]
    before = _snapshot(workdir)
    code, out, err = run_probe(["audit", "--model", GOOD, "--workdir", str(workdir), *SYNC], capsys)
    assert code == 0, err
    assert _snapshot(workdir) == before  # fully cached: no stage recomputed
    first = next(l for l in audited["out"].splitlines() if l.startswith("**verdict"))
    assert first in out


# -- the digest design (plans only: no work) -------------------------------------------------------------------

def _digests(name, overrides=None, meta=None):
    from probe.pipeline import plan_pipeline

    plan = plan_pipeline(name, preset="smoke", overrides=overrides, meta=meta)
    return stage_digests(plan.stages), plan


def test_audit_shares_the_modify_pipelines_stages(plugin_paths, tmp_path):
    modify, _ = _digests("modify-dsprites")
    full, plan = _digests("audit", {"plugin.model": GOOD, "reference.models": []})
    assert {s: full[s] for s in REFERENCE_STAGES} == {s: modify[s] for s in REFERENCE_STAGES}
    narrowed, plan = _digests("audit", {"plugin.model": GOOD})
    shared = ("store", "restarts", "select", "manipulate", "apply", "noise")
    assert {s: narrowed[s] for s in shared} == {s: modify[s] for s in shared}
    assert narrowed["retrain"] != modify["retrain"]
    assert next(s for s in plan.stages if s.name == "retrain").config["models"] == ["ae", "beta-vae"]
    # a complete modify run in the workdir: the audit uses its reference runs instead of training its own
    (final_dir(tmp_path, "retrain", modify["retrain"])).mkdir(parents=True)
    (final_dir(tmp_path, "retrain", modify["retrain"]) / STAGE_FILE).write_text("{}")
    reused, plan = _digests("audit", {"plugin.model": GOOD}, meta={"workdir": str(tmp_path)})
    assert {s: reused[s] for s in REFERENCE_STAGES} == {s: modify[s] for s in REFERENCE_STAGES}
    assert narrowed["plugin-train"] == reused["plugin-train"]  # the plug-in's runs do not depend on the references


def test_a_reference_trained_on_the_random_m_keeps_its_stages_and_a_narrowed_one_leaves_them_out(plugin_paths):
    # the dSprites smoke preset retrains the β-VAE on mod-random (the random-ψ control's m): the audit of the whole
    # reference pipeline plans it as `probe pipeline run` does; narrowed to reference.models it trains what the verdict
    # reads (orig, mod, noise) and runs no random-ψ control
    def jobs(plan):
        return {s.name: [j.key for j in s.jobs(s.config)] for s in plan.stages}

    modify, _ = _digests("modify-dsprites")
    full, plan = _digests("audit", {"plugin.model": GOOD, "reference.models": []})
    planned = jobs(plan)
    assert "beta-vae-mod-random-s100" in planned["retrain"] and len(planned["apply-random"]) == 1
    assert full["apply-random"] == modify["apply-random"] and full["retrain"] == modify["retrain"]
    narrowed, plan = _digests("audit", {"plugin.model": GOOD})
    planned = jobs(plan)
    assert planned["manipulate-random"] == [] and planned["apply-random"] == []
    assert {k.split("-s1")[0] for k in planned["retrain"]} == {f"{m}-{v}" for m in ("ae", "beta-vae")
                                                             for v in ("orig", "mod", "noise")}


def test_two_plugins_share_all_but_their_stages_and_an_edit_gives_new_runs(plugin_paths, tmp_path, monkeypatch):
    module = tmp_path / "audit_tmp_plugin.py"
    module.write_text("from plugins.broken_plugins import _Base\n\n\nclass Tiny(_Base):\n    name = 'tiny'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    a, _ = _digests("audit", {"plugin.model": GOOD})
    b, _ = _digests("audit", {"plugin.model": "audit_tmp_plugin:Tiny"})
    own = ("plugin-check", "plugin-train", "plugin-evaluate", "audit")
    assert {s: a[s] for s in REFERENCE_STAGES} == {s: b[s] for s in REFERENCE_STAGES}
    assert all(a[s] != b[s] for s in own)
    module.write_text(module.read_text() + "    # edited: different source, different runs\n")
    c, _ = _digests("audit", {"plugin.model": "audit_tmp_plugin:Tiny"})
    assert {s: c[s] for s in REFERENCE_STAGES} == {s: b[s] for s in REFERENCE_STAGES}
    assert all(c[s] != b[s] for s in own)
    d, _ = _digests("audit", {"plugin.model": "audit_tmp_plugin:Tiny", "plugin.seeds": 3})
    assert d["plugin-train"] != c["plugin-train"] and d["retrain"] == c["retrain"]


def test_bad_audit_options_are_user_errors(plugin_paths, capsys, tmp_path):
    code, _, err = run_probe(["audit", "--model", GOOD, "--dataset", "mnist", "--workdir", str(tmp_path / "x"), *SYNC], capsys)
    assert code == 2 and "no reference pipeline" in err and not (tmp_path / "x").exists()
    code, _, err = run_probe(["audit", "--model", GOOD, "--set", "plugin.model_config.nope=1", "--workdir",
                         str(tmp_path / "x"), *SYNC], capsys)
    assert code == 2 and GOOD in err and "no hyperparameter 'nope'" in err and not (tmp_path / "x").exists()
    code, out, _ = run_probe(["audit", "--model", GOOD, "--plan", "--workdir", str(tmp_path / "x")], capsys)
    assert code == 0 and "plugin-train" in out and "models ae, beta-vae × 2 seeds" in out
