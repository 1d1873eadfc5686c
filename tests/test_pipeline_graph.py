"""The stage graph and the pipeline definitions: stages are objects (job functions referenced directly), a stage
added in one module plus one graph line runs, and the modify pipelines' shared base (definitions/modify.toml)
resolves to exactly the configs the two stand-alone files gave."""

from __future__ import annotations

import json
import pickle
import tomllib
from pathlib import Path

import pytest

from probe.errors import UserError
from probe.pipeline import graph, plan_pipeline, run_pipeline
from probe.pipeline.config import load_definition, pipeline_names, resolve
from probe.pipeline.engine import Job
from probe.pipeline.stages import store

PRE_BASE = Path(__file__).resolve().parent / "data" / "pre_base"


# -- a new stage: one module, its TOML table, one graph line ---------------------------------------------------

COUNT_STAGE = '''"""Stage ``count``: the original store's image count times ``count.factor`` (a new stage, as a user adds one)."""

from probe.errors import UserError
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import store
from probe.pipeline.stages.face import input_names, single_job_result

NAME = "count"
INPUTS = (store,)


def job_count_images(ctx, *, factor):
    num_images = store.result(ctx.inputs).num_images
    (ctx.job_dir / "count.txt").write_text(str(num_images * factor))
    return {"count": num_images * factor, "file": str(ctx.job_dir / "count.txt")}


def result(inputs):
    return inputs[NAME]["count"]


def check(config, *, deep=True):
    if config[NAME]["factor"] < 1:
        raise UserError(f"{NAME}.factor must be at least 1, got {config[NAME]['factor']}")


def stage(config, meta):
    return Stage(NAME, config[NAME], input_names(INPUTS), lambda c: [Job(NAME, job_count_images, dict(c))],
                 single_job_result(NAME))
'''


