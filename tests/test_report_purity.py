"""`probe report` is a pure function of report_inputs.json and the files it names (issue 25): it imports no torch and
nothing of the models, the trainer, the perturbation or the pipeline, opens no store and no run folder (what needs
them the report stage computed, probe.pipeline.report_data), and re-renders a workdir in seconds."""

from __future__ import annotations

import json
from pathlib import Path
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

# what `probe report` must not import: torch and every layer that needs it, and the pipeline that writes its inputs
FORBIDDEN = ("torch", "probe.models", "probe.train", "probe.perturb", "probe.pipeline", "probe.analysis", "zarr")
# a generous bound for a busy CI machine; the smoke workdir re-renders in a few seconds (docs/notes/report.md)
RERENDER_SECONDS = 60


def render_in_subprocess(workdir, out) -> dict:
    """Run ``probe report WORKDIR --out OUT`` in a fresh interpreter under ``-X importtime``. Returns {"modules": every
    module imported, "forbidden": those under ``FORBIDDEN``, "wall_s", "proc"}."""
    start = time.time()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "probe.cli", "report", str(workdir), "--out",
                           str(out)], capture_output=True, text=True)
    wall = time.time() - start
    modules = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    forbidden = sorted(m for m in modules if m.split(".")[0] in FORBIDDEN or m.startswith(FORBIDDEN))
    return {"modules": modules, "forbidden": forbidden, "wall_s": wall, "proc": proc}


@pytest.fixture(scope="module")
def computed_workdir(tmp_path_factory, toy_restarts_20):
    """A fake workdir (tests/test_report.py) on a toy store whose selected restarts and first two β-VAE orig runs are
    real 20-step runs on it, with the sections the report stage computes from them (``add_report_data``). The store
    and runs are a copy of the session's ``toy_restarts_20`` (a test here moves them away)."""
    from pathlib import Path

    from test_report import write_fake_workdir

    from probe.data import open_store
    from probe.pipeline.report_data import add_report_data
    from probe.report.schema import write_inputs

    root = tmp_path_factory.mktemp("pure")
    (root / "trained").mkdir()
    shared_store, shared_runs = toy_restarts_20
    store = open_store(shutil.copytree(shared_store.path, root / "trained" / Path(shared_store.path).name))
    runs = [Path(shutil.copytree(run, root / "trained" / Path(run).name)) for run in shared_runs]
    workdir = root / "wd"
    inputs = write_fake_workdir(workdir, store_path=store.path, robustness=False, computed=False,
                                restart_dirs={"entangled": runs[0], "disentangled": runs[1]})
    for r in inputs["runs"]:
        if r["model"] == "beta-vae" and r["variant"] == "orig" and r["seed"] in (0, 1):
            r["run_dir"] = str(runs[r["seed"]])
    inputs = add_report_data(inputs, root=workdir)
    write_inputs(workdir, inputs)
    shared_root = str(Path(shared_store.path).parent)
    assert shared_root not in (workdir / "report_inputs.json").read_text()  # it names the copy only
    return {"workdir": workdir, "inputs": inputs, "runs": runs, "trained": root / "trained", "root": root}


def test_the_report_stage_records_what_needs_models_and_stores(computed_workdir):
    inputs = computed_workdir["inputs"]
    assert inputs["stores"]["orig"]["factor_names"] == ["shape", "level", "x", "y"]
    assert inputs["stores"]["orig"]["factor_sizes"] == [2, 3, 4, 4] and inputs["stores"]["orig"]["num_images"] == 96
    assert "mean_image_mse" in inputs["stores"]["orig"] and "factor_names" not in inputs["stores"]["mod"]  # no store
    from probe.data.visibility import factor_ceilings

    ceiling = inputs["stores"]["orig"]["factor_ceiling"]  # what the toy store's images determine of each factor
    assert ceiling == factor_ceilings(open_store_of(inputs, computed_workdir)) and len(ceiling) == 4
    assert all(c is None or 0 <= c <= 1 for c in ceiling)
    capture = inputs["factor_capture"]
    assert len(capture["runs"]) == len(inputs["runs"]) and capture["factor_names"] == ["shape", "level", "x", "y"]
    encoded = [e for e in capture["runs"] if "error" not in e]
    assert [(e["model"], e["variant"], e["seed"]) for e in encoded] == [("beta-vae", "orig", s) for s in (0, 1)]
    for e in encoded:
        assert len(e["gap"]) == 4 and np.mean(e["gap"]) == pytest.approx(e["mig"]) and e["active"] is not None
    assert len(capture["runs"]) - len(encoded) == len(inputs["runs"]) - 2  # no checkpoints: recorded, not raised
    latents = inputs["restart_latents"]
    assert [p["run_dir"] for p in latents["panels"]] == [str(computed_workdir["runs"][1]),
                                                           str(computed_workdir["runs"][0])]
    for panel in latents["panels"]:
        nmi = np.asarray(panel["nmi"])
        assert nmi.shape == (4, 4) and np.all((nmi >= 0) & (nmi <= 1 + 1e-9))
    assert inputs["manipulation_deviations"] is None  # the fake inputs record no setting (no manipulation config)


