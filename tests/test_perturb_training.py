"""probe.perturb with real (tiny) β-VAE restarts: adversarial training, resume, apply, Figure 4."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from probe.errors import UserError

TINY = {"steps": 4, "batch_size": 8, "z_samples": 2, "checkpoint_every": 2, "log_every": 1, "eval_images": 32}


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny convolutions on a shared 2-core machine run fastest (and deterministically) on one thread
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def restarts(tmp_path_factory):
    """A 16×16 toy store named "dsprites" (so ε defaults to 0.1) and two briefly trained β-VAEs on it."""
    from conftest import toy_dsprites_restarts

    root = tmp_path_factory.mktemp("perturb")
    store, runs = toy_dsprites_restarts(root, steps=10)
    return store, runs, root


@pytest.fixture(scope="module")
def manipulation(restarts):
    from probe.perturb import train_manipulation

    store, runs, root = restarts
    torch.set_num_threads(1)
    return train_manipulation(store.path, [runs[0]], [runs[1]], root / "manip", TINY, progress=False)


def test_training_outputs_and_provenance(restarts, manipulation):
    store, runs, _ = restarts
    config = json.loads((manipulation / "config.json").read_text())
    assert config["config"]["epsilon"] == 0.1 and config["store"]["digest"] == store.digest
    assert config["entangled"] == [str(runs[0])] and config["disentangled"] == [str(runs[1])]
    assert set(config["restart_digests"]) == {str(runs[0]), str(runs[1])} and "source_digest" in config["code_version"]
    rows = [json.loads(line) for line in (manipulation / "losses.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        assert r["objective"] == pytest.approx(r["rec_entangled"] - r["rec_disentangled"], rel=1e-5, abs=1e-4)
        assert np.isfinite([r["decoder_rec_entangled"], r["decoder_rec_disentangled"]]).all()
    done = json.loads((manipulation / "done.json").read_text())
    assert done["steps"] == 4
    for when in ("before", "after"):
        f = done["final"][when]
        assert f["entangled"] > f["target_entropy"] and f["disentangled"] > f["target_entropy"]  # BCE ≥ H(target)
    # a finished run with the same inputs is returned as is; different inputs are refused
    from probe.perturb import train_manipulation

    assert train_manipulation(store.path, [runs[0]], [runs[1]], manipulation, TINY, progress=False) == manipulation
    with pytest.raises(UserError, match="different manipulation run"):
        train_manipulation(store.path, [runs[1]], [runs[0]], manipulation, TINY, progress=False)
    with pytest.raises(UserError, match="both entangled and disentangled"):
        train_manipulation(store.path, [runs[0]], [runs[0]], manipulation.parent / "x", TINY, progress=False)


def test_psi_step_lowers_the_adversarial_objective(restarts):
    """One Adam step on ψ decreases L_ent − L_dis on the batch it was computed on (the sign is right)."""
    from probe.data import open_store
    from probe.perturb.adversarial import ManipulationTrainer, resolve_manipulation_config

    store, runs, root = restarts
    cfg = resolve_manipulation_config({**TINY, "lr": 1e-3, "batch_size": 32}, "dsprites")
    trainer = ManipulationTrainer(open_store(store.path), cfg, [runs[0]], [runs[1]], torch.device("cpu"))
    state = trainer.generator.get_state()
    batch = trainer._draw()
    trainer.generator.set_state(state)
    before = float(trainer.objective(*batch)[2].detach())
    stepped = trainer.manipulation_step()[2]
    after = float(trainer.objective(*batch)[2].detach())
    assert stepped == pytest.approx(before, rel=1e-6)
    assert after < before


def crash_after_checkpoint(monkeypatch, *, step: int):
    """Make every run folder raise KeyboardInterrupt right after writing its checkpoint of ``step`` (a kill between
    checkpoints); returns the original ``RunFolder.save_checkpoint`` to restore."""
    from probe.train import RunFolder

    original = RunFolder.save_checkpoint

    def crash(self, payload):
        original(self, payload)
        if payload["step"] == step:
            raise KeyboardInterrupt

    monkeypatch.setattr(RunFolder, "save_checkpoint", crash)
    return original


def test_resume_is_bit_identical(restarts, monkeypatch):
    from probe.perturb import train_manipulation
    from probe.train import RunFolder

    store, runs, root = restarts
    cfg = {**TINY, "steps": 4, "checkpoint_every": 2, "log_every": 1}
    straight = train_manipulation(store.path, [runs[0]], [runs[1]], root / "straight", cfg, progress=False)

    original = crash_after_checkpoint(monkeypatch, step=2)
    with pytest.raises(KeyboardInterrupt):
        train_manipulation(store.path, [runs[0]], [runs[1]], root / "resumed", cfg, progress=False)
    assert not (root / "resumed" / "done.json").exists()
    with pytest.raises(UserError, match="unfinished"):
        train_manipulation(store.path, [runs[0]], [runs[1]], root / "resumed", cfg, resume=False, progress=False)
    monkeypatch.setattr(RunFolder, "save_checkpoint", original)
    resumed = train_manipulation(store.path, [runs[0]], [runs[1]], root / "resumed", cfg, progress=False)

    a = torch.load(straight / "checkpoint.pt", weights_only=False)
    b = torch.load(resumed / "checkpoint.pt", weights_only=False)
    for key in ("manipulation",):
        for name in a[key]:
            assert torch.equal(a[key][name], b[key][name]), name
    for side in ("decoders_entangled", "decoders_disentangled"):
        for sa, sb in zip(a[side], b[side]):
            assert all(torch.equal(sa[n], sb[n]) for n in sa)
    assert torch.equal(a["generator"], b["generator"])
    la = (straight / "losses.jsonl").read_text().splitlines()
    lb = (resumed / "losses.jsonl").read_text().splitlines()
    assert la == lb
    da, db = (json.loads((d / "done.json").read_text())["final"] for d in (straight, resumed))
    assert da == db


def test_an_interrupted_manipulation_and_a_partner_are_kept_in_a_moved_folder(restarts, monkeypatch, tmp_path):
    """Moved with its store and restarts (a pipeline workdir copied elsewhere), an interrupted manipulation continues
    where it now lies and a finished rotated partner is reused: their identity is the store's content and the
    checkpoints they were built from, not paths."""
    import shutil
    from pathlib import Path

    from probe.perturb import train_manipulation
    from probe.perturb.partner import rotated_partner
    from probe.train import RunFolder

    store, runs, root = restarts
    cfg = {**TINY, "steps": 4, "checkpoint_every": 2, "log_every": 1}
    here = tmp_path / "here"
    here.mkdir()
    for src in (store.path, *runs):
        shutil.copytree(src, here / Path(src).name)
    partner = rotated_partner(here / "r1", here / "partner", here / "orig.zarr")
    built = (partner / "checkpoint.pt").stat().st_mtime_ns
    original = crash_after_checkpoint(monkeypatch, step=2)
    with pytest.raises(KeyboardInterrupt):
        train_manipulation(here / "orig.zarr", [here / "r0"], [here / "r1"], here / "manip", cfg, progress=False)
    monkeypatch.setattr(RunFolder, "save_checkpoint", original)

    there = tmp_path / "there"
    here.rename(there)
    assert rotated_partner(there / "r1", there / "partner", there / "orig.zarr") == there / "partner"
    assert (there / "partner" / "checkpoint.pt").stat().st_mtime_ns == built  # reused, not rebuilt
    resumed = train_manipulation(there / "orig.zarr", [there / "r0"], [there / "r1"], there / "manip", cfg,
                                 progress=False)
    straight = train_manipulation(store.path, [runs[0]], [runs[1]], root / "straight", cfg, progress=False)
    assert (resumed / "losses.jsonl").read_text() == (straight / "losses.jsonl").read_text()
    assert json.loads((resumed / "config.json").read_text())["entangled"] == [str(there / "r0")]  # where it is now


def test_random_psi_control_keeps_psi_at_its_initialisation_while_the_decoders_learn(restarts, manipulation):
    """freeze_psi (the frozen random-ψ control, issue 24): ψ bit-identical to its seeded initialisation after training,
    both sides' decoders fine-tuned, and the same loop as the learned run: its first logged step (ψ still at the
    shared initialisation, the same batches and z noise) equals the learned run's exactly."""
    from probe.data import open_store
    from probe.perturb import train_manipulation
    from probe.perturb.adversarial import ManipulationTrainer, resolve_manipulation_config
    from probe.train import ManipulationRunFolder, load_run

    store, runs, root = restarts
    control = train_manipulation(store.path, [runs[0]], [runs[1]], root / "random", {**TINY, "freeze_psi": True},
                                 progress=False)
    cfg = resolve_manipulation_config({**TINY, "freeze_psi": True}, "dsprites")
    init = ManipulationTrainer(open_store(store.path), cfg, [runs[0]], [runs[1]], torch.device("cpu")).net.state_dict()
    state = ManipulationRunFolder(control).load_checkpoint()
    assert state["step"] == 4 and state["manipulation"].keys() == init.keys()
    assert all(torch.equal(state["manipulation"][k], init[k]) for k in init)  # ψ never moved
    learned = ManipulationRunFolder(manipulation).load_checkpoint()["manipulation"]
    assert any(not torch.equal(learned[k], init[k]) for k in init)  # while the learned run's ψ did
    for side, run in (("decoders_entangled", runs[0]), ("decoders_disentangled", runs[1])):
        start = load_run(run, device="cpu")[0].decoder.state_dict()
        tuned = state[side][0]
        assert any(not torch.equal(tuned[k], start[k]) for k in start), side  # the decoders learned
    rows = [(d / "losses.jsonl").read_text().splitlines() for d in (control, manipulation)]
    assert rows[0][0] == rows[1][0] and rows[0][1:] != rows[1][1:]
    done = json.loads((control / "done.json").read_text())["final"]
    learned_done = json.loads((manipulation / "done.json").read_text())["final"]
    assert done["before"] == learned_done["before"]  # x with the restarts' decoders: the same for both runs
    smooth = done["coverage"]["smoothness"]
    assert 0 <= smooth["high_frequency_share"] <= 1 and smooth["neighbour_diff_ratio"] >= 0
    assert done["coverage"]["linf_quantiles"]["p50"] < 0.1  # an untrained m spends little of ε (hence full_budget)


