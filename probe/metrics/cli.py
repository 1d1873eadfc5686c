"""``probe evaluate RUN --data STORE [--metrics mig,dci,...] [--out metrics.json]``: ``evaluate_run`` of one trained run."""

from __future__ import annotations

import json

import click


@click.command()
@click.argument("run", type=click.Path())
@click.option("--data", "data", required=True, type=click.Path(), help="Store to evaluate on (a .zarr store).")
@click.option("--metrics", "metrics", default=None,
              help="Comma-separated metric names, or 'fast' (default: all; an unknown name lists them).")
@click.option("--out", "out", default=None, type=click.Path(), help="Write the result JSON here (atomically).")
@click.option("--seed", type=int, default=0, show_default=True, help="Evaluation seed (disentanglement_lib: 0).")
@click.option("--small", is_flag=True, help="Use the small sample sizes of quick presets instead of the reference ones.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Evaluation setting, e.g. num_train=2000, dci_predictor=rf, infomec_n_neighbors=10; repeatable.")
@click.option("--device", default=None, help="Device for the encoder (cpu, cuda, ...; default cpu).")
def evaluate(run, data, metrics, out, seed, small, settings, device):
    """Compute disentanglement metrics of the trained RUN on a store; prints the metrics as JSON."""
    from probe.cli import parse_set_options
    from probe.metrics import small_settings
    from probe.metrics.evaluate import evaluate_run, resolve_metrics, resolve_settings
    from probe.provenance import write_json_atomic

    overrides = {**(small_settings() if small else {}), **parse_set_options(settings)}
    if device is not None:
        overrides["device"] = device
    resolve_settings(overrides)  # fail on unknown keys before loading anything
    resolve_metrics(metrics)
    result = evaluate_run(run, data, metrics=metrics, seed=seed, **overrides)
    if out is not None:
        write_json_atomic(out, result)
    click.echo(json.dumps(result["metrics"], indent=2, sort_keys=True))
