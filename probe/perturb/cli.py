"""``probe perturb``: restart selection, manipulation training, modified and noise stores, Figure 4."""

from __future__ import annotations

import json
from pathlib import Path

import click

from probe.errors import UserError


@click.group()
def perturb():
    """Build the modified and noise datasets of Zietlow et al. 2021 (the bias probe).

    \b
    The steps, in order (each one's output feeds the next):
      1. probe train beta-vae --data ORIG.zarr --out runs/rN --seed N      (N restarts, several seeds)
      2. probe perturb select runs/r0 runs/r1 ... --data ORIG.zarr --out selection.json
      3. probe perturb train --data ORIG.zarr --selection selection.json --out manip/
      4. probe perturb apply --data ORIG.zarr --manipulation manip/ --out MOD.zarr
      5. probe perturb noise --data ORIG.zarr --epsilon 0.1 --seed 0 --out NOISE.zarr
      6. probe perturb figure --data ORIG.zarr --manipulation manip/ --out figure4.png
    `probe pipeline run modify-dsprites` runs all of this for you.
    """


@perturb.command("select")
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--data", required=True, type=click.Path(), help="The original store the restarts were trained on (.zarr).")
@click.option("--out", required=True, type=click.Path(), help="JSON file to write (must not exist).")
@click.option("-k", "--k", "k", default=1, show_default=True,
              help="How many entangled and disentangled runs to pick (paper: 1 for dSprites, 4 for Shapes3D).")
@click.option("--seed", default=0, show_default=True, help="Seed of the metric's sampling.")
@click.option("--min-active-units", default=1, show_default=True,
              help="Runs with fewer active latents (⟨σ²⟩ < 0.8) are recorded but not selected (collapsed models).")
def select_cmd(runs, data, out, k, seed, min_active_units):
    """Pick the entangled (lowest MIG) and disentangled (highest MIG) β-VAE restarts.

    RUNS are finished run directories of `probe train beta-vae` on the store --data. For every run
    this evaluates MIG and the posterior-variance order of its latents (⟨σ²⟩ ascending, active
    units = latents with ⟨σ²⟩ < 0.8) and writes everything plus the choice to --out.

    \b
    Example:
      probe perturb select runs/r0 runs/r1 runs/r2 runs/r3 runs/r4 --data dsprites.zarr --out selection.json
    """
    from probe.perturb.selection import describe_restarts
    from probe.provenance import code_version, write_json_atomic

    result = describe_restarts(list(runs), data, k=k, seed=seed, min_active_units=min_active_units)
    result["code_version"] = code_version()
    write_json_atomic(out, result, overwrite=False)
    click.echo(f"entangled: {', '.join(result['entangled'])}\ndisentangled: {', '.join(result['disentangled'])}\n"
               f"wrote {out}")


@perturb.command("train")
@click.option("--data", required=True, type=click.Path(), help="The original store (.zarr) the restarts were trained on.")
@click.option("--selection", type=click.Path(), default=None,
              help="selection.json from `probe perturb select` (gives the entangled and disentangled runs).")
@click.option("--entangled", multiple=True, type=click.Path(),
              help="Run directory of an entangled β-VAE (repeat for an ensemble); instead of --selection.")
@click.option("--disentangled", multiple=True, type=click.Path(),
              help="Run directory of a disentangled β-VAE (repeat for an ensemble); instead of --selection.")
@click.option("--out", required=True, type=click.Path(),
              help="Run folder to create (config, checkpoint, loss log, done record).")
