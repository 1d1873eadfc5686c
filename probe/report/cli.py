"""``probe report WORKDIR [WORKDIR ...] [--out DIR]``."""

from __future__ import annotations

import click

from probe.metrics.registry import PRIMARY_METRIC


@click.command()
@click.argument("workdirs", nargs=-1, required=True, type=click.Path())
@click.option("--out", "out_dir", type=click.Path(), default=None,
              help="Output folder (default WORKDIR/report); replaced if it holds an earlier report.")
@click.option("--primary-metric", default=PRIMARY_METRIC, show_default=True,
              help="Metric the verdicts use (mig, dci_d, factor_vae, sap, infom, ...).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap.")
def report(workdirs, out_dir, primary_metric, seed):
    """Markdown + self-contained HTML report with tables, statistics, verdicts and figures from
    WORKDIR/report_inputs.json and the files it names; loads no model and opens no store (the pipeline's
    report stage computed what needs them). Several workdirs (e.g. dSprites and Shapes3D) share one report;
    workdirs of one experiment (the same stores, code and settings; other seeds) are pooled into one sample."""
    from probe.report.build import make_report

    result = make_report(list(workdirs) if len(workdirs) > 1 else workdirs[0], out_dir,
                         primary_metric=primary_metric, seed=seed)
    click.echo(f"wrote {result['markdown']}, {result['html']} and {len(result['figures'])} figures")
