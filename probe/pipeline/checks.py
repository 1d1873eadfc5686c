"""The checks run before any work (before the lock, the cluster or any file): everything about a
pipeline's config that needs no data. Each raises UserError."""

from __future__ import annotations

from pathlib import Path

from probe.errors import UserError
from probe.pipeline.stages.common import KEEP_CHECKPOINTS, KEEP_CHOICES, keep_checkpoints, model_train, primary_hyperparameter
from probe.pipeline.variants import VARIANTS, check_variant, dose_scale, dose_variant


def validate_modify(config: dict, *, deep: bool = True) -> None:
    """Everything that can be checked without data: counts, seeds, variants, settings, the official source file;
    with ``deep`` also the models, their hyperparameters, train settings, manipulation settings and metric names,
    which import the models and metrics (torch, scipy: seconds; ``probe pipeline show`` leaves them out unless asked,
    ``run`` never does). Raises UserError."""
    dataset = config["pipeline"]["dataset"]
    st = config["store"]
    if st["source"] not in ("synthetic", "official"):
        raise UserError(f"store.source must be 'synthetic' or 'official', got {st['source']!r}")
    if st["source"] == "official":
        check_official_file(dataset, st.get("file") or None)
    keep = keep_checkpoints(config)
    if keep not in KEEP_CHOICES:
        raise UserError(f"pipeline.{KEEP_CHECKPOINTS} must be one of {', '.join(map(repr, KEEP_CHOICES))}, got {keep!r}")
    rt, rs, rb = config["retrain"], config["restarts"], config["robustness"]
    first_seed = rt.get("first_seed", 0)
    if isinstance(first_seed, bool) or not isinstance(first_seed, int) or first_seed < 0:
        raise UserError(f"retrain.first_seed must be a non-negative integer, got {first_seed!r}")
    for key, value in (("restarts.count", rs["count"]), ("retrain.seeds", rt["seeds"]), ("robustness.seeds", rb["seeds"])):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key != "robustness.seeds" else 0):
            raise UserError(f"{key} must be a positive integer, got {value!r}")
    if rs["count"] < 2 * config["select"]["k"]:
        raise UserError(f"restarts.count ({rs['count']}) must be at least 2 × select.k ({config['select']['k']})")
    from probe.pipeline.stages.retrain import all_variants

    retrain_variants = all_variants(rt)
    bad_variants = [v for v in retrain_variants + list(rb["variants"]) if v not in VARIANTS]
    if config["pipeline"].get("kind") == "control":  # its graph also makes the rotated and dose stores
        for v in retrain_variants:
            check_variant(v)
        scales = [dose_variant(x) for x in (config.get("dose") or {}).get("scales", [])]
        bad_variants = [v for v in retrain_variants if dose_scale(v) is not None and v not in scales]
        bad_variants += [v for v in rb["variants"] if v not in VARIANTS]
        if bad_variants:
            raise UserError(f"dataset variant(s) {bad_variants}: a dose variant must be one of dose.scales "
                            f"({', '.join(scales) or 'none'}), robustness runs only on {', '.join(VARIANTS)}")
    if bad_variants:
        raise UserError(f"unknown dataset variant(s) {bad_variants} (known: {', '.join(VARIANTS)})")
    from probe.pipeline.stages import manipulate

    manipulate.check(config)
    if not rt["models"]:
        raise UserError("retrain.models is empty")
    if rb["enabled"]:
        no_hp = [m for m in rb["models"] if not primary_hyperparameter(config, m)]
        if no_hp:
            raise UserError(f"robustness.models without a primary hyperparameter (see [hyperparameters]): {no_hp}")
    if deep:
        validate_modify_models(config)


def validate_modify_models(config: dict) -> None:
    """The checks of ``validate_modify`` that import the models, the trainer, the manipulation and the metrics."""
    from probe.models.base import resolve_config
    from probe.models.registry import get_model_class
    from probe.train.config import resolve_train_config

    dataset = config["pipeline"]["dataset"]
    rt, rs, rb = config["retrain"], config["restarts"], config["robustness"]
    # per-model settings of models not in retrain.models are ignored (a preset may narrow the list),
    # but they must name real models with real hyperparameters
    checks = [(m, rt["model_config"].get(m, {}), model_train(rt, m))
              for m in dict.fromkeys([*rt["models"], *rt["model_config"], *(rt.get("model_train") or {})])]
    checks.append((rs["model"], rs["model_config"], rs["train"]))
    if rb["enabled"]:
        checks += [(m, rt["model_config"].get(m, {}), rb["train"] or rt["train"]) for m in rb["models"]]
    for model, overrides, train in checks:
        cls = get_model_class(model)  # unknown model -> UserError naming it
        resolved = resolve_config(cls, dataset, overrides)
        resolve_train_config(cls, train)
        hp = primary_hyperparameter(config, model)
        if hp is not None and hp not in resolved:
            raise UserError(f"hyperparameters.{model} = {hp!r}, but model {model!r} has no such hyperparameter "
                            f"(known: {', '.join(sorted(resolved))})")
    from probe.perturb.adversarial import resolve_manipulation_config

    resolve_manipulation_config(config["manipulate"]["config"], dataset)
    _check_metrics(config["evaluate"]["metrics"], config["evaluate"]["sample_sizes"])


def _check_metrics(metrics: list, sample_sizes: dict) -> None:
    from probe.metrics.evaluate import resolve_metrics, resolve_settings

    resolve_metrics(list(metrics) or None)
    resolve_settings(sample_sizes)


def check_official_file(dataset: str, file: str | None) -> None:
    """The official file must exist before any work (paper preset): name it, its URL and the fetch command."""
    from probe.data.sources import card, default_source

    path = Path(file) if file else default_source(dataset)
    if not path.exists():
        urls = [f.get("url") for f in card(dataset).get("files", []) if f.get("url")]
        raise UserError(
            f"the official {dataset} file {path} does not exist; download it with `probe datasets fetch {dataset}` "
            f"(from {', '.join(urls) or 'the URL on its dataset card'}), or pass its path with --set store.file=PATH")


def validate_linear_pca(config: dict, *, deep: bool = True) -> None:
    """The store's source and its official file (there is nothing ``deep`` to check)."""
    st = config["store"]
    if st["source"] not in ("synthetic", "official"):
        raise UserError(f"store.source must be 'synthetic' or 'official', got {st['source']!r}")
    if st["source"] == "official":
        check_official_file(config["pipeline"]["dataset"], st.get("file") or None)
