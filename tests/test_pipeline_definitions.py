"""The shipped pipeline definitions (package data next to probe.pipeline.config) and a user's own by path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import probe
from probe.errors import UserError
from probe.pipeline.config import DEFINITIONS_DIR, pipeline_files, resolve


def test_the_definitions_are_inside_the_package():
    assert DEFINITIONS_DIR == Path(probe.__file__).parent / "pipeline" / "definitions"
    assert {"modify", "modify-shapes3d", "modify-dsprites", "modify-control", "linear-pca", "audit"} <= set(pipeline_files())
    assert all(path.parent == DEFINITIONS_DIR for path in pipeline_files().values())


def test_a_copied_definition_runs_by_path_and_extends_a_shipped_base(tmp_path):
    # a user copies one shipped file out of site-packages and passes its path; its `extends = "modify"` has no
    # sibling modify.toml there, so the shipped base is used
    copy = tmp_path / "my-shapes3d.toml"
    shutil.copy(DEFINITIONS_DIR / "modify-shapes3d.toml", copy)
    mine, shipped = resolve(str(copy), "smoke"), resolve("modify-shapes3d", "smoke")
    assert mine["pipeline"]["name"] == "my-shapes3d"
    mine["pipeline"]["name"] = shipped["pipeline"]["name"]
    assert json.dumps(mine) == json.dumps(shipped)
    edited = copy.read_text().replace("factor_sizes = [2, 2, 2, 2, 2, 3]", "factor_sizes = [2, 2, 2, 2, 3, 3]", 1)
    copy.write_text(edited)  # and the user's edit is what resolves
    assert resolve(str(copy), "smoke")["store"]["factor_sizes"] == [2, 2, 2, 2, 3, 3]


def test_a_missing_definition_file_is_one_clear_message(tmp_path):
    with pytest.raises(UserError, match=r"pipeline file .*nope\.toml does not exist"):
        resolve(str(tmp_path / "nope.toml"), "smoke")
    with pytest.raises(UserError, match="unknown pipeline 'nope'; known pipelines: audit, linear-pca"):
        resolve("nope", "smoke")


def test_list_says_where_the_definitions_are(capsys):
    from conftest import run_probe

    code, out, _ = run_probe(["pipeline", "list"], capsys)
    assert code == 0 and f"definitions: {DEFINITIONS_DIR} " in out
    assert out.splitlines()[0].split()[0] == "audit"


@pytest.mark.parametrize("text", ["beta-tcvae,slow-vae", "[beta-tcvae,slow-vae]", "[beta-tcvae, slow-vae]",
                                  '["beta-tcvae", "slow-vae"]'])
def test_a_list_key_reads_names_with_or_without_brackets(text):
    # README's `--set retrain.models=[...]`: unquoted names are not JSON, and were once split into '[beta-tcvae'
    from probe.cli import parse_set_options

    config = resolve("modify-shapes3d", "cpu", parse_set_options([f"retrain.models={text}"]))
    assert config["retrain"]["models"] == ["beta-tcvae", "slow-vae"]
    sizes = resolve("modify-shapes3d", "cpu", {"store.factor_sizes": "[10, 10, 10, 4, 4, 2]"})["store"]["factor_sizes"]
    assert sizes == [10, 10, 10, 4, 4, 2]                       # numbers stay numbers


def test_every_shipped_preset_plans_or_names_the_official_file_it_needs():
    # a preset is config text nobody runs in CI past smoke: a mistyped key or generator option would first show
    # when someone starts its hours-long run. Presets on official data need the downloaded file, and say so.
    from probe.pipeline import plan_pipeline
    from probe.pipeline.config import load_definition, pipeline_names

    planned = []
    for name in pipeline_names():
        overrides = {"plugin.model": "ae"} if name == "audit" else None
        for preset in load_definition(name)[1].get("presets", {}):
            try:
                plan = plan_pipeline(name, preset=preset, overrides=overrides)
            except UserError as error:
                assert preset == "paper" and "download it with `probe datasets fetch" in str(error), (name, preset, error)
                continue
            assert plan.stages, (name, preset)
            planned.append((name, preset))
    assert {("modify-dsprites", "cpu"), ("modify-shapes3d", "cpu"), ("modify-dsprites", "quick")} <= set(planned)
