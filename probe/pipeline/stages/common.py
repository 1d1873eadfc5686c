"""What several stages share: run keys and run configs, the training job, evaluation settings and the
evaluation call.

Choices (paper vs reference code):
* Restarts, retrained models and robustness runs use seeds 0..n-1 (the retrained ones from
  ``retrain.first_seed``); orig/mod/noise share seeds, so each seed is a paired comparison.
* Every run passes ``dataset = pipeline.dataset`` so the model's Table 2 preset applies on every variant
  (the modified and noise stores of a dSprites run are still dSprites).
"""

from __future__ import annotations

import json
import math

from probe.errors import UserError
from probe.pipeline.worker import JobContext

# `[pipeline] keep_checkpoints`: what a training stage keeps of each finished run (this module owns the name and
# its values; check_pipeline validates it, the training stages hash it into their configs)
KEEP_CHECKPOINTS = "keep_checkpoints"
KEEP_ALL = "all"                      # every checkpoint as training left it: a run can be extended later
KEEP_FINAL_WEIGHTS = "final-weights"  # RunFolder.compact: the final weights only (smoke, quick: what later stages read)
KEEP_CHOICES = (KEEP_ALL, KEEP_FINAL_WEIGHTS)


# the training run a training job keeps in its job folder (train_job, train_jobs; probe pipeline status reads it)
JOB_RUN = "run"


def job_run_progress(job_folder) -> dict | None:
    """``probe.train.run_progress`` of the training run in a job folder (None: the job trains none, or has
    not started it)."""
    from probe.train import run_progress

    return run_progress(job_folder / JOB_RUN)


def keep_checkpoints(config: dict) -> str:
    """The pipeline's ``keep_checkpoints`` setting (``all`` where a config does not give it)."""
    return config["pipeline"].get(KEEP_CHECKPOINTS, KEEP_ALL)


def keep_run(run_dir, keep: str) -> None:
    """Apply the ``keep_checkpoints`` setting ``keep`` to the finished run in ``run_dir``."""
    from probe.train import RunFolder

    if keep == KEEP_FINAL_WEIGHTS:
        RunFolder(run_dir).compact(hint=f'to keep every run continuable, set {KEEP_CHECKPOINTS} = "{KEEP_ALL}" in the '
                                        f"pipeline (--set pipeline.{KEEP_CHECKPOINTS}={KEEP_ALL})")


def check_pipeline(config: dict, *, deep: bool = True) -> None:
    """The ``[pipeline]`` settings the stages share (``keep_checkpoints``)."""
    keep = keep_checkpoints(config)
    if keep not in KEEP_CHOICES:
        raise UserError(f"pipeline.{KEEP_CHECKPOINTS} must be one of {', '.join(map(repr, KEEP_CHOICES))}, got {keep!r}")


