"""Theorem 1 of Zietlow et al. 2021 made executable: direct numerical minimisation of the reduced
objective (6)–(7) over U, Σ, V (and the latent noise σ).

Setting (supplement A.1, Fig. 1): the reconstructions X̂ [n, m] are fixed, the latent dimension
equals the data dimension (m), the linear decoder is M = U Σ Vᵀ with U, V orthogonal and Σ positive
diagonal, and the encoder is the one that reproduces X̂: μ⁽ⁱ⁾ = M⁻¹ x̂⁽ⁱ⁾. With the polarised-regime
KL (8), L_≈KL = Σ_j μ_j² − log σ_j², the constrained problem (6)–(7) is solved through its
Lagrangian with multiplier β (the β of Eq. 4):

    J(U, Σ, V, σ) = E_i E_ε ||U Σ Vᵀ (σ ∘ ε)||² + β E_i L_≈KL
                  = Σ_j σ_j² (V Σ² Vᵀ)_jj + β [tr(M⁻¹ C M⁻ᵀ) − Σ_j log σ_j²],   C = E x̂ x̂ᵀ.

(σ is per latent and shared by all points: the σ-dependent part of J is the same for every i, so
per-point optima coincide.) Eliminating σ and Σ analytically and applying Hadamard's inequality twice
gives the unique minimum value (up to signed permutations)

    J* = 2mβ − mβ log β + β Σ_j log λ_j   (λ = eigenvalues of C),

attained iff V is a signed permutation and the columns of U are the eigenvectors of C (U = V_Xᵀ in
the paper's row convention), with Σ² = diag(λ) and σ_j² = β/λ_j: the smallest noise sits on the
largest-variance direction. ``minimise_reduced_objective`` finds the minimum numerically from a
random start; the tests check all of this.
"""

from __future__ import annotations

import numpy as np
import torch

from probe.analysis.alignment import eig_descending, match_columns, sigma_order_matches, signed_permutation_error


def _orthogonal(param: torch.Tensor) -> torch.Tensor:
    return torch.linalg.matrix_exp(param - param.T)


def reduced_objective(u, sigma_diag, v, noise_sigma, cov, beta):
    """J(U, Σ, V, σ) above, for torch tensors (U, V orthogonal [m, m]; Σ, σ positive [m])."""
    m = u @ torch.diag(sigma_diag) @ v.T
    gram_diag = ((v * sigma_diag) ** 2).sum(1)       # diag(V Σ² Vᵀ) = ||M e_j||²
    stochastic = (noise_sigma ** 2 * gram_diag).sum()
    m_inv = torch.linalg.inv(m)
    mean_sq = torch.trace(m_inv @ cov @ m_inv.T)     # E Σ_j μ_j²
    kl = mean_sq - torch.log(noise_sigma ** 2).sum()
    return stochastic + beta * kl, stochastic, kl


def closed_form_minimum(eigenvalues, beta: float) -> float:
    lam = np.asarray(eigenvalues, dtype=np.float64)
    m = len(lam)
    return float(2 * m * beta - m * beta * np.log(beta) + beta * np.log(lam).sum())


def minimise_reduced_objective(reconstructions: np.ndarray, *, beta: float = 0.5, seed: int = 0,
                               max_iter: int = 2000) -> dict:
    """Minimise J over (U, Σ, V, σ) from a random start with L-BFGS; return the minimiser, the
    checks of Theorem 1 and the analytic minimum for comparison. ``reconstructions`` [n, m]."""
    x = np.asarray(reconstructions, dtype=np.float64)
    x = x - x.mean(0, keepdims=True)
    cov_np = x.T @ x / len(x)
    eigenvalues, eigenvectors = eig_descending(cov_np)
    m = cov_np.shape[0]
    cov = torch.as_tensor(cov_np)
    gen = torch.Generator().manual_seed(int(seed))
    a = torch.randn(m, m, generator=gen, dtype=torch.float64).requires_grad_()
    b = torch.randn(m, m, generator=gen, dtype=torch.float64).requires_grad_()
    log_s = (0.3 * torch.randn(m, generator=gen, dtype=torch.float64)).requires_grad_()
    log_noise = (0.3 * torch.randn(m, generator=gen, dtype=torch.float64) - 1.0).requires_grad_()
    params = [a, b, log_s, log_noise]
    opt = torch.optim.LBFGS(params, lr=1.0, max_iter=max_iter, tolerance_grad=1e-12, tolerance_change=1e-16,
                            history_size=50, line_search_fn="strong_wolfe")
    start = {}

    def closure():
        opt.zero_grad()
        loss, _, _ = reduced_objective(_orthogonal(a), log_s.exp(), _orthogonal(b), log_noise.exp(), cov, beta)
        loss.backward()
        start.setdefault("loss", float(loss.detach()))
        return loss

    opt.step(closure)
    with torch.no_grad():
        u, v = _orthogonal(a).numpy(), _orthogonal(b).numpy()
        s, noise = log_s.exp().numpy(), log_noise.exp().numpy()
        loss, stochastic, kl = reduced_objective(_orthogonal(a), log_s.exp(), _orthogonal(b), log_noise.exp(), cov, beta)
    decoder = u @ np.diag(s) @ v.T
    # U's columns (weighted by Σ) against V_X: match U itself, since V is the checked permutation
    u_match = match_columns(u, eigenvectors)
    col_match = match_columns(decoder, eigenvectors)
    order = sigma_order_matches(col_match["assignment"], noise)
    analytic = closed_form_minimum(eigenvalues, beta)
    return {
        "dim": m,
        "beta": float(beta),
        "seed": int(seed),
        "eigenvalues": eigenvalues.tolist(),
        "initial_objective": start.get("loss"),
        "objective": float(loss),
        "closed_form_minimum": analytic,
        "objective_gap": float(loss) - analytic,
        "kl_constraint_value": float(kl),
        "v_signed_permutation": signed_permutation_error(v),
        "u_alignment_mean_abs_cos": u_match["mean_abs_cos"],
        "decoder_alignment_mean_abs_cos": col_match["mean_abs_cos"],
        "sigma": noise.tolist(),
        "sigma_squared_times_lambda": (noise ** 2 * eigenvalues[col_match["assignment"]]).tolist(),
        "sigma_order": order,
        "singular_values": s.tolist(),
    }


def random_reconstructions(dim: int, *, n: int = 4000, seed: int = 0, eigenvalues=None) -> np.ndarray:
    """Fixed reconstructions X̂ [n, dim] with distinct covariance eigenvalues (default dim, …, 1)
    along a random rotation, so that V_X is not the identity."""
    rng = np.random.default_rng(seed)
    lam = np.arange(dim, 0, -1, dtype=np.float64) if eigenvalues is None else np.asarray(eigenvalues, float)
    basis, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    return (rng.standard_normal((n, dim)) * np.sqrt(lam)) @ basis.T
