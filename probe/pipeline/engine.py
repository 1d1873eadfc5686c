"""The stage engine: a linear graph of stages, each a set of independent jobs, cached by digest.

Layout of a workdir::

    WORKDIR/pipeline.lock                 held while a run is active ({"pid", "host", "started"})
    WORKDIR/pipeline.json                 the plan of the latest run (config, stage digests, job keys)
    WORKDIR/<stage>/<digest>/             a complete stage: stage.json (written last) + its job folders
    WORKDIR/<stage>/<digest>.partial/     a stage being computed; finished jobs inside are kept
    WORKDIR/logs/<stage>/<job>.log        one log per job (stdout, stderr, logging)

A stage's digest hashes its config, the digests of its input stages and ``code_version()``, so
changing anything upstream (or the code) gives new folders and never reuses stale results. Inside a
partial stage each job owns ``jobs/<key>/``; a job is finished when ``jobs/<key>/job.json`` exists
(written atomically by the job wrapper on the worker, so a killed driver loses nothing finished).
When every job is finished the stage's ``collect`` result goes into ``stage.json`` and the partial
folder is renamed to its final name; paths inside results that point into the partial folder are
rewritten to the final one.

Execution: jobs are dask.distributed tasks (``Executor``); ``scheduler="synchronous"`` runs them in
this process, one after the other (debugging, fast tests). A failing job is retried once; if it
fails again the stage stops with the job's error and its log path. Stages run in order; the jobs of
one stage run in parallel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import importlib
import json
import logging
import os
import shutil
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from probe.errors import UserError
from probe.provenance import code_version, digest_json, write_json_atomic

log = logging.getLogger(__name__)

STAGE_FILE = "stage.json"
JOB_FILE = "job.json"
ERROR_FILE = "error.json"
STARTED_FILE = "started.json"
LOCK_FILE = "pipeline.lock"
PLAN_FILE = "pipeline.json"


class StageFailed(Exception):
    """A job failed twice; the message names the stage, the job, its error and its log.

    Attributes (for callers that map failures of some stages to their own messages, e.g. ``probe
    audit``): ``stage``, ``job`` (key), ``error`` (the job's last exception), ``log`` (its log path)."""

    stage: str | None = None
    job: str | None = None
    error: BaseException | None = None
    log: str | None = None


# -- definitions ------------------------------------------------------------------------------------

@dataclasses.dataclass
class Job:
    """One independent unit of work. ``fn`` is ``"module:function"`` called as
    ``fn(ctx: JobContext, **kwargs) -> dict`` (JSON-able); ``work`` estimates its cost (training
    steps, or 1 for an evaluation) for ETAs and ``show``."""

    key: str
    fn: str
    kwargs: dict = dataclasses.field(default_factory=dict)
    work: float = 1.0

    def __post_init__(self):
        if not self.key or any(c in self.key for c in "/\\") or self.key.startswith("."):
            raise ValueError(f"job key must be a plain file name, got {self.key!r}")


@dataclasses.dataclass
class Stage:
    """A stage: its config (hashed), input stages, jobs (from config alone) and how results combine.

    ``jobs(config)`` lists the jobs without running anything (used by ``show`` too); each job
    receives the *results* of the input stages at run time through ``ctx.inputs``.
    ``collect(config, inputs, results)`` turns ``{job key: job result}`` into the stage result
    (default: ``{"jobs": results}``). ``local`` stages run their jobs in the driver process.
    """

    name: str
    config: dict
    inputs: list[str]
    jobs: Callable[[dict], list[Job]]
    collect: Callable[[dict, dict, dict], dict] | None = None
    local: bool = False


@dataclasses.dataclass
class JobContext:
    """What a job function gets besides its kwargs."""

    job_dir: Path
    inputs: dict            # input stage name -> that stage's result
    stage: str
    key: str
    device: str | None = None


# -- digests and folders ----------------------------------------------------------------------------

def cache_version() -> dict:
    """The part of ``code_version()`` that decides results: package version and source digest.

    The git commit is recorded in every stage's provenance but left out of the digest, so committing
    unchanged sources (or running from an sdist without .git) does not invalidate the cache."""
    version = code_version()
    return {"probe_version": version["probe_version"], "source_digest": version["source_digest"]}


def stage_digests(stages: list[Stage], version: dict | None = None) -> dict[str, str]:
    version = cache_version() if version is None else version
    digests: dict[str, str] = {}
    for stage in stages:
        missing = [i for i in stage.inputs if i not in digests]
        if missing:
            raise ValueError(f"stage {stage.name!r} needs {missing} earlier in the pipeline")
        digests[stage.name] = digest_json({
            "stage": stage.name, "config": stage.config,
            "inputs": {i: digests[i] for i in stage.inputs}, "code_version": version,
        })[:16]
    return digests


def final_dir(workdir: Path, stage: str, digest: str) -> Path:
    return workdir / stage / digest


def partial_dir(workdir: Path, stage: str, digest: str) -> Path:
    return workdir / stage / f"{digest}.partial"


def load_stage_result(workdir: Path, stage: str, digest: str) -> dict | None:
    path = final_dir(workdir, stage, digest) / STAGE_FILE
    if not path.exists():
        return None
    return json.loads(path.read_text())["result"]


def _rewrite_paths(obj: Any, old: str, new: str) -> Any:
    if isinstance(obj, str):
        return new + obj[len(old):] if obj == old or obj.startswith(old + os.sep) else obj
    if isinstance(obj, dict):
        return {k: _rewrite_paths(v, old, new) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rewrite_paths(v, old, new) for v in obj]
    return obj


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


# -- the lock ---------------------------------------------------------------------------------------

def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_holder(workdir: Path) -> dict | None:
    """The live holder of the workdir lock, or None (no lock, or a stale one from a dead pid)."""
    info = _read_json(Path(workdir) / LOCK_FILE)
    if not info:
        return None
    if info.get("host") == socket.gethostname() and not _pid_alive(int(info.get("pid", -1))):
        return None
    return info


@contextlib.contextmanager
def workdir_lock(workdir: Path):
    """One run per workdir. A lock left by a dead pid on this host is taken over."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / LOCK_FILE
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": _now()}
    for _attempt in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = lock_holder(workdir)
            if holder is not None:
                raise UserError(
                    f"workdir {workdir} is in use by another pipeline run (pid {holder.get('pid')} on "
                    f"{holder.get('host')}, started {holder.get('started')}); wait for it to finish or "
                    f"stop it, or use another --workdir (lock file: {path})") from None
            log.warning("taking over a stale lock %s", path)
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    else:  # pragma: no cover - another process won the race for a stale lock
        raise UserError(f"workdir {workdir} was locked by another run just now; try again")
    try:
        yield
    finally:
        if (_read_json(path) or {}).get("pid") == os.getpid():
            path.unlink(missing_ok=True)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# -- the job wrapper (runs on the worker) -----------------------------------------------------------

def resolve_function(target: str) -> Callable:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def _worker_device() -> str | None:
    """One GPU per LocalCluster worker: worker ``i`` uses ``cuda:i % n``; None lets the trainer choose."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    n = torch.cuda.device_count()
    if n <= 1:
        return None
    try:
        from distributed import get_worker

        name = get_worker().name
        return f"cuda:{int(name) % n}"
    except (ValueError, TypeError):
        return None
    except Exception:
        return None


def run_job(spec: dict) -> dict:
    """Run one job: log to its log file, write ``job.json`` atomically on success, ``error.json`` on
    failure (and re-raise). ``spec`` is plain data so it pickles to any worker."""
    job_dir = Path(spec["job_dir"])
    job_dir.mkdir(parents=True, exist_ok=True)
    log_path = Path(spec["log"])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    (job_dir / ERROR_FILE).unlink(missing_ok=True)
    write_json_atomic(job_dir / STARTED_FILE, {"pid": os.getpid(), "host": socket.gethostname(), "started": _now()})
    if spec.get("torch_threads"):
        try:
            import torch

            torch.set_num_threads(int(spec["torch_threads"]))
        except ImportError:  # pragma: no cover
            pass
    ctx = JobContext(job_dir=job_dir, inputs=spec["inputs"], stage=spec["stage"], key=spec["key"],
                     device=spec.get("device") or _worker_device())
    handler = None
    with open(log_path, "a", buffering=1) as logf:
        logf.write(f"--- {_now()} {spec['stage']}/{spec['key']} pid {os.getpid()} ({spec['fn']})\n")
        root = logging.getLogger()
        handler = logging.StreamHandler(logf)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        start = time.time()
        try:
            with contextlib.redirect_stdout(logf), contextlib.redirect_stderr(logf):
                result = resolve_function(spec["fn"])(ctx, **spec["kwargs"])
            if result is None:
                result = {}
            json.dumps(result, default=str)  # fail here, with the job's name, if not JSON-able
        except BaseException as exc:
            tb = traceback.format_exc()
            logf.write(tb)
            write_json_atomic(job_dir / ERROR_FILE, {"error": f"{type(exc).__name__}: {exc}", "traceback": tb,
                                                     "log": str(log_path), "time": _now()})
            raise
        finally:
            root.removeHandler(handler)
        elapsed = time.time() - start
        logf.write(f"--- done in {elapsed:.1f}s\n")
    write_json_atomic(job_dir / JOB_FILE, {"result": result, "wall_time_s": elapsed, "finished": _now()})
    return result


# -- executors --------------------------------------------------------------------------------------

class SynchronousExecutor:
    """Runs jobs in this process, in order. ``map_jobs`` yields (spec, result | exception)."""

    description = "synchronous (in-process)"
    torch_threads = None

    def run(self, specs: list[dict], local: bool = False):
        for spec in specs:
            try:
                yield spec, run_job(spec)
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
    """dask.distributed: a LocalCluster sized to the machine, or an existing scheduler by address."""

    def __init__(self, address: str | None = None, workers: int | None = None):
        from distributed import Client, LocalCluster

        self.cluster = None
        if address:
            try:
                self.client = Client(address, timeout="20s")
            except OSError as exc:
                raise UserError(f"cannot reach the dask scheduler at {address}: {exc}") from None
            self.torch_threads = None
            self.description = f"dask scheduler {address}"
        else:
            n_workers, threads = local_cluster_size(workers)
            self.torch_threads = threads
            drop_malloc_trim_threshold()
            self.cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                        dashboard_address=None, silence_logs=logging.ERROR)
            self.client = Client(self.cluster)
            self.description = f"LocalCluster {n_workers} worker(s) × {threads} torch thread(s)"

    def run(self, specs: list[dict], local: bool = False):
        from distributed import as_completed

        if local:
            yield from SynchronousExecutor().run(specs)
            return
        futures = {}
        for spec in specs:
            fut = self.client.submit(run_job, spec, pure=False, key=f"{spec['stage']}-{spec['key']}-{time.time_ns()}")
            futures[fut] = spec
        for fut in as_completed(list(futures)):
            spec = futures[fut]
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


