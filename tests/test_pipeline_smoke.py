"""Integration test of the whole project: `probe pipeline run modify-dsprites --preset smoke` through every
stage and every model, then rerun (nothing recomputed), kill -9 mid-training and resume (identical metrics),
an external dask scheduler with two workers, and bad configs (exit 2 before any work).

One smoke workdir is shared by the module (the first run is the expensive part); later tests copy its
finished upstream stages so that they only recompute what they are about."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from probe.pipeline import run_pipeline
from probe.pipeline.workdir import LOCK_FILE, workdir_status
from probe.report.schema import load_inputs
from conftest import run_probe

pytestmark = pytest.mark.slow
PIPELINE = "modify-dsprites"
# the later tests' overrides: the β-VAE only (× orig, mod, noise, mod-random), no rendering (they read
# report_inputs.json; the rendering is the shared workdir's, test_report_rerenders_...)
LATER = {"retrain.models": ["beta-vae"], "report.make_report": False}
LATER_ARGS = tuple(arg for key, value in LATER.items()  # LATER as `--set` arguments
                   for arg in ("--set", f"{key}={','.join(value) if isinstance(value, list) else json.dumps(value)}"))
# copied to skip them in later tests
UPSTREAM = ("store", "restarts", "select", "manipulate", "manipulate-random", "apply", "apply-random", "noise")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("smoke") / "wd"
    start = time.time()
    run = run_pipeline(PIPELINE, workdir=workdir, preset="smoke", scheduler="synchronous", progress=False)
    run.first_wall_time_s = time.time() - start
    return run




def _runs_by_key(report_inputs: dict, *, random_m: bool = False) -> dict:
    runs = report_inputs["runs"] + (report_inputs["random_m"]["runs"] if random_m else [])
    return {(r["model"], r["variant"], r["seed"]): r for r in runs}


def test_smoke_completes_every_stage(smoke):
    from probe.data import open_store
    from probe.pipeline.config import resolve

    config = resolve(PIPELINE, "smoke")
    st = workdir_status(smoke.workdir)
    assert [s["state"] for s in st["stages"]] == ["complete"] * len(st["stages"])
    assert smoke.jobs_run == sum(s["total"] for s in st["stages"])

    ri = load_inputs(smoke.workdir)
    assert ri["pipeline"] == PIPELINE and ri["preset"] == "smoke" and ri["dataset"] == "dsprites"
    # the setting the report describes, recorded by the report stage through the stage modules (report_inputs.setting)
    assert ri["setting"]["data"] == {k: config["store"][k] for k in ("source", "resolution", "factor_sizes")}
    assert ri["setting"]["retraining"]["model_steps"]["beta-vae"] == config["retrain"]["train"]["steps"]
    assert ri["setting"]["evaluation"]["seed"] == config["evaluate"]["seed"]
    assert ri["setting"]["manipulation"] == config["manipulate"]["config"] and ri["manipulation_deviations"]
    mod, noise = open_store(ri["stores"]["mod"]["path"]), open_store(ri["stores"]["noise"]["path"])
    orig = open_store(ri["stores"]["orig"]["path"])
    assert mod.origin["kind"] == "perturbed" and noise.origin["kind"] == "noise"
    assert mod.digest == ri["stores"]["mod"]["digest"] != orig.digest != noise.digest
    assert ri["stores"]["noise"]["epsilon"] == pytest.approx(0.1) and ri["stores"]["mod"]["epsilon"] == pytest.approx(0.1)
    assert len(mod) == len(orig) == len(noise) == 3 * 2 * 4 * 4 * 4

    # restarts: one entangled (lowest MIG) and one disentangled (highest MIG)
    selected = {r["selected"]: r for r in ri["restarts"] if r["selected"]}
    assert set(selected) == {"entangled", "disentangled"}
    assert selected["entangled"]["mig"] == min(r["mig"] for r in ri["restarts"])
    assert selected["disentangled"]["mig"] == max(r["mig"] for r in ri["restarts"])
    assert Path(ri["manipulation"]["losses"]).exists() and Path(ri["manipulation"]["figure4"]).exists()
    # the manipulation's coverage is measured on every image of the store
    coverage = ri["manipulation"]["coverage"]
    assert coverage["num_images"] == len(orig) and 0.0 <= coverage["fraction_covered"] <= 1.0
    assert coverage["fraction_covered"] == pytest.approx(1.0 - coverage["fraction_small"])
    # the frozen random-ψ control (stage manipulate-random): the same loop and config, ψ frozen, full budget
    control = ri["manipulation_random"]
    assert control["config"] == {**ri["manipulation"]["config"], "freeze_psi": True, "normalise_linf": True}
    assert control["before"] == ri["manipulation"]["before"]  # x with the restarts' decoders: the same for both
    assert control["coverage"]["linf_quantiles"]["p05"] == pytest.approx(1.0) and Path(control["losses"]).exists()
    assert control["entangled"] == ri["manipulation"]["entangled"]
    assert "error" not in ri["why"]["global_pca_random"] and ri["why"]["global_pca_random"]["num_images"] > 0

    # metrics for every (model, variant, seed), each run complete with its learning curve
    runs = _runs_by_key(ri)
    first = config["retrain"]["first_seed"]  # retrain seeds start past the restarts' (stages.common.retrain_seeds)
    assert first == 100
    expected = {(m, v, s) for m in config["retrain"]["models"] for v in ("orig", "mod", "noise") for s in (first, first + 1)}
    assert set(runs) == expected and len(expected) == len(config["retrain"]["models"]) * 6
    for key, r in runs.items():
        assert (Path(r["run_dir"]) / "done.json").exists(), key
        assert Path(r["curve"]).exists(), key
        assert 0.0 <= r["metrics"]["mig"]["mig"] <= 1.0, key
        assert set(r["alignment"] or {}) >= {"entangled", "disentangled"} or "alignment_error" in r, key
        if "alignment_error" not in r:  # the global PCA of the orig images at the same points (evaluate)
            pca = r["alignment"]["global_pca"]
            assert 0.0 <= pca["span_r2"] <= 1.0 and 0.0 <= pca["mean_block_r2"] <= 1.0, key
            assert sorted(i for b in pca["blocks"] for i in b) == list(range(pca["num_components"])), key
        if config["hyperparameters"].get(r["model"]):
            assert r["hyperparameter"]["name"] == config["hyperparameters"][r["model"]]
            assert r["hyperparameter"]["value"] is not None
    assert all("alignment_error" not in r for r in runs.values()), [r.get("alignment_error") for r in runs.values()]
    assert runs[("beta-vae", "orig", first)]["hyperparameter"] == {"name": "beta", "value": 8.0}  # Table 2, dSprites
    assert ri["linear_pca"] is not None and ri["robustness"] == []
    # every run of a variant was trained on that variant's store
    for (model, variant, seed), r in runs.items():
        cfg = json.loads((Path(r["run_dir"]) / "config.json").read_text())
        assert cfg["store"]["digest"] == ri["stores"][variant]["digest"]
        assert cfg["seed"] == seed


def test_report_rerenders_the_smoke_workdir_from_its_inputs_alone(smoke, tmp_path):
    # issue 25: `probe report` imports no torch, model, trainer, perturb or pipeline code, and re-renders in seconds
    # exactly the report the report stage wrote (pipelines' report.make_report = true)
    from test_report_purity import RERENDER_SECONDS, render_in_subprocess

    made = render_in_subprocess(smoke.workdir, tmp_path / "report")
    assert made["proc"].returncode == 0, made["proc"].stderr[-3000:]
    assert made["forbidden"] == [] and made["wall_s"] < RERENDER_SECONDS, (made["forbidden"], made["wall_s"])
    staged = Path(smoke.results["report"]["jobs"]["report"]["report"]["markdown"]).parent
    import re

    def content(path):  # the renderer's git commit moves when a commit lands while the suite runs; sources do not
        return re.sub(rb"[0-9a-f]{40}", b"<git commit>", path.read_bytes())

    for name in ("report.md", "runs.csv", "summary.json"):
        assert content(tmp_path / "report" / name) == content(staged / name), name
    md = (staged / "report.md").read_text()
    assert "figures/traversals_dsprites.png" in md and "MIG recorded / recomputed" in md
    assert "## Learned vs random ψ (dsprites)" in md and "figures/manipulation_random_dsprites.png" in md
    # the gap with the images' m permuted, from the manipulation's done record through the stage into the report
    assert "With every image given another image's m (the rows permuted once, seeded; same decoders) the gap is" in md
    assert "| of the gap on x′, what needs each image's own m (x′ − permuted) | " in md


def test_smoke_keeps_final_weights_only_and_stays_under_200_mb(smoke):
    # issue 17: the smoke workdir was 1.2 GB (optimiser states, 1000-unit discriminators); the smoke preset keeps
    # only the final weights of every restart and retrained run (pipeline.keep_checkpoints), which evaluated as usual
    from probe.train import RunFolder
    from probe.train.run_folder import COMPACTED

    ri = load_inputs(smoke.workdir)
    runs = [r["run_dir"] for r in ri["runs"] + ri["random_m"]["runs"] + ri["restarts"]]
    assert len(runs) == 14 * 6 + 2 + 4
    for run_dir in runs:
        payload = RunFolder(run_dir).load_checkpoint()
        assert COMPACTED in payload and "optimizers" not in payload and "rng" not in payload, run_dir
        assert payload[COMPACTED]["bytes_before"] > 2 * (Path(run_dir) / "checkpoint.pt").stat().st_size, run_dir
    size = sum(p.stat().st_size for p in smoke.workdir.rglob("*") if p.is_file())
    assert size < 200e6, f"{size / 1e6:.0f} MB"


def test_rerun_recomputes_nothing(smoke, capsys):
    before = json.loads((smoke.workdir / "report_inputs.json").read_text())
    start = time.time()
    code, out, err = run_probe(["pipeline", "run", PIPELINE, "--preset", "smoke", "--workdir", str(smoke.workdir),
                           "--scheduler", "synchronous"], capsys)
    elapsed = time.time() - start
    assert code == 0, err
    assert "(0 job(s) run)" in err and err.count("cached") == 13
    assert elapsed < 20
    assert json.loads((smoke.workdir / "report_inputs.json").read_text()) == before
    code, out, err = run_probe(["pipeline", "status", str(smoke.workdir)], capsys)
    assert code == 0 and out.count("complete") == 13 and "not running" in out


def _copy_upstream(src: Path, dst: Path) -> None:
    """Copy the finished upstream stages: the same digests make them cached in ``dst``."""
    dst.mkdir(parents=True)
    for stage in UPSTREAM:
        shutil.copytree(src / stage, dst / stage, symlinks=True)


def test_kill_during_training_then_resume_gives_identical_metrics(smoke, tmp_path, capsys):
    # Upstream stages copied (cached); two models only: a run's config (and so its numbers) does not depend
    # on which other models are in the list, so the runs compare one to one with the shared smoke workdir.
    wd = tmp_path / "killed"
    _copy_upstream(smoke.workdir, wd)
    # CPU results are bit-identical only at a fixed torch thread count (reduction order): the killed
    # subprocess uses the same count as this process, where the reference smoke run and the resume run.
    import torch

    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    proc = subprocess.Popen([sys.executable, "-m", "probe.cli", "pipeline", "run", PIPELINE, "--preset", "smoke",
                             "--workdir", str(wd), "--scheduler", "synchronous", "--quiet", *LATER_ARGS], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    killed_mid_job = None
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            runs = [p.parent for p in wd.glob("retrain/*.partial/jobs/*/run/checkpoint.pt")]
            unfinished = [r for r in runs if not (r / "done.json").exists()]
            if unfinished and len(runs) >= 3:
                proc.send_signal(signal.SIGKILL)
                killed_mid_job = unfinished[0]
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None and killed_mid_job is None:
            proc.kill()
        proc.wait()
    assert killed_mid_job is not None, f"never saw a training checkpoint: {proc.stderr.read().decode()[-2000:]}"
    assert proc.returncode == -signal.SIGKILL
    assert (wd / LOCK_FILE).exists()  # left behind by the killed run: stale, taken over below
    st = workdir_status(wd)
    retrain = next(s for s in st["stages"] if s["name"] == "retrain")
    assert retrain["state"] in ("partial", "pending") and retrain["done"] < retrain["total"]
    # status names the killed job with how far its run got: the last step its log holds, of the steps it trains
    from probe.train import RunFolder

    logged = RunFolder(killed_mid_job).read_log()  # stops at a line the kill cut, as the resume reads it
    code, out, _ = run_probe(["pipeline", "status", str(wd)], capsys)
    assert code == 0 and f"{killed_mid_job.parent.name} ({logged[-1]['step']}/10 steps)" in out


    resumed = run_pipeline(PIPELINE, workdir=wd, preset="smoke", scheduler="synchronous", progress=False,
                           overrides=LATER)
    retrain_report = next(r for r in resumed.reports if r.name == "retrain")
    assert retrain_report.jobs_reused >= 2 and not retrain_report.cached
    assert all(r.cached for r in resumed.reports if r.name in UPSTREAM)
    a = _runs_by_key(load_inputs(smoke.workdir), random_m=True)
    b = _runs_by_key(load_inputs(wd), random_m=True)
    assert set(b) == {k for k in a if k[0] == "beta-vae"} and len(b) == 8
    for key in b:
        assert b[key]["metrics"] == a[key]["metrics"], key


def test_models_retrained_on_the_random_m_get_its_store_and_a_section_of_their_own(smoke):
    # issue 24: variant mod-random, the frozen random-ψ control's m applied (stage apply-random); the smoke preset
    # retrains the β-VAE on it (modify-dsprites.toml), so the shared workdir holds it
    from probe.data import open_store

    ri = load_inputs(smoke.workdir)
    random_m, control = ri["random_m"], ri["manipulation_random"]
    store = open_store(random_m["store"]["path"])
    assert store.digest == random_m["store"]["digest"] not in {ri["stores"][v]["digest"] for v in ("orig", "mod", "noise")}
    assert store.origin["kind"] == "perturbed" and store.origin["config"]["manipulation"]["dir"] == control["dir"]
    assert store.origin["config"]["manipulation"]["config"]["normalise_linf"] is True
    eps = ri["stores"]["mod"]["epsilon"]
    assert random_m["store"]["epsilon"] == pytest.approx(eps)
    # the random m spends the budget: |x′ − x| reaches ε (to the uint8 step) and never passes it
    assert eps - 1 / 255 <= store.origin["max_abs_diff"] <= eps + 0.5 / 255
    assert {(r["model"], r["variant"], r["seed"]) for r in random_m["runs"]} == {("beta-vae", "mod-random", 100),
                                                                                ("beta-vae", "mod-random", 101)}
    for r in random_m["runs"]:
        assert json.loads((Path(r["run_dir"]) / "config.json").read_text())["store"]["digest"] == store.digest
    assert {r["variant"] for r in ri["runs"]} == {"orig", "mod", "noise"}
    captured = random_m["factor_capture"]["runs"]
    assert [(e["variant"], e["seed"]) for e in captured] == [("mod-random", 100), ("mod-random", 101)]
    assert all("error" not in e for e in captured)
    for e, r in zip(captured, sorted(random_m["runs"], key=lambda r: r["seed"])):
        assert e["mig"] == pytest.approx(r["metrics"]["mig"]["mig"])  # the capture reproduces MIG on that store
    made = smoke.results["report"]["jobs"]["report"]["report"]
    md = Path(made["markdown"]).read_text()
    assert "## Retrained on the random m: is it learning m that moves the models? (dsprites)" in md
    summary = json.loads((Path(made["markdown"]).parent / "summary.json").read_text())
    shown = summary["random_m"]["dsprites"]["models"]["beta-vae"]
    assert shown["mod-random"] == [r["metrics"]["mig"]["mig"] for r in sorted(random_m["runs"], key=lambda r: r["seed"])]
    assert list(summary["random_m"]["dsprites"]["models"]) == ["beta-vae"]


def test_robustness_trains_the_scaled_runs_batched_as_alone_and_evaluates_them(smoke, tmp_path):
    # §5.3's stage (off in the smoke preset): the β-VAE at 0.5 × its Table 2 β on orig and mod, two seeds trained as
    # one batched job per variant, then each run's metrics and alignment in the same job. Everything before it is the
    # shared workdir's (retrain and evaluate included: robustness's settings are in no other stage's digest).
    wd = tmp_path / "robust"
    _copy_upstream(smoke.workdir, wd)
    for stage in ("retrain", "evaluate"):
        shutil.copytree(smoke.workdir / stage, wd / stage, symlinks=True, copy_function=os.link)
    over = {"robustness.enabled": True, "robustness.models": ["beta-vae"], "robustness.scales": [0.5]}
    batched = run_pipeline(PIPELINE, workdir=wd, preset="smoke", scheduler="synchronous", progress=False,
                           until="robustness", overrides={**over, "robustness.seeds": 2})
    assert [r.name for r in batched.reports if not r.cached] == ["robustness"]
    runs = {(r["variant"], r["seed"]): r for r in batched.results["robustness"]["jobs"].values()}
    assert set(runs) == {(v, s) for v in ("orig", "mod") for s in (100, 101)}
    ri = load_inputs(smoke.workdir)
    stores = {v: ri["stores"][v]["digest"] for v in ("orig", "mod")}
    for (variant, seed), r in runs.items():
        assert r["model"] == "beta-vae" and r["scale"] == 0.5
        assert r["hyperparameter"] == {"name": "beta", "value": 4.0}  # 0.5 × Table 2's β = 8 for dSprites
        config = json.loads((Path(r["run_dir"]) / "config.json").read_text())
        assert config["model_config"]["beta"] == 4.0 and config["store"]["digest"] == stores[variant]
        assert 0.0 <= r["metrics"]["metrics"]["mig"]["mig"] <= 1.0  # evaluate_run's record, as the evaluate stage's
        assert r["metrics"]["settings"]["run_dir"] == r["run_dir"]
        assert set(r["alignment"]) >= {"entangled", "disentangled"}
    # one seed: each variant's job runs alone (no batch), and gives the batched member's numbers
    alone = run_pipeline(PIPELINE, workdir=wd, preset="smoke", scheduler="synchronous", progress=False,
                         until="robustness", overrides={**over, "robustness.seeds": 1})
    single = {(r["variant"], r["seed"]): r for r in alone.results["robustness"]["jobs"].values()}
    assert set(single) == {("orig", 100), ("mod", 100)}
    for key, r in single.items():
        assert r["metrics"]["metrics"] == runs[key]["metrics"]["metrics"], key
        assert r["alignment"] == runs[key]["alignment"], key


def _wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        if time.time() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.1)


def test_external_dask_scheduler_with_two_workers(smoke, tmp_path, capsys):
    # every stage runs on the cluster (nothing copied); one model keeps it short
    wd = tmp_path / "dask"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    scheduler_file = tmp_path / "scheduler.json"
    bin_dir = Path(sys.executable).parent
    procs = [subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(scheduler_file)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        _wait_for(scheduler_file)
        for i in range(2):
            procs.append(subprocess.Popen([str(bin_dir / "dask"), "worker", "--scheduler-file", str(scheduler_file),
                                           "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
                                           "--name", f"w{i}"], env=env, cwd=str(tmp_path),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        address = json.loads(scheduler_file.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        from distributed import Client

        with Client(address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
        code, out, err = run_probe(["pipeline", "run", PIPELINE, "--preset", "smoke", "--workdir", str(wd),
                               "--scheduler", address, *LATER_ARGS], capsys)
        assert code == 0, err
        assert f"dask scheduler {address}" in err
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    ri = load_inputs(wd)
    assert len(_runs_by_key(ri)) == 6 and all(r["metrics"]["mig"]["mig"] >= 0 for r in ri["runs"])
    assert len(ri["random_m"]["runs"]) == 2
    assert {r["selected"] for r in ri["restarts"]} == {"entangled", "disentangled", None}
    from probe.data import open_store

    assert open_store(ri["stores"]["mod"]["path"]).origin["kind"] == "perturbed"
    # the jobs ran in the worker processes, not here: their logs name other pids (every stage but the report, which
    # runs here; which worker a stage's jobs land on depends on what runs beside it: independent stages run at once)
    logs = [p for p in (wd / "logs").glob("*/*.log") if p.parent.name != "report"]
    pids = {int(line.split(" pid ")[1].split()[0]) for p in logs for line in p.read_text().splitlines()
            if line.startswith("--- ") and " pid " in line}
    assert len(pids) == 2 and os.getpid() not in pids


@pytest.mark.parametrize("args, message", [
    (["--set", "retrain.models=ae,no-such-model"], "no-such-model"),
    (["--set", "retrain.seedz=3"], "retrain.seedz"),
    (["--set", "retrain.train.stepz=3"], "stepz"),
    (["--set", "manipulate-random.enabled=false", "--set", "retrain.variants=orig,mod,noise,mod-random"],
     "needs [manipulate-random] enabled = true"),
    (["--preset", "huge"], "no preset 'huge'"),
    (["--preset", "paper"], "probe datasets fetch dsprites"),
])
def test_bad_configs_exit_2_before_any_work(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PROBE_DATA_DIR", str(tmp_path / "no-data"))
    wd = tmp_path / "wd"
    argv = ["pipeline", "run", PIPELINE, "--workdir", str(wd), "--scheduler", "synchronous"]
    if "--preset" not in args:
        argv += ["--preset", "smoke"]
    code, out, err = run_probe(argv + args, capsys)
    assert code == 2
    assert message in err and err.startswith("error: ") and "Traceback" not in err
    assert not wd.exists()


def test_paper_preset_message_names_file_and_url(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PROBE_DATA_DIR", str(tmp_path / "no-data"))
    from probe.data.sources import card, default_source

    code, out, err = run_probe(["pipeline", "show", PIPELINE, "--preset", "paper"], capsys)
    assert code == 2
    assert str(default_source("dsprites")) in err and card("dsprites")["files"][0]["url"] in err


def test_show_prints_plan(capsys):
    code, out, err = run_probe(["pipeline", "show", "modify-shapes3d", "--preset", "quick", "--set", "retrain.seeds=4"], capsys)
    assert code == 0, err
    assert "retrain" in out and "retrain.seeds = 4" in out
    # 3 models × 3 variants × 4 seeds; per model steps from retrain.model_train: AE 500, β-VAE 2,000, PCL 1,500
    assert " 36 job(s), 48,000 training steps" in out
    assert "expected wall time: about 46 min" in out


def test_local_cluster_workers_start_without_malloc_trim_threshold():
    # dask's default MALLOC_TRIM_THRESHOLD_=65536 made CPU training 1.47× slower in its workers
    import dask

    from probe.pipeline.executors import DaskExecutor

    with dask.config.set({"distributed.nanny.pre-spawn-environ": {"MALLOC_TRIM_THRESHOLD_": 65536, "OMP_NUM_THREADS": 1}}):
        executor = DaskExecutor(workers=1)
        try:
            env = executor.client.run(lambda: {k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")})
        finally:
            executor.close()
    assert list(env.values()) == [{"MALLOC_TRIM_THRESHOLD_": None, "OMP_NUM_THREADS": "1"}]


def test_bad_set_type_exits_2_before_any_job(tmp_path, capsys):
    workdir = tmp_path / "wd"
    code, _, err = run_probe(["pipeline", "run", "modify-dsprites", "--preset", "smoke", "--workdir", str(workdir),
                              "--set", "restarts.model_config.beta=abc"], capsys)
    assert code == 2 and "hyperparameter 'beta' must be a number" in err
    assert not workdir.exists()  # nothing was started


def test_store_options_render_the_store_and_are_recorded(tmp_path, capsys):
    # store.options: the generator's rendering options (a stated deviation), passed to the store and recorded in it
    from probe.data import open_store
    from probe.pipeline import config as pipeline_config
    from probe.pipeline.stages import store as store_stage

    wd = tmp_path / "wd"
    code, _, err = run_probe(["pipeline", "run", "modify-shapes3d", "--preset", "smoke", "--workdir", str(wd),
                              "--scheduler", "synchronous", "--until", "store", "--quiet",
                              "--set", "store.options.camera_distance=2.6", "--set", "store.options.fov_deg=40"], capsys)
    assert code == 0, err
    [path] = list(wd.rglob("shapes3d.zarr"))
    near = open_store(path)
    assert near.origin["config"]["options"] == {"camera_distance": 2.6, "fov_deg": 40}
    from probe.data.synth import render_indices

    default = render_indices("shapes3d", np.arange(4), near.factor_sizes, near.image_shape[0])
    assert np.array_equal(near.images[:4], render_indices("shapes3d", np.arange(4), near.factor_sizes, near.image_shape[0],
                                                          {"camera_distance": 2.6, "fov_deg": 40}))
    assert not np.array_equal(near.images[:4], default)
    cfg = pipeline_config.resolve("modify-shapes3d", "smoke", {"store.options.camera_distance": 2.6})
    assert store_stage.description(cfg)["options"] == {"camera_distance": 2.6}
    assert "options" not in store_stage.description(pipeline_config.resolve("modify-shapes3d", "smoke"))


@pytest.mark.parametrize("args, message", [
    (["--set", "store.options.no_such=1"], "has no rendering option 'no_such'"),
    (["--set", "store.options.camera_distance=0.5"], "camera_distance"),
    (["--preset", "paper", "--set", "store.options.fov_deg=40"], "store.source must be 'synthetic'"),
])
def test_bad_store_options_exit_2_before_any_work(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PROBE_DATA_DIR", str(tmp_path / "no-data"))
    wd = tmp_path / "wd"
    argv = ["pipeline", "run", "modify-shapes3d", "--workdir", str(wd), "--scheduler", "synchronous"]
    code, _, err = run_probe(argv + (args if "--preset" in args else ["--preset", "smoke", *args]), capsys)
    assert code == 2
    assert message in err and err.startswith("error: ") and "Traceback" not in err
    assert not wd.exists()


def test_regime_preset_renders_the_closer_camera_and_passes_its_checks(capsys):
    # the regime preset's store options are checked before any work (one image rendered with them) and its plan has
    # the retrained β-VAE at the length where the learning curves have every factor encoded
    code, out, err = run_probe(["pipeline", "show", "modify-shapes3d", "--preset", "regime", "--check"], capsys)
    assert code == 0, err
    assert "store.options.camera_distance = 2.6" in out and "store.options.fov_deg = 40.0" in out
    assert "retrain.model_train.beta-vae.steps = 45000" in out
