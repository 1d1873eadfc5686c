"""probe.report.pool: two workdirs of one experiment (the second trained more seeds on copies of the first's stores)
report as one sample per model × variant; anything that makes them two experiments is refused by name."""

from __future__ import annotations

import json

import pytest

from probe.errors import UserError
from probe.report import make_report
from probe.report.pool import differences, pool
from probe.report.schema import config_for_models, config_less_run_choice, load_inputs, write_inputs

from test_report import write_fake_workdir


def _config(first_seed: int, models=("beta-vae", "pcl", "ae"), lr: float = 5e-4) -> dict:
    return {"retrain": {"seeds": 3, "first_seed": first_seed, "models": list(models),
                        "model_config": {"beta-vae": {"lr": lr}}, "train": {"steps": 1000}},
            "evaluate": {"seed": 0}}


def _workdir(root, seeds, **config):
    """A fake workdir whose stores are the default fake digests (the same in every call)."""
    write_fake_workdir(root, seeds=seeds, robustness=False, computed=False, config=_config(seeds[0], **config))
    return root


def test_config_less_run_choice_drops_only_the_seed_and_model_choice():
    config = _config(7)
    kept = config_less_run_choice(config)
    assert kept["retrain"] == {"model_config": {"beta-vae": {"lr": 5e-4}}, "train": {"steps": 1000}}
    assert kept["evaluate"] == {"seed": 0}
    assert config["retrain"]["first_seed"] == 7  # the recorded config itself is left alone
    assert config_less_run_choice(None) == {}


def test_config_for_models_keeps_the_per_model_entries_of_those_models_only():
    config = {"retrain": {"model_config": {"a": {"lr": 1}, "b": {"lr": 2}}, "model_train": {"b": {"steps": 5}},
                          "model_variants": {"a": ["orig"]}, "train": {"steps": 9}}, "evaluate": {"seed": 0}}
    kept = config_for_models(config, {"a"})
    assert kept["retrain"] == {"model_config": {"a": {"lr": 1}}, "model_train": {}, "model_variants": {"a": ["orig"]},
                               "train": {"steps": 9}}
    assert kept["evaluate"] == {"seed": 0}
    assert config["retrain"]["model_config"]["b"] == {"lr": 2}  # the recorded config itself is left alone
    assert config_for_models(None, {"a"}) == {}


def _part(root, seeds, models, model_config) -> dict:
    """The loaded inputs of a fake workdir that retrained only ``models`` (the fake β-VAE's runs under their names)
    and recorded ``model_config``: a part that adds models to an experiment with their settings set on the command
    line."""
    config = {"retrain": {"seeds": len(seeds), "first_seed": seeds[0], "models": list(models),
                          "model_config": model_config, "train": {"steps": 1000}}, "evaluate": {"seed": 0}}
    inputs = write_fake_workdir(root, seeds=seeds, robustness=False, computed=False, config=config)
    inputs["runs"] = [{**run, "model": model}
                      for run in inputs["runs"] if run["model"] == "beta-vae" for model in models]
    write_inputs(root, inputs)
    return load_inputs(root)


def test_a_part_adding_a_model_pools_though_it_records_that_models_settings(tmp_path):
    first = load_inputs(_workdir(tmp_path / "a", (0, 1, 2)))        # β-VAE, PCL, AE; the β-VAE at lr 5e-4
    tcvae = {"lr": 5e-4, "reconstruction_weight": 2}
    # settings of a model only one part trained decide none of the other part's runs, the β-VAE's here included
    b = _part(tmp_path / "b", (0, 1), ("beta-tcvae",), {"beta-vae": {"lr": 1e-3}, "beta-tcvae": tcvae})
    assert differences(first, b) == []
    (group,) = pool([first, b])
    assert {run["model"] for run in group["runs"]} == {"beta-vae", "pcl", "ae", "beta-tcvae"}

    # the model's next seeds trained otherwise: each part agrees with the first, which never trained it, and the
    # two parts are compared with each other
    c = _part(tmp_path / "c", (2, 3), ("beta-tcvae",), {"beta-tcvae": {**tcvae, "lr": 1e-3}})
    assert differences(first, c) == []
    message = (f"{b['_path']} and {c['_path']} trained on the same stores but are not one experiment.*"
               r"retrain\.model_config\.beta-tcvae\.lr \(0\.0005 vs 0\.001\)")
    with pytest.raises(UserError, match=message):
        pool([first, b, c])

    # a model both parts trained is compared as before
    d = _part(tmp_path / "d", (5,), ("beta-vae",), {"beta-vae": {"lr": 1e-3}})
    assert differences(first, d) == ["config retrain.model_config.beta-vae.lr (0.0005 vs 0.001)"]