def open_store_of(inputs, computed_workdir):
    from probe.data import open_store
    from probe.report.schema import resolve

    return open_store(resolve(computed_workdir["workdir"], inputs["stores"]["orig"]["path"]))


def test_traversal_tiles_round_trip(tmp_path):
    from probe.pipeline.report_data import encode_tiles
    from probe.report.figures import read_tiles

    rng = np.random.default_rng(0)
    for channels in (1, 3):
        grid = rng.random((3, 3, 5, 4, channels)).astype(np.float32)
        back = read_tiles(encode_tiles(grid), 3)
        assert back.shape == grid.shape and np.abs(back - grid).max() <= 0.5 / 255 + 1e-7
    assert read_tiles(None, 3) is None and read_tiles("not base64!", 3) is None


def test_report_imports_no_model_code_and_reads_no_store(computed_workdir, tmp_path):
    workdir = computed_workdir["workdir"]
    first = render_in_subprocess(workdir, tmp_path / "a")
    assert first["proc"].returncode == 0, first["proc"].stderr[-3000:]
    assert first["forbidden"] == [], first["forbidden"]
    assert {"probe.report.build", "probe.report.schema", "probe.metrics.registry"} <= first["modules"]
    assert first["wall_s"] < RERENDER_SECONDS
    md = (tmp_path / "a" / "report.md").read_text()
    assert "figures/nmi_dsprites.png" in md and "figures/traversals_dsprites.png" in md
    assert "MIG recorded / recomputed" in md  # the capture of the two real runs is shown
    assert "| orig images (ceiling) |" in md and "| beta-vae orig (highest over seeds) |" in md

    # the store and the trained run folders gone: the report is the same, so it never read them
    moved = computed_workdir["root"] / "moved"
    shutil.move(str(computed_workdir["trained"]), moved)
    try:
        second = render_in_subprocess(workdir, tmp_path / "b")
    finally:
        shutil.move(str(moved), computed_workdir["trained"])
    assert second["proc"].returncode == 0, second["proc"].stderr[-3000:]
    assert (tmp_path / "b" / "report.md").read_text() == md
    assert (tmp_path / "b" / "runs.csv").read_bytes() == (tmp_path / "a" / "runs.csv").read_bytes()
    a, b = (json.loads((tmp_path / d / "summary.json").read_text()) for d in "ab")
    assert a == b


def test_an_older_inputs_file_renders_and_says_what_it_lacks(tmp_path, make_toy_store):
    from probe.report import make_report
    from test_report import write_fake_workdir

    workdir = tmp_path / "wd"
    write_fake_workdir(workdir, store_path=make_toy_store().path, robustness=False, computed=False)
    md = make_report(workdir, tmp_path / "rep")["markdown"].read_text()
    assert "Not computed: report_inputs.json has no 'factor_capture' (written before schema 2" in md
    assert "NMI heatmaps and latent traversals are not available: report_inputs.json has no 'restart_latents'" in md


# a recorded pipeline config with the tables the report's setting describes (tests/test_report.py's fake runs)
SETTING_CONFIG = {"store": {"source": "synthetic", "file": "", "resolution": 16, "factor_sizes": [1, 3, 4, 4], "seed": 0},
                  "retrain": {"models": ["beta-vae", "pcl", "ae"], "train": {"steps": 2000},
                              "model_train": {"pcl": {"steps": 100}}},
                  "evaluate": {"metrics": [], "seed": 7, "sample_sizes": {"num_train": 300, "num_test": 150}},
                  "manipulate": {"config": {"epsilon": 0.1, "steps": 4}}}