def check_count(key: str, value, minimum: int = 1) -> None:
    """A count setting (``restarts.count``, ``retrain.seeds``): an integer ≥ ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{key} must be a {'positive' if minimum else 'non-negative'} integer, got {value!r}")


def check_models(dataset: str, models: list[tuple[str, dict, dict]], hyperparameters: dict | None = None) -> None:
    """Each (model, model config overrides, train settings) resolves: a known model, real hyperparameters, valid
    train settings; ``hyperparameters`` (the ``[hyperparameters]`` table) names a real one per model. Imports the
    models and the trainer (a ``deep`` check)."""
    from probe.models.base import resolve_config
    from probe.models.registry import get_model_class
    from probe.train.config import resolve_train_config

    for model, overrides, train in models:
        cls = get_model_class(model)  # unknown model -> UserError naming it
        resolved = resolve_config(cls, dataset, overrides)
        resolve_train_config(cls, train)
        hp = (hyperparameters or {}).get(model) or None
        if hp is not None and hp not in resolved:
            raise UserError(f"hyperparameters.{model} = {hp!r}, but model {model!r} has no such hyperparameter "
                            f"(known: {', '.join(sorted(resolved))})")


# the retrain stage's name, which is also its TOML table's. stages.retrain takes its NAME from here so that the stages
# it reads can ask what it trains (retrain_table, trained_variants) without importing it: apply-random makes its store
# only where a model is retrained on mod-random
RETRAIN = "retrain"


def retrain_table(config: dict) -> dict | None:
    """The ``[retrain]`` table of a pipeline config; None where the pipeline retrains nothing."""
    return config.get(RETRAIN)


# -- training runs --------------------------------------------------------------------------------------

def run_key(model: str, variant: str, seed: int, scale: float | None = None) -> str:
    base = f"{model}-{variant}-s{seed}"
    return base if scale is None else f"{model}-x{scale:g}-{variant}-s{seed}"


def run_config(model: str, dataset: str, seed: int, train: dict, model_config: dict) -> dict:
    return {"model": model, "model_config": dict(model_config.get(model, {})), "dataset": dataset, "seed": seed,
            "train": dict(train)}


def retrain_seeds(retrain: dict) -> range:
    """The retrained runs' seeds: ``retrain.seeds`` of them from ``retrain.first_seed``. The modify pipelines start
    them at 100, past every restart seed: with equal seeds and settings a retrained orig run would repeat a restart,
    so the orig sample would contain the very runs the selection picked as most entangled and most disentangled."""
    first = int(retrain.get("first_seed", 0))
    return range(first, first + int(retrain["seeds"]))


def model_variants(retrain: dict, model: str) -> list[str]:
    """The variants ``model`` is retrained on: ``retrain.model_variants[model]``, else ``retrain.variants`` (the
    control trains the β-VAE on its L1 and L3 stores too, the AE and PCL on orig, mod and noise only)."""
    return list((retrain.get("model_variants") or {}).get(model) or retrain["variants"])


def trained_variants(retrain: dict) -> list[str]:
    """Every variant some model of the ``[retrain]`` table ``retrain`` is trained on (the retrain stage reads their
    stores; apply-random makes its store only when ``mod-random`` is among them)."""
    return list(dict.fromkeys(v for m in retrain["models"] for v in model_variants(retrain, m)))


def model_train(retrain: dict, model: str) -> dict:
    """The retrain stage's train settings for ``model``: ``retrain.train`` with ``retrain.model_train[model]`` on top
    (a preset trains each model as long as it needs, e.g. the AE shorter than the β-VAE)."""
    return {**retrain["train"], **((retrain.get("model_train") or {}).get(model) or {})}


def primary_hyperparameter(config: dict, model: str) -> str | None:
    return (config.get("hyperparameters") or {}).get(model) or None


def train_job(ctx: JobContext, store_path, *, run_config: dict, variant: str, model: str, seed: int,
              hyperparameter: str | None = None, scale: float | None = None, keep: str = KEEP_ALL) -> dict:
    """One training run on the store at ``store_path`` (the calling stage's job function resolves it from the job's
    inputs: ``variant``'s store), kept in the job folder; with ``scale``, the primary hyperparameter's resolved
    (literature) value is multiplied by it; ``keep``: the pipeline's ``keep_checkpoints`` setting, applied once the
    run is finished."""
    from probe.train import train_run

    run_config, hp = _prepare_train(run_config, store_path, model, hyperparameter, scale)
    run_dir = train_run(run_config, store_path, ctx.job_dir / JOB_RUN, resume=True, device=ctx.device, progress=False)
    return _train_result(run_dir, hp, variant=variant, model=model, seed=seed, scale=scale, keep=keep)


def train_jobs(contexts: list[JobContext], store_paths: list, members: list[dict]) -> list:
    """``train_job`` for jobs that differ only in seed (``members``: their keyword arguments; ``store_paths``: each
    one's store, all the same), trained as one batched job (probe.train.batched): one result or exception per member,
    each the result ``train_job`` gives."""
    from probe.train.batched import train_runs

    if len({str(p) for p in store_paths}) != 1:
        raise ValueError(f"a batched job trains on one store, got {sorted({str(p) for p in store_paths})}")
    prepared = [_prepare_train(kw["run_config"], path, kw["model"], kw.get("hyperparameter"), kw.get("scale"))
                for path, kw in zip(store_paths, members)]
    outcomes = train_runs([p[0] for p in prepared], store_paths[0], [ctx.job_dir / JOB_RUN for ctx in contexts],
                          device=contexts[0].device)
    return [outcome if isinstance(outcome, BaseException)
            else _train_result(outcome, hp, variant=kw["variant"], model=kw["model"], seed=kw["seed"],
                               scale=kw.get("scale"), keep=kw.get("keep", KEEP_ALL))
            for kw, (_, hp), outcome in zip(members, prepared, outcomes)]


def _prepare_train(run_config: dict, store_path, model: str, hyperparameter: str | None, scale: float | None):
    """(run config, {"name", "value"} of the primary hyperparameter). The trainer resolves the model config
    (probe.train); only a scaled run (robustness) resolves it here first, to multiply the literature value and write
    the product into its run config. Otherwise the value is read after training from the run's own resolved config
    (``_train_result``), so the model config is resolved once per run."""
    run_config = json.loads(json.dumps(run_config))
    hp = {"name": hyperparameter, "value": None}
    if scale is not None:
        from probe.train import resolve_run_config

        if hyperparameter is None:
            raise UserError(f"model {model!r} has no primary hyperparameter to scale")
        resolved = resolve_run_config(run_config, store_path)
        hp["value"] = float(resolved["model_config"][hyperparameter]) * float(scale)
        run_config.setdefault("model_config", {})[hyperparameter] = hp["value"]
    return run_config, hp


def _train_result(run_dir, hp: dict, *, variant: str, model: str, seed: int, scale: float | None, keep: str) -> dict:
    from probe.train import RunFolder

    keep_run(run_dir, keep)
    if hp["name"] is not None and hp["value"] is None:  # as the trainer resolved it (the run's config.json)
        hp = {**hp, "value": RunFolder(run_dir).read_config()["model_config"].get(hp["name"])}
    result = {"model": model, "variant": variant, "seed": seed, "run_dir": str(run_dir), "hyperparameter": hp,
              "curve": str(RunFolder(run_dir).log_path)}
    if scale is not None:
        result["scale"] = float(scale)
    return result


# -- evaluation -----------------------------------------------------------------------------------------

def evaluate_metrics(run_dir, store_path, settings: dict) -> dict:
    """``probe.metrics.evaluate_run`` of one run on a store, as strict JSON (NaN -> null)."""
    from probe.metrics import evaluate_run

    result = evaluate_run(str(run_dir), str(store_path), metrics=settings.get("metrics") or None,
                          seed=int(settings.get("seed", 0)), **(settings.get("sample_sizes") or {}))
    return json.loads(json.dumps(result, default=_jsonable))


def _jsonable(obj):
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return str(obj)
