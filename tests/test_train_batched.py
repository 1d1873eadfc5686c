"""Batched training (probe.train.batched): each member equals the seed trained alone; kill -9 and resume work.

The loop engine runs the single-run code per member: bit-identical for every model. The vmap engine shares one
step between members: equal to the single run to float rounding (the vmapped backward sums in another order),
checked here after 20 steps with the tolerance docs/notes/train.md states.
"""

from __future__ import annotations

import json

import pytest
import torch

from probe.errors import UserError
from probe.train import load_run, train_run
from probe.train.batched import choose_engine, train_runs
from probe.train.trainer import select_device
from conftest import run_probe

FAST = {"batch_size": 8, "log_every": 5, "checkpoint_every": 10}
SEEDS = (3, 4, 5)
# the stated tolerance of a vmap member against the seed trained alone after 20 steps (float32 rounding, CPU)
PARAM_ATOL, LOSS_RTOL = 1e-4, 1e-4


def _configs(model, steps=20, seeds=SEEDS, **model_config):
    return [{"model": model, "seed": s, "model_config": dict(model_config), "train": {"steps": steps, **FAST}}
            for s in seeds]


def _rows(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("img_per_s", "wall_time_s")} for r in rows]


def _state(run_dir):
    return load_run(run_dir)[0].state_dict()


def _checkpoint_keys(run_dir):
    payload = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    return {k: sorted(v) if isinstance(v, dict) else None for k, v in payload.items()}


@pytest.mark.parametrize("model", ["beta-vae", "factor-vae", "slow-vae", "tripod"])
def test_loop_member_is_bit_identical_to_the_seed_alone(model, make_toy_store, tmp_path):
    store = make_toy_store()
    narrow = {"tripod": {"enc_widths": [8, 8, 16, 16, 32], "enc_hidden": 32, "dec_widths": [32, 16, 16, 8],
                         "cond_dim": 16}}.get(model, {})
    configs = _configs(model, **narrow)
    outs = [tmp_path / f"b{s}" for s in SEEDS]
    results = train_runs(configs, store, outs, engine="loop")
    assert results == outs
    for config, out in zip(configs, outs):
        alone = train_run(config, store, tmp_path / f"alone{config['seed']}", progress=False)
        assert _rows(out) == _rows(alone)
        a, b = _state(out), _state(alone)
        assert all(torch.equal(a[k], b[k]) for k in a)
    batched = json.loads((outs[0] / "config.json").read_text())["runtime"]["batched"]
    assert batched == {"engine": "loop", "members": 3}


@pytest.mark.parametrize("model", ["beta-vae", "beta-tcvae", "pcl", "ae"])
def test_vmap_member_equals_the_seed_alone_within_float_rounding(model, make_toy_store, tmp_path):
    store = make_toy_store()
    configs = _configs(model)
    outs = [tmp_path / f"v{s}" for s in SEEDS]
    assert all(isinstance(r, type(outs[0])) for r in train_runs(configs, store, outs, engine="vmap"))
    for config, out in zip(configs, outs):
        alone = train_run(config, store, tmp_path / f"alone{config['seed']}", progress=False)
        rows_v, rows_a = _rows(out), _rows(alone)
        assert [r["step"] for r in rows_v] == [r["step"] for r in rows_a] == [5, 10, 15, 20]
        for rv, ra in zip(rows_v, rows_a):
            assert rv.keys() == ra.keys()
            for key in ra:
                assert rv[key] == pytest.approx(ra[key], rel=LOSS_RTOL, abs=1e-6), (key, rv["step"])
        a, b = _state(out), _state(alone)
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(a[key], b[key], atol=PARAM_ATOL, rtol=0)
        # the member's checkpoint has the single run's layout, so `probe train --resume` could continue it
        assert _checkpoint_keys(out) == _checkpoint_keys(alone)
    first, second = _state(outs[0]), _state(outs[1])  # members are distinct runs, not copies
    assert any(not torch.equal(first[k], second[k]) for k in first)