def _strip_config_block(md: str) -> str:
    """The report without the recorded config's JSON block (the provenance section prints ``provenance.config``)."""
    import re

    return re.sub(r"\n{3,}", "\n\n", re.sub(r"```.*?```", "", md, flags=re.S))


def test_the_report_reads_the_recorded_setting_and_upgrades_an_older_file(tmp_path):
    """``setting`` (report_inputs.json, schema 3) is what the report describes the store and the retraining steps by:
    with ``provenance.config`` emptied, or contradicting it, the report is the one an older file (no ``setting``, the
    same values in its recorded config, upgraded at load by ``setting_of_older_file``) gives."""
    from probe.pipeline.report_inputs import setting
    from probe.report import make_report
    from probe.report.schema import SCHEMA_VERSION, inputs_path, load_inputs
    from test_report import write_fake_workdir

    workdir = tmp_path / "wd"
    write_fake_workdir(workdir, robustness=False, config=SETTING_CONFIG, computed=False)
    older = json.loads(inputs_path(workdir).read_text())
    assert "setting" not in older
    assert load_inputs(workdir)["setting"] == setting_of_older_file_expected()
    old = make_report(workdir, tmp_path / "old")
    md = old["markdown"].read_text()
    assert "synthetic store at 16×16, factor sizes [1, 3, 4, 4]" in md and "training steps beta-vae 2000, pcl 100" in md
    assert "**Too short to mean anything:** on dsprites, pcl (100 steps)" in md
    assert "over 3 orig runs, at least the 3 factors" in md  # the store's factor sizes; a size-1 factor does not count

    recorded = setting(SETTING_CONFIG)  # what the report stage records, through the stage modules' accessors
    assert recorded["data"] == {"source": "synthetic", "resolution": 16, "factor_sizes": [1, 3, 4, 4]}
    assert recorded["retraining"] == {"steps": 2000, "model_steps": {"beta-vae": 2000, "pcl": 100, "ae": 2000}}
    for config in ({}, {"store": {"source": "official", "resolution": 64},
                        "retrain": {"models": ["pcl"], "train": {"steps": 9}}}):
        newer = {**older, "setting": recorded, "schema": SCHEMA_VERSION,
                 "provenance": {**older["provenance"], "config": config}}
        inputs_path(workdir).write_text(json.dumps(newer))
        out = make_report(workdir, tmp_path / f"new{len(config)}")
        assert _strip_config_block(out["markdown"].read_text()) == _strip_config_block(md)
        assert out["csv"].read_bytes() == old["csv"].read_bytes()
        a, b = (json.loads(o["summary"].read_text()) for o in (old, out))
        assert {k: v for k, v in a.items() if k != "report_code_version"} == \
            {k: v for k, v in b.items() if k != "report_code_version"}

    # an older file without a recorded config: nothing to say, and the report says so
    inputs_path(workdir).write_text(json.dumps({**older, "provenance": {**older["provenance"], "config": {}}}))
    assert load_inputs(workdir)["setting"] is None
    md = make_report(workdir, tmp_path / "bare")["markdown"].read_text()
    assert "store settings not recorded in the inputs, training steps not recorded" in md


def test_the_store_options_are_recorded_and_named_in_the_setting(tmp_path):
    """A store rendered with generator options (store.options, a deviation from the default images) is described as
    such: the report stage records the options, and the report's setting line names them; without options, neither."""
    from probe.pipeline.report_inputs import setting
    from probe.report import make_report
    from probe.report.schema import SCHEMA_VERSION, inputs_path
    from test_report import write_fake_workdir

    options = {"camera_distance": 2.6, "fov_deg": 40.0}
    config = {**SETTING_CONFIG, "store": {**SETTING_CONFIG["store"], "options": options}}
    recorded = setting(config)
    assert recorded["data"]["options"] == options
    assert "options" not in setting({**SETTING_CONFIG, "store": {**SETTING_CONFIG["store"], "options": {}}})["data"]
    workdir = tmp_path / "wd"
    write_fake_workdir(workdir, robustness=False, config=config, computed=False)
    inputs = json.loads(inputs_path(workdir).read_text())
    inputs_path(workdir).write_text(json.dumps({**inputs, "setting": recorded, "schema": SCHEMA_VERSION}))
    md = make_report(workdir, tmp_path / "out")["markdown"].read_text()
    assert ("synthetic store at 16×16, factor sizes [1, 3, 4, 4], rendering options camera_distance = 2.6, "
            "fov_deg = 40.0 (a deviation from the generator's default images)") in md