def test_a_stage_added_in_one_module_and_one_graph_line_runs(tmp_path, monkeypatch):
    """Adding a stage = its module (name, inputs as modules, check, result, jobs) + its table in the pipeline's TOML
    + one line in the graph; nothing else changes."""
    import importlib

    (tmp_path / "count_stage.py").write_text(COUNT_STAGE)
    (tmp_path / "count-pipeline.toml").write_text('extends = "linear-pca"\n\n[count]\nfactor = 2\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    count_stage = importlib.import_module("count_stage")
    monkeypatch.setitem(graph.GRAPHS, "linear-pca", graph.Graph((*graph.LINEAR_PCA.modules, count_stage)))  # the line
    definition = str(tmp_path / "count-pipeline.toml")
    over = {"synthetic.enabled": False, "linear-pca.enabled": False}
    plan = plan_pipeline(definition, preset="smoke", overrides=over)
    assert [s.name for s in plan.stages] == ["store", "synthetic", "linear-pca", "report", "count"]
    with pytest.raises(UserError, match="count.factor must be at least 1"):
        plan_pipeline(definition, preset="smoke", overrides={**over, "count.factor": 0})
    run = run_pipeline(definition, workdir=tmp_path / "wd", preset="smoke", overrides=over,
                       scheduler="synchronous", progress=False)
    count = count_stage.result(run.results)
    assert count == 2 * store.result(run.results).num_images == 2 * 3 * 2 * 4 * 4 * 4
    file = run.results[count_stage.NAME]["file"]
    assert ".partial" not in file and Path(file).read_text() == str(count)
    again = run_pipeline(definition, workdir=tmp_path / "wd", preset="smoke", overrides=over,
                         scheduler="synchronous", progress=False)
    assert again.jobs_run == 0 and again.results[count_stage.NAME] == run.results[count_stage.NAME]


@pytest.mark.parametrize("name, overrides", [("modify-dsprites", {}), ("modify-shapes3d", {"robustness.enabled": True}),
                                             ("linear-pca", {}), ("audit", {"plugin.model": "ae"})])
def test_every_job_function_is_a_module_level_function(name, overrides):
    for stage in plan_pipeline(name, preset="smoke", overrides=overrides).stages:
        for job in stage.jobs(stage.config):
            assert callable(job.fn) and pickle.loads(pickle.dumps(job.fn)) is job.fn, (stage.name, job.key)
            assert job.fn.__module__.startswith("probe.pipeline.stages."), (stage.name, job.fn)


def test_a_job_named_by_a_string_is_refused():
    with pytest.raises(TypeError, match="job function itself"):
        Job("a", "probe.pipeline.stages.store:job_store")


# -- the modify pipelines' base ------------------------------------------------------------------------------

@pytest.mark.parametrize("dataset", ["dsprites", "shapes3d"])
def test_the_base_gives_every_preset_the_config_the_standalone_file_gave(dataset):
    """tests/data/pre_base/ holds modify-<dataset>.toml as they were before the base existed; the resolved
    configs must be equal, key order included (`probe pipeline show` prints them in that order). A deliberate
    change to a preset is made in both places."""
    before = PRE_BASE / f"modify-{dataset}.toml"
    presets = tomllib.loads(before.read_text())["presets"]
    for preset in presets:
        for overrides in ({}, {"retrain.model_config.beta-vae.beta": 2.0, "manipulate.config.steps": 7}):
            old, new = resolve(str(before), preset, overrides), resolve(f"modify-{dataset}", preset, overrides)
            assert json.dumps(new) == json.dumps(old), (dataset, preset, overrides)


def test_the_base_is_not_a_pipeline():
    assert "modify" not in pipeline_names()
    assert {"modify-dsprites", "modify-shapes3d", "linear-pca", "audit"} <= set(pipeline_names())
    with pytest.raises(UserError, match="base of modify-control, modify-dsprites, modify-shapes3d"):
        resolve("modify", "smoke")


BASE = """
base = true
must_set = ["pipeline.dataset"]
free_form = ["train.model_config"]
[pipeline]
kind = "modify"
dataset = ""
wall = ""
[train]
steps = 100
model_config = {a = {lr = 1}}
[presets.small]
train = {steps = 5}
"""


def test_extends_merges_in_base_order_and_checks_must_set(tmp_path):
    (tmp_path / "toybase.toml").write_text(BASE)
    child = tmp_path / "toy.toml"
    child.write_text('extends = "toybase"\n[pipeline]\ndataset = "d"\n[train]\nmodel_config = {b = {lr = 2}}\n'
                     '[presets.small]\ntrain = {model_config = {a = {lr = 3}}}\n[presets.big]\n')
    c = resolve(str(child), "small")
    assert list(c["pipeline"]) == ["kind", "dataset", "wall", "name", "preset"] and c["pipeline"]["dataset"] == "d"
    assert c["train"] == {"steps": 5, "model_config": {"a": {"lr": 3}, "b": {"lr": 2}}}
    assert "base" not in c and "must_set" not in c and "extends" not in c
    assert resolve(str(child), "big")["train"]["steps"] == 100
    child.write_text('extends = "toybase"\n')
    with pytest.raises(UserError, match="does not set pipeline.dataset"):
        resolve(str(child), "small")
    child.write_text('extends = "nothere"\n')
    with pytest.raises(UserError, match="not a pipeline definition"):
        resolve(str(child), "small")
    (tmp_path / "loop.toml").write_text('extends = "toy"\n')
    child.write_text('extends = "loop"\n')
    with pytest.raises(UserError, match="extends it back"):
        resolve(str(child), "small")


def test_a_shared_preset_reaches_only_a_child_that_defines_it(tmp_path):
    (tmp_path / "toybase.toml").write_text('shared_presets = ["big"]\n' + BASE
                                           + "[presets.big]\ntrain = {steps = 1000, model_config = {a = {lr = 10, wd = 1}}}\n")
    child = tmp_path / "toy.toml"
    child.write_text('extends = "toybase"\n[pipeline]\ndataset = "d"\n'
                     '[presets.big]\ntrain = {model_config = {a = {lr = 30}, b = {lr = 4}}}\n')
    c = resolve(str(child), "big")                     # the base's big, the child's big merged over it: the child wins
    assert c["train"] == {"steps": 1000, "model_config": {"a": {"lr": 30, "wd": 1}, "b": {"lr": 4}}}
    assert "shared_presets" not in c and list(load_definition(str(child))[1]["presets"]) == ["small", "big"]
    assert resolve(str(child), "small")["train"] == {"steps": 5, "model_config": {"a": {"lr": 1}}}
    (tmp_path / "grandchild.toml").write_text('extends = "toy"\n')   # the child's presets (big merged) reach its
    assert resolve(str(tmp_path / "grandchild.toml"), "big")["train"] == c["train"]   # own children as any preset
    child.write_text('extends = "toybase"\n[pipeline]\ndataset = "d"\n[presets.other]\n')
    assert list(load_definition(str(child))[1]["presets"]) == ["small", "other"]   # no big: not listed ...
    with pytest.raises(UserError, match=r"has no preset 'big'; its presets: small, other$"):
        resolve(str(child), "big")                     # ... nor accepted


def test_a_shared_preset_the_base_does_not_define_is_refused(tmp_path):
    child = tmp_path / "toy.toml"
    child.write_text('extends = "toybase"\n[pipeline]\ndataset = "d"\n[presets.huge]\n')
    (tmp_path / "toybase.toml").write_text('shared_presets = ["small", "huge"]\n' + BASE)
    with pytest.raises(UserError, match=r"toybase.toml: shared_presets names 'huge' but it defines no such "
                                        r"\[presets.NAME\]; its presets: small$"):
        resolve(str(child), "small")
    (tmp_path / "toybase.toml").write_text('shared_presets = "small"\n' + BASE)
    with pytest.raises(UserError, match="shared_presets must be a list of preset names"):
        resolve(str(child), "small")


def test_the_shared_cpu_preset_reaches_the_dataset_files_with_one_and_changes_nothing():
    """modify.toml's [presets.cpu] is shared (shared_presets): the dSprites- and Shapes3D-like files define their own,
    modify-control has none. That both resolve to the configs they gave with it written out in full, key order
    included, is checked against tests/data/pre_base/ (test_the_base_gives_every_preset_...)."""
    for name in ("modify-dsprites", "modify-shapes3d"):
        assert "cpu" in load_definition(name)[1]["presets"]
    control_presets = list(load_definition("modify-control")[1]["presets"])
    assert "cpu" not in control_presets
    with pytest.raises(UserError) as error:
        resolve("modify-control", "cpu")
    assert str(error.value).endswith(f"has no preset 'cpu'; its presets: {', '.join(control_presets)}")


def test_the_module_attr_loader():
    from probe.imports import importable, load_attr, qualified_name
    from probe.pipeline.stages.store import job_store

    assert qualified_name(job_store) == "probe.pipeline.stages.store:job_store"
    assert load_attr(qualified_name(job_store)) is job_store and importable(qualified_name(job_store))
    assert not importable("no_such_package.mod:x")
    for target, match in [("nocolon", "expected 'package.module:Class'"), ("no_such_package_x:A", "importing module"),
                          ("probe.pipeline.stages.store:nope", "has no attribute 'nope'")]:
        with pytest.raises(UserError, match=match):
            load_attr(target, "plug-in model 'x'")
    with pytest.raises(ModuleNotFoundError):  # probe's own targets: a failure is a bug, not a user error
        load_attr("no_such_package_x:A")
