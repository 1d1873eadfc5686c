"""A small linear-VAE training loop on in-memory float arrays, for the PCA comparison.

Model (Zietlow et al. 2021 §4.1 with linear maps, Lucas et al. 2019's "linear VAE"):
    μ(x) = W_E (x − b),  σ  = exp(½ logvar)  (one learned variance per latent, independent of x),
    z = μ + σ ∘ ε,       x̂ = W_D z + b.
Loss (Eq. 4, Gaussian decoder, squared error summed over dimensions, mean over data):
    L = E_x E_ε ||W_D z + b − x||² + β · ½ Σ_j (μ_j² + σ_j² − log σ_j² − 1).

Why our own loop and objective: the models in ``probe.models`` take image batches [B, C, H, W] in
[0, 1] with a Bernoulli likelihood (disentanglement_lib), while Theorem 1 is about the squared-error
objective on real-valued vectors; the analysis therefore states the objective here.

Estimators: ``"analytic"`` takes E_ε in closed form, E_ε||W_D σ∘ε||² = Σ_j σ_j² ||W_D[:, j]||², and
the mean over the data through the second-moment matrix S of the centred data, so a step is exact
full-batch gradient descent on the VAE objective (L-BFGS). ``"sampled"`` is the usual reparameterised
minibatch training with Adam (what a trainer does); it reaches the same solution more slowly.
"""

from __future__ import annotations

import numpy as np
import torch


def _objective_analytic(w_enc, w_dec, logvar, second_moment, beta):
    # E||x − W_D W_E x||² = tr((I − DE) S (I − DE)ᵀ); E μμᵀ = E S Eᵀ
    eye = torch.eye(second_moment.shape[0], dtype=second_moment.dtype)
    residual = eye - w_dec @ w_enc
    recon = torch.trace(residual @ second_moment @ residual.T)
    var = logvar.exp()
    stochastic = (var * (w_dec ** 2).sum(0)).sum()
    mean_sq = torch.diagonal(w_enc @ second_moment @ w_enc.T)
    kl = 0.5 * (mean_sq + var - logvar - 1).sum()
    return recon + stochastic + beta * kl, {"reconstruction": recon, "stochastic": stochastic, "kl": kl}


def _objective_sampled(w_enc, w_dec, logvar, batch, beta, generator):
    mean = batch @ w_enc.T
    eps = torch.randn(mean.shape, generator=generator, dtype=mean.dtype)
    z = mean + torch.exp(0.5 * logvar) * eps
    recon = ((z @ w_dec.T - batch) ** 2).sum(1).mean()
    kl = 0.5 * (mean ** 2 + logvar.exp() - logvar - 1).sum(1).mean()
    return recon + beta * kl, {"reconstruction": recon, "kl": kl}


def fit_linear_vae(data: np.ndarray, num_latent: int, *, beta: float = 0.1, seed: int = 0,
                   estimator: str = "analytic", steps: int | None = None, lr: float = 1e-2,
                   batch_size: int = 256) -> dict:
    """Train the linear VAE on ``data`` [N, D]; returns numpy arrays ``decoder`` [D, d] (W_D),
    ``encoder`` [d, D] (W_E), ``sigma`` [d], ``bias`` [D] and the final loss terms.

    ``steps``: L-BFGS iterations (analytic, default 5000) or Adam steps (sampled, default 20000).
    Latents whose eigenvalue is below β/2 collapse (σ → 1, decoder column → 0), as in pPCA.
    """
    if estimator not in ("analytic", "sampled"):
        raise ValueError(f"estimator must be 'analytic' or 'sampled', got {estimator!r}")
    x = torch.as_tensor(np.asarray(data, dtype=np.float64))
    bias = x.mean(0)
    x = x - bias
    n, dim = x.shape
    gen = torch.Generator().manual_seed(int(seed))
    scale = 0.1
    w_enc = (scale * torch.randn(num_latent, dim, generator=gen, dtype=torch.float64)).requires_grad_()
    w_dec = (scale * torch.randn(dim, num_latent, generator=gen, dtype=torch.float64)).requires_grad_()
    logvar = torch.zeros(num_latent, dtype=torch.float64, requires_grad=True)
    params = [w_enc, w_dec, logvar]
    history = []
    if estimator == "analytic":
        second_moment = x.T @ x / n
        opt = torch.optim.LBFGS(params, lr=1.0, max_iter=steps or 5000, tolerance_grad=1e-12,
                                tolerance_change=1e-15, history_size=50, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss, _ = _objective_analytic(w_enc, w_dec, logvar, second_moment, beta)
            loss.backward()
            history.append(float(loss.detach()))
            return loss

        opt.step(closure)
        with torch.no_grad():
            loss, terms = _objective_analytic(w_enc, w_dec, logvar, second_moment, beta)
    else:
        opt = torch.optim.Adam(params, lr=lr)
        total = steps or 20000
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, total)
        for step in range(total):
            idx = torch.randint(0, n, (min(batch_size, n),), generator=gen)
            opt.zero_grad()
            loss, _ = _objective_sampled(w_enc, w_dec, logvar, x[idx], beta, gen)
            loss.backward()
            opt.step()
            sched.step()
            if step % 100 == 0:
                history.append(float(loss.detach()))
        with torch.no_grad():
            loss, terms = _objective_analytic(w_enc, w_dec, logvar, x.T @ x / n, beta)
    return {
        "decoder": w_dec.detach().numpy().copy(),
        "encoder": w_enc.detach().numpy().copy(),
        "sigma": torch.exp(0.5 * logvar).detach().numpy().copy(),
        "bias": bias.numpy().copy(),
        "loss": float(loss),
        "terms": {k: float(v) for k, v in terms.items()},
        "evaluations": len(history),
        "estimator": estimator,
        "beta": float(beta),
    }
