"""``probe audit --model X``: train a plug-in model on original / modified / noise data next to the
reference models and print the verdict (probe.pipeline.audit; pipelines/audit.toml)."""

from __future__ import annotations

import click


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
@click.option("--workers", type=int, default=None, help="LocalCluster workers (default: one per GPU, else cores/2)")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="override an audit config value, e.g. plugin.model_config.mmd_weight=5 or "
                   "reference.overrides.retrain.seeds=3 (see pipelines/audit.toml)")
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
    from pathlib import Path

    from probe.cli import parse_set_options
    from probe.pipeline.audit import AUDIT_PIPELINE, format_audit, reference_configs, run_audit

    overrides = parse_set_options(sets)
    workdir = Path(workdir) if workdir else Path("runs") / f"{dataset}-{preset}"
    if plan_only:
        from probe.pipeline import format_plan, plan_pipeline

        over = {**overrides, "plugin.model": target, "pipeline.dataset": dataset}
        if seeds is not None:
            over["plugin.seeds"] = seeds
        meta = {"workdir": str(workdir.resolve())}
        plan = plan_pipeline(AUDIT_PIPELINE, preset=preset, overrides=over, meta=meta)
        click.echo(format_plan(plan))
        ref_name, _full, _narrowed = reference_configs(plan.config)
        retrain = next(s for s in plan.stages if s.name == "retrain").config
        click.echo(f"\nreference: {ref_name} preset {preset}, models {', '.join(retrain['models'])} × "
                   f"{retrain['seeds']} seeds (`probe pipeline show {ref_name} --preset {preset}` lists its config)")
        return
    result = run_audit(target, workdir=workdir, dataset=dataset, preset=preset, seeds=seeds, overrides=overrides,
                       scheduler=scheduler, workers=workers, progress=not quiet)
    click.echo(format_audit(result))
    click.echo(f"written: {result['paths']['markdown']} and {result['paths']['json']}")