@click.option("--steps", type=int, default=None, help="Manipulation-network updates (default 5000).")
@click.option("--epsilon", type=float, default=None, help="Max-norm budget ε (default 0.1 dSprites, 0.175 Shapes3D).")
@click.option("--seed", type=int, default=None, help="Seed of the network initialisation and batches (default 0).")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Any other setting, e.g. --set batch_size=32 --set lr=3e-4 (see DEFAULT_MANIPULATION_CONFIG).")
@click.option("--device", default=None, help="cpu or cuda (default: cuda when available).")
@click.option("--resume/--no-resume", default=True, show_default=True, help="Continue an interrupted run in --out.")
@click.option("--progress/--no-progress", default=True, show_default=True)
def train_cmd(data, selection, entangled, disentangled, out, steps, epsilon, seed, settings, device, resume, progress):
    """Learn the additive manipulation m(w) that favours the entangled alignment.

    The encoders of the chosen β-VAEs stay frozen on the original images; their decoders keep
    training on the manipulated images x' = fold(x + ε·m(w)), and m learns to make x' cheap to
    reconstruct for the entangled model(s) and expensive for the disentangled one(s). OUT logs the
    losses; its done record holds both models' reconstruction losses before (on x) and after (on x').

    \b
    Examples:
      probe perturb train --data dsprites.zarr --selection selection.json --out manip
      probe perturb train --data dsprites.zarr --entangled runs/r3 --disentangled runs/r1 --out manip --steps 2000
    """
    from probe.cli import parse_set_options
    from probe.perturb.adversarial import manipulation_final, train_manipulation

    if selection:
        if entangled or disentangled:
            raise UserError("give either --selection or --entangled/--disentangled, not both")
        try:
            chosen = json.loads(Path(selection).read_text())
            entangled, disentangled = chosen["entangled"], chosen["disentangled"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise UserError(f"cannot read the entangled/disentangled runs from {selection}: {exc}") from None
    if not entangled or not disentangled:
        raise UserError("need the runs to manipulate against: --selection selection.json, or --entangled RUN and --disentangled RUN")
    config = parse_set_options(settings)
    for key, value in (("steps", steps), ("epsilon", epsilon), ("seed", seed)):
        if value is not None:
            config[key] = value
    result = train_manipulation(data, list(entangled), list(disentangled), out, config, resume=resume, progress=progress,
                                device=device)
    done = manipulation_final(result)
    click.echo(f"reconstruction loss on x (before): entangled {done['before']['entangled']:.3f}, "
               f"disentangled {done['before']['disentangled']:.3f}")
    click.echo(f"reconstruction loss on x' (after): entangled {done['after']['entangled']:.3f}, "
               f"disentangled {done['after']['disentangled']:.3f}")
    click.echo(f"wrote {result}")


@perturb.command("apply")
@click.option("--data", required=True, type=click.Path(), help="The original store (.zarr) the manipulation was trained on.")
@click.option("--manipulation", required=True, type=click.Path(), help="Finished folder of `probe perturb train`.")
@click.option("--out", required=True, type=click.Path(), help="Modified store to create (.zarr; must not exist).")
@click.option("--epsilon", type=float, default=None, help="Scale of the manipulation (default: the trained ε).")
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda.")
def apply_cmd(data, manipulation, out, epsilon, device):
    """Write the modified store x' = fold(x + ε·m(w)) for every image of --data.

    Factors and metadata are copied; the new store records origin.kind "perturbed", the parent's
    digest, ε, the manipulation's checkpoint digest and the achieved max-norm distance.

    \b
    Example:
      probe perturb apply --data dsprites.zarr --manipulation manip --out dsprites-mod.zarr
    """
    from probe.perturb.apply import apply_manipulation

    store = apply_manipulation(data, manipulation, out, epsilon=epsilon, device=device)
    click.echo(f"wrote {store.path} (max |x' - x| = {store.origin['max_abs_diff']:.4f}, digest {store.digest[:12]})")


@perturb.command("noise")
@click.option("--data", required=True, type=click.Path(), help="The original store (.zarr).")
@click.option("--out", required=True, type=click.Path(), help="Noise store to create (.zarr; must not exist).")
@click.option("--epsilon", type=float, required=True, help="Noise amplitude: u ~ U[-ε, ε] per pixel (paper: 0.1 dSprites, 0.175 Shapes3D).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the noise.")
def noise_cmd(data, out, epsilon, seed):
    """Write the noise baseline x' = fold(x + u), u ~ U[-ε, ε] i.i.d. per pixel and channel.

    \b
    Example:
      probe perturb noise --data dsprites.zarr --epsilon 0.1 --seed 0 --out dsprites-noise.zarr
    """
    from probe.perturb.apply import make_noise_store

    store = make_noise_store(data, out, epsilon=epsilon, seed=seed)
    click.echo(f"wrote {store.path} (max |x' - x| = {store.origin['max_abs_diff']:.4f}, digest {store.digest[:12]})")


@perturb.command("figure")
@click.option("--data", required=True, type=click.Path(), help="The original store (.zarr).")
@click.option("--manipulation", required=True, type=click.Path(), help="Finished folder of `probe perturb train`.")
@click.option("--out", required=True, type=click.Path(), help="PNG file to write.")
@click.option("-n", "n", default=4, show_default=True, help="Number of example images (columns).")
def figure_cmd(data, manipulation, out, n):
    """Figure 4 of the paper: original images, the manipulation m(w) and the altered images.

    \b
    Example:
      probe perturb figure --data dsprites.zarr --manipulation manip --out figure4.png
    """
    from probe.perturb.figure import figure4

    click.echo(f"wrote {figure4(data, manipulation, out, n=n)}")
