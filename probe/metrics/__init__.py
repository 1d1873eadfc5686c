"""Disentanglement metrics: pure functions over arrays plus one sampler/encoder cache.

``codes [N, D]`` (float, or int for discrete codes) and ``factors [N, K]`` (int class indices); every
metric returns a dict of floats. See docs/notes/metrics.md for which reference each one follows. The
metric list (what evaluation computes and the report shows) is ``probe.metrics.registry``.
"""

from probe.metrics.alignment import block_capture, code_alignment
from probe.metrics.dci import dci
from probe.metrics.evaluate import Encoder, EvaluationContext, evaluate_encoder, evaluate_run
from probe.metrics.infomec import infomec, normalized_mutual_info
from probe.metrics.information import discrete_entropy, discrete_mutual_info, histogram_discretize, ksg_mutual_info
from probe.metrics.intervention import beta_vae_score, factor_vae_score
from probe.metrics.mig import mig
from probe.metrics.modularity import modularity_explicitness
from probe.metrics.reconstruction import reconstruction
from probe.metrics.registry import (MetricSpec, ReportColumn, default_metrics, default_settings, fast_metrics,
                                    register_metric, small_settings)
from probe.metrics.sampler import CodeCache, draw_factors, draw_train_test
from probe.metrics.sap import sap
from probe.metrics.unsupervised import active_units, gaussian_tc, mcc

__all__ = [
    "mig", "dci", "sap", "factor_vae_score", "beta_vae_score", "modularity_explicitness", "infomec", "gaussian_tc",
    "active_units", "mcc", "reconstruction", "normalized_mutual_info", "histogram_discretize", "discrete_mutual_info",
    "discrete_entropy", "ksg_mutual_info", "CodeCache", "draw_factors", "draw_train_test", "evaluate_encoder", "evaluate_run",
    "Encoder", "EvaluationContext", "block_capture", "code_alignment", "MetricSpec", "ReportColumn", "register_metric",
    "default_metrics", "fast_metrics", "default_settings", "small_settings",
]
