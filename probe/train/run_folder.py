"""The training-run folder: the one module that names its files; everything else goes through :class:`RunFolder`.

A run folder (``probe train`` makes one per model, ``probe perturb train`` one per manipulation)::

    config.json     the resolved configuration and its provenance; its identity decides what a resume may continue
    checkpoint.pt   the latest state, replaced atomically; tensors and plain containers only (``weights_only`` loads it).
                    A complete run may be compacted (:meth:`RunFolder.compact`) to its final weights: the step, the
                    identity digest and the ``WEIGHTS`` entries, marked ``COMPACTED``; it still loads and evaluates,
                    but cannot be continued (no optimiser, RNG or log state)
    metrics.jsonl   one JSON object per logged step (a manipulation run names it losses.jsonl)
    done.json       written last: {"steps", "wall_time_s", "final", ...}; a folder holding it is complete

:mod:`probe.train.loop` is the one loop that fills a run folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, TextIO

import torch

from probe.errors import UserError
from probe.provenance import atomic_path, digest_json, sha256_file, write_json_atomic

CHECKPOINT_FORMAT = 1
COMPACTED = "compacted"  # checkpoint entry of a compacted run: {"bytes_before", "hint"}


class RunFolder:
    """The folder of one training run (a model trained by :func:`probe.train.train_run`)."""

    CONFIG = "config.json"
    CHECKPOINT = "checkpoint.pt"
    LOG = "metrics.jsonl"
    DONE = "done.json"
    FAILED = "failed.json"  # written when a run stops on a NaN loss: nothing in it is worth continuing
    noun = "training run"
    # what a compacted checkpoint keeps besides the step and the identity digest: what loading a finished run reads
    # (probe.train.trainer.load_run); everything else in a checkpoint exists only to continue the run
    WEIGHTS = ("model",)

    def __init__(self, path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    @property
    def config_path(self) -> Path:
        return self.path / self.CONFIG

    @property
    def checkpoint_path(self) -> Path:
        return self.path / self.CHECKPOINT

    @property
    def log_path(self) -> Path:
        return self.path / self.LOG

    @property
    def done_path(self) -> Path:
        return self.path / self.DONE

    @property
    def is_complete(self) -> bool:
        return self.done_path.exists()

    @property
    def has_checkpoint(self) -> bool:
        return self.checkpoint_path.exists()

    @property
    def failed_path(self) -> Path:
        return self.path / self.FAILED

    @property
    def is_failed(self) -> bool:
        return self.failed_path.exists()

    def write_failed(self, record: dict) -> None:
        write_json_atomic(self.failed_path, record)

    def own_files(self) -> list[Path]:
        """Every file this type names (a subclass's too), existing or not."""
        names = {getattr(type(self), a) for a in dir(type(self)) if a.isupper() and isinstance(getattr(type(self), a), str)}
        return [self.path / n for n in sorted(names)]

    def reset(self) -> None:
        """Remove the run's own files (nothing else in the folder), for a fresh start in the same place."""
        for path in self.own_files():
            path.unlink(missing_ok=True)

    def require_complete(self, hint: str = "") -> None:
        """UserError unless the run has finished; ``hint`` says what to do about it."""
        if not self.is_complete:
            advice = f"; {hint}" if hint else ""
            raise UserError(f"{self.path}: the {self.noun} is not complete (no {self.DONE}){advice}")

    def require_checkpoint(self) -> None:
        if not self.has_checkpoint:
            raise UserError(f"{self.path} holds no {self.CHECKPOINT}; is it a probe run folder?")

    # -- config ---------------------------------------------------------------------------------------
    def read_config(self) -> dict:
        if not self.config_path.exists():
            raise UserError(f"{self.path} is not a run folder ({self.CONFIG} missing)")
        return _read_json(self.config_path)

    def write_config(self, record: dict) -> None:
        write_json_atomic(self.config_path, record)

    def check_config(self, identity: dict, identity_of: Callable[[dict], dict]) -> None:
        """UserError when the stored config's identity differs from ``identity`` (naming the keys that differ)."""
        old_identity = identity_of(self.read_config())
        if digest_json(old_identity) != digest_json(identity):
            normalised = json.loads(json.dumps(identity))  # tuples -> lists, as stored in the config
            diffs = sorted(k for k in normalised if normalised[k] != old_identity.get(k))
            raise UserError(f"{self.path} holds a different {self.noun}: a different configuration "
                            f"(differs in: {', '.join(diffs)}); pass --overwrite to replace it, or choose "
                            "another --out")

    # -- done record ----------------------------------------------------------------------------------
    def read_done(self) -> dict:
        self.require_complete()
        return _read_json(self.done_path)

    def write_done(self, record: dict) -> None:
        write_json_atomic(self.done_path, record)

    def clear_done(self) -> None:
        """A run being continued (or extended) is incomplete until its loop ends."""
        self.done_path.unlink(missing_ok=True)

    # -- checkpoint -----------------------------------------------------------------------------------
    def save_checkpoint(self, payload: dict) -> None:
        with atomic_path(self.checkpoint_path, overwrite=True) as tmp:
            torch.save({"format": CHECKPOINT_FORMAT, **payload}, tmp)

    def load_checkpoint(self) -> dict:
        path = self.checkpoint_path
        if not path.exists():
            raise UserError(f"{self.path}: the {self.noun} has no checkpoint yet")
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a truncated or foreign file: say which, no traceback
            raise UserError(f"cannot read checkpoint {path}: {type(exc).__name__}: {exc}") from None
        if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
            raise UserError(f"{path} is not a probe checkpoint (format {CHECKPOINT_FORMAT})")
        return payload

    def compact(self, hint: str) -> dict:
        """Rewrite the complete run's checkpoint to its final weights (``WEIGHTS``, the step and the identity digest),
        dropping optimiser, RNG and log state: what evaluation and every later stage read, at a third of the size or
        less. The run can no longer be continued or extended; ``hint`` is kept in the checkpoint and says, in the
        error a later extension gets, how to keep full checkpoints. Idempotent; returns the ``COMPACTED`` record with
        ``bytes_after``."""
        self.require_complete("only a finished run can be compacted")
        if not self.WEIGHTS:
            raise UserError(f"{self.path}: a {self.noun} cannot be compacted")
        payload = self.load_checkpoint()
        if COMPACTED not in payload:
            payload = self._compacted(payload, hint)
            self.save_checkpoint(payload)
        return {**payload[COMPACTED], "bytes_after": self.checkpoint_path.stat().st_size}

    def _compacted(self, payload: dict, hint: str) -> dict:
        missing = [k for k in self.WEIGHTS if k not in payload]
        if missing:
            raise UserError(f"{self.checkpoint_path} has no {', '.join(missing)}; is it a {self.noun}?")
        return {"step": payload["step"], "wall_time_s": payload["wall_time_s"], "identity_digest": payload["identity_digest"],
                **{k: payload[k] for k in self.WEIGHTS},
                COMPACTED: {"bytes_before": self.checkpoint_path.stat().st_size, "hint": hint}}

    def require_continuable(self, checkpoint: dict, steps: int) -> None:
        """UserError when ``checkpoint`` (this run's) was compacted: continuing to ``steps`` needs the state it
        dropped."""
        if COMPACTED in checkpoint:
            raise UserError(
                f"{self.path} was kept weights-only (compacted to its final weights at step {checkpoint['step']}, "
                f"without optimiser or RNG state), so it cannot be continued to {steps} steps; "
                f"{checkpoint[COMPACTED]['hint']}, or train into another --out (or pass --overwrite to start over)")

    def checkpoint_sha256(self) -> str | None:
        return sha256_file(self.checkpoint_path) if self.has_checkpoint else None

    # -- step log -------------------------------------------------------------------------------------
    def read_log(self) -> list[dict]:
        if not self.log_path.exists():
            return []
        rows = []
        for line in self.log_path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill: everything after it is discarded too
                break
        return rows

    # the quantile of a run's step intervals read as its idle cost (the report's "fastest decile", the cost benchmark)
    FASTEST_QUANTILE = 0.1

    def step_costs(self, rows: list[dict] | None = None) -> list[float]:
        """Seconds per training step of each logged interval: consecutive log rows with a growing step and wall time.
        A resume restarts the clock from the checkpoint's wall time, so an interval across it that runs backwards is
        skipped. The intervals measure the host as the run saw it (its load included). ``rows``: the log as
        ``read_log`` gave it, for a caller that already read it."""
        rows = self.read_log() if rows is None else rows
        return [(b["wall_time_s"] - a["wall_time_s"]) / (b["step"] - a["step"]) for a, b in zip(rows, rows[1:])
                if "wall_time_s" in a and "wall_time_s" in b and b["step"] > a["step"]
                and b["wall_time_s"] > a["wall_time_s"]]

    def trim_log(self, step: int) -> None:
        """Keep the rows up to ``step``: the log describes exactly the steps the checkpoint went through."""
        rows = [r for r in self.read_log() if r.get("step", 0) <= step]
        with atomic_path(self.log_path, overwrite=True) as tmp:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def open_log(self) -> TextIO:
        return open(self.log_path, "a")


class ManipulationRunFolder(RunFolder):
    """The folder of a manipulation run (:func:`probe.perturb.train_manipulation`): the same files, the log
    named losses.jsonl, plus before.json, the reconstruction losses measured before the first step."""

    LOG = "losses.jsonl"
    BEFORE = "before.json"
    noun = "manipulation run"
    WEIGHTS = ()  # not compactable: its done record holds the checkpoint's sha256, which loading it verifies

    @property
    def before_path(self) -> Path:
        return self.path / self.BEFORE

    def read_before(self) -> dict:
        return _read_json(self.before_path)

    def write_before(self, record: dict) -> None:
        write_json_atomic(self.before_path, record)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