def make_executor(scheduler: str | None, workers: int | None = None):
    if scheduler in ("synchronous", "sync"):
        return SynchronousExecutor()
    return DaskExecutor(scheduler, workers)


# -- running ----------------------------------------------------------------------------------------

@dataclasses.dataclass
class StageReport:
    name: str
    digest: str
    total: int
    cached: bool                # the whole stage came from the cache
    jobs_run: int = 0           # jobs executed in this run (retries counted once)
    jobs_reused: int = 0        # finished jobs found in a partial stage
    wall_time_s: float = 0.0


class Progress:
    """One line per stage: done/total jobs and an ETA from the work done so far."""

    def __init__(self, stream=None, enabled: bool = True):
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def line(self, index: int, count: int, name: str, done: int, total: int, eta: float | None, note: str = "",
             final: bool = False) -> None:
        if not self.enabled:
            return
        eta_s = "" if eta is None else f"  ETA {format_seconds(eta)}"
        text = f"[{index}/{count}] {name:<12} {done}/{total} jobs{eta_s}{('  ' + note) if note else ''}"
        if self.tty:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        elif final or done == 0:
            self.stream.write(text + "\n")
        self.stream.flush()


def format_seconds(s: float) -> str:
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def write_plan(workdir: Path, stages: list[Stage], digests: dict, meta: dict) -> None:
    plan = {**meta, "stages": [{"name": s.name, "digest": digests[s.name], "inputs": s.inputs,
                                "jobs": [j.key for j in s.jobs(s.config)]} for s in stages]}
    write_json_atomic(workdir / PLAN_FILE, plan)


