"""Step (i) of Zietlow et al. §4.2: pick the most entangled and most disentangled β-VAE restarts.

Over N restarts trained on the original store, MIG decides (§4.3: "we pick the model with the lowest
MIG score"; appendix C.2: highest and lowest). With ``k > 1`` the k lowest and k highest runs form
the entangled and disentangled ensembles (paper: k = 1 on dSprites, k = 4 on Shapes3D).

Each model's latents are ordered by mean posterior variance ⟨σ²⟩ ascending (Eq. 13–14): the latent
with the smallest average noise carries the most variance (the first nonlinear principal component).
A latent is *active* when ⟨σ²⟩ < 0.8 (§5.3).
"""

from __future__ import annotations

import math
import os

import numpy as np

from probe.errors import UserError

ACTIVE_VARIANCE_THRESHOLD = 0.8  # §5.3: E(σ_i²) < 0.8 counts as an active coordinate


def select_restarts(mig_by_run: dict, k: int = 1) -> dict:
    """The k lowest-MIG runs (entangled) and the k highest-MIG runs (disentangled).

    Ties are broken by run name so the choice is deterministic; the disentangled runs are picked
    among those not chosen as entangled. Needs at least 2k runs, each with a
    finite MIG; returns ``{"entangled": [...], "disentangled": [...], "mig": {run: mig}, "k": k}``
    (lists ordered from most extreme inwards).
    """
    k = int(k)
    if k < 1:
        raise UserError(f"k must be at least 1, got {k}")
    mig = {str(run): float(value) for run, value in mig_by_run.items()}
    bad = [run for run, value in mig.items() if not math.isfinite(value)]
    if bad:
        raise UserError(f"MIG is not a finite number for {', '.join(bad)}; re-evaluate or drop these runs")
    if len(mig) < 2 * k:
        raise UserError(f"selecting {k} entangled and {k} disentangled runs needs at least {2 * k} restarts, got {len(mig)}")
    entangled = sorted(mig, key=lambda run: (mig[run], run))[:k]
    # drawn from the remaining runs, so ties can never put one run on both sides
    disentangled = sorted((r for r in mig if r not in entangled), key=lambda run: (-mig[run], run))[:k]
    return {"entangled": entangled, "disentangled": disentangled, "mig": mig, "k": k}


def evaluate_restarts(run_dirs, store_path, seed: int = 0, **sample_sizes) -> dict:
    """MIG of each run, {run_dir: mig}, via ``probe.metrics.evaluate_run`` (disentanglement_lib's settings
    unless ``sample_sizes`` override them, e.g. ``num_train=2000`` for quick presets)."""
    from probe.metrics import evaluate_run
    from probe.train import RunFolder

    runs = [str(r) for r in run_dirs]
    if not runs:
        raise UserError("no restarts given")
    for run in runs:
        RunFolder(run).require_complete("finish or retrain it first")
    out = {}
    for run in runs:
        result = evaluate_run(run, store_path, metrics=["mig"], seed=seed, **sample_sizes)
        out[run] = float(result["metrics"]["mig"]["mig"])
    return out


def posterior_variance_order(mean_variance) -> dict:
    """Eq. 13–14: latent indices sorted by ⟨σ²⟩ ascending, and the number of active latents."""
    v = np.asarray(mean_variance, dtype=np.float64)
    order = np.argsort(v, kind="stable")
    return {"mean_variance": v.tolist(), "order": order.tolist(),
            "active_units": int((v < ACTIVE_VARIANCE_THRESHOLD).sum())}


def latent_statistics(run_dir, store_path, *, num_samples: int = 10000, seed: int = 0, batch_size: int = 256) -> dict:
    """⟨σ²⟩ per latent over ``num_samples`` uniformly drawn images, the σ-order and the active units."""
    import torch

    from probe.data import open_store
    from probe.train import load_run

    store = open_store(store_path)
    model, _ = load_run(run_dir, device="cpu")
    if not hasattr(model, "encode_distribution"):
        raise UserError(f"{run_dir}: model {type(model).__name__} has no Gaussian posterior; restarts must be β-VAEs")
    rng = np.random.RandomState(seed)
    n = min(int(num_samples), store.num_images)
    indices = np.sort(rng.choice(store.num_images, size=n, replace=False))
    total = None
    with torch.no_grad():
        for start in range(0, n, batch_size):
            x = torch.from_numpy(store.read(indices[start:start + batch_size])).permute(0, 3, 1, 2).float() / 255.0
            _, logvar = model.encode_distribution(x)
            s = logvar.exp().double().sum(0)
            total = s if total is None else total + s
    return posterior_variance_order((total / n).numpy())


def describe_restarts(run_dirs, store_path, *, k: int = 1, seed: int = 0, num_samples: int = 10000,
                      min_active_units: int = 1, **sample_sizes) -> dict:
    """Everything the selection stage records: each run's MIG, ⟨σ²⟩ order and active units, and the choice.

    Runs with fewer than ``min_active_units`` active latents are recorded but not eligible: a collapsed
    model (no active latent) decodes the mean image whatever z is, so it offers no alignment to foster
    or suppress (the paper likewise discards over-pruned runs, §5.3). Pass 0 to keep every run.
    """
    mig = evaluate_restarts(run_dirs, store_path, seed=seed, **sample_sizes)
    runs = {run: {"mig": mig[run], **latent_statistics(run, store_path, num_samples=num_samples, seed=seed)} for run in mig}
    eligible = {run: mig[run] for run in mig if runs[run]["active_units"] >= min_active_units}
    excluded = sorted(set(mig) - set(eligible))
    if len(eligible) < 2 * k:
        raise UserError(f"only {len(eligible)} of {len(mig)} restarts have at least {min_active_units} active latent(s) "
                        f"(excluded: {', '.join(excluded)}); selecting k={k} per side needs {2 * k}. "
                        "Train longer or more restarts, or lower min_active_units")
    selection = select_restarts(eligible, k=k)
    for run in runs:
        runs[run]["selected"] = ("entangled" if run in selection["entangled"]
                                 else "disentangled" if run in selection["disentangled"] else None)
    return {**selection, "mig": mig, "excluded": excluded, "min_active_units": min_active_units, "runs": runs,
            "seed": seed, "store": os.fspath(store_path), "metric_settings": dict(sample_sizes),
            "num_samples_variance": num_samples}
