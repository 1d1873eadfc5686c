"""``probe pca verify``: linear VAE vs PCA on synthetic data (default) or on a store."""

from __future__ import annotations

from pathlib import Path

import click

from probe.errors import UserError


@click.group()
def pca():
    """Linear VAE vs PCA (Zietlow et al. 2021, Theorem 1)."""


def _parse_dims(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        dim, sep, lat = item.strip().lower().partition("x")
        try:
            out.append((int(dim), int(lat)))
        except ValueError:
            raise UserError(f"--dims expects DATAxLATENT pairs like 10x3,20x5; got {item!r}") from None
        if not sep or out[-1][1] < 1 or out[-1][1] > out[-1][0]:
            raise UserError(f"--dims: {item!r} needs 1 <= LATENT <= DATA")
    return out


def _parse_floats(text: str, what: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"{what} expects comma-separated numbers, got {text!r}") from None


@pca.command()
@click.option("--store", "--data", "store_path", type=click.Path(), default=None,
              help="A store: verify on its flattened images (default: synthetic Gaussian data).")
@click.option("--run", "run_dir", type=click.Path(), default=None,
              help="With --data: a trained nonlinear β-VAE run on that store, for the Fig. 1 local-vs-global alignment.")
@click.option("--dims", default="4x2,10x3,20x5", show_default=True, help="Synthetic: DATAxLATENT pairs.")
@click.option("--noise", default="0,0.1,0.3", show_default=True, help="Synthetic: isotropic noise std levels.")
@click.option("--theorem1-dims", default="2,3,5", show_default=True,
              help="Synthetic: dimensions of the direct minimisation of the reduced objective (6)-(7).")
@click.option("--beta", type=float, default=None, help="KL weight (synthetic default 0.5; store default 0.5·λ_d).")
@click.option("--num-latent", type=int, default=None, help="Store: latents (default: number of factors).")
@click.option("--project-dims", type=int, default=None, help="Store: PCA dimensions kept (default 2·latents).")
@click.option("--num-images", type=int, default=5000, show_default=True, help="Store: images used.")
@click.option("--estimator", type=click.Choice(["analytic", "sampled"]), default="analytic", show_default=True,
              help="Synthetic: exact expectation over ε (L-BFGS) or reparameterised minibatches (Adam).")
@click.option("--degenerate-ratio", type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True), default=None,
              help="Adjacent PCA eigenvalues with λ_{i+1}/λ_i at or above this form one near-degenerate block, "
                   "judged as a subspace (default 0.9; docs/notes/analysis.md).")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Fit iterations (L-BFGS for analytic, default 100,000: it stops when converged; Adam for sampled, "
                   "default 20000).")