def test_two_workdirs_of_one_experiment_pool_into_one_sample(tmp_path):
    a = _workdir(tmp_path / "a", (0, 1, 2))
    b = _workdir(tmp_path / "b", (3, 4, 5))
    loaded = [load_inputs(a), load_inputs(b)]
    assert differences(*loaded) == []
    (group,) = pool(loaded)
    assert len(group["runs"]) == len(loaded[0]["runs"]) + len(loaded[1]["runs"])

    out = make_report([a, b], tmp_path / "rep")
    summary = json.loads(out["summary"].read_text())
    assert len(summary["datasets"]) == 1                      # one column group, not two "dsprites"
    cells = summary["tables"]["mig"]["models"]["beta-vae"]["datasets"]["dsprites"]
    for variant in ("orig", "mod", "noise"):
        assert cells[variant]["n"] == 6
        assert sorted(cells[variant]["seeds"]) == [0, 1, 2, 3, 4, 5]
        expected = [r["metrics"]["mig"]["mig"] for i in loaded for r in i["runs"]
                    if r["model"] == "beta-vae" and r["variant"] == variant]
        assert cells[variant]["mean"] == pytest.approx(sum(expected) / 6)
    assert summary["pooled"]["dsprites"] == [i["_path"] for i in loaded]

    md = out["markdown"].read_text()
    assert "**Pooled runs.**" in md and "seeds 0, 1, 2)" in md and "seeds 3, 4, 5)" in md
    assert "dsprites, part 1 of 2" in md and "dsprites, part 2 of 2" in md   # each part's provenance
    rows = out["csv"].read_text().splitlines()
    seeds = {int(line.split(",")[3]) for line in rows[1:]}
    assert seeds == {0, 1, 2, 3, 4, 5}


def _retraining(models) -> dict:
    """``setting`` as the writer records it: model_steps for the models retrained and those with steps of their own."""
    steps = {"beta-vae": 1000, "ae": 500, "pcl": 1000}
    return {"data": None, "evaluation": {"seed": 0}, "manipulation": None,
            "retraining": {"steps": 1000, "model_steps": {m: steps[m] for m in dict.fromkeys([*models, "ae"])}}}


def test_a_second_workdir_with_fewer_models_adds_seeds_to_those_only(tmp_path):
    a = tmp_path / "a"
    first = write_fake_workdir(a, seeds=(0, 1, 2), robustness=False, computed=False, config=_config(0))
    first["setting"] = _retraining(["beta-vae", "pcl", "ae"])
    leg_a = {"started": "2026-01-01T00:00:00", "wall_time_s": 100.0}
    first["provenance"]["legs"] = [leg_a]
    write_inputs(a, first)
    b = tmp_path / "b"
    inputs = write_fake_workdir(b, seeds=(3, 4), robustness=False, computed=False,
                                config=_config(3, models=("beta-vae",)))
    inputs["runs"] = [r for r in inputs["runs"] if r["model"] == "beta-vae"]
    inputs["setting"] = _retraining(["beta-vae"])            # no pcl steps: pcl was not retrained here
    inputs["provenance"]["legs"] = [leg_a, {"started": "2026-01-02T00:00:00", "wall_time_s": 50.0}]
    write_inputs(b, inputs)
    out = make_report([a, b], tmp_path / "rep")
    cells = json.loads(out["summary"].read_text())["tables"]["mig"]["models"]
    assert cells["beta-vae"]["datasets"]["dsprites"]["orig"]["n"] == 5
    assert cells["pcl"]["datasets"]["dsprites"]["orig"]["n"] == 3
    # the first workdir's leg (which computed the shared stages) is counted once
    assert "each counted once: 150 s in 2 legs" in out["markdown"].read_text()

    # the steps of a model only one of them retrained do not decide a pooled score (b records ae's own steps)
    inputs["setting"]["retraining"]["model_steps"]["ae"] = 700
    write_inputs(b, inputs)
    make_report([a, b], tmp_path / "rep1")

    # the steps of a model both retrained must agree
    inputs["setting"]["retraining"]["model_steps"]["beta-vae"] = 2000
    write_inputs(b, inputs)
    with pytest.raises(UserError, match=r"setting\.retraining"):
        make_report([a, b], tmp_path / "rep2")