def run_stages(stages: list[Stage], workdir: str | os.PathLike, *, executor=None, until: str | None = None,
               force: str | None = None, progress: Progress | None = None, meta: dict | None = None,
               ) -> tuple[dict[str, dict], list[StageReport]]:
    """Run (or reuse) every stage in order; returns ({stage: result}, reports).

    ``force`` recomputes that stage and every later one; ``until`` stops after that stage.
    The caller holds the workdir lock (``workdir_lock``).
    """
    workdir = Path(workdir).resolve()
    names = [s.name for s in stages]
    for opt, value in (("--until", until), ("--force", force)):
        if value is not None and value not in names:
            raise UserError(f"{opt} {value!r}: no such stage; the stages are {', '.join(names)}")
    executor = executor or SynchronousExecutor()
    progress = progress or Progress(enabled=False)
    digests = stage_digests(stages)
    workdir.mkdir(parents=True, exist_ok=True)
    write_plan(workdir, stages, digests, {**(meta or {}), "pid": os.getpid(), "started": _now()})
    forced = set(names[names.index(force):]) if force else set()
    last = names.index(until) if until else len(stages) - 1

    results: dict[str, dict] = {}
    reports: list[StageReport] = []
    for index, stage in enumerate(stages[: last + 1], start=1):
        digest = digests[stage.name]
        final, partial = final_dir(workdir, stage.name, digest), partial_dir(workdir, stage.name, digest)
        if stage.name in forced:
            for path in (final, partial):
                if path.exists():
                    shutil.rmtree(path)
        jobs = stage.jobs(stage.config)
        cached = load_stage_result(workdir, stage.name, digest)
        if cached is not None:
            results[stage.name] = cached
            reports.append(StageReport(stage.name, digest, len(jobs), cached=True))
            progress.line(index, len(stages), stage.name, len(jobs), len(jobs), None, "cached", final=True)
            continue
        inputs = {i: results[i] for i in stage.inputs}
        input_digests = {i: digests[i] for i in stage.inputs}
        results[stage.name], report = _run_stage(stage, digest, input_digests, jobs, inputs, workdir, executor,
                                                 progress, index, len(stages))
        reports.append(report)
    return results, reports