@click.option("--anchors", type=click.IntRange(min=1), default=16, show_default=True,
              help="With --run: anchor points for the local-vs-global alignment.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(), default=None, help="Write the full result as JSON here.")
def verify(store_path, run_dir, dims, noise, theorem1_dims, beta, num_latent, project_dims, num_images, estimator,
           degenerate_ratio, steps, anchors, seed, out):
    """Train a linear VAE and check it against PCA: subspace match, matched alignment (mean |cos|),
    σ-ordering vs eigenvalue ordering, V a signed permutation; plus Theorem 1 on the reduced objective."""
    from probe.analysis.verify import verify_store, verify_synthetic

    if run_dir is not None and store_path is None:
        raise UserError("--run needs --store (the store the run was trained on)")
    if store_path is not None and not Path(store_path).exists():
        raise UserError(f"--store {store_path}: no such store")
    if run_dir is not None:
        from probe.train import RunFolder

        RunFolder(run_dir).require_checkpoint()
    if out is not None and not Path(out).parent.exists():
        raise UserError(f"the folder of --out ({Path(out).parent}) does not exist")
    if store_path is None:
        def show(case):
            click.echo(_case_line(case))

        click.echo("data_dim latents noise | subspace mean cos² | alignment mean |cos| | σ-order | V perm err | pass")
        result = verify_synthetic(_parse_dims(dims), _parse_floats(noise, "--noise"),
                                  beta=0.5 if beta is None else beta, seed=seed, estimator=estimator, progress=show,
                                  degenerate_ratio=degenerate_ratio, steps=steps,
                                  theorem1_dims=[int(d) for d in _parse_floats(theorem1_dims, "--theorem1-dims")])
        for t in result["theorem1"]:
            click.echo(f"Theorem 1, dim {t['dim']}: objective − closed form = {t['objective_gap']:.2e}, "
                       f"V perm err {t['v_signed_permutation']['max_abs_error']:.1e}, "
                       f"U·V_X mean |cos| {t['u_alignment_mean_abs_cos']:.6f}, σ-order "
                       f"{'ok' if t['sigma_order']['correct'] else 'WRONG'} -> {'PASS' if t['passed'] else 'FAIL'}")
    else:
        result = verify_store(store_path, num_latent=num_latent, project_dims=project_dims, num_images=num_images,
                              beta=beta, seed=seed, run_dir=run_dir, degenerate_ratio=degenerate_ratio, steps=steps,
                              estimator=estimator, num_anchors=anchors)
        check = result["linear_vae"]
        s = result["settings"]
        click.echo(f"{result['store']['name']}: {s['num_images']} images -> {s['project_dims']} PCA dims, "
                   f"{s['num_latent']} latents, beta {s['beta']:.3g}")
        click.echo(_case_line({**check, "data_dim": s["project_dims"], "num_latent": s["num_latent"], "noise": float("nan")}))
        click.echo(_spectrum_lines(check))
        result["passed"] = check["passed"]
        local = result.get("local_alignment")
        if local and "local_mean_abs_cos" in local:
            click.echo(f"nonlinear run {local['run_dir']}: Jacobian vs local PCA mean |cos| {local['local_mean_abs_cos']:.3f}, "
                       f"vs global PCA {local['global_mean_abs_cos']:.3f} ({local['num_anchors']} anchors, "
                       f"{local['neighbours']} neighbours, {local['num_active']} active latents)")
    click.echo(f"passed: {result['passed']}")
    if out is not None:
        from probe.provenance import write_json_atomic

        write_json_atomic(out, result)
        click.echo(f"wrote {out}")


def _spectrum_lines(check: dict) -> str:
    """The PCA spectrum's blocks and the judgement with its reasons, for the terminal."""
    sp = check.get("spectrum")
    if not sp:
        return ""
    lines = [f"PCA eigenvalues {', '.join(f'{v:.3g}' for v in check['eigenvalues'])}; adjacent ratios "
             f"{', '.join(f'{r:.3f}' for r in sp['adjacent_ratios'])} (near-degenerate at ≥ {sp['ratio_threshold']})"]
    for b in sp["blocks"]:
        rng = f"{b['start'] + 1}" if b["size"] == 1 else f"{b['start'] + 1}–{b['end'] + 1}"
        kind = f"near-degenerate block (ratio {b['ratio_last_first']:.3f})" if b["degenerate"] else "well separated"
        lines.append(f"  component{'s' if b['size'] > 1 else ''} {rng}: {kind}; latents {b['latents']}, "
                     f"mean |cos| to the {'span' if b['degenerate'] else 'direction'} {b['mean_score']:.4f}")
    j = check.get("judgement") or {}
    lines.append(f"judgement: {j.get('status')}")
    lines.extend(f"  - {r}" for r in j.get("reasons", []))
    return "\n".join(lines)


def _case_line(c: dict) -> str:
    return (f"{c['data_dim']:>8} {c['num_latent']:>7} {c['noise']:>5.2f} | {c['subspace']['mean_cos2']:>18.6f} | "
            f"{c['alignment_mean_abs_cos']:>20.6f} | {'ok' if c['sigma_order']['correct'] else 'WRONG':>7} | "
            f"{c['v_signed_permutation']['max_abs_error']:>10.2e} | "
            f"{ {'pass': 'PASS', 'pass-blocks': 'PASS (blocks)', 'fail': 'FAIL'}.get((c.get('judgement') or {}).get('status'), 'PASS' if c['passed'] else 'FAIL')}")