def setting_of_older_file_expected() -> dict:
    """``SETTING_CONFIG`` as ``setting_of_older_file`` reads it (per-model steps only where the config overrides)."""
    return {"data": {"source": "synthetic", "resolution": 16, "factor_sizes": [1, 3, 4, 4]},
            "retraining": {"steps": 2000, "model_steps": {"pcl": 100}},
            "evaluation": SETTING_CONFIG["evaluate"], "manipulation": SETTING_CONFIG["manipulate"]["config"]}


def test_the_report_data_reads_the_recorded_setting():
    """MIG's sample for the factor capture and the appendix-B deviations come from ``setting``, not from the recorded
    config; without a setting, the metric defaults and no deviations."""
    from probe.pipeline.report_data import manipulation_deviations, mig_sample_settings
    from probe.pipeline.report_inputs import setting

    inputs = {"dataset": "dsprites", "setting": setting(SETTING_CONFIG), "provenance": {"config": {}}}
    sample = mig_sample_settings(inputs)
    assert sample["recorded"] and sample["seed"] == 7 and (sample["num_train"], sample["num_test"]) == (300, 150)
    assert any("4 ψ steps" in d for d in manipulation_deviations(inputs))
    bare = {"dataset": "dsprites", "provenance": {"config": SETTING_CONFIG}}  # the config alone is not read
    assert not mig_sample_settings(bare)["recorded"] and mig_sample_settings(bare)["seed"] == 0
    assert manipulation_deviations(bare) is None
    # the audit records its own TOML as config: no table of the setting, every part null
    assert setting({"pipeline": {"kind": "audit"}, "plugin": {}}) == dict.fromkeys(("data", "retraining", "evaluation",
                                                                                    "manipulation"))


def _without_inputs_line(md: str) -> str:
    """The report less the provenance line naming where its inputs file was read from."""
    return "\n".join(line for line in md.splitlines() if not line.startswith("- inputs: `"))


def test_the_archived_inputs_render_the_same_report_without_the_workdir(computed_workdir, tmp_path):
    """Every report archives report_inputs.json and the files it opens (curves, loss logs, Fig. 4) in
    REPORT/inputs/part-<n>; with the whole workdir moved away, `probe report` of that copy gives the same report."""
    import matplotlib.pyplot as plt

    from probe.report import make_report
    from probe.report.schema import ARCHIVE_DIR, inputs_path, load_inputs, opened_files, write_inputs

    workdir = computed_workdir["workdir"]
    inputs = json.loads(inputs_path(workdir).read_text())
    fig4 = workdir / "manipulate" / "figure4.png"  # a Fig. 4 too, so that every kind of opened file is archived
    plt.imsave(fig4, np.random.default_rng(1).random((20, 60)))
    copy_of = None
    try:
        original = {**inputs, "manipulation": {**inputs["manipulation"], "figure4": str(fig4)}}
        write_inputs(workdir, original, workdir=workdir)                # paths recorded relative, as the pipeline does
        first = make_report(workdir, tmp_path / "a")
        archive = tmp_path / "a" / ARCHIVE_DIR / "part-1"
        names = opened_files(load_inputs(workdir))
        assert len(names) == len(load_inputs(workdir)["runs"]) + 2      # every run's curve, the loss log, Fig. 4
        assert all(Path(p).is_file() for p in opened_files(load_inputs(archive)))
        assert str(workdir) not in json.dumps(opened_files(json.loads(inputs_path(archive).read_text())))

        copy_of = computed_workdir["root"] / "away"
        shutil.move(str(computed_workdir["root"] / "wd"), copy_of)      # the workdir gone: only the archive is left
        second = make_report(archive, tmp_path / "b")
    finally:
        if copy_of is not None and copy_of.exists():
            shutil.move(str(copy_of), computed_workdir["root"] / "wd")
        write_inputs(workdir, inputs)
    md_a, md_b = (_without_inputs_line(o["markdown"].read_text()) for o in (first, second))
    assert md_a == md_b and "figures/figure4_dsprites.png" in md_a and "`inputs/part-1`" in md_a
    assert second["csv"].read_bytes() == first["csv"].read_bytes()
    for a, b in zip(first["figures"], second["figures"]):
        assert a.name == b.name
    assert (tmp_path / "b" / ARCHIVE_DIR / "part-1" / "report_inputs.json").exists()  # archived again, re-renderable
