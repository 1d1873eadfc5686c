"""``probe datasets``: list, fetch, build, generate, info, verify, show, export."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from probe.errors import UserError


@click.group()
def datasets():
    """Official datasets (fetch/build), procedural generators and store utilities."""


@datasets.command("list")
def list_cmd():
    """Known official datasets and procedural generators."""
    from probe.data.sources import DATASETS
    from probe.data.synth import GENERATORS

    click.echo("official datasets (probe datasets fetch NAME; probe datasets build NAME --out STORE):")
    for name, c in DATASETS.items():
        sizes = c["factor_sizes"]
        click.echo(f"  {name:16s} {int(np.prod(sizes)):>9,d} images  {dict(zip(c['factor_names'], sizes))}")
    click.echo("procedural generators (probe datasets generate NAME --out STORE):")
    for name, g in GENERATORS.items():
        click.echo(f"  {name:16s} {int(np.prod(g.FULL_SIZES)):>9,d} images  {dict(zip(g.FACTOR_NAMES, g.FULL_SIZES))}")


@datasets.command()
@click.argument("name")
@click.option("--dir", "dest", type=click.Path(file_okay=False), default=None,
              help="Download folder (default $PROBE_DATA_DIR/NAME or ~/.cache/probe/datasets/NAME).")
def fetch(name, dest):
    """Download NAME's official files (resumable) and check their digests."""
    from probe.data.sources import fetch as do_fetch

    for path in do_fetch(name, dest):
        click.echo(str(path))


def _sizes_option(value):
    if value is None:
        return None
    try:
        return [int(s) for s in value.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"--factor-sizes must be comma-separated integers, got {value!r}") from None


@datasets.command()
@click.argument("name")
@click.option("--source", type=click.Path(), default=None, help="The official file (default: where fetch puts it).")
@click.option("--out", required=True, type=click.Path(), help="Store to create (must not exist).")
@click.option("--factor-sizes", default=None, help="Grid of a reduced file without labels (MPI3D), e.g. 2,2,1,1,1,4,4.")
@click.option("--require-full", is_flag=True, help="Fail unless the file holds the card's full grid.")
def build(name, source, out, factor_sizes, require_full):
    """Convert an official file into a store."""
    from probe.data.sources import build as do_build

    store = do_build(name, source, out, progress=True, factor_sizes=_sizes_option(factor_sizes), require_full=require_full)
    click.echo(repr(store))


@datasets.command()
@click.argument("name")
@click.option("--out", required=True, type=click.Path(), help="Store to create (must not exist).")
@click.option("--resolution", default=64, show_default=True, type=int)
@click.option("--factor-sizes", default=None, help="Sub-grid with the official ranges, e.g. 3,2,4,8,8.")
@click.option("--seed", default=0, show_default=True, type=int, help="Recorded; generation is deterministic.")
@click.option("--workers", default=None, type=int, help="Threads or processes (default: all cores).")
@click.option("--processes", is_flag=True, help="Render in worker processes (scales the Shapes3D renderer on many cores).")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE",
              help="A rendering option of the generator, recorded in the store (e.g. shapes3d hue_span=0.8).")
def generate(name, out, resolution, factor_sizes, seed, workers, processes, options):
    """Render a procedural dataset into a store (the generators: `probe datasets list`)."""
    from probe.cli import parse_set_options
    from probe.data.synth import generate as do_generate

    parsed = parse_set_options(options, flag="--option")
    store = do_generate(name, out, resolution=resolution, factor_sizes=_sizes_option(factor_sizes), seed=seed,
                        progress=True, workers=workers, options=parsed or None,
                        processes=processes)
    click.echo(repr(store))


@datasets.command()
@click.argument("store")
@click.option("--ceilings", is_flag=True,
              help="Also what the images determine of each factor, I(w;x)/H(w) over the grid: the most of a factor's "
                   "entropy any latent can hold (below 1 where values render alike, e.g. a symmetric shape turned).")
def info(store, ceilings):
    """Print a store's metadata as JSON."""
    from probe.data import open_store

    opened = open_store(store)
    out = opened.info()
    if ceilings:
        from probe.data.visibility import factor_ceilings

        out["factor_ceiling"] = dict(zip(opened.factor_names, factor_ceilings(opened)))
    click.echo(json.dumps(out, indent=2))


@datasets.command()
@click.argument("store")
def verify(store):
    """Recompute the content digest and re-check the grid."""
    from probe.data import open_store

    click.echo(json.dumps(open_store(store).verify()))


@datasets.command()
@click.argument("store")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="PNG to write.")
@click.option("--samples", default=16, show_default=True, help="Random samples in the top rows.")
@click.option("--seed", default=0, show_default=True)
def show(store, out, samples, seed):
    """A grid of random samples plus one traversal row per factor."""
    from probe.data import open_store

    show_store(open_store(store), out, samples=samples, seed=seed)
    click.echo(out)


@datasets.command()
@click.argument("store")
@click.option("--format", "fmt", required=True, type=click.Choice(["h5", "npz"]))
@click.option("--out", required=True, type=click.Path(dir_okay=False))
def export(store, fmt, out):
    """Write STORE in its dataset's official file layout (3dshapes.h5, dSprites npz, MPI3D npz)."""
    from probe.data.export import export_store

    click.echo(str(export_store(store, fmt, out)))


def show_store(store, out, *, samples: int = 16, seed: int = 0, max_cols: int = 10) -> Path:
    """Mosaic: ``samples`` random images (rows of ``max_cols``), then one traversal row per factor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from probe.provenance import atomic_path

    rng = np.random.default_rng(seed)
    rows, labels = [], []
    idx = store.index_of(store.sample_factors(samples, rng))
    images = store.read(idx)
    for r in range(0, samples, max_cols):
        rows.append(list(images[r:r + max_cols]))
        labels.append("samples" if r == 0 else "")
    base = store.sample_factors(1, rng)[0]
    for k, (fname, size) in enumerate(zip(store.factor_names, store.factor_sizes)):
        values = np.unique(np.linspace(0, size - 1, min(size, max_cols)).round().astype(int))
        trav = np.repeat(base[None], len(values), axis=0)
        trav[:, k] = values
        rows.append(list(store.read(store.index_of(trav))))
        labels.append(f"{fname} ({size})")
    h, w, c = store.image_shape
    fig, axes = plt.subplots(len(rows), max_cols, figsize=(max_cols * 0.9 + 1.4, len(rows) * 0.9 + 0.4), squeeze=False)
    for r, (row, label) in enumerate(zip(rows, labels)):
        for col in range(max_cols):
            ax = axes[r, col]
            ax.set_xticks([])
            ax.set_yticks([])
            for spine in ax.spines.values():
                spine.set_visible(False)
            if col < len(row):
                img = row[col]
                ax.imshow(img[..., 0] if c == 1 else img, cmap="gray" if c == 1 else None, vmin=0, vmax=255,
                          interpolation="nearest")
        axes[r, 0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
    fig.suptitle(f"{store.name} ({store.origin.get('kind')}) {list(store.images.shape)}", fontsize=9)
    fig.subplots_adjust(left=0.16, right=0.99, top=0.95, bottom=0.01, wspace=0.05, hspace=0.08)
    out = Path(out)
    with atomic_path(out, overwrite=True) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    return out
