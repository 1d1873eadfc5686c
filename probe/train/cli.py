"""``probe models list`` and ``probe train``."""

from __future__ import annotations

import click

from probe.errors import UserError


def _describe(cls) -> str:
    """First line of the class docstring, else of its module's docstring."""
    import sys

    for doc in (cls.__dict__.get("__doc__"), getattr(sys.modules.get(cls.__module__), "__doc__", None)):
        lines = (doc or "").strip().splitlines()
        if lines and lines[0].strip():
            return lines[0].strip()
    return ""


@click.group()
def models():
    """Objectives available to `probe train` (built-ins and plug-ins)."""


@models.command("list")
def list_models():
    """Each model: name, code kind (continuous/discrete), pairs, one-line description."""
    from probe.models.registry import available_models, get_model_class

    rows = []
    for name in available_models():
        try:
            cls = get_model_class(name)
        except UserError as exc:  # a broken plug-in must not hide the others
            rows.append((name, "?", "", f"(cannot load: {exc})"))
            continue
        rows.append((name, getattr(cls, "code_kind", "continuous"), "pairs" if getattr(cls, "needs_pairs", False) else "",
                     _describe(cls)))
    width = max((len(r[0]) for r in rows), default=4)
    for name, kind, pairs, desc in rows:
        click.echo(f"{name:<{width}}  {kind:<10}  {pairs:<5}  {desc}".rstrip())


@click.command()
@click.argument("model")
@click.option("--data", "data", required=True, type=click.Path(), help="Store to train on (a .zarr store).")
@click.option("--out", "out", required=True, type=click.Path(), help="Run directory to create (or resume).")
@click.option("--steps", type=int, default=None, help="Optimizer steps (default 300000, or the model's train default).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--seeds", default=None, metavar="LIST",
              help="Train several seeds as one batched job (e.g. 0-9 or 0,3,7): --out is then a folder holding one "
                   "run folder per seed, seed<N>.")
@click.option("--engine", type=click.Choice(["auto", "loop", "vmap"]), default="auto", show_default=True,
              help="Batched engine with --seeds: loop (seeds in turn, bit-identical to separate runs), vmap (one step "
                   "for all seeds, equal to float rounding; supported models only), auto (vmap on CUDA when possible).")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Train setting (steps, batch_size, checkpoint_every, log_every, precision, compile) "
                   "or model hyperparameter (see the model's defaults); repeatable.")
@click.option("--dataset", default=None, help="Preset name for the model's hyperparameters (default: the store's name).")
@click.option("--device", default=None, help="cpu, cuda, cuda:N or auto (default auto: cuda if present).")
@click.option("--overwrite", is_flag=True, default=False,
              help="Replace a run with another configuration that already holds --out (a failed run, or one that "
                   "never checkpointed, is replaced without it).")
@click.option("--resume/--no-resume", default=True, show_default=True,
              help="Continue an interrupted run in --out (with the same configuration).")
@click.option("--progress/--no-progress", default=True, show_default=True)
def train(model, data, out, steps, seed, seeds, engine, settings, dataset, device, overwrite, resume, progress):
    """Train MODEL (a name from `probe models list` or package.module:Class) on a store."""
    from probe.cli import parse_set_options
    from probe.models.registry import get_model_class
    from probe.train.config import TRAIN_KEYS
    from probe.train.trainer import train_run

    overrides = parse_set_options(settings)
    model_cls = get_model_class(model)
    model_keys = set(model_cls.default_config())
    unknown = sorted(set(overrides) - model_keys - set(TRAIN_KEYS))
    if unknown:
        raise UserError(f"unknown --set key(s) {', '.join(map(repr, unknown))}; train keys: {', '.join(TRAIN_KEYS)}; "
                        f"{model} hyperparameters: {', '.join(sorted(model_keys))}")
    train_cfg = {k: v for k, v in overrides.items() if k in TRAIN_KEYS}
    model_cfg = {k: v for k, v in overrides.items() if k not in TRAIN_KEYS}
    if steps is not None:
        train_cfg["steps"] = steps
    run_config = {"model": model, "model_config": model_cfg, "dataset": dataset, "seed": seed, "train": train_cfg}
    if seeds is not None:
        _train_seeds(run_config, data, out, parse_seeds(seeds), engine=engine, device=device, resume=resume,
                     overwrite=overwrite, progress=progress)
        return
    run_dir = train_run(run_config, data, out, resume=resume, device=device, progress=progress, overwrite=overwrite)
    click.echo(str(run_dir))


def parse_seeds(text: str) -> list[int]:
    """"0-9" or "0,3,7" (or both: "0-4,10") -> the seeds, in order, without repeats."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            seeds += list(range(int(first), int(last) + 1)) if last else [int(first)]
    except ValueError:
        raise UserError(f"--seeds {text!r}: give seeds as 0-9 or 0,3,7") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds {text!r}: give at least one seed, each once")
    return seeds


def _train_seeds(run_config: dict, data, out, seeds: list[int], **options) -> None:
    from pathlib import Path

    from probe.train.batched import train_runs
    from probe.train.trainer import _open_data

    store = _open_data(data)  # a corrupt store stops here, before any folder is made
    parent = Path(out)
    parent.mkdir(parents=True, exist_ok=True)
    outs = [parent / f"seed{s}" for s in seeds]
    outcomes = train_runs([{**run_config, "seed": s} for s in seeds], store, outs, **options)
    failed = [(s, o) for s, o in zip(seeds, outcomes) if isinstance(o, BaseException)]
    for outcome in outcomes:
        if not isinstance(outcome, BaseException):
            click.echo(str(outcome))
    if failed:
        raise UserError("; ".join(f"seed {s}: {o}" for s, o in failed))