def _run_stage(stage: Stage, digest: str, input_digests: dict, jobs: list[Job], inputs: dict, workdir: Path, executor, progress,
               index: int, count: int) -> tuple[dict, StageReport]:
    final, partial = final_dir(workdir, stage.name, digest), partial_dir(workdir, stage.name, digest)
    partial.mkdir(parents=True, exist_ok=True)
    start = time.time()
    job_results: dict[str, dict] = {}
    todo: list[Job] = []
    for job in jobs:
        done = _read_json(partial / "jobs" / job.key / JOB_FILE)
        if done is not None:
            job_results[job.key] = done["result"]
        else:
            todo.append(job)
    report = StageReport(stage.name, digest, len(jobs), cached=False, jobs_reused=len(job_results))
    total_work = sum(j.work for j in todo) or 1.0
    work_of = {j.key: j.work for j in todo}
    done_work = 0.0
    progress.line(index, count, stage.name, len(job_results), len(jobs), None)

    def spec_of(job: Job) -> dict:
        return {"fn": job.fn, "kwargs": job.kwargs, "inputs": inputs, "stage": stage.name, "key": job.key,
                "job_dir": str(partial / "jobs" / job.key), "log": str(workdir / "logs" / stage.name / f"{job.key}.log"),
                "torch_threads": getattr(executor, "torch_threads", None)}

    pending = [spec_of(j) for j in todo]
    attempt = 0
    failures: list[tuple[dict, BaseException]] = []
    while pending:
        attempt += 1
        retry: list[dict] = []
        for spec, outcome in executor.run(pending, local=stage.local):
            if isinstance(outcome, BaseException):
                if attempt == 1:
                    log.warning("job %s/%s failed (%s); retrying once", stage.name, spec["key"], outcome)
                    retry.append(spec)
                else:
                    failures.append((spec, outcome))
                continue
            job_results[spec["key"]] = outcome
            report.jobs_run += 1
            done_work += work_of[spec["key"]]
            elapsed = time.time() - start
            eta = elapsed / done_work * (total_work - done_work) if done_work else None
            progress.line(index, count, stage.name, len(job_results), len(jobs), eta)
        if failures:
            break
        pending = retry if attempt == 1 else []
    if failures:
        spec, exc = failures[0]
        progress.line(index, count, stage.name, len(job_results), len(jobs), None, "FAILED", final=True)
        more = f" ({len(failures) - 1} more job(s) failed too)" if len(failures) > 1 else ""
        failed = StageFailed(
            f"stage {stage.name!r} failed: job {spec['key']!r} failed twice: {type(exc).__name__}: {exc}\n"
            f"log: {spec['log']}{more}; finished jobs are kept in {partial}")
        failed.stage, failed.job, failed.error, failed.log = stage.name, spec["key"], exc, spec["log"]
        raise failed

    result = stage.collect(stage.config, inputs, job_results) if stage.collect else {"jobs": job_results}
    result = _rewrite_paths(result, str(partial), str(final))
    write_json_atomic(partial / STAGE_FILE, {
        "stage": stage.name, "digest": digest, "config": stage.config, "inputs": input_digests,
        "code_version": code_version(), "finished": _now(), "wall_time_s": time.time() - start, "result": result,
    })
    os.replace(partial, final)
    report.wall_time_s = time.time() - start
    progress.line(index, count, stage.name, len(jobs), len(jobs), None, f"done in {format_seconds(report.wall_time_s)}",
                  final=True)
    return result, report


