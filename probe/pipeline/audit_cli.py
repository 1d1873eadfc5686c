"""``probe audit --model X``: train a plug-in model on original / modified / noise data next to the
reference models and print the verdict (probe.pipeline.audit; probe/pipeline/definitions/audit.toml). ``run_audit`` runs
the audit pipeline and publishes its files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click

from probe.errors import UserError
from probe.pipeline import StageFailed, format_plan, plan_pipeline, run_pipeline
from probe.pipeline.audit import AUDIT_PIPELINE, AUDITS_DIR, format_audit, reference_configs
from probe.pipeline.stages import audit as audit_stage
from probe.pipeline.stages import plugin_check, plugin_evaluate, plugin_train, retrain

# a failure in these stages is the plug-in's: the user gets one message naming it
PLUGIN_STAGES = (plugin_check.NAME, plugin_train.NAME, plugin_evaluate.NAME, audit_stage.NAME)


@click.command()
@click.option("--model", "target", required=True, metavar="NAME",
              help="the model to audit: an entry-point name (group probe.models), a registry name, or "
                   "package.module:Class (importable, e.g. on PYTHONPATH)")
@click.option("--dataset", default="dsprites", show_default=True, help="dsprites or shapes3d (the reference "
              "pipeline modify-<dataset> provides the stores and reference models)")
@click.option("--preset", default="smoke", show_default=True,
              help="smoke (minutes, 2 reference models), quick (CPU, under an hour), paper (GPU, official data)")
@click.option("--seeds", type=click.IntRange(min=1), default=None,
              help="seeds of the plug-in per variant (default: the reference pipeline's retrain.seeds)")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="where stages, runs and the audit go (default runs/<dataset>-<preset>); use the workdir of a "
                   "`probe pipeline run modify-<dataset>` to reuse its stores and reference runs")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="dask scheduler address; 'synchronous' runs jobs in this process; default: a LocalCluster")
@click.option("--workers", type=int, default=None, help="LocalCluster workers (default: one per GPU, else one "
              "single-threaded worker per CPU core)")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="override an audit config value, e.g. plugin.model_config.mmd_weight=5 or "
                   "reference.overrides.retrain.seeds=3 (`probe pipeline show audit` lists them)")
@click.option("--plan", "plan_only", is_flag=True, help="print the resolved stages and config, run nothing")
@click.option("--quiet", is_flag=True, help="no progress lines")
def audit(target, dataset, preset, seeds, workdir, scheduler, workers, sets, plan_only, quiet):
    """Audit a new method: does it, like the VAEs, rely on local variance structure?

    Trains the model on the original, the adversarially modified and the noise data (stores built or
    reused through the pipeline cache), evaluates it, and prints the verdict (Welch t-test, bootstrap CI,
    the report's rule) next to the reference models'. The audit is written to WORKDIR/audits/<model>/
    (audit.md, audit.json, and report_inputs.json for `probe report WORKDIR/audits/<model>`).
    Exit code 2 when the plug-in is broken; finished stages and runs are kept.
    """
    from probe.cli import parse_set_options

    overrides = parse_set_options(sets)
    workdir = Path(workdir) if workdir else Path("runs") / f"{dataset}-{preset}"
    if plan_only:
        over = {**overrides, "plugin.model": target, "pipeline.dataset": dataset}
        if seeds is not None:
            over["plugin.seeds"] = seeds
        meta = {"workdir": str(workdir.resolve())}
        plan = plan_pipeline(AUDIT_PIPELINE, preset=preset, overrides=over, meta=meta)
        click.echo(format_plan(plan))
        ref_name, _full, _narrowed = reference_configs(plan.config)
        reference = next(s for s in plan.stages if s.name == retrain.NAME).config
        click.echo(f"\nreference: {ref_name} preset {preset}, models {', '.join(reference['models'])} × "
                   f"{reference['seeds']} seeds (`probe pipeline show {ref_name} --preset {preset}` lists its config)")
        return
    result = run_audit(target, workdir=workdir, dataset=dataset, preset=preset, seeds=seeds, overrides=overrides,
                       scheduler=scheduler, workers=workers, progress=not quiet)
    click.echo(format_audit(result))
    click.echo(f"written: {result['paths']['markdown']} and {result['paths']['json']}")


def run_audit(target: str, *, workdir, dataset: str = "dsprites", preset: str = "smoke", seeds: int | None = None,
              overrides: dict | None = None, scheduler: str | None = None, workers: int | None = None,
              progress: bool = True) -> dict:
    """Run (or resume) the audit of plug-in ``target`` in ``workdir``; returns the audit result
    (``audit.json``'s content) plus ``paths`` of the files published to ``WORKDIR/audits/<slug>/``.
    A failure in a plug-in stage raises UserError naming the plug-in; finished work is kept."""
    over = dict(overrides or {})
    over.update({"plugin.model": target, "pipeline.dataset": dataset})
    if seeds is not None:
        over["plugin.seeds"] = seeds
    workdir = Path(workdir).resolve()
    try:
        run = run_pipeline(AUDIT_PIPELINE, workdir=workdir, preset=preset, overrides=over, scheduler=scheduler,
                           workers=workers, progress=progress)
    except StageFailed as exc:
        if exc.stage not in PLUGIN_STAGES:
            raise
        err = exc.error
        problem = str(err) if isinstance(err, UserError) else f"plug-in {target}: {type(err).__name__}: {err}"
        if not problem.startswith("plug-in"):
            problem = f"plug-in {target}: {problem}"
        raise UserError(f"{problem}\n(stage {exc.stage!r}, job {exc.job!r}; log: {exc.log})\nThe stores, the reference "
                        f"runs and every finished stage and job are kept in {workdir}; fix the plug-in and run the "
                        "audit again.") from None
    job = audit_stage.result(run.results)
    return publish(workdir, job)


def publish(workdir: Path, job: dict) -> dict:
    """Copy the audit stage's files to ``WORKDIR/audits/<slug>/`` (also after a cached run: the
    latest audit of a plug-in is the one published)."""
    from probe.provenance import atomic_path
    from probe.report.schema import copy_inputs, inputs_path

    out = Path(workdir) / AUDITS_DIR / job["slug"]
    out.mkdir(parents=True, exist_ok=True)  # may also hold a `probe report` of it: files are replaced one by one
    copy_inputs(job["report_inputs"], out)  # its "workdir" entry rewritten for the new folder
    for key, name in (("markdown", "audit.md"), ("audit", "audit.json")):
        with atomic_path(out / name, overwrite=True) as tmp:
            shutil.copyfile(job[key], tmp)
    result = json.loads((out / "audit.json").read_text())
    result["paths"] = {"json": str(out / "audit.json"), "markdown": str(out / "audit.md"),
                       "report_inputs": str(inputs_path(out))}
    return result
