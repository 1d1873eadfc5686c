"""Run configuration: defaults, validation and resolution against a store (no training here).

A run config is ``{"model", "model_config", "dataset", "seed", "train"}`` (docs/notes/INTERFACES.md).
Resolution order for the train section: ``TRAIN_DEFAULTS`` <- the model's ``train_defaults`` <- the
user's ``train``; for the model section: the model's defaults <- its preset for the dataset <- the
user's ``model_config`` (``probe.models.base.resolve_config``).
"""

from __future__ import annotations

from typing import Any

import torch

from probe.errors import UserError

RUN_KEYS = ("model", "model_config", "dataset", "seed", "train")

# disentanglement_lib's shared.gin: batch 64, 300k steps (the paper preset); Adam lives in the model config.
TRAIN_DEFAULTS: dict[str, Any] = {
    "steps": 300_000,
    "batch_size": 64,
    "checkpoint_every": 1000,
    "log_every": 100,
    "precision": "auto",      # auto: bf16 autocast on CUDA, fp32 on CPU
    "compile": False,         # torch.compile the model's loss (worth it on GPU for long runs)
}
TRAIN_KEYS = tuple(TRAIN_DEFAULTS)
PRECISIONS = ("auto", "fp32", "bf16")

# Parts of a resolved config that change the numbers a run produces; resuming demands they match.
# (steps may grow: a finished run can be extended; logging/checkpoint cadence and compile may change.)
IDENTITY_TRAIN_KEYS = ("batch_size", "precision")


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"train.{name} must be a positive integer, got {value!r}")
    return value


def resolve_train_config(model_cls, overrides: dict | None) -> dict:
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(TRAIN_KEYS))
    if unknown:
        raise UserError(f"unknown train setting(s) {', '.join(map(repr, unknown))} (known: {', '.join(TRAIN_KEYS)})")
    model_defaults = dict(getattr(model_cls, "train_defaults", {}) or {})
    bad = sorted(set(model_defaults) - set(TRAIN_KEYS))
    if bad:
        raise UserError(f"model {getattr(model_cls, 'name', model_cls)!r} declares unknown train_defaults {bad}")
    train = {**TRAIN_DEFAULTS, **model_defaults, **overrides}
    for key in ("steps", "batch_size", "checkpoint_every", "log_every"):
        train[key] = _positive_int(key, train[key])
    if train["precision"] not in PRECISIONS:
        raise UserError(f"train.precision must be one of {', '.join(PRECISIONS)}, got {train['precision']!r}")
    if not isinstance(train["compile"], bool):
        raise UserError(f"train.compile must be true or false, got {train['compile']!r}")
    return train


def model_target(model_cls) -> str:
    return f"{model_cls.__module__}:{model_cls.__qualname__}"


def resolve_run_config(run_config: dict, store) -> dict:
    """Validate ``run_config`` against ``store`` (a Store or a path) without training; returns the resolved config.

    Returned keys: model (as given), model_class ("module:Class"), model_config (every hyperparameter,
    ``num_latent`` made explicit), dataset, seed, train (every train setting), store (path, digest,
    name, image_shape [C, H, W], factor_sizes, grid). Raises UserError on anything a run would reject.
    """
    from probe.data import Store, open_store
    from probe.models.base import resolve_config
    from probe.models.registry import get_model_class

    if not isinstance(run_config, dict):
        raise UserError(f"a run config must be a mapping, got {type(run_config).__name__}")
    unknown = sorted(set(run_config) - set(RUN_KEYS))
    if unknown:
        raise UserError(f"unknown run config key(s) {', '.join(map(repr, unknown))} (known: {', '.join(RUN_KEYS)})")
    if not run_config.get("model") or not isinstance(run_config["model"], str):
        raise UserError("run config needs 'model': a registry name (see `probe models list`) or 'package.module:Class'")
    store = store if isinstance(store, Store) else open_store(store)
    seed = run_config.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserError(f"seed must be a non-negative integer, got {seed!r}")
    model_overrides = run_config.get("model_config") or {}
    if not isinstance(model_overrides, dict):
        raise UserError(f"model_config must be a mapping, got {type(model_overrides).__name__}")

    model_cls = get_model_class(run_config["model"])
    dataset = run_config.get("dataset") or store.name
    model_config = resolve_config(model_cls, dataset, model_overrides)
    if model_config.get("num_latent", "absent") is None:
        model_config["num_latent"] = store.num_factors  # Zietlow §5.1: as many latents as factors
    train = resolve_train_config(model_cls, run_config.get("train"))

    if getattr(model_cls, "needs_pairs", False):
        if store.grid != "C":
            raise UserError(f"model {run_config['model']!r} trains on pairs of neighbouring factor states and needs a "
                            f"store holding the complete factor grid in C order; {store.path} has grid={store.grid!r}")
        if not hasattr(model_cls, "pair_sampler"):
            raise UserError(f"model {run_config['model']!r} sets needs_pairs but has no pair_sampler(factor_sizes)")
    h, w, c = store.image_shape
    image_shape = (c, h, w)
    _check_constructible(model_cls, model_config, image_shape, store.num_factors, run_config["model"])
    return {
        "model": run_config["model"],
        "model_class": model_target(model_cls),
        "model_config": model_config,
        "dataset": dataset,
        "seed": seed,
        "train": train,
        "store": {"path": str(store.path), "digest": store.digest, "name": store.name, "image_shape": list(image_shape),
                  "factor_sizes": list(store.factor_sizes), "grid": store.grid},
    }


def _check_constructible(model_cls, model_config, image_shape, num_factors, name) -> None:
    """Build the model once (cheap) so that shape/architecture errors surface before any work."""
    with torch.random.fork_rng(devices=[]):
        try:
            model_cls(model_config, image_shape=image_shape, num_factors=num_factors)
        except UserError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise UserError(f"model {name!r} cannot be built for images {list(image_shape)} (C, H, W) with "
                            f"{num_factors} factors: {type(exc).__name__}: {exc}") from None


# Hyperparameters added after runs existed, with the value that gives the loss of before (the GaussianVAE models'
# reconstruction_weight, 1 = unweighted): a config written before the key existed and one holding it at that value
# describe the same run, so the identity leaves the key out at that value and such runs still resume and extend.
NEUTRAL_HYPERPARAMETERS: dict[str, Any] = {"reconstruction_weight": 1.0}


def _identity_model_config(model_config: dict) -> dict:
    return {k: v for k, v in model_config.items()
            if not (k in NEUTRAL_HYPERPARAMETERS and not isinstance(v, bool) and v == NEUTRAL_HYPERPARAMETERS[k])}


def identity_of(resolved: dict) -> dict:
    """The parts of a resolved config that must match for a resume to continue the same run."""
    return {
        "model_class": resolved["model_class"],
        "model_config": _identity_model_config(resolved["model_config"]),
        "seed": resolved["seed"],
        "store_digest": resolved["store"]["digest"],
        "train": {k: resolved["train"][k] for k in IDENTITY_TRAIN_KEYS},
    }
