"""Where the DaskExecutor's jobs run: a job submitted while every worker is busy starts on the first worker that
frees, not behind another long job (probe.pipeline.executors.DaskExecutor)."""

from __future__ import annotations

import os
import threading
import time

import pytest

pytest.importorskip("distributed")


def sleep_job(ctx, seconds: float) -> dict:
    """A job of known length that says where and when it ran."""
    start = time.time()
    time.sleep(seconds)
    return {"pid": os.getpid(), "start": start, "end": time.time()}


def spec_of(tmp_path, stage: str, seconds: float) -> dict:
    return {"fn": sleep_job, "kwargs": {"seconds": seconds}, "inputs": {}, "stage": stage, "key": "job",
            "job_dir": str(tmp_path / stage / "job"), "log": str(tmp_path / "logs" / f"{stage}.log"),
            "workdir": str(tmp_path), "staged": (str(tmp_path / "partial"), str(tmp_path / "final"))}


def test_a_job_submitted_while_all_workers_are_busy_starts_on_the_first_worker_that_frees(tmp_path):
    # As in the quick Shapes3D run of session 18: one worker busy with a short job (linear-pca) for a while, the
    # other idle; then two long stages submit one job each (manipulate, manipulate-random), each from its own thread
    # as the engine does. dask gave the idle worker the first, and the second (estimated 0.5 s, never timed) to
    # the worker with the lower estimated occupancy, which was the first's, so it waited for it while the other
    # worker went idle a moment later.
    from probe.pipeline.executors import DaskExecutor

    executor = DaskExecutor(workers=2)
    results: dict[str, dict] = {}

    def run_stage(stage, seconds):
        for spec, outcome in executor.run([spec_of(tmp_path, stage, seconds)]):
            results[spec["stage"]] = outcome

    try:
        executor.client.wait_for_workers(2)
        short = threading.Thread(target=run_stage, args=("linear-pca", 3.0))
        short.start()
        time.sleep(2.0)
        longs = [threading.Thread(target=run_stage, args=(stage, 4.0)) for stage in ("manipulate", "manipulate-random")]
        for thread in longs:
            thread.start()
            time.sleep(0.05)
        for thread in [short, *longs]:
            thread.join(timeout=60)
    finally:
        executor.close()

    assert all(isinstance(r, dict) for r in results.values()), results
    first, second = results["manipulate"], results["manipulate-random"]
    # Where the second long job ran, not how soon: with two one-thread workers it either queued behind the first
    # (same process, the failure) or took the worker the short job freed (that job's process). A margin on the start
    # times measured this too when the cores were idle, but under load (CI beside a training run) the second job's
    # start lagged the short job's end by ~3 s and the margin failed with the placement right (session 37).
    assert first["pid"] != second["pid"], "the second long job queued behind the first"
    assert second["pid"] == results["linear-pca"]["pid"]
    assert second["start"] >= results["linear-pca"]["end"] - 0.5   # ... after the short job freed it


def test_capacity_is_the_local_workers_or_the_external_clusters_threads_re_read(monkeypatch):
    from probe.pipeline.executors import DaskExecutor

    local = DaskExecutor.__new__(DaskExecutor)
    local.cluster, local.workers = object(), 3          # a LocalCluster of 3 one-thread workers, registered or not
    assert local.capacity() == 3

    class Client:
        threads = {"tcp://a": 4, "tcp://b": 2}

        def nthreads(self):
            return dict(self.threads)

    external = DaskExecutor.__new__(DaskExecutor)
    external.cluster, external.client, external._capacity = None, Client(), (0, float("-inf"))
    clock = [1000.0]
    monkeypatch.setattr("probe.pipeline.executors.time.monotonic", lambda: clock[0])
    assert external.capacity() == 6
    external.client.threads = {"tcp://a": 4}              # a worker left: seen after CAPACITY_REFRESH_S, not before
    assert external.capacity() == 6
    clock[0] += DaskExecutor.CAPACITY_REFRESH_S + 1
    assert external.capacity() == 4
    external.client.threads = {}
    clock[0] += DaskExecutor.CAPACITY_REFRESH_S + 1
    assert external.capacity() == 1                       # never 0: a task still waits for a worker at the scheduler
