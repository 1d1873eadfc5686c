"""Linear VAE vs PCA (Zietlow et al. 2021 §4.1, Theorem 1, Fig. 1) and latent ordering by σ."""

from probe.analysis.alignment import compare_with_pca, match_columns, pca, signed_permutation_error, subspace_match
from probe.analysis.linear_vae_fit import fit_linear_vae
from probe.analysis.theorem1 import closed_form_minimum, minimise_reduced_objective, random_reconstructions
from probe.analysis.verify import (
    local_alignment_of_run,
    local_vs_global_alignment,
    synthetic_data,
    global_pca_change,
    global_pca_change_of,
    judge,
    verify_store,
    verify_synthetic,
)

__all__ = [
    "closed_form_minimum", "compare_with_pca", "fit_linear_vae", "global_pca_change", "global_pca_change_of", "judge", "local_alignment_of_run", "local_vs_global_alignment",
    "match_columns", "minimise_reduced_objective", "pca", "random_reconstructions", "signed_permutation_error",
    "subspace_match", "synthetic_data", "verify_store", "verify_synthetic",
]
