"""The face every stage module shows the others (issue 25): what a stage reads of another goes through that stage's
module, never through its name or its result keys spelled as strings.

A stage module has

* ``NAME``: the stage's name (its folder, its TOML table, ``--until``/``--force``);
* ``INPUTS``: the stage modules whose results its jobs read (``input_names(INPUTS)`` for the engine); where they
  depend on the config, ``input_stages(config)`` instead (retrain, evaluate: the stores of the variants trained on);
* ``result(inputs) -> <Stage>Result``: the stage's result, typed, out of the results the engine hands a later stage
  (``ctx.inputs``, or ``PipelineRun.results``);
* ``check(config, *, deep)`` where it has settings to check before any work (``deep``: the checks that import the
  models, the trainer or the metrics);
* ``stage(config, meta) -> Stage``: the engine's view, built from the pipeline's resolved config.

A pipeline kind is a tuple of these modules (probe.pipeline.graph). This module holds what they share and imports
no stage, so every stage can import it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Mapping


def input_names(modules: Iterable[ModuleType]) -> list[str]:
    """The engine's ``Stage.inputs`` for a tuple of stage modules, in order, without repeats."""
    return list(dict.fromkeys(m.NAME for m in modules))


def single_job_result(key: str):
    """``collect`` of a one-job stage: the job's result, plus ``jobs`` like every stage result."""
    def collect(config, inputs, results):
        return {**results[key], "jobs": results}
    return collect


def jobs_of(inputs: Mapping[str, dict], name: str) -> dict[str, dict]:
    """``{job key: job result}`` of stage ``name`` among ``inputs`` (the engine's stage-result layout)."""
    return inputs[name]["jobs"]


def present(inputs: Mapping[str, Any], module: ModuleType) -> bool:
    """Whether ``module``'s stage is among ``inputs`` (a stage that only some pipeline kinds have)."""
    return module.NAME in inputs


@dataclasses.dataclass(frozen=True)
class StoreResult:
    """A stage that writes one dataset store (store, apply, noise, rotated, each dose)."""

    path: str
    digest: str
    epsilon: float | None = None     # the manipulation's or the noise's ε (apply, noise, dose)

    @property
    def store_path(self) -> Path:
        return Path(self.path)

    def entry(self) -> dict:
        """``{"path", "digest"}``, the report inputs' store entry."""
        return {"path": self.path, "digest": self.digest}


@dataclasses.dataclass(frozen=True)
class TrainedRun:
    """One training job's result (``probe.pipeline.stages.common.train_job``): restarts, retrain, robustness and the
    audit's plug-in runs. ``raw`` is the job's whole record (metrics and alignment for robustness runs)."""

    key: str
    model: str
    variant: str
    seed: int
    run_dir: str
    hyperparameter: dict
    curve: str
    scale: float | None
    raw: dict

    @classmethod
    def of(cls, key: str, record: dict) -> "TrainedRun":
        return cls(key, record["model"], record["variant"], int(record["seed"]), record["run_dir"],
                   record.get("hyperparameter") or {}, record.get("curve"), record.get("scale"), record)

    def entry(self, fields: Iterable[str]) -> dict:
        """The named fields of the job's record (the report inputs' run entry)."""
        return {k: self.raw[k] for k in fields}


def trained_runs(jobs: Mapping[str, dict]) -> dict[str, TrainedRun]:
    """``{job key: TrainedRun}`` of a training stage's jobs, in job-key order."""
    return {key: TrainedRun.of(key, record) for key, record in sorted(jobs.items())}