@pytest.mark.parametrize("engine", ["loop", "vmap"])
def test_batched_job_killed_mid_run_resumes_to_the_same_result(engine, make_toy_store, tmp_path):
    store = make_toy_store()
    configs = _configs("beta-vae", steps=30)
    straight = [tmp_path / f"s{s}" for s in SEEDS]
    killed = [tmp_path / f"k{s}" for s in SEEDS]
    train_runs(configs, store, straight, engine=engine)
    train_runs(configs, store, killed, engine=engine, stop_after=25)  # like kill -9 after step 25 (checkpoint 20)
    assert all(not (k / "done.json").exists() for k in killed)
    assert all(torch.load(k / "checkpoint.pt", weights_only=True)["step"] == 20 for k in killed)
    train_runs(configs, store, killed, engine=engine)
    for s, k in zip(straight, killed):
        assert _rows(s) == _rows(k)
        a, b = _state(s), _state(k)
        assert all(torch.equal(a[key], b[key]) for key in a)


def test_vmap_members_left_at_different_steps_are_brought_level(make_toy_store, tmp_path):
    """A kill between two members' checkpoint writes leaves them at different steps; the job still finishes."""
    store = make_toy_store()
    configs = _configs("beta-vae", steps=30)
    outs = [tmp_path / f"m{s}" for s in SEEDS]
    train_runs(configs[:1], store, outs[:1], engine="loop", stop_after=25)       # member 0 at checkpoint 20
    train_runs(configs[1:], store, outs[1:], engine="loop", stop_after=15)       # members 1, 2 at checkpoint 10
    train_runs(configs, store, outs, engine="vmap")
    for config, out in zip(configs, outs):
        assert json.loads((out / "done.json").read_text())["steps"] == 30
        alone = train_run(config, store, tmp_path / f"alone{config['seed']}", progress=False)
        a, b = _state(out), _state(alone)
        for key in a:
            torch.testing.assert_close(a[key], b[key], atol=PARAM_ATOL, rtol=0)


def test_a_diverging_member_fails_alone(make_toy_store, tmp_path):
    store = make_toy_store()
    configs = _configs("beta-vae", steps=20)
    configs[1]["model_config"]["lr"] = 1e6  # diverges; vmap needs equal configs, so this runs through loop
    outs = [tmp_path / f"d{s}" for s in SEEDS]
    results = train_runs(configs, store, outs, engine="auto")
    assert isinstance(results[1], UserError) and "diverged" in str(results[1])
    assert (outs[1] / "failed.json").exists()
    assert results[0] == outs[0] and results[2] == outs[2]
    assert (outs[0] / "done.json").exists() and (outs[2] / "done.json").exists()


def test_engine_choice(make_toy_store):
    store = make_toy_store()
    cpu = select_device("cpu")
    assert choose_engine("auto", _configs("beta-vae"), store, cpu) == "loop"  # CPU: vmapped convs are no faster
    assert choose_engine("vmap", _configs("beta-vae"), store, cpu) == "vmap"
    for model, why in [("factor-vae", "training_step"), ("tripod", "not vmappable")]:
        with pytest.raises(UserError, match=why):
            choose_engine("vmap", _configs(model), store, cpu)
    differing = _configs("beta-vae")
    differing[0]["model_config"]["beta"] = 2.0
    with pytest.raises(UserError, match="differ in model_config"):
        choose_engine("vmap", differing, store, cpu)


def test_cli_trains_seeds_as_one_batched_job(make_toy_store, tmp_path, capsys):
    store = make_toy_store()
    out = tmp_path / "seeds"
    code, stdout, err = run_probe(["train", "beta-vae", "--data", str(store.path), "--out", str(out), "--steps", "10",
                                   "--seeds", "3-4", "--set", "batch_size=8", "--set", "log_every=5", "--no-progress"],
                                  capsys)
    assert code == 0, err
    assert stdout.split() == [str(out / "seed3"), str(out / "seed4")]
    alone = train_run({"model": "beta-vae", "seed": 4, "model_config": {},
                       "train": {"steps": 10, "batch_size": 8, "log_every": 5}}, store, tmp_path / "alone",
                      progress=False)
    assert _rows(out / "seed4") == _rows(alone)
    for bad in ("3-x", "2,2"):
        code, _, err = run_probe(["train", "beta-vae", "--data", str(store.path), "--out", str(tmp_path / "bad"),
                                  "--seeds", bad], capsys)
        assert code == 2 and "--seeds" in err and not (tmp_path / "bad").exists()
