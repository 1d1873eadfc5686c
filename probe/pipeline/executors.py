"""Where jobs run: in this process (``SynchronousExecutor``) or on dask.distributed (``DaskExecutor``: a
LocalCluster sized to the machine, or an existing scheduler by address). ``run(specs, local)`` yields
(spec, result | exception) as jobs finish."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque

from probe.errors import UserError
from probe.pipeline.worker import run_task


class SynchronousExecutor:
    """Runs jobs in this process, in order. ``map_jobs`` yields (spec, result | exception)."""

    description = "synchronous (in-process)"
    torch_threads = None
    workers = 1
    concurrent_stages = False   # stages one after the other, in order (probe.pipeline.engine)

    def run(self, specs: list[dict], local: bool = False):
        for spec in specs:
            try:
                yield spec, run_task(spec)
            except Exception as exc:  # noqa: BLE001 - reported by the engine
                yield spec, exc

    def close(self):
        pass


def drop_malloc_trim_threshold() -> None:
    """Stop dask's nannies from starting workers with ``MALLOC_TRIM_THRESHOLD_=65536`` (its default
    ``distributed.nanny.pre-spawn-environ``), for the rest of this process.

    Setting any malloc threshold turns off glibc's dynamic mmap threshold, so every large tensor a
    training step allocates is mmap'ed and unmapped again, and its pages are faulted in afresh each
    step. Measured on the 2-core VM (β-VAE, 32×32, one thread, 600 steps): 1578.8 img/s without the
    variable, 1072.4 img/s with it (1.47× slower); in the dSprites quick pipeline the restarts ran at
    ~1,110 img/s per worker against ~2,250 img/s for the same jobs outside dask. The global setting (not
    a context manager) also covers workers the nanny respawns later.
    """
    import dask

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {})
    if "MALLOC_TRIM_THRESHOLD_" in environ:
        environ.pop("MALLOC_TRIM_THRESHOLD_")
        dask.config.set({"distributed.nanny.pre-spawn-environ": environ})


class DaskExecutor:
    """dask.distributed: a LocalCluster sized to the machine, or an existing scheduler by address. ``run`` may be
    called from several threads at once (the engine runs independent stages side by side).

    No more tasks are in the cluster at once than it has worker threads; the rest wait here. dask places a task
    that has no dependencies on an idle worker if there is one, else on the worker with the least estimated
    occupancy, and a job it has never timed counts as 0.5 s: a long job submitted while every worker was busy
    queued behind another long job on one worker while the other worker went idle a second later, and work
    stealing did not move it (quick Shapes3D, session 18: the random-ψ control waited 17 min behind manipulate;
    tests/test_pipeline_executors.py reproduces it with sleeps). Holding tasks back until a thread is free makes
    every submission land on an idle worker."""

    concurrent_stages = True
    CAPACITY_REFRESH_S = 10.0   # an external cluster may gain or lose workers

    def __init__(self, address: str | None = None, workers: int | None = None):
        from distributed import Client, LocalCluster

        self.cluster = None
        if address:
            try:
                self.client = Client(address, timeout="20s")
            except OSError as exc:
                raise UserError(f"cannot reach the dask scheduler at {address}: {exc}") from None
            self.torch_threads = None
            self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))
            self.description = f"dask scheduler {address}"
        else:
            n_workers, threads = local_cluster_size(workers)
            self.torch_threads = threads
            self.workers = n_workers
            drop_malloc_trim_threshold()
            self.cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                        dashboard_address=None, silence_logs=logging.ERROR)
            self.client = Client(self.cluster)
            self.description = f"LocalCluster {n_workers} worker(s) × {threads} torch thread(s)"
        self._slots = threading.Condition()   # guards _in_flight; notified whenever a task finishes
        self._in_flight = 0
        self._capacity = (0, float("-inf"))   # (worker threads, when read)

    def capacity(self) -> int:
        """Worker threads in the cluster (at least 1): a LocalCluster's are the workers it was built with (one thread
        each), whether or not they have all registered yet; an external one's are re-read every ``CAPACITY_REFRESH_S``."""
        if self.cluster is not None:
            return self.workers
        threads, read_at = self._capacity
        if time.monotonic() - read_at > self.CAPACITY_REFRESH_S:
            with contextlib.suppress(Exception):
                threads = sum(self.client.nthreads().values())
            self._capacity = (max(1, threads), time.monotonic())
        return self._capacity[0]

    def _finished(self, _future) -> None:
        with self._slots:
            self._in_flight -= 1
            self._slots.notify_all()

    def run(self, specs: list[dict], local: bool = False):
        if local:
            yield from SynchronousExecutor().run(specs)
            return
        waiting = deque(specs)
        futures: dict = {}
        while waiting or futures:
            capacity = self.capacity()   # outside the lock: it may ask the scheduler, whose thread runs _finished
            with self._slots:
                while True:
                    # a future is done before its callback runs, and the callback needs this lock: nothing that
                    # finishes between these checks and wait() can be missed
                    done = [fut for fut in futures if fut.done()]
                    free = capacity - self._in_flight
                    if done or (waiting and free > 0):
                        break
                    if not self._slots.wait(timeout=self.CAPACITY_REFRESH_S) and self.cluster is None:
                        break   # re-read an external cluster's size
                ready = [waiting.popleft() for _ in range(min(max(free, 0), len(waiting)))]
                self._in_flight += len(ready)
            for spec in ready:
                fut = self.client.submit(run_task, spec, pure=False,
                                         key=f"{spec['stage']}-{spec['key']}-{time.time_ns()}")
                futures[fut] = spec
                fut.add_done_callback(self._finished)
            for fut in done:
                spec = futures.pop(fut)
                try:
                    yield spec, fut.result()
                except Exception as exc:  # noqa: BLE001
                    yield spec, exc

    def close(self):
        with contextlib.suppress(Exception):
            self.client.close()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close()


def local_cluster_size(workers: int | None = None) -> tuple[int, int]:
    """(workers, torch threads each): one worker per GPU; on CPU, one single-threaded worker per core.

    Independent training jobs parallelise perfectly across processes, while the small conv nets used here
    gain little from intra-op threads (and on a loaded 2-core VM two OpenMP threads per step were up to
    10× slower than one: docs/notes/train.md), so CPU workers get one torch thread each."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    gpus = 0
    with contextlib.suppress(Exception):
        import torch

        gpus = torch.cuda.device_count()
    if workers is None:
        workers = gpus if gpus else max(1, cpus)
    return workers, max(1, cpus // workers)


MAX_MEMBERS = 64  # members of one batched job: issue 16's largest measured S


def members_per_task(count: int, workers: int) -> int:
    """How many of ``count`` jobs that differ only in seed one batched task trains: enough tasks that every worker
    has one (on CPU a batched job trains its members one after another, so fewer tasks than workers would idle
    cores; on a GPU worker the members share each step), at most ``MAX_MEMBERS``."""
    return max(1, min(MAX_MEMBERS, -(-count // max(1, workers))))


def make_executor(scheduler: str | None, workers: int | None = None):
    if scheduler in ("synchronous", "sync"):
        return SynchronousExecutor()
    return DaskExecutor(scheduler, workers)
