"""The stage engine: a linear graph of stages, each a set of independent jobs, cached by digest.

A stage's digest hashes its config, the digests of its input stages and ``code_version()``, so
changing anything upstream (or the code) gives new folders and never reuses stale results (the
folders: probe.pipeline.workdir). Inside a partial stage each job owns ``jobs/<key>/``; a job is
finished when ``jobs/<key>/job.json`` exists (written atomically by the job wrapper on the worker,
probe.pipeline.worker, so a killed driver loses nothing finished). When every job is finished the
stage's ``collect`` result goes into ``stage.json`` and the partial folder is renamed to its final
name; paths inside results that point into the partial folder are rewritten to the final one. On
disk, results name paths relative to the workdir (``$WORKDIR/...``: probe.pipeline.workdir.to_record),
so a copied or moved workdir resumes where it stands; in memory they are absolute.

Before any work, a damaged workdir (probe.pipeline.workdir.plan_damage: a stage whose repair may change
its result while complete stages computed from it exist) is refused with advice, unless ``force``
covers the stale stages; the folders of forced stages are removed before anything runs, so an
interrupted forced run never leaves stages computed from the old result beside the new one.

Execution: jobs are dask.distributed tasks (probe.pipeline.executors); ``scheduler="synchronous"``
runs them in this process, one after the other (debugging, fast tests). A failing job is retried
once; if it fails again the stage stops with the job's error and its log path. The jobs of one stage
run in parallel. On an executor with ``concurrent_stages`` (dask) every stage whose input stages are
done runs at once beside the others, so a one-job stage (manipulate, the random-ψ control, noise)
does not leave the other workers idle. A ``local`` stage (run in this process) runs alone, and holds
back the stages after it in the list while it waits for the others to finish.
When a stage fails, no new stage starts, the running ones finish (their jobs are kept), then the
first failure is raised. On other executors the stages run one after the other, in order.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from probe.errors import UserError
from probe.pipeline.executors import SynchronousExecutor
from probe.pipeline.progress import Progress, format_seconds
from probe.pipeline.workdir import (PLAN_FILE, STAGE_FILE, Leg, damage_advice, final_dir, job_dir, load_stage_result,
                                    log_path, moved_paths, now, partial_dir, plan_damage, read_job_result, to_record)
from probe.provenance import code_version, digest_json, write_json_atomic

log = logging.getLogger(__name__)

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
    """One independent unit of work. ``fn`` is a module-level function (it pickles by reference to a
    dask worker) called as ``fn(ctx: JobContext, **kwargs) -> dict`` (JSON-able; JobContext:
    probe.pipeline.worker); ``work`` estimates its cost (training steps, or 1 for an evaluation) for
    ETAs and ``show``."""

    key: str
    fn: Callable[..., dict]
    kwargs: dict = dataclasses.field(default_factory=dict)
    work: float = 1.0
    # Jobs of a stage with the same ``batch`` differ only in seed: the engine may run several of them as one task
    # through ``batch_fn(contexts, kwargs list) -> [result or exception]`` (probe.train.batched, issue 16).
    batch: str | None = None
    batch_fn: Callable[..., list] | None = None

    def __post_init__(self):
        if not self.key or any(c in self.key for c in "/\\") or self.key.startswith("."):
            raise ValueError(f"job key must be a plain file name, got {self.key!r}")
        if not callable(self.fn):
            raise TypeError(f"job {self.key!r}: fn must be the job function itself, got {self.fn!r}")


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


# -- digests ----------------------------------------------------------------------------------------

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


def plan_entries(stages: list[Stage], digests: dict) -> list[dict]:
    """The plan's stage entries (``pipeline.json``, ``workdir.plan_damage``): name, digest, inputs, job keys."""
    return [{"name": s.name, "digest": digests[s.name], "inputs": s.inputs, "jobs": [j.key for j in s.jobs(s.config)]}
            for s in stages]


def write_plan(workdir: Path, plan: dict) -> None:
    write_json_atomic(workdir / PLAN_FILE, to_record(plan, workdir))


