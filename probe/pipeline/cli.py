"""``probe pipeline list | show | run | status``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from probe.errors import UserError

PRESETS_HELP = "smoke (tiny, every stage, minutes), quick (CPU, under an hour), paper (GPU, official data)"


@click.group()
def pipeline():
    """Staged pipelines (cached by digest, resumable, executed on dask.distributed)."""


@pipeline.command("list")
def list_cmd():
    """The shipped pipelines with their presets (bases such as modify.toml are not pipelines)."""
    from probe.pipeline.config import DEFINITIONS_DIR, load_definition, pipeline_names

    for name in pipeline_names():
        _, raw = load_definition(name)
        click.echo(f"{name:<20} presets: {', '.join(raw.get('presets', {}))}")
    # after `pip install .` the files sit in site-packages: say where, so a user can copy one and run it by path
    click.echo(f"definitions: {DEFINITIONS_DIR} (a copy of one runs by its path: probe pipeline run my.toml)")


@pipeline.command()
@click.argument("name")
@click.option("--preset", default="smoke", show_default=True, help=PRESETS_HELP)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override a config value (dotted key)")
@click.option("--check", is_flag=True,
              help="also check the models' hyperparameters, train settings and metrics, as `run` does (imports torch: seconds)")
def show(name, preset, sets, check):
    """Print the resolved plan of NAME: stages, jobs, estimated work, every config value."""
    from probe.cli import parse_set_options
    from probe.pipeline import format_plan, plan_pipeline

    click.echo(format_plan(plan_pipeline(name, preset=preset, overrides=parse_set_options(sets), deep=check)))


@pipeline.command()
@click.argument("name")
@click.option("--preset", default="smoke", show_default=True, help=PRESETS_HELP)
@click.option("--workdir", required=True, type=click.Path(file_okay=False), help="where stages, logs and results go")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="dask scheduler address (tcp://host:8786); 'synchronous' runs jobs in this process; "
                   "default: a LocalCluster sized to this machine")
@click.option("--workers", type=int, default=None, help="LocalCluster workers (default: one per GPU, else one single-threaded worker per CPU core)")
@click.option("--until", default=None, metavar="STAGE", help="stop after this stage")
@click.option("--force", default=None, metavar="STAGE", help="recompute this stage and everything after it")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override a config value (dotted key)")
@click.option("--quiet", is_flag=True, help="no progress lines")
def run(name, preset, workdir, scheduler, workers, until, force, sets, quiet):
    """Run (or resume) pipeline NAME in WORKDIR; finished stages and jobs are reused."""
    from probe.cli import parse_set_options
    from probe.pipeline import StageFailed, run_pipeline

    try:
        result = run_pipeline(name, workdir=workdir, preset=preset, overrides=parse_set_options(sets),
                              scheduler=scheduler, workers=workers, until=until, force=force, progress=not quiet)
    except StageFailed as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if not quiet:
        from probe.report.schema import inputs_path

        report = inputs_path(result.workdir)
        if report.exists():
            click.echo(f"report inputs: {report}")


def _training_progress(workdir, stage: dict) -> dict:
    """{job: run_progress} of the stage's started, unfinished jobs that train a run: how far each got. A batched job
    (several seeds as one task) finishes its jobs together, so a seed already trained still reads as running."""
    keys = stage["running"] + stage["interrupted"]
    if not keys:
        return {}  # reading a run folder imports torch (seconds): only where there is progress to show
    from probe.pipeline.stages.common import job_run_progress
    from probe.pipeline.workdir import job_dir, partial_dir

    partial = partial_dir(Path(workdir), stage["name"], stage["digest"])
    found = {key: job_run_progress(job_dir(partial, key)) for key in keys}
    return {key: progress for key, progress in found.items() if progress is not None}


def _with_progress(key: str, progress: dict) -> str:
    p = progress.get(key)
    if p is None:
        return key
    if p["complete"]:
        return f"{key} (trained, {p['step']:,} steps)"
    return f"{key} ({p['step']:,}/{p['steps']:,} steps)" if p["steps"] else f"{key} (step {p['step']:,})"


@pipeline.command()
@click.argument("workdir", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def status(workdir, as_json):
    """What is done, running and failed in WORKDIR; exit 2, with advice, when a stage is damaged."""
    from probe.pipeline.workdir import workdir_status

    st = workdir_status(workdir)
    for s in st["stages"]:
        s["progress"] = _training_progress(workdir, s)
    if as_json:
        click.echo(json.dumps(st, indent=2))
    else:
        who = f"running (pid {st['running_pid']})" if st["running_pid"] else "not running"
        click.echo(f"{st['pipeline']} preset {st['preset']} in {st['workdir']}: {who}; started {st['started']}")
        for s in st["stages"]:
            extra = []
            if s["running"]:
                extra.append(f"running: {', '.join(_with_progress(key, s['progress']) for key in s['running'])}")
            if s["interrupted"]:
                extra.append(f"interrupted: {len(s['interrupted'])}"
                             + (f" ({', '.join(_with_progress(k, s['progress']) for k in s['progress'])})"
                                if s["progress"] else ""))
            if s["state"] == "stale":
                extra.append(f"depends on damaged {s['stale_from']}")
            click.echo(f"  {s['name']:<12} {s['state']:<9} {s['done']}/{s['total']} jobs  {'; '.join(extra)}")
            for f in s["failed"]:
                click.echo(f"      FAILED {f['job']}: {f['error']}  (log: {f['log']})")
    if not st["stages"]:
        raise UserError("the plan holds no stages")
    if st["advice"]:
        raise UserError(st["advice"])
