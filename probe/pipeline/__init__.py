"""Staged pipelines: cached by digest, resumable, executed on dask.distributed.

Public API::

    run_pipeline(name, *, workdir, preset="smoke", overrides=None, scheduler=None, workers=None,
                 until=None, force=None, progress=True) -> PipelineRun
    plan_pipeline(name, *, preset="smoke", overrides=None, workdir=None) -> Plan
    format_plan(plan) -> str
    workdir_status(workdir) -> dict          (probe.pipeline.workdir)

Pipelines are TOML files in ``probe/pipeline/definitions/`` (probe.pipeline.config); a pipeline's ``[pipeline] kind``
picks its stage graph (probe.pipeline.graph): ``modify``, ``linear-pca`` or ``audit`` (normally run as
``probe audit --model X``). The stages are modules of probe.pipeline.stages.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from probe.errors import UserError
from probe.pipeline.config import flatten, resolve
from probe.pipeline.engine import Stage, StageFailed, StageReport, run_stages
from probe.pipeline.executors import make_executor
from probe.pipeline.graph import graph_of
from probe.pipeline.progress import Progress
from probe.pipeline.workdir import workdir_lock, workdir_status

__all__ = ["run_pipeline", "plan_pipeline", "format_plan", "workdir_status", "StageFailed", "PipelineRun", "Plan"]


@dataclasses.dataclass
class Plan:
    name: str
    preset: str
    config: dict
    stages: list[Stage]
    modules: tuple = ()  # the graph's stage modules, in order (the graph is built once, here)
    deep: bool = True  # validated with the checks that import the models and metrics (plan_pipeline)


@dataclasses.dataclass
class PipelineRun:
    workdir: Path
    results: dict
    reports: list[StageReport]
    wall_time_s: float

    @property
    def jobs_run(self) -> int:
        return sum(r.jobs_run for r in self.reports)


def plan_pipeline(name: str, *, preset: str = "smoke", overrides: dict | None = None, workdir=None,
                  meta: dict | None = None, deep: bool = True) -> Plan:
    """Resolve and validate a pipeline (no work, no files); raises UserError on any bad config. ``deep=False`` leaves
    out the checks that import the models and metrics (torch, scipy: seconds), for ``probe pipeline show``."""
    config = resolve(name, preset, overrides)
    graph = graph_of(config)
    graph.validate(config, deep=deep)
    return Plan(config["pipeline"]["name"], preset, config, graph.stages(config, meta or {}), graph.modules, deep)


def run_pipeline(name: str, *, workdir, preset: str = "smoke", overrides: dict | None = None,
                 scheduler: str | None = None, workers: int | None = None, until: str | None = None,
                 force: str | None = None, progress: bool = True) -> PipelineRun:
    """Run (or resume) a pipeline in ``workdir``. Validation happens before the lock, the cluster or
    any file is touched."""
    from probe.provenance import code_version

    workdir = Path(workdir).resolve()
    t0 = time.time()
    meta = {"workdir": str(workdir), "started": _now(), "t0": t0, "code_version": code_version()}
    plan = plan_pipeline(name, preset=preset, overrides=overrides, meta=meta)
    meta.update(pipeline=plan.name, preset=preset, dataset=plan.config["pipeline"].get("dataset"), config=plan.config)
    names = [s.name for s in plan.stages]
    for opt, value in (("--until", until), ("--force", force)):
        if value is not None and value not in names:
            raise UserError(f"{opt} {value!r}: no such stage; the stages are {', '.join(names)}")
    if workdir.exists() and not workdir.is_dir():
        raise UserError(f"--workdir {workdir} exists and is not a folder")
    with workdir_lock(workdir):
        executor = make_executor(scheduler, workers)
        try:
            out = Progress(enabled=progress)
            if progress:
                print(f"pipeline {plan.name} preset {preset} in {workdir} on {executor.description}", file=sys.stderr)
            results, reports = run_stages(plan.stages, workdir, executor=executor, until=until, force=force,
                                          progress=out, meta={"pipeline": plan.name, "preset": preset,
                                                              "config": plan.config})
        finally:
            executor.close()
    _publish(workdir, results, plan.modules)
    run = PipelineRun(workdir, results, reports, time.time() - t0)
    if progress:
        print(f"done in {run.wall_time_s:.1f}s ({run.jobs_run} job(s) run)", file=sys.stderr)
    return run


def _publish(workdir: Path, results: dict, modules: tuple) -> None:
    """Copy the modify report stage's report_inputs.json to WORKDIR when it is missing (a cached report)."""
    from probe.pipeline.stages import report
    from probe.pipeline.stages.face import present
    from probe.report.schema import copy_inputs, inputs_path

    if report not in modules or not present(results, report):
        return
    src = report.result(results).report_inputs
    if Path(src).exists() and not inputs_path(workdir).exists():
        copy_inputs(src, workdir)


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def format_plan(plan: Plan) -> str:
    """The resolved plan: stages, digests-independent job counts, estimated work, then every config key."""
    lines = [f"pipeline {plan.name}  preset {plan.preset}", "", "stages:"]
    total_steps = 0
    total_jobs = 0
    width = max([12] + [len(stage.name) for stage in plan.stages])
    for i, stage in enumerate(plan.stages, start=1):
        jobs = stage.jobs(stage.config)
        steps = sum(j.work for j in jobs if j.work > 1)
        total_steps += steps
        total_jobs += len(jobs)
        extra = f", {int(steps):,} training steps" if steps else ""
        deps = f"  <- {', '.join(stage.inputs)}" if stage.inputs else ""
        lines.append(f"  {i:>2}. {stage.name:<{width}} {len(jobs):>4} job(s){extra}{deps}")
    lines.append(f"  total: {total_jobs} jobs, {int(total_steps):,} training steps")
    expected = plan.config.get("pipeline", {}).get("expected_wall")
    if expected:
        lines.append(f"  expected wall time: {expected}")
    if not plan.deep:
        lines.append("  checked: settings, counts and files; the models' hyperparameters, train settings and metrics are "
                     "checked by `run` before any work (or here with --check)")
    lines += ["", "config (override with --set KEY=VALUE):"]
    for key, value in flatten({k: v for k, v in plan.config.items()}).items():
        lines.append(f"  {key} = {value!r}")
    return "\n".join(lines)

