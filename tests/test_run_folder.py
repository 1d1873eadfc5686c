"""The run folder type and the one checkpoint/resume loop, on a toy state (no store, no model registry)."""

from __future__ import annotations

import json

import pytest
import torch

from probe.errors import UserError
from probe.train import ManipulationRunFolder, RunFolder
from probe.train.loop import Schedule, open_run


def _identity_of(record: dict) -> dict:
    return {"seed": record.get("seed"), "lr": record.get("lr")}


class ToyState:
    """A linear regression with SGD whose batches come from a seeded generator."""

    def __init__(self, seed: int = 0, nan_from: int | None = None):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.model = torch.nn.Linear(3, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.generator = torch.Generator().manual_seed(seed + 1)
        self.nan_from = nan_from

    def state_dict(self) -> dict:
        return {"model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "opt": self.opt.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.generator.set_state(state["generator"])

    def step(self, i: int) -> dict:
        x = torch.randn(8, 3, generator=self.generator)
        loss = (self.model(x).squeeze(1) - x.sum(1)).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        if self.nan_from is not None and i >= self.nan_from:
            loss = loss * float("nan")
        return {"loss": loss.detach(), "half": float(loss.detach()) / 2, "ignored": "text"}


def _train(path, steps=10, *, resume=True, stop_after=None, nan_from=None, folder_type=RunFolder):
    folder = folder_type(path)
    session = open_run(folder, {"seed": 0, "lr": 0.1, "steps": steps}, _identity_of, steps=steps, resume=resume)
    if session is None:
        return folder, None
    state = ToyState(nan_from=nan_from)
    completed = session.drive(state, state.step, Schedule(steps, log_every=2, checkpoint_every=3),
                              finish=lambda row: {"final": {"loss": row.get("loss")}}, label="toy",
                              device=torch.device("cpu"), watch="loss", progress=False, stop_after=stop_after)
    return folder, completed


def test_files_round_trip(tmp_path):
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    folder.write_config({"seed": 1, "nested": {"a": [1, 2]}})
    assert folder.read_config() == {"seed": 1, "nested": {"a": [1, 2]}}
    assert not folder.is_complete and not folder.has_checkpoint
    folder.save_checkpoint({"step": 3, "weights": torch.arange(4.0)})
    payload = folder.load_checkpoint()
    assert payload["step"] == 3 and torch.equal(payload["weights"], torch.arange(4.0))
    assert folder.checkpoint_sha256() is not None
    folder.write_done({"steps": 3, "final": {"loss": 0.5}})
    assert folder.is_complete and folder.read_done()["final"] == {"loss": 0.5}
    folder.clear_done()
    assert not folder.is_complete


def test_completeness_and_foreign_files_are_user_errors(tmp_path):
    folder = RunFolder(tmp_path)
    with pytest.raises(UserError, match="not complete.*retrain it"):
        folder.require_complete("retrain it")
    with pytest.raises(UserError, match="is not a run folder"):
        folder.read_config()
    with pytest.raises(UserError, match="no checkpoint yet"):
        folder.load_checkpoint()
    with pytest.raises(UserError, match="probe run folder"):
        folder.require_checkpoint()
    torch.save({"something": 1}, folder.checkpoint_path)
    with pytest.raises(UserError, match="not a probe checkpoint"):
        folder.load_checkpoint()
    folder.checkpoint_path.write_bytes(b"truncated")
    with pytest.raises(UserError, match="cannot read checkpoint"):
        folder.load_checkpoint()


def test_log_trimming_keeps_rows_up_to_the_checkpoint_and_drops_a_cut_line(tmp_path):
    folder = RunFolder(tmp_path)
    with folder.open_log() as log:
        for step in (2, 4, 6):
            log.write(json.dumps({"step": step, "loss": step / 10}) + "\n")
        log.write('{"step": 8, "lo')  # killed mid-line
    assert [r["step"] for r in folder.read_log()] == [2, 4, 6]
    folder.trim_log(4)
    assert folder.log_path.read_text() == '{"step": 2, "loss": 0.2}\n{"step": 4, "loss": 0.4}\n'


def test_config_mismatch_names_the_keys_that_differ(tmp_path):
    folder = RunFolder(tmp_path)
    folder.write_config({"seed": 0, "lr": 0.1, "steps": 5})
    folder.check_config({"seed": 0, "lr": 0.1}, _identity_of)
    with pytest.raises(UserError, match=r"different training run: a different configuration \(differs in: lr\)"):
        folder.check_config({"seed": 0, "lr": 0.2}, _identity_of)


def test_manipulation_folder_names_its_own_log(tmp_path):
    assert RunFolder(tmp_path).log_path.name != ManipulationRunFolder(tmp_path).log_path.name
    folder = ManipulationRunFolder(tmp_path)
    folder.write_before({"entangled": 1.0})
    assert folder.read_before() == {"entangled": 1.0}


def test_loop_resumes_bit_identically_after_a_kill(tmp_path):
    straight, completed = _train(tmp_path / "straight")
    assert completed
    killed, completed = _train(tmp_path / "killed", stop_after=5)  # last checkpoint: step 3, mid log interval
    assert completed is False and not killed.is_complete
    assert killed.load_checkpoint()["step"] == 3
    _, completed = _train(tmp_path / "killed")
    assert completed and killed.is_complete
    assert straight.read_log() == killed.read_log()
    assert [r["step"] for r in straight.read_log()] == [2, 4, 6, 8, 10]
    assert set(straight.read_log()[0]) == {"step", "loss", "half"}  # no throughput without images_per_step
    assert straight.read_done()["final"] == killed.read_done()["final"]
    a, b = straight.load_checkpoint(), killed.load_checkpoint()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_open_run_rules(tmp_path):
    folder, _ = _train(tmp_path / "run", steps=6)
    mtime = folder.checkpoint_path.stat().st_mtime_ns
    assert _train(tmp_path / "run", steps=6)[1] is None  # complete: returned untouched
    assert folder.checkpoint_path.stat().st_mtime_ns == mtime
    with pytest.raises(UserError, match="already exists and holds a complete training run"):
        _train(tmp_path / "run", steps=6, resume=False)
    with pytest.raises(UserError, match="cannot be shortened"):
        _train(tmp_path / "run", steps=4)
    _, completed = _train(tmp_path / "run", steps=10)  # extending a finished run
    assert completed and folder.read_done()["steps"] == 10
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "stray").write_text("x")
    with pytest.raises(UserError, match="holds no run"):
        _train(tmp_path / "other")
    with pytest.raises(UserError, match="does not exist"):
        _train(tmp_path / "missing" / "run")


def test_non_finite_watched_value_stops_before_the_next_checkpoint(tmp_path):
    with pytest.raises(UserError, match=r"NaN or infinite at step 5 of 10 \(toy\).*checkpoint \(step 3\)"):
        _train(tmp_path / "run", nan_from=5)
    folder = RunFolder(tmp_path / "run")
    assert folder.load_checkpoint()["step"] == 3 and not folder.is_complete
    assert [r["step"] for r in folder.read_log()] == [2, 4]


def test_step_costs_are_the_logged_intervals_and_skip_a_resume_that_restarts_the_clock(tmp_path):
    folder = RunFolder(tmp_path)
    rows = [{"step": 100, "wall_time_s": 1.0}, {"step": 200, "wall_time_s": 3.0}, {"step": 300, "wall_time_s": 4.0},
            {"step": 400, "wall_time_s": 0.5},   # resumed: the clock restarted from the checkpoint's wall time
            {"step": 500, "wall_time_s": 2.0}, {"step": 600, "loss": 1.0}]  # a row without a wall time
    with folder.open_log() as log:
        log.write("".join(json.dumps(r) + "\n" for r in rows))
    assert folder.step_costs() == pytest.approx([0.02, 0.01, 0.015])
    assert RunFolder(tmp_path / "none").step_costs() == []
