"""Stage manipulate-random (the frozen random-ψ control, issue 24): its table, its place in the graph, its result
through report_inputs.json, and the global-PCA change orig → x′ that the report stage computes for it."""

from __future__ import annotations

import numpy as np
import pytest

from probe.errors import UserError
from probe.pipeline.config import resolve
from probe.pipeline.graph import graph_of
from probe.pipeline.stages import manipulate, manipulate_random


def _stage(config):
    return next(s for s in graph_of(config).stages(config) if s.name == manipulate_random.NAME)


def test_the_control_runs_in_the_modify_pipelines_with_the_manipulations_config():
    config = resolve("modify-shapes3d", "smoke")
    names = graph_of(config).names
    assert names.index(manipulate_random.NAME) == names.index(manipulate.NAME) + 1
    assert manipulate_random.NAME in _stage_inputs(config, "report")
    stage = _stage(config)
    (job,) = stage.jobs(stage.config)
    assert job.fn is manipulate_random.job_manipulate_random and job.work == 4  # smoke: manipulate's 4 ψ steps
    assert job.kwargs == {"config": config["manipulate"]["config"], "full_budget": True, "partner": "lowest-mig",
                          "partner_rotation_deg": 45.0}
    # it reads the selection, not the learned manipulation: the engine runs it beside manipulate
    assert _stage_inputs(config, manipulate_random.NAME) == ["store", "select"]
    control_pipeline = resolve("modify-control", "smoke")
    (rotated_job,) = _stage(control_pipeline).jobs(_stage(control_pipeline).config)
    assert rotated_job.kwargs["partner"] == control_pipeline["manipulate"]["partner"] == "rotated"
    assert rotated_job.kwargs["partner_rotation_deg"] == float(control_pipeline["manipulate"].get("partner_rotation_deg", 45.0))
    control = manipulate_random.control_config(job.kwargs["config"], job.kwargs["full_budget"])
    assert control == {**config["manipulate"]["config"], "freeze_psi": True, "normalise_linf": True}
    manipulate_random.check(config, deep=True)  # the control's manipulation config resolves
    # switched off: no job, no result, and the learned manipulation's stage is untouched
    off = resolve("modify-shapes3d", "smoke", {"manipulate-random.enabled": False})
    assert _stage(off).jobs(_stage(off).config) == []
    before = next(s for s in graph_of(config).stages(config) if s.name == manipulate.NAME)
    after = next(s for s in graph_of(off).stages(off) if s.name == manipulate.NAME)
    assert before.config == after.config
    assert manipulate_random.result({manipulate_random.NAME: {"jobs": {}}}) is None
    assert manipulate_random.result({}) is None
    assert graph_of(resolve("modify-control", "smoke")).names.count(manipulate_random.NAME) == 1
    for bad, message in (({"manipulate-random.enabled": "yes"}, "true or false"),
                         ({"manipulate-random.full_budget": 1}, "true or false")):
        with pytest.raises(UserError, match=message):
            manipulate_random.check(resolve("modify-shapes3d", "smoke", bad), deep=False)


def _stage_inputs(config, name):
    return next(s for s in graph_of(config).stages(config) if s.name == name).inputs


def test_the_controls_result_round_trips_through_report_inputs(tmp_path):
    from probe.pipeline.report_inputs import StageValues, report_inputs
    from probe.pipeline.stages.face import StoreResult
    from probe.pipeline.stages.manipulate import ManipulateResult
    from probe.pipeline.stages.store import OrigStoreResult
    from probe.report.schema import load_inputs, write_inputs

    wd = tmp_path / "wd"
    job = {"dir": str(wd / "manipulate-random" / "d" / "jobs" / "manipulate-random" / "manipulation"),
           "losses": str(wd / "manipulate-random" / "d" / "jobs" / "manipulate-random" / "manipulation" / "losses.jsonl"),
           "coverage": {"threshold": 0.05, "fraction_covered": 1.0, "linf_quantiles": {"p05": 1.0, "p50": 1.0},
                        "smoothness": {"neighbour_diff_ratio": 0.9, "high_frequency_share": 0.8}},
           "dis_minus_ent": {"before": 2.5, "after": 3.0},
           "before": {"entangled": 40.0, "disentangled": 42.5, "dis_minus_ent": 2.5},
           "after": {"entangled": 41.0, "disentangled": 44.0, "dis_minus_ent": 3.0},
           "config": {"epsilon": 0.175, "seed": 0, "steps": 4, "freeze_psi": True, "normalise_linf": True},
           "full_budget": True, "entangled": [str(wd / "restarts" / "r0")], "disentangled": [str(wd / "restarts" / "r1")]}
    inputs = {manipulate_random.NAME: {"jobs": {manipulate_random.NAME: job}}}
    control = manipulate_random.result(inputs)
    assert control.dir == job["dir"] and control.full_budget and control.record == job
    learned = ManipulateResult(str(wd / "m"), str(wd / "m" / "losses.jsonl"), None, "lowest-mig", [], [], {"dir": str(wd / "m")})
    values = StageValues(orig_store=OrigStoreResult(str(wd / "orig.zarr"), "a"), mod_store=StoreResult(str(wd / "mod.zarr"), "b", 0.175),
                         noise_store=StoreResult(str(wd / "noise.zarr"), "c", 0.175), manipulation=learned, retrain={},
                         evaluate={}, manipulation_random=control)
    data = report_inputs(values, {"pipeline": "p"}, pipeline="p", runs=[])
    folder = wd / "report"
    folder.mkdir(parents=True)
    path = write_inputs(folder, data, workdir=wd)
    assert "$WORKDIR" in path.read_text() and str(wd) not in path.read_text()  # recorded relative to the workdir
    loaded = load_inputs(folder)
    assert loaded["manipulation_random"] == job  # paths absolute again where the file stands
    again = manipulate_random.result({manipulate_random.NAME: {"jobs": {manipulate_random.NAME: loaded["manipulation_random"]}}})
    assert again == control
    # a run without the control records null, and an older file without the key reads as null
    assert report_inputs(StageValues(**{**values.__dict__, "manipulation_random": None}), {}, pipeline="p",
                         runs=[])["manipulation_random"] is None
    older = {k: v for k, v in data.items() if k != "manipulation_random"}
    write_inputs(tmp_path, older)
    assert load_inputs(tmp_path)["manipulation_random"] is None