def test_the_same_seed_in_both_workdirs_is_refused(tmp_path):
    a = _workdir(tmp_path / "a", (0, 1, 2))
    b = _workdir(tmp_path / "b", (2, 3, 4))
    with pytest.raises(UserError, match=r"seed 2 is in both .*first_seed"):
        make_report([a, b], tmp_path / "rep")
    assert not (tmp_path / "rep").exists()


def test_same_stores_trained_differently_are_refused_by_name(tmp_path):
    a = _workdir(tmp_path / "a", (0, 1, 2))
    b = _workdir(tmp_path / "b", (3, 4, 5), lr=1e-3)
    with pytest.raises(UserError, match=r"retrain\.model_config\.beta-vae\.lr \(0\.0005 vs 0\.001\)"):
        make_report([a, b], tmp_path / "rep")
    # another preset or other code on the same stores: also not one experiment
    inputs = json.loads((b / "report_inputs.json").read_text())
    inputs["provenance"]["config"] = _config(3)
    inputs["preset"] = "cpu"
    inputs["provenance"]["code_version"]["source_digest"] = "e" * 64
    write_inputs(b, inputs)
    found = differences(load_inputs(a), load_inputs(b))
    assert found == ["preset 'quick' vs 'cpu'", "code (source digest ffffffffffffffff vs eeeeeeeeeeeeeeee)"]


def test_workdirs_on_other_stores_stay_groups_of_their_own(tmp_path):
    a = _workdir(tmp_path / "a", (0, 1, 2))
    b = _workdir(tmp_path / "b", (0, 1, 2), lr=1e-3)
    inputs = json.loads((b / "report_inputs.json").read_text())
    inputs["stores"]["mod"]["digest"] = "d" * 64          # another manipulation: another experiment
    write_inputs(b, inputs)
    groups = pool([load_inputs(a), load_inputs(b)])
    assert len(groups) == 2 and all("_parts" not in g for g in groups)


def _random_m(root, seeds, digest="r" * 64) -> dict:
    """report_inputs' ``random_m`` as the writer records it: the random-ψ control's store and the β-VAEs on it."""
    return {"store": {"path": str(root / "apply-random" / "mod-random.zarr"), "digest": digest, "epsilon": 0.175},
            "runs": [{"model": "beta-vae", "variant": "mod-random", "seed": s, "run_dir": str(root / f"rnd-{s}"),
                      "metrics": {"mig": {"mig": 0.1 + 0.01 * s}}} for s in seeds]}


