"""The analytic linear-VAE fit (probe.analysis.fit_linear_vae: scipy's L-BFGS-B on the numpy objective and its
written-out gradient) against the reference it replaced: torch's L-BFGS over autograd of the same objective
(``_objective_analytic``), same start, same iteration cap. Prints per case the wall time of both, their ratio, the
final losses (the replacement must reach the reference's loss or lower) and the per-direction alignment with PCA.

Cases: synthetic data with a known spectrum (probe.analysis.verify.synthetic_data) and, with ``--store``, a store's
check as the pipeline runs it (``verify_store``'s projection; 5,000 images by default).

Usage::

    python benchmarks/linear_vae_fit.py [--store S.zarr] [--num-images 5000] [--cap 5000] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

# the replacement must be at least this much faster on the cases below (it was 20-60x when written)
MIN_RATIO = 5.0


def torch_lbfgs_reference(data: np.ndarray, num_latent: int, *, beta: float, seed: int, cap: int) -> dict:
    """The fit as it was before session 33: torch.optim.LBFGS (strong Wolfe, history 50) over autograd."""
    from probe.analysis.linear_vae_fit import _objective_analytic

    x = torch.as_tensor(np.asarray(data, dtype=np.float64))
    x = x - x.mean(0)
    n, dim = x.shape
    gen = torch.Generator().manual_seed(int(seed))
    w_enc = (0.1 * torch.randn(num_latent, dim, generator=gen, dtype=torch.float64)).requires_grad_()
    w_dec = (0.1 * torch.randn(dim, num_latent, generator=gen, dtype=torch.float64)).requires_grad_()
    logvar = torch.zeros(num_latent, dtype=torch.float64, requires_grad=True)
    second_moment = x.T @ x / n
    opt = torch.optim.LBFGS([w_enc, w_dec, logvar], lr=1.0, max_iter=cap, tolerance_grad=1e-12,
                            tolerance_change=1e-15, history_size=50, line_search_fn="strong_wolfe")
    evaluations = []

    def closure():
        opt.zero_grad()
        loss, _ = _objective_analytic(w_enc, w_dec, logvar, second_moment, beta)
        loss.backward()
        evaluations.append(1)
        return loss

    opt.step(closure)
    with torch.no_grad():
        loss, _ = _objective_analytic(w_enc, w_dec, logvar, second_moment, beta)
    return {"decoder": w_dec.detach().numpy(), "sigma": torch.exp(0.5 * logvar).detach().numpy(), "loss": float(loss),
            "evaluations": len(evaluations)}


def store_case(path: str, num_images: int, seed: int = 0):
    """``verify_store``'s data (``projected_sample``), latents and β (0.5·λ_d) for a store."""
    from probe.analysis.verify import projected_sample
    from probe.data import open_store

    store = open_store(path)
    d = store.num_factors
    _, _, values, projected = projected_sample(store, d, 2 * d, num_images=num_images, seed=seed)
    return projected, d, 0.5 * float(values[d - 1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default=None)
    ap.add_argument("--num-images", type=int, default=5000)
    ap.add_argument("--cap", type=int, default=5000, help="iteration cap of both fits (the reference's default)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from probe.analysis import fit_linear_vae
    from probe.analysis.verify import compare_with_pca, pca, synthetic_data

    cases = []
    for dim, latents, noise in ((4, 2, 0.0), (10, 3, 0.3), (20, 5, 0.1)):
        data, _, _ = synthetic_data(dim, latents, noise, n=5000, seed=3)
        cases.append((f"synthetic {dim}->{latents}, noise {noise}", data, latents, 0.5))
    if args.store:
        data, d, beta = store_case(args.store, args.num_images)
        cases.append((f"store {args.store} ({args.num_images} images)", data, d, beta))
    fit_linear_vae(cases[0][1], cases[0][2], beta=cases[0][3], steps=5)  # imports and first calls off the clock
    torch_lbfgs_reference(cases[0][1], cases[0][2], beta=cases[0][3], seed=3, cap=5)
    worst = np.inf
    for name, data, latents, beta in cases:
        values, vectors = pca(data)
        t0 = time.perf_counter()
        ref = torch_lbfgs_reference(data, latents, beta=beta, seed=3, cap=args.cap)
        ref_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        new = fit_linear_vae(data, latents, beta=beta, seed=3, steps=args.cap)
        new_s = time.perf_counter() - t0
        row = {"case": name, "reference_s": round(ref_s, 3), "probe_s": round(new_s, 3), "ratio": round(ref_s / new_s, 1),
               "reference_loss": ref["loss"], "probe_loss": new["loss"],
               "reference_evaluations": ref["evaluations"], "probe_evaluations": new["evaluations"]}
        for label, fit in (("reference", ref), ("probe", new)):
            check = compare_with_pca(fit["decoder"], fit["sigma"], values, vectors)
            row[f"{label}_alignment"] = round(float(check["alignment_mean_abs_cos"]), 6)
        print(json.dumps(row), flush=True)
        worst = min(worst, ref_s / new_s)
        if new["loss"] > ref["loss"] * (1 + 1e-9):
            print(f"FAIL {name}: probe's loss {new['loss']} above the reference's {ref['loss']}")
    print(f"slowest ratio {worst:.1f}x (limit >= {MIN_RATIO}x): {'ok' if worst >= MIN_RATIO else 'BELOW'}")


if __name__ == "__main__":
    main()