def test_frozen_decoders_keep_the_restarts_weights_while_psi_learns(restarts):
    """decoder_batches_per_step 0 (issue 24): the decoders end bit-identical to the restarts', ψ moves and lowers the
    objective against them, and each logged row's decoder losses are its ψ batch's (the decoders' losses on x′)."""
    from probe.perturb import train_manipulation
    from probe.perturb.adversarial import appendix_b1_deviations
    from probe.train import ManipulationRunFolder, load_run

    store, runs, root = restarts
    cfg = {**TINY, "decoder_batches_per_step": 0, "steps": 6, "manipulation_lr": 1e-2}
    out = train_manipulation(store.path, [runs[0]], [runs[1]], root / "frozen", cfg, progress=False)
    state = ManipulationRunFolder(out).load_checkpoint()
    for side, run in (("decoders_entangled", runs[0]), ("decoders_disentangled", runs[1])):
        start = load_run(run, device="cpu")[0].decoder.state_dict()
        assert all(torch.equal(state[side][0][k], start[k]) for k in start), side
    rows = [json.loads(line) for line in (out / "losses.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    assert all(r["decoder_rec_entangled"] == r["rec_entangled"] and r["decoder_rec_disentangled"] == r["rec_disentangled"]
               for r in rows)
    final = json.loads((out / "done.json").read_text())["final"]
    # with the decoders fixed, ψ alone moves the gap dis − ent; it moves it towards the entangled side
    assert final["after"]["dis_minus_ent"] > final["before"]["dis_minus_ent"]
    assert any("frozen at the restarts' weights" in d for d in appendix_b1_deviations(cfg, "dsprites"))
    with pytest.raises(UserError, match="decoder_batches_per_step"):
        train_manipulation(store.path, [runs[0]], [runs[1]], root / "bad", {**TINY, "decoder_batches_per_step": -1},
                           progress=False)


def test_permuted_m_gives_each_image_another_images_m_and_an_image_independent_m_is_unchanged(restarts, manipulation):
    """The done record's ``after_shuffled`` (session 44): the decoders scored on x′ where image i gets the m of image
    π(i). Checked against the same evaluation with ψ replaced by w_i ↦ m(w_π(i)), and for an m that ignores w
    (one pattern for every image) the permutation changes nothing."""
    from torch import nn

    from probe.data import open_store
    from probe.pipeline.stages.manipulate import run_record
    from probe.perturb.adversarial import ManipulationTrainer, resolve_manipulation_config, restore_trainer

    store, runs, _ = restarts
    final = json.loads((manipulation / "done.json").read_text())["final"]
    assert set(final["after_shuffled"]) == set(final["after"])
    record = run_record(manipulation)
    assert record["dis_minus_ent"]["after_shuffled"] == final["after_shuffled"]["dis_minus_ent"]
    # the finished run restored from its checkpoint rescores both readings of its done record exactly
    restored = restore_trainer(manipulation)
    assert restored.evaluate(manipulated=True) == pytest.approx(final["after"], rel=1e-6)
    assert restored.evaluate(manipulated=True, m_rows=torch.from_numpy(
        np.random.RandomState(restored.cfg["seed"] + 4).permutation(restored.eval_idx.shape[0]))) \
        == pytest.approx(final["after_shuffled"], rel=1e-6)

    cfg = resolve_manipulation_config(TINY, "dsprites")
    trainer = ManipulationTrainer(open_store(store.path), cfg, [runs[0]], [runs[1]], torch.device("cpu"))
    torch.manual_seed(3)
    with torch.no_grad():  # a ψ whose m varies with w enough to move the losses
        for p in trainer.net.parameters():
            p.mul_(50.0)
    n = trainer.eval_idx.shape[0]
    perm = torch.from_numpy(np.random.RandomState(7).permutation(n))
    w_eval = trainer.w[trainer.eval_idx]
    row_of = {tuple(v.tolist()): i for i, v in enumerate(w_eval)}
    net = trainer.net

    class Moved(nn.Module):  # w_i ↦ m(w_π(i)), by hand
        def forward(self, w):
            return net(w_eval[perm[[row_of[tuple(v.tolist())] for v in w]]])

    paired = trainer.evaluate(manipulated=True)
    shuffled = trainer.evaluate(manipulated=True, m_rows=perm)
    assert trainer.evaluate(manipulated=True, m_rows=torch.arange(n)) == paired
    trainer.net = Moved()
    assert trainer.evaluate(manipulated=True) == pytest.approx(shuffled, rel=1e-6)
    assert shuffled["dis_minus_ent"] != pytest.approx(paired["dis_minus_ent"], rel=1e-3)  # the test can fail

    pattern = net(w_eval[:1]).detach()

    class OnePattern(nn.Module):
        def forward(self, w):
            return pattern.expand(w.shape[0], *pattern.shape[1:])

    trainer.net = OnePattern()
    assert trainer.evaluate(manipulated=True, m_rows=perm) == trainer.evaluate(manipulated=True)


def test_apply_manipulation_writes_bounded_store(restarts, manipulation, tmp_path):
    from probe.data import open_store
    from probe.perturb import apply_manipulation, load_manipulation, manipulate, normalised_factors
    from probe.perturb.manipulation import to_uint8
    from probe.provenance import sha256_file

    store, _, _ = restarts
    eps = 0.5  # a large ε makes sure the manipulation really moves pixels (and folding happens)
    mod = apply_manipulation(store.path, manipulation, tmp_path / "mod.zarr", epsilon=eps)
    mod = open_store(mod.path)
    mod.verify()
    assert mod.origin["kind"] == "perturbed"
    assert mod.origin["parent"] == {"path": str(store.path), "digest": store.digest}
    assert mod.origin["config"]["epsilon"] == eps and mod.origin["config"]["trained_epsilon"] == 0.1
    assert mod.origin["config"]["manipulation"]["checkpoint_sha256"] == sha256_file(manipulation / "checkpoint.pt")
    assert np.array_equal(mod.factors, store.factors) and mod.name == store.name
    x, y = store.load_numpy(), mod.load_numpy()
    diff = np.abs(y.astype(int) - x.astype(int)) / 255
    assert diff.max() <= eps + 1 / 255 and diff.max() > 0
    assert mod.origin["max_abs_diff"] == pytest.approx(diff.max())
    net, info = load_manipulation(manipulation)
    with torch.no_grad():
        m = net(normalised_factors(store.factors, store.factor_sizes))
        expected = manipulate(torch.from_numpy(x).permute(0, 3, 1, 2).float() / 255, m, eps)
    assert np.abs(y.astype(int) - to_uint8(expected.permute(0, 2, 3, 1).numpy()).astype(int)).max() <= 1
    # the default ε is the trained one
    default = apply_manipulation(store.path, manipulation, tmp_path / "mod01.zarr")
    assert default.origin["config"]["epsilon"] == 0.1 and default.origin["max_abs_diff"] <= 0.1 + 1 / 255
    with pytest.raises(UserError, match="exists"):
        apply_manipulation(store.path, manipulation, tmp_path / "mod.zarr")
    with pytest.raises(UserError, match="trained on"):
        apply_manipulation(default.path, manipulation, tmp_path / "other.zarr")
    assert not (tmp_path / "other.zarr").exists()


def test_figure4(restarts, manipulation, tmp_path):
    import matplotlib.image as mpimg

    from probe.perturb import figure4

    store, _, _ = restarts
    out = figure4(store.path, manipulation, tmp_path / "fig4.png", n=3)
    img = mpimg.imread(out)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


def test_describe_restarts_records_mig_order_and_choice(restarts):
    from probe.metrics import evaluate_run
    from probe.perturb import describe_restarts

    store, runs, _ = restarts
    res = describe_restarts(runs, store.path, k=1, seed=0, num_samples=64, min_active_units=0, num_train=200)
    for run in runs:
        expected = evaluate_run(run, store.path, metrics=["mig"], seed=0, num_train=200)["metrics"]["mig"]["mig"]
        assert res["mig"][str(run)] == pytest.approx(expected)
        info = res["runs"][str(run)]
        assert sorted(info["order"]) == list(range(len(info["mean_variance"])))
        assert np.all(np.diff(np.asarray(info["mean_variance"])[info["order"]]) >= 0)
    low, high = sorted(map(str, runs), key=lambda r: (res["mig"][r], r))
    assert res["entangled"] == [low] and res["disentangled"] == [high]
    assert res["runs"][low]["selected"] == "entangled" and res["runs"][high]["selected"] == "disentangled"
    assert res["excluded"] == []
    # a threshold no run meets is a clear user error, not a silent choice
    with pytest.raises(UserError, match="active latent"):
        describe_restarts(runs, store.path, k=1, seed=0, num_samples=64, min_active_units=99, num_train=200)