def run_stages(stages: list[Stage], workdir: str | os.PathLike, *, executor=None, until: str | None = None,
               force: str | None = None, progress: Progress | None = None, meta: dict | None = None,
               ) -> tuple[dict[str, dict], list[StageReport]]:
    """Run (or reuse) every stage in order; returns ({stage: result}, reports).

    ``force`` recomputes that stage and every later one; ``until`` stops after that stage.
    The caller holds the workdir lock (``workdir_lock``). Each call is a leg (``probe.pipeline.workdir.Leg``): its
    start, wall time and computed stages go to ``legs.json``, from which a report sums a resumed run's wall time.
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
    plan = {**(meta or {}), "pid": os.getpid(), "started": now(), "stages": plan_entries(stages, digests)}
    forced = set(names[names.index(force):]) if force else set()
    last = names.index(until) if until else len(stages) - 1
    _refuse_stale(workdir, plan, forced)
    write_plan(workdir, plan)
    for stage in stages:  # before anything runs: a killed forced run leaves nothing computed from the old results
        if stage.name in forced:
            for path in (final_dir(workdir, stage.name, digests[stage.name]),
                         partial_dir(workdir, stage.name, digests[stage.name])):
                if path.exists():
                    shutil.rmtree(path)

    leg = Leg(workdir)
    try:
        return _run_stages(stages[: last + 1], workdir, digests, forced, executor, progress, leg, len(stages))
    finally:
        leg.tick(finished=True)


def _refuse_stale(workdir: Path, plan: dict, forced: set) -> None:
    """UserError (nothing run, nothing deleted) when a damaged stage's repair may change its result while complete
    stages computed from it are not forced: they would be reused, computed from a result that is gone."""
    damages = [d for d in plan_damage(workdir, plan["stages"]) if set(d.stale) - forced]
    if damages:
        raise UserError(damage_advice(damages, plan, workdir))


def _run_stages(stages: list[Stage], workdir: Path, digests: dict, forced: set, executor, progress: Progress, leg: Leg,
                count: int) -> tuple[dict[str, dict], list[StageReport]]:
    index_of = {s.name: i for i, s in enumerate(stages, start=1)}
    concurrent = bool(getattr(executor, "concurrent_stages", False))
    results: dict[str, dict] = {}
    reports: dict[str, StageReport] = {}
    waiting = list(stages)
    running: dict[str, Stage] = {}
    finished: queue.Queue = queue.Queue()
    failure: BaseException | None = None

    def compute(stage: Stage, jobs: list[Job]):
        inputs = {i: results[i] for i in stage.inputs}
        return _run_stage(stage, digests[stage.name], {i: digests[i] for i in stage.inputs}, jobs, inputs, workdir,
                          executor, progress, index_of[stage.name], count, leg)

    def in_thread(stage: Stage, jobs: list[Job]) -> None:
        try:
            finished.put((stage.name, compute(stage, jobs)))
        except BaseException as exc:  # noqa: BLE001 - raised by the driver once the running stages are done
            finished.put((stage.name, exc))

    while True:
        scan = failure is None
        while scan:  # start every stage that can start now; a cached one may make later ones ready
            scan = False
            for stage in list(waiting):
                if any(i not in results for i in stage.inputs):
                    continue
                jobs = stage.jobs(stage.config)
                digest = digests[stage.name]
                cached = load_stage_result(workdir, stage.name, digest, [j.key for j in jobs])
                if cached is not None:
                    waiting.remove(stage)
                    results[stage.name] = cached
                    reports[stage.name] = StageReport(stage.name, digest, len(jobs), cached=True)
                    progress.line(index_of[stage.name], count, stage.name, len(jobs), len(jobs), None, "cached",
                                  final=True)
                    scan = True
                    break
                alone = stage.local or any(r.local for r in running.values())
                if running and (not concurrent or alone):
                    break  # the list's order is the priority: a ready stage that must wait holds back later ones
                waiting.remove(stage)
                leg.computing(digest)
                if not concurrent:
                    results[stage.name], reports[stage.name] = compute(stage, jobs)
                    scan = True
                    break
                running[stage.name] = stage
                threading.Thread(target=in_thread, args=(stage, jobs), name=f"stage-{stage.name}", daemon=True).start()
        if not running:
            break
        name, outcome = finished.get()
        running.pop(name)
        if isinstance(outcome, BaseException):
            failure = failure or outcome
            if running:
                log.warning("stage %s failed; waiting for the running stage(s) %s to finish (their jobs are kept)",
                            name, ", ".join(running))
        else:
            results[name], reports[name] = outcome
    if failure is not None:
        raise failure
    return results, [reports[s.name] for s in stages if s.name in reports]


def _batched_tasks(specs: list[dict], workers: int) -> list[dict]:
    """The specs with jobs of the same ``batch`` fused into group tasks (``{"members": [...]}``) of
    ``members_per_task`` jobs each; a retry runs the failed members one by one."""
    from probe.pipeline.executors import members_per_task

    tasks: list[dict] = []
    groups: dict[str, list[dict]] = {}
    for spec in specs:
        if spec.get("batch") is None or spec.get("batch_fn") is None:
            tasks.append(spec)
        else:
            groups.setdefault(spec["batch"], []).append(spec)
    for batch, members in groups.items():
        size = members_per_task(len(members), workers)
        for start in range(0, len(members), size):
            chunk = members[start:start + size]
            tasks.append(chunk[0] if len(chunk) == 1 else {
                "members": chunk, "fn": chunk[0]["batch_fn"], "stage": chunk[0]["stage"],
                "key": f"{batch}-x{len(chunk)}-{chunk[0]['key']}"})
    return tasks


def _per_job(task: dict, outcome):
    """(job spec, its result or exception) for every job of a finished task."""
    if "members" not in task:
        yield task, outcome
        return
    for member in task["members"]:
        yield member, outcome if isinstance(outcome, BaseException) else outcome[member["key"]]


def _run_stage(stage: Stage, digest: str, input_digests: dict, jobs: list[Job], inputs: dict, workdir: Path, executor, progress,
               index: int, count: int, leg: Leg) -> tuple[dict, StageReport]:
    final, partial = final_dir(workdir, stage.name, digest), partial_dir(workdir, stage.name, digest)
    partial.mkdir(parents=True, exist_ok=True)
    start = time.time()
    job_results: dict[str, dict] = {}
    todo: list[Job] = []
    staged = (str(partial), str(final))
    for job in jobs:
        done = read_job_result(job_dir(partial, job.key), workdir, staged)
        if done is not None:
            job_results[job.key] = done
        else:
            todo.append(job)
    report = StageReport(stage.name, digest, len(jobs), cached=False, jobs_reused=len(job_results))
    total_work = sum(j.work for j in todo) or 1.0
    work_of = {j.key: j.work for j in todo}
    done_work = 0.0
    progress.line(index, count, stage.name, len(job_results), len(jobs), None)

    def spec_of(job: Job) -> dict:
        return {"fn": job.fn, "kwargs": job.kwargs, "inputs": inputs, "stage": stage.name, "key": job.key,
                "job_dir": str(job_dir(partial, job.key)), "log": str(log_path(workdir, stage.name, job.key)),
                "workdir": str(workdir), "staged": staged,
                "torch_threads": getattr(executor, "torch_threads", None), "batch": job.batch,
                "batch_fn": job.batch_fn}

    pending = _batched_tasks([spec_of(j) for j in todo], getattr(executor, "workers", 1))
    attempt = 0
    failures: list[tuple[dict, BaseException]] = []
    while pending:
        attempt += 1
        retry: list[dict] = []
        for spec, outcome in (pair for task in executor.run(pending, local=stage.local) for pair in _per_job(*task)):
            if isinstance(outcome, BaseException):
                if attempt == 1:
                    log.warning("job %s/%s failed (%s); retrying once", stage.name, spec["key"], outcome)
                    retry.append(spec)
                else:
                    failures.append((spec, outcome))
                continue
            job_results[spec["key"]] = outcome
            report.jobs_run += 1
            leg.tick()
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
    result = moved_paths(result, partial, final)
    write_json_atomic(partial / STAGE_FILE, to_record({
        "stage": stage.name, "digest": digest, "config": stage.config, "inputs": input_digests,
        "code_version": code_version(), "finished": now(), "wall_time_s": time.time() - start, "result": result,
    }, workdir))
    os.replace(partial, final)
    report.wall_time_s = time.time() - start
    progress.line(index, count, stage.name, len(jobs), len(jobs), None, f"done in {format_seconds(report.wall_time_s)}",
                  final=True)
    return result, report