def test_global_pca_change_of_images_is_global_pca_change_of_a_store(make_toy_store, tmp_path):
    """The control's x′ has no store: ``global_pca_change_of`` takes its images on the same sample, and gives what
    ``global_pca_change`` gives for a store holding them; a control that cannot be read is an error entry."""
    from probe.analysis import global_pca_change, global_pca_change_of
    from probe.data import open_store, write_store
    from probe.pipeline.why import WHY_SETTINGS, random_global_pca

    a = make_toy_store(factor_sizes=(2, 3, 4, 4))
    x = a.load_numpy()
    shift = np.clip(x.astype(int) + 20 * (np.arange(16)[None, None, :, None] % 2), 0, 255).astype(np.uint8)
    b = write_store(tmp_path / "b.zarr", shift, a.factors, name=a.name, factor_names=a.factor_names,
                    factor_sizes=a.factor_sizes, factor_values=a.factor_values, origin={"kind": "noise", "seed": 0})
    whole = global_pca_change(a.path, b.path, k=5, num_images=60, seed=1)
    part = global_pca_change_of(a.path, open_store(b.path).read, k=5, num_images=60, seed=1)
    assert whole["stores"] == [str(a.path), str(b.path)] and {**part, "stores": whole["stores"]} == whole
    same = global_pca_change_of(a.path, a.read, k=5, num_images=60, seed=1)
    assert same["subspace_mean_cos2"] == pytest.approx(1.0) and same["max_relative_eigenvalue_change"] == 0.0
    assert whole["mean_sq_pixel_difference"] > 0 and same["mean_sq_pixel_difference"] == 0.0
    failed = random_global_pca(a.path, tmp_path / "no-such-run", WHY_SETTINGS)
    assert set(failed) == {"error"} and "UserError" in failed["error"]


def test_apply_random_makes_the_random_m_store_only_for_models_that_train_on_it():
    """Stage apply-random (variant mod-random): after apply in both modify graphs, a job only when some model is
    retrained on mod-random, read by retrain (and so evaluate) through the variant's store, refused without the
    control it applies."""
    from probe.pipeline.stages import apply, apply_random, retrain
    from probe.pipeline.stages.stores import variant_stage, variant_store

    for name in ("modify-shapes3d", "modify-control"):
        names = graph_of(resolve(name, "smoke")).names
        assert names.index(apply_random.NAME) == names.index(apply.NAME) + 1
    config = resolve("modify-shapes3d", "smoke")
    stage = next(s for s in graph_of(config).stages(config) if s.name == apply_random.NAME)
    assert stage.jobs(stage.config) == [] and apply_random.NAME not in _stage_inputs(config, retrain.NAME)
    assert apply_random.result({}) is None and apply_random.result({apply_random.NAME: {"jobs": {}}}) is None
    wanted = resolve("modify-shapes3d", "smoke", {"retrain.model_variants": {"beta-vae": ["orig", "mod", "mod-random"]}})
    graph_of(wanted).validate(wanted, deep=False)
    stage = next(s for s in graph_of(wanted).stages(wanted) if s.name == apply_random.NAME)
    (job,) = stage.jobs(stage.config)
    assert job.fn is apply_random.job_apply_random and stage.inputs == ["store", manipulate_random.NAME]
    assert apply_random.NAME in _stage_inputs(wanted, retrain.NAME) and apply_random.NAME in _stage_inputs(wanted, "report")
    keys = [j.key for s in graph_of(wanted).stages(wanted) if s.name == retrain.NAME for j in s.jobs(s.config)]
    assert [k for k in keys if "mod-random" in k] == ["beta-vae-mod-random-s100", "beta-vae-mod-random-s101"]
    assert variant_stage("mod-random") is apply_random
    inputs = {apply_random.NAME: {"jobs": {apply_random.NAME: {"path": "/w/r.zarr", "digest": "d", "epsilon": 0.175}}}}
    assert variant_store(inputs, "mod-random") == "/w/r.zarr" and apply_random.result(inputs).epsilon == 0.175
    off = resolve("modify-shapes3d", "smoke", {"retrain.variants": ["orig", "mod", "noise", "mod-random"],
                                               "manipulate-random.enabled": False})
    with pytest.raises(UserError, match=r"needs \[manipulate-random\] enabled = true"):
        graph_of(off).validate(off, deep=False)
