"""The stage engine with small fake stage functions: caching, digests, force/until, retries, locks, status,
and the config layer (presets, --set). Real stages are exercised in test_pipeline_smoke.py."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from probe.errors import UserError
from probe.pipeline import engine
from probe.pipeline.engine import Job, Stage, StageFailed, run_stages
from probe.pipeline.executors import local_cluster_size
from probe.pipeline.workdir import LOCK_FILE, workdir_lock, workdir_status


# -- fake job functions ----------------------------------------------------------------------------------------

def _count(ctx, name):
    counter = Path(os.environ["PROBE_TEST_COUNTER"])
    with open(counter, "a") as f:
        f.write(f"{ctx.stage}/{name}\n")


def fake_source(ctx, *, value):
    _count(ctx, "source")
    (ctx.job_dir / "data.txt").write_text(str(value))
    return {"path": str(ctx.job_dir / "data.txt"), "value": value}


def fake_square(ctx, *, i):
    _count(ctx, f"square{i}")
    src = ctx.inputs["source"]["jobs"]["src"]
    base = int(Path(src["path"]).read_text())
    print(f"squaring {i}")  # goes to the job's log
    return {"y": (base + i) ** 2}


def fake_flaky(ctx, *, i):
    """Fails on its first call in a given job folder, succeeds on the retry."""
    _count(ctx, f"flaky{i}")
    marker = ctx.job_dir / "tried"
    if not marker.exists():
        marker.write_text("1")
        raise RuntimeError("transient failure")
    return {"i": i}


def fake_broken(ctx, *, i):
    _count(ctx, f"broken{i}")
    if i == 1 and not os.environ.get("PROBE_TEST_FIXED"):
        raise ValueError(f"job {i} is broken")
    return {"i": i, "y": i}


def fake_square_batch(contexts, members):
    """The batched form of fake_square: one call for several jobs; member i = 1 fails on its first try."""
    _count(contexts[0], "batch:" + ",".join(str(m["i"]) for m in members))
    out = []
    for ctx, m in zip(contexts, members):
        marker = ctx.job_dir / "tried"
        if m["i"] == 1 and not marker.exists():
            marker.write_text("1")
            out.append(RuntimeError("member 1 diverged"))
        else:
            out.append(fake_square(ctx, **m))
    return out


def _sum(config, inputs, results):
    return {"total": sum(r["y"] for r in results.values()), "jobs": results}


def make_stages(value=3, n=3, square_fn=fake_square, extra=None):
    stages = [
        Stage("source", {"value": value}, [], lambda c: [Job("src", fake_source, {"value": c["value"]})]),
        Stage("square", {"n": n}, ["source"],
              lambda c: [Job(f"j{i}", square_fn, {"i": i}) for i in range(c["n"])], _sum),
        Stage("final", {}, ["square"], lambda c: [Job("f", fake_flaky, {"i": 0})]),
    ]
    return stages + (extra or [])


@pytest.fixture
def counter(tmp_path, monkeypatch):
    path = tmp_path / "calls.txt"
    path.write_text("")
    monkeypatch.setenv("PROBE_TEST_COUNTER", str(path))
    return lambda: [line for line in path.read_text().splitlines() if line]


def test_run_then_rerun_reuses_everything(tmp_path, counter):
    wd = tmp_path / "wd"
    results, reports = run_stages(make_stages(), wd)
    assert results["square"]["total"] == 9 + 16 + 25
    # the source file path was rewritten from the .partial folder to the final one, and exists
    src = results["source"]["jobs"]["src"]["path"]
    assert ".partial" not in src and Path(src).read_text() == "3"
    digests = engine.stage_digests(make_stages())
    assert Path(src).parent.parent.parent == wd.resolve() / "source" / digests["source"]
    calls = counter()
    # flaky final job: failed once, retried once
    assert calls.count("final/flaky0") == 2 and len(calls) == 1 + 3 + 2
    assert [r.jobs_run for r in reports] == [1, 3, 1]
    # per-job logs hold the job's prints
    assert "squaring 2" in (wd / "logs" / "square" / "j2.log").read_text()

    results2, reports2 = run_stages(make_stages(), wd)
    assert results2 == results
    assert all(r.cached and r.jobs_run == 0 for r in reports2)
    assert len(counter()) == len(calls)


def test_config_change_recomputes_downstream_only(tmp_path, counter):
    wd = tmp_path / "wd"
    run_stages(make_stages(n=2), wd)
    before = len(counter())
    results, reports = run_stages(make_stages(n=3), wd)
    assert [r.cached for r in reports] == [True, False, False]
    assert results["square"]["total"] == 9 + 16 + 25
    new = counter()[before:]
    assert "source/source" not in new and new.count("square/square0") == 1


def test_force_and_until(tmp_path, counter):
    wd = tmp_path / "wd"
    results, reports = run_stages(make_stages(), wd, until="square")
    assert set(results) == {"source", "square"} and len(reports) == 2
    assert not (wd / "final").exists()
    results, reports = run_stages(make_stages(), wd, force="square")
    assert [r.cached for r in reports] == [True, False, False]
    assert [r.jobs_run for r in reports] == [0, 3, 1]
    with pytest.raises(UserError, match="no such stage"):
        run_stages(make_stages(), wd, force="nope")


def test_failed_job_stops_stage_keeps_finished_jobs(tmp_path, counter, monkeypatch):
    wd = tmp_path / "wd"
    with pytest.raises(StageFailed) as info:
        run_stages(make_stages(square_fn=fake_broken), wd)
    msg = str(info.value)
    assert "'square'" in msg and "j1" in msg and "job 1 is broken" in msg
    assert str(wd.resolve() / "logs" / "square" / "j1.log") in msg
    calls = counter()
    assert calls.count("square/broken1") == 2 and calls.count("square/broken0") == 1  # retried once, others kept
    st = workdir_status(wd)
    square = next(s for s in st["stages"] if s["name"] == "square")
    assert square["state"] == "failed" and square["done"] == 2
    assert square["failed"][0]["job"] == "j1" and "broken" in square["failed"][0]["error"]
    assert st["running_pid"] is None

    monkeypatch.setenv("PROBE_TEST_FIXED", "1")
    results, reports = run_stages(make_stages(square_fn=fake_broken), wd)
    assert reports[1].jobs_reused == 2 and reports[1].jobs_run == 1
    new = counter()[len(calls):]
    assert "square/broken0" not in new and "square/broken1" in new
    assert all(s["state"] == "complete" for s in workdir_status(wd)["stages"])


def test_jobs_differing_only_in_seed_run_as_batched_tasks(tmp_path, counter):
    """Jobs with one batch key are fused into tasks of members_per_task(n, workers); every member gets its own
    job.json; a failed member is retried alone; the results equal unbatched ones."""
    from probe.pipeline.executors import SynchronousExecutor, members_per_task

    assert [members_per_task(n, 2) for n in (1, 2, 5, 10)] == [1, 1, 3, 5]
    assert members_per_task(10, 1) == 10 and members_per_task(200, 1) == 64

    class TwoWorkers(SynchronousExecutor):
        workers = 2

    def batched_square(c):
        return [Job(f"j{i}", fake_square, {"i": i}, batch="sq", batch_fn=fake_square_batch) for i in range(c["n"])]

    stages = make_stages(n=5)
    stages[1] = Stage("square", {"n": 5}, ["source"], batched_square, _sum)
    wd = tmp_path / "wd"
    results, reports = run_stages(stages, wd, executor=TwoWorkers())
    assert results["square"]["total"] == sum((3 + i) ** 2 for i in range(5))
    calls = [c for c in counter() if c.startswith("square/")]
    assert [c for c in calls if "batch:" in c] == ["square/batch:0,1,2", "square/batch:3,4"]
    assert calls.count("square/square1") == 1 and calls.count("square/square0") == 1  # member 1 retried alone
    for i in range(5):
        assert (wd / "square" / engine.stage_digests(stages)["square"] / "jobs" / f"j{i}" / "job.json").exists()
    assert "batched job of 3" in (wd / "logs" / "square" / "j1.log").read_text()
    unbatched, _ = run_stages(make_stages(n=5), tmp_path / "plain", until="square")
    assert unbatched["square"]["total"] == results["square"]["total"]


def test_lock_blocks_live_holder_and_takes_over_stale(tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        import socket

        (wd / LOCK_FILE).write_text(json.dumps({"pid": sleeper.pid, "host": socket.gethostname(), "started": "x"}))
        with pytest.raises(UserError, match=f"pid {sleeper.pid}"):
            with workdir_lock(wd):
                pass
    finally:
        sleeper.kill()
        sleeper.wait()
    # the holder is dead now: its lock is stale and is taken over
    with workdir_lock(wd):
        assert json.loads((wd / LOCK_FILE).read_text())["pid"] == os.getpid()
        with pytest.raises(UserError, match=f"pid {os.getpid()}"):  # a second run on the same workdir
            with workdir_lock(wd):
                pass
    assert not (wd / LOCK_FILE).exists()


def test_bad_job_key_and_missing_input_stage():
    with pytest.raises(ValueError):
        Job("a/b", fake_source)
    with pytest.raises(ValueError, match="needs"):
        engine.stage_digests([Stage("b", {}, ["a"], lambda c: [])])


def test_digest_depends_on_code_version_and_inputs():
    stages = make_stages()
    a = engine.stage_digests(stages, {"v": 1})
    b = engine.stage_digests(stages, {"v": 2})
    assert all(a[k] != b[k] for k in a)
    c = engine.stage_digests(make_stages(value=4), {"v": 1})
    assert c["source"] != a["source"] and c["square"] != a["square"] and c["final"] != a["final"]


def test_local_cluster_size():
    workers, threads = local_cluster_size()
    assert workers >= 1 and threads >= 1
    assert local_cluster_size(workers=1)[1] >= 1


# -- config layer -------------------------------------------------------------------------------------------

TOML = """
free_form = ["train.model_config"]
[pipeline]
kind = "modify"
[train]
steps = 100
models = ["a", "b"]
flag = true
model_config = {}
[presets.small]
train = {steps = 5}
[presets.bad]
train = {stepz = 5}
"""


def test_config_presets_and_set(tmp_path):
    from probe.pipeline.config import resolve

    path = tmp_path / "toy.toml"
    path.write_text(TOML)
    c = resolve(str(path), "small", {"train.models": "a,c", "train.model_config.a.beta": 2})
    assert c["train"]["steps"] == 5 and c["train"]["models"] == ["a", "c"]
    assert c["train"]["model_config"] == {"a": {"beta": 2}}
    assert c["pipeline"]["preset"] == "small" and c["pipeline"]["name"] == "toy"
    for overrides, match in [({"train.stepz": 3}, "unknown config key 'train.stepz'"),
                             ({"nope.x": 1}, "unknown config key 'nope'"),
                             ({"train.steps": "many"}, "expected a number"),
                             ({"train.flag": 3}, "expected true or false"),
                             ({"train": 3}, "is a table")]:
        with pytest.raises(UserError, match=match):
            resolve(str(path), "small", overrides)
    with pytest.raises(UserError, match="no preset 'huge'"):
        resolve(str(path), "huge")
    with pytest.raises(UserError, match="train.stepz"):
        resolve(str(path), "bad")
    with pytest.raises(UserError, match="unknown pipeline"):
        resolve("no-such-pipeline", "small")


def test_damaged_stage_record_is_reported_and_recomputed_from_its_jobs(tmp_path, counter):
    wd = tmp_path / "wd"
    results, _ = run_stages(make_stages(), wd)
    calls = len(counter())
    record = wd / "square" / engine.stage_digests(make_stages())["square"] / "stage.json"
    record.write_text(record.read_text()[:40])  # truncated, as by a full disk or a kill mid-copy
    assert {s["name"]: s["state"] for s in workdir_status(wd)["stages"]}["square"] == "damaged"
    results2, reports = run_stages(make_stages(), wd)
    assert results2 == results  # the same result, rebuilt from the finished jobs: no job ran again
    assert [r.cached for r in reports] == [True, False, True] and len(counter()) == calls
    assert json.loads(record.read_text())["result"] == results["square"]
    assert {s["name"]: s["state"] for s in workdir_status(wd)["stages"]}["square"] == "complete"


def test_progress_without_a_terminal_prints_finished_jobs_at_an_interval():
    import io

    from probe.pipeline.progress import Progress

    stream = io.StringIO()  # not a terminal
    progress = Progress(stream, interval_s=0.0)
    for done in range(4):
        progress.line(1, 2, "retrain", done, 3, None, final=done == 3)
    assert [line.split()[2] for line in stream.getvalue().splitlines()] == ["0/3", "1/3", "2/3", "3/3"]
    stream = io.StringIO()
    progress = Progress(stream, interval_s=3600.0)
    for done in range(4):
        progress.line(1, 2, "retrain", done, 3, None, final=done == 3)
    assert [line.split()[2] for line in stream.getvalue().splitlines()] == ["0/3", "3/3"]  # start and end only


def fake_provenance(ctx, *, workdir):
    from probe.pipeline.report_inputs import provenance

    return provenance({"workdir": workdir, "started": "not this", "t0": 0.0})


def test_provenance_sums_the_legs_of_a_run_that_failed_and_ran_again(tmp_path, counter, monkeypatch):
    from probe.pipeline.workdir import plan_legs, read_legs
    from probe.report.build import wall_time_text

    wd = tmp_path / "wd"
    report = Stage("report", {}, ["square"], lambda c: [Job("r", fake_provenance, {"workdir": str(wd.resolve())})],
                   local=True)
    with pytest.raises(StageFailed):  # leg 1: source, then square fails on j1
        run_stages(make_stages(square_fn=fake_broken, extra=[report]), wd)
    monkeypatch.setenv("PROBE_TEST_FIXED", "1")
    results, _ = run_stages(make_stages(square_fn=fake_broken, extra=[report]), wd)  # leg 2: square, final, report
    legs = read_legs(wd)
    assert len(legs) == 2 and all(leg["finished"] for leg in legs)
    digests = engine.stage_digests(make_stages(square_fn=fake_broken, extra=[report]))
    assert legs[0]["stages"] == [digests["source"], digests["square"]]
    assert legs[1]["stages"] == [digests["square"], digests["final"], digests["report"]]
    prov = results["report"]["jobs"]["r"]
    assert [leg["started"] for leg in prov["legs"]] == [legs[0]["started"], legs[1]["started"]]
    assert prov["started"] == legs[0]["started"]
    assert prov["legs"][0]["wall_time_s"] == legs[0]["wall_time_s"] > 0  # the finished leg as recorded
    assert 0 < prov["legs"][1]["wall_time_s"] <= legs[1]["wall_time_s"]  # the report's own leg, up to the report
    assert prov["wall_time_s"] == pytest.approx(prov["legs"][0]["wall_time_s"] + prov["legs"][1]["wall_time_s"])
    text = wall_time_text(prov)
    assert text.startswith(f"wall time {prov['wall_time_s']:.0f} s in 2 legs") and legs[1]["started"] in text

    # a rerun with every stage cached computes nothing: its leg is recorded but is not part of the result
    run_stages(make_stages(square_fn=fake_broken, extra=[report]), wd)
    assert len(read_legs(wd)) == 3 and read_legs(wd)[2]["stages"] == []
    assert [leg["started"] for leg in plan_legs(wd)] == [legs[0]["started"], legs[1]["started"]]
    assert wall_time_text({"wall_time_s": 12.4, "legs": [{"started": "t", "wall_time_s": 12.4}]}) == "wall time 12 s"


def test_a_leg_killed_inside_a_long_job_keeps_the_time_to_its_last_heartbeat(tmp_path):
    import time

    from probe.pipeline.workdir import Leg, read_legs

    leg = Leg(tmp_path, heartbeat_s=0.05)
    time.sleep(0.5)  # one long job: no job finishes, nothing else ticks; then the process is killed (no last tick)
    recorded = read_legs(tmp_path)[0]
    assert not recorded["finished"] and recorded["wall_time_s"] >= 0.3
    leg.tick(finished=True)
    final = read_legs(tmp_path)[0]["wall_time_s"]
    time.sleep(0.2)  # the heartbeat stopped with the leg: the finished record is not rewritten
    assert read_legs(tmp_path)[0] == {**recorded, "wall_time_s": final, "finished": True}
    leg.tick()
    assert read_legs(tmp_path)[0]["finished"] and read_legs(tmp_path)[0]["wall_time_s"] == final


# -- relocatable workdirs and damaged stages ----------------------------------------------------------------

def fake_keyed(ctx, *, i):
    """A result whose dict keys are paths (as the select stage keys its MIGs by run folder) and a non-path string."""
    src = ctx.inputs["source"]["jobs"]["src"]["path"]
    return {"by_path": {src: i}, "note": "not a path", "outside": "/nonexistent/dataset.h5"}


def fake_report(ctx, *, workdir):
    """Writes report_inputs.json as a report stage does (probe.report.schema.write_inputs with the workdir), into the
    workdir and into its job folder."""
    from probe.report.schema import write_inputs

    data = {"workdir": workdir, "stores": {"orig": {"path": ctx.inputs["source"]["jobs"]["src"]["path"]}},
            "runs": [{"model": "m", "variant": "orig", "seed": 0,
                      "run_dir": str(Path(ctx.inputs["source"]["jobs"]["src"]["path"]).parent)}]}
    for folder in (Path(workdir), ctx.job_dir):
        write_inputs(folder, data, workdir=workdir)
    return {"report_inputs": str(ctx.job_dir / "report_inputs.json"), "total": ctx.inputs["square"]["total"]}


def relocation_stages(workdir):
    keyed = Stage("keyed", {}, ["source"], lambda c: [Job("k", fake_keyed, {"i": 1})])
    report = Stage("report", {}, ["source", "square"],
                   lambda c: [Job("r", fake_report, {"workdir": str(Path(workdir).resolve())})], local=True)
    return make_stages(square_fn=fake_broken, extra=[keyed, report])


def _recorded_strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _recorded_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _recorded_strings(v)


def test_a_copied_workdir_resumes_and_reports_inside_the_copy(tmp_path, counter, monkeypatch):
    """A run stopped mid-stage (square's j1 fails), copied, the original moved away, and the copy's first stage record
    damaged (its recovery from job.json is where records of the original used to leak): the copy resumes, reuses every
    finished job, reads and writes nothing outside itself, and every recorded path resolves inside it."""
    from probe.pipeline.workdir import WORKDIR_MARK, recorded_paths
    from probe.report.schema import load_inputs

    original = tmp_path / "cluster" / "wd"
    with pytest.raises(StageFailed):
        run_stages(relocation_stages(original), original)
    copy = tmp_path / "laptop" / "wd"
    import shutil

    shutil.copytree(original, copy)
    original.rename(tmp_path / "cluster" / "gone")  # a read of the original fails from here on
    digests = engine.stage_digests(relocation_stages(copy))
    record = copy / "source" / digests["source"] / "stage.json"
    record.write_text(record.read_text()[:30])
    assert {s["name"]: s["state"] for s in workdir_status(copy)["stages"]}["source"] == "damaged"

    monkeypatch.setenv("PROBE_TEST_FIXED", "1")
    before = len(counter())
    results, reports = run_stages(relocation_stages(copy), copy)
    by_name = {r.name: r for r in reports}
    assert by_name["source"].jobs_reused == 1 and by_name["source"].jobs_run == 0  # rebuilt from its job.json
    assert by_name["square"].jobs_reused == 2 and by_name["square"].jobs_run == 1  # j0, j2 reused; j1 ran
    assert counter()[before:].count("square/broken1") == 1 and "square/broken0" not in counter()[before:]
    assert results["report"]["jobs"]["r"]["total"] == 0 + 1 + 2  # fake_broken: y = i
    assert all(s["state"] == "complete" for s in workdir_status(copy)["stages"])

    # in memory: absolute paths in the copy; on disk: every recorded path relative to the workdir and inside it
    src = results["source"]["jobs"]["src"]["path"]
    assert src == str(copy.resolve() / "source" / digests["source"] / "jobs" / "src" / "data.txt")
    assert results["keyed"]["jobs"]["k"]["by_path"] == {src: 1}
    assert results["keyed"]["jobs"]["k"]["outside"] == "/nonexistent/dataset.h5"
    records = [p for name in ("stage.json", "job.json", "error.json", "pipeline.json") for p in copy.rglob(name)]
    assert len([p for p in records if p.name == "job.json"]) == 1 + 3 + 1 + 1 + 1
    marked = 0
    for path in records:
        text = path.read_text()
        assert str(tmp_path / "cluster") not in text and str(copy.resolve()) not in text, path
        data = json.loads(text)
        for p in recorded_paths(data, copy.resolve()):
            assert p.exists() and copy.resolve() in p.parents, (path, p)
            marked += 1
        assert not [s for s in _recorded_strings(data) if s.startswith(os.sep)
                    and s != "/nonexistent/dataset.h5" and not s.startswith(sys.prefix)], path
    assert marked == 6  # the stage.json and job.json of source, keyed and report
    keyed_job = json.loads(next(copy.glob("keyed/*/jobs/k/job.json")).read_text())["result"]
    assert list(keyed_job["by_path"]) == [f"{WORKDIR_MARK}/source/{digests['source']}/jobs/src/data.txt"]
    assert keyed_job["note"] == "not a path"

    # the report reads report_inputs.json (here and in the job folder) with paths inside the copy, even once moved
    moved = tmp_path / "elsewhere"
    copy.rename(moved)
    for where in (moved, next(moved.glob("report/*/jobs/r"))):
        written = json.loads((where / "report_inputs.json").read_text())
        assert written["stores"]["orig"]["path"].startswith("$WORKDIR/") and not Path(written["workdir"]).is_absolute()
        inputs = load_inputs(where)  # absolute again, where the workdir now stands
        assert inputs["workdir"] == str(moved.resolve())
        for value in (inputs["stores"]["orig"]["path"], inputs["runs"][0]["run_dir"]):
            assert moved.resolve() in Path(value).parents and Path(value).exists()
        assert Path(inputs["stores"]["orig"]["path"]).read_text() == "3"


def test_report_inputs_copied_to_another_folder_keep_their_paths(tmp_path):
    from probe.report.schema import copy_inputs, load_inputs, write_inputs

    wd = tmp_path / "wd"
    (wd / "stage" / "jobs" / "x").mkdir(parents=True)
    (wd / "data.txt").write_text("d")
    data = {"workdir": str(wd), "runs": [], "stores": {"orig": {"path": str(wd / "data.txt")}}, "name": "data.txt",
            "outside": str(tmp_path / "dataset.h5")}
    write_inputs(wd / "stage" / "jobs" / "x", data, workdir=wd)
    (wd / "audits" / "m").mkdir(parents=True)
    copy_inputs(wd / "stage" / "jobs" / "x", wd / "audits" / "m")
    written = json.loads((wd / "audits" / "m" / "report_inputs.json").read_text())
    assert written["workdir"] == "../.." and written["stores"]["orig"]["path"] == "$WORKDIR/data.txt"
    assert written["name"] == "data.txt"  # a string that is no absolute path under the workdir is kept as it is
    assert written["outside"] == str(tmp_path / "dataset.h5")
    moved = tmp_path / "moved"
    wd.rename(moved)
    inputs = load_inputs(moved / "audits" / "m")
    assert inputs["workdir"] == str(moved) and Path(inputs["stores"]["orig"]["path"]).read_text() == "d"


def test_a_marker_lookalike_in_a_result_is_refused_and_paths_round_trip(tmp_path):
    from probe.pipeline.workdir import from_record, to_record

    wd = tmp_path / "wd"
    partial, final = wd / "s" / "d.partial", wd / "s" / "d"
    obj = {"a": str(partial / "jobs" / "x"), str(wd / "k"): [str(wd), "plain", str(tmp_path / "out"), 3, None],
           "p": partial / "f"}
    record = to_record(obj, wd, staged=(partial, final))
    assert record == {"a": "$WORKDIR/s/d/jobs/x", "$WORKDIR/k": ["$WORKDIR", "plain", str(tmp_path / "out"), 3, None],
                      "p": "$WORKDIR/s/d/f"}
    assert from_record(record, wd, staged=(partial, final)) == {**obj, "p": str(partial / "f")}
    assert from_record(record, tmp_path / "copy")["a"] == str(tmp_path / "copy" / "s" / "d" / "jobs" / "x")
    with pytest.raises(ValueError, match="cannot begin with"):
        to_record({"x": "$WORKDIR/looks/like/a/path"}, wd)


def test_status_on_damaged_stages_exits_2_with_advice_and_marks_later_stages_stale(tmp_path, counter, capsys):
    import shutil

    from conftest import run_probe

    meta = {"pipeline": "toy", "preset": "smoke"}
    wd = tmp_path / "wd"
    digests = engine.stage_digests(make_stages())
    run_stages(make_stages(), wd, meta=meta)
    code, out, err = run_probe(["pipeline", "status", str(wd)], capsys)
    assert code == 0 and out.count("complete") == 3 and not err

    # a stage's files lost: the result names a path that is gone; the stages computed from it are stale
    data = wd / "source" / digests["source"] / "jobs" / "src" / "data.txt"
    data.unlink()
    code, out, err = run_probe(["pipeline", "status", str(wd)], capsys)
    assert code == 2
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [["source", "damaged"], ["square", "stale"],
                                                                    ["final", "stale"]]
    assert "depends on damaged source" in out
    assert f"stage 'source' in {wd.resolve()} is damaged" in err and str(data) in err and "stale" in err
    assert f"`probe pipeline run toy --preset smoke --workdir {wd.resolve()} --force source`" in err
    code, out, err = run_probe(["pipeline", "status", str(wd), "--json"], capsys)
    assert code == 2 and json.loads(out)["damage"][0]["stale"] == ["square", "final"]
    # `run` refuses (nothing runs, nothing is deleted) until --force covers the stale stages
    calls = len(counter())
    with pytest.raises(UserError, match="--force source"):
        run_stages(make_stages(), wd, meta=meta)
    with pytest.raises(UserError, match="--force source"):
        run_stages(make_stages(), wd, meta=meta, force="final")  # square would still be stale
    assert len(counter()) == calls and (wd / "square" / digests["square"]).exists()
    _, reports = run_stages(make_stages(), wd, meta=meta, force="source")
    assert [r.jobs_run for r in reports] == [1, 3, 1] and data.read_text() == "3"
    assert run_probe(["pipeline", "status", str(wd)], capsys)[0] == 0

    # a final folder missing while the stages computed from it are complete
    shutil.rmtree(wd / "square" / digests["square"])
    code, out, err = run_probe(["pipeline", "status", str(wd)], capsys)
    assert code == 2 and "square       damaged" in out and "final        stale" in out
    assert "source       complete" in out and "is missing" in err and "--force square" in err
    run_stages(make_stages(), wd, meta=meta, force="square")

    # an unreadable job.json: the repair reruns that job, so what was computed from the stage is stale
    job = wd / "square" / digests["square"] / "jobs" / "j1" / "job.json"
    job.write_text("{")
    code, out, err = run_probe(["pipeline", "status", str(wd)], capsys)
    assert code == 2 and "job j1" in err and "final        stale" in out and "--force square" in err

    # only stage.json lost, its jobs intact: the next run rebuilds the same result, nothing is stale
    run_stages(make_stages(), wd, meta=meta, force="square")
    record = wd / "square" / digests["square"] / "stage.json"
    record.write_text(record.read_text()[:40])
    code, out, err = run_probe(["pipeline", "status", str(wd)], capsys)
    assert code == 2 and "square       damaged" in out and "final        complete" in out
    assert "repairs it" in err and "--force" not in err
    calls = len(counter())
    _, reports = run_stages(make_stages(), wd, meta=meta)
    assert [r.cached for r in reports] == [True, False, True] and len(counter()) == calls
    assert run_probe(["pipeline", "status", str(wd)], capsys)[0] == 0


# -- stages side by side (an executor with concurrent_stages: dask) -------------------------------------------------

class ThreadedExecutor:
    """Two workers as threads of this process (the engine's view of a dask cluster): jobs run at the same time."""

    description = "test threads"
    torch_threads = None
    workers = 2
    concurrent_stages = True

    def run(self, specs, local=False):
        from concurrent.futures import ThreadPoolExecutor, as_completed

        from probe.pipeline.worker import run_task

        with ThreadPoolExecutor(self.workers) as pool:
            futures = {pool.submit(run_task, spec): spec for spec in specs}
            for fut in as_completed(futures):
                try:
                    yield futures[fut], fut.result()
                except Exception as exc:  # noqa: BLE001
                    yield futures[fut], exc

    def close(self):
        pass


MEETING: dict = {}


def fake_meet(ctx, *, side, fail=False):
    """Both sides wait for each other: they pass only if their stages run at the same time."""
    import threading
    import time

    MEETING.setdefault("log", []).append(("start", ctx.stage, time.monotonic()))
    if fail:
        raise ValueError(f"{side} is broken")
    MEETING["barrier"].wait()
    # both sides write while the other is running: each line must land in its own job's log
    print(f"{side} prints")
    sys.stderr.write(f"{side} writes to stderr\n")
    logging.getLogger("probe.test").warning(f"{side} logs")
    time.sleep(0.2)
    MEETING["log"].append(("end", ctx.stage, time.monotonic()))
    return {"side": side, "thread": threading.current_thread().name}


def test_side_by_side_jobs_in_one_process_write_their_own_logs(tmp_path, counter):
    """Jobs that overlap in threads of one worker process (a dask worker with nthreads > 1) keep their output
    apart, and the process's stdout / stderr are what they were once they end."""
    stdout, stderr = sys.stdout, sys.stderr
    MEETING.clear()
    MEETING["barrier"] = threading.Barrier(2, timeout=20)
    run_stages(side_by_side(), tmp_path / "wd", executor=ThreadedExecutor())
    assert sys.stdout is stdout and sys.stderr is stderr
    for side, other in (("left", "right"), ("right", "left")):
        log = (tmp_path / "wd" / "logs" / side / f"{side}.log").read_text()
        assert f"{side} prints" in log and f"{side} writes to stderr" in log and f"{side} logs" in log
        assert other not in log


def fake_local(ctx):
    import time

    MEETING.setdefault("log", []).append(("start", ctx.stage, time.monotonic()))
    return {"ok": True}


def side_by_side(fail_left=False, local=None):
    def meet(side, fail=False):
        return lambda c: [Job(side, fake_meet, {"side": side, "fail": fail})]

    stages = [Stage("source", {"value": 2}, [], lambda c: [Job("src", fake_source, {"value": c["value"]})]),
              Stage("left", {}, ["source"], meet("left", fail_left)),
              Stage("right", {}, ["source"], meet("right")),
              Stage("join", {}, ["left", "right"], lambda c: [Job("j", fake_flaky, {"i": 1})])]
    if local:
        stages.insert(1, local)
    return stages


def test_independent_stages_run_side_by_side_on_a_concurrent_executor(tmp_path, counter):
    import threading

    from probe.pipeline.executors import DaskExecutor, SynchronousExecutor

    assert DaskExecutor.concurrent_stages and not SynchronousExecutor.concurrent_stages
    MEETING.clear()
    MEETING["barrier"] = threading.Barrier(2, timeout=20)
    results, reports = run_stages(side_by_side(), tmp_path / "wd", executor=ThreadedExecutor())
    assert [r.name for r in reports] == ["source", "left", "right", "join"]  # reports in the list's order
    assert results["left"]["jobs"]["left"]["side"] == "left" and results["join"]["jobs"]["j"] == {"i": 1}
    starts = {stage: t for kind, stage, t in MEETING["log"] if kind == "start"}
    ends = {stage: t for kind, stage, t in MEETING["log"] if kind == "end"}
    assert starts["right"] < ends["left"] and starts["left"] < ends["right"]
    # the same stages one after the other (synchronous executor): the two sides never meet
    MEETING.clear()
    MEETING["barrier"] = threading.Barrier(2, timeout=0.5)
    with pytest.raises(StageFailed, match="left.*BrokenBarrierError"):
        run_stages(side_by_side(), tmp_path / "sync")


def test_a_failed_stage_lets_the_running_ones_finish_and_starts_no_more(tmp_path, counter):
    import threading

    MEETING.clear()
    MEETING["barrier"] = threading.Barrier(1, timeout=20)  # right passes alone
    wd = tmp_path / "wd"
    with pytest.raises(StageFailed, match="left is broken"):
        run_stages(side_by_side(fail_left=True), wd, executor=ThreadedExecutor())
    digests = engine.stage_digests(side_by_side())
    assert (wd / "right" / digests["right"] / "stage.json").exists()  # finished, kept
    assert not (wd / "join").exists() and not any("join/" in c for c in counter())
    results, reports = run_stages(side_by_side(), wd, executor=ThreadedExecutor())
    assert [r.cached for r in reports] == [True, False, True, False]


def test_a_local_stage_runs_alone(tmp_path, counter):
    import threading

    MEETING.clear()
    MEETING["barrier"] = threading.Barrier(2, timeout=20)
    local = Stage("local", {}, ["source"], lambda c: [Job("l", fake_local)], local=True)
    results, reports = run_stages(side_by_side(local=local), tmp_path / "wd", executor=ThreadedExecutor())
    starts = {stage: t for kind, stage, t in MEETING["log"] if kind == "start"}
    # listed before left and right, ready with them: it runs first, and they start only after it
    assert starts["local"] < min(starts["left"], starts["right"])
    assert [r.name for r in reports] == ["source", "local", "left", "right", "join"]