# -- status -----------------------------------------------------------------------------------------

def workdir_status(workdir: str | os.PathLike) -> dict:
    """What the latest run's plan says and what the folders hold: per stage done/running/failed jobs."""
    workdir = Path(workdir)
    plan = _read_json(workdir / PLAN_FILE)
    if plan is None:
        raise UserError(f"{workdir} holds no pipeline run (no {PLAN_FILE}); start one with `probe pipeline run`")
    holder = lock_holder(workdir)
    stages = []
    for s in plan["stages"]:
        final, partial = final_dir(workdir, s["name"], s["digest"]), partial_dir(workdir, s["name"], s["digest"])
        entry = {"name": s["name"], "digest": s["digest"], "total": len(s["jobs"]), "done": 0, "running": [],
                 "failed": [], "interrupted": []}
        if (final / STAGE_FILE).exists():
            entry.update(state="complete", done=len(s["jobs"]))
        else:
            for key in s["jobs"]:
                job_dir = partial / "jobs" / key
                if (job_dir / JOB_FILE).exists():
                    entry["done"] += 1
                elif (job_dir / ERROR_FILE).exists():
                    err = _read_json(job_dir / ERROR_FILE) or {}
                    entry["failed"].append({"job": key, "error": err.get("error"), "log": err.get("log")})
                elif (job_dir / STARTED_FILE).exists():
                    entry["running" if holder else "interrupted"].append(key)
            if entry["failed"]:
                entry["state"] = "failed"
            elif entry["running"]:
                entry["state"] = "running"
            elif entry["done"] or entry["interrupted"]:
                entry["state"] = "partial"
            else:
                entry["state"] = "pending"
        stages.append(entry)
    return {"workdir": str(workdir), "pipeline": plan.get("pipeline"), "preset": plan.get("preset"),
            "started": plan.get("started"), "running_pid": holder.get("pid") if holder else None, "stages": stages}
