"""Bias probing (Zietlow et al. 2021, §4.2–4.4, §5.2): restart selection, the
adversarial manipulation network m(w), modified and noise stores, and Figure 4. See docs/notes/perturb.md."""

from probe.perturb.adversarial import (DEFAULT_EPSILON, DEFAULT_MANIPULATION_CONFIG, load_manipulation,
                                       resolve_manipulation_config, train_manipulation)
from probe.perturb.apply import apply_manipulation, make_noise_store, noise_block
from probe.perturb.figure import figure4
from probe.perturb.manipulation import ManipulationNet, fold, manipulate, normalised_factors
from probe.perturb.selection import (describe_restarts, evaluate_restarts, latent_statistics, posterior_variance_order,
                                     select_restarts)

__all__ = [
    "DEFAULT_EPSILON", "DEFAULT_MANIPULATION_CONFIG", "ManipulationNet", "apply_manipulation", "describe_restarts",
    "evaluate_restarts", "figure4", "fold", "latent_statistics", "load_manipulation",
    "make_noise_store", "manipulate", "noise_block", "normalised_factors", "posterior_variance_order",
    "resolve_manipulation_config", "select_restarts", "train_manipulation",
]