@pytest.mark.parametrize("with_random_first", [True, False])
def test_a_part_that_trained_nothing_on_the_random_m_pools_with_one_that_did(tmp_path, with_random_first):
    """The cpu preset's extension: the first part retrains the β-VAE also on the random-ψ control's m; a second part
    adds other models (``--set retrain.models=[...]``), so its stage apply-random writes no store. Same experiment:
    one group, the random-m runs kept whichever part comes first; another random-ψ store is another experiment."""
    a = tmp_path / "a"
    first = write_fake_workdir(a, seeds=(0, 1, 2), robustness=False, computed=False, config=_config(0))
    first["random_m"] = _random_m(a, (0, 1, 2))
    write_inputs(a, first)
    b = tmp_path / "b"
    second = write_fake_workdir(b, seeds=(0, 1, 2), robustness=False, computed=False,
                                config=_config(0, models=("pcl",)))
    second["runs"] = [r for r in second["runs"] if r["model"] == "pcl"]
    first["runs"] = [r for r in first["runs"] if r["model"] != "pcl"]
    write_inputs(a, first)
    write_inputs(b, second)
    loaded = [load_inputs(a), load_inputs(b)]
    assert "random_m" not in loaded[1] or not loaded[1]["random_m"]
    (group,) = pool(loaded if with_random_first else loaded[::-1])
    assert sorted(r["seed"] for r in group["random_m"]["runs"]) == [0, 1, 2]
    assert group["random_m"]["store"]["digest"] == "r" * 64
    assert {r["model"] for r in group["runs"]} == {r["model"] for i in loaded for r in i["runs"]}
    md = make_report([a, b] if with_random_first else [b, a], tmp_path / "rep")["markdown"].read_text()
    assert "Retrained on the random m" in md and "**Pooled runs.**" in md

    second["random_m"] = _random_m(b, (5,), digest="s" * 64)   # another random ψ: not the same data
    write_inputs(b, second)
    assert len(pool([load_inputs(a), load_inputs(b)])) == 2


def test_a_reports_archived_inputs_pool_with_a_later_workdir_after_the_first_is_gone(tmp_path):
    """The cpu run's case (session 38): part 1's workdir was lost with its machine, its report's archive
    (REPORT/inputs/part-1) kept; part 2, trained later on the same stores recomputed, pools with the archive as it
    would have with the workdir, and the pooled report archives both parts again."""
    import shutil

    from probe.report.schema import ARCHIVE_DIR

    a = _workdir(tmp_path / "a", (0, 1, 2))
    make_report(a, tmp_path / "rep1")
    archive = tmp_path / "rep1" / ARCHIVE_DIR / "part-1"
    from_workdir = make_report([a, _workdir(tmp_path / "b", (3, 4, 5))], tmp_path / "with-workdir")
    shutil.rmtree(a)                                             # part 1's workdir gone, its report's archive left
    out = make_report([archive, tmp_path / "b"], tmp_path / "rep")
    summary = json.loads(out["summary"].read_text())
    assert len(summary["datasets"]) == 1
    cells = summary["tables"]["mig"]["models"]["beta-vae"]["datasets"]["dsprites"]
    assert cells["orig"]["n"] == 6 and sorted(cells["orig"]["seeds"]) == [0, 1, 2, 3, 4, 5]
    # the same numbers as pooling the two workdirs while the first still stood
    expected = json.loads(from_workdir["summary"].read_text())
    assert summary["tables"] == expected["tables"] and summary["datasets"] == expected["datasets"]
    for part in ("part-1", "part-2"):
        assert load_inputs(tmp_path / "rep" / ARCHIVE_DIR / part)["runs"]


def test_rewriting_a_copied_workdirs_inputs_leaves_its_hard_linked_source_as_it_was(tmp_path):
    # long_run.sh's FROM copy hard-links the source's report_inputs.json; benchmarks/pool_part.sh takes the copy's
    # file as its own only when it is newer than the part's last leg. Both hold only while write_inputs replaces the
    # file (a new inode) instead of writing through the link into the source workdir.
    source, copy = tmp_path / "source", tmp_path / "copy"
    source.mkdir()
    copy.mkdir()
    first = write_inputs(source, {"runs": ["source"]})
    (copy / first.name).hardlink_to(first)
    before = first.read_bytes()
    write_inputs(copy, {"runs": ["copy"]})
    assert first.read_bytes() == before
    assert json.loads((copy / first.name).read_text())["runs"] == ["copy"]
    assert (copy / first.name).stat().st_ino != first.stat().st_ino
