"""The one checkpoint/resume loop: the model trainer and perturb's manipulation training both run in it.

:func:`open_run` creates a run folder or finds where to continue it; :meth:`Session.drive` runs the steps.
The caller gives its state (``state_dict``/``load_state_dict`` over its modules, optimisers and RNGs) and
its step function; the loop owns the rest: restoring the checkpoint, logging the running means every
``log_every`` steps, checkpointing atomically every ``checkpoint_every`` steps, cutting the log back to
the checkpoint on resume, and writing the done record last.

A checkpoint holds the caller's state plus the step, the wall time and the running sums of the current
log interval, so a resumed run continues bit-identically on CPU, log lines included. Non-finite values
of the watched log entry are flagged on the device and read only at log and checkpoint boundaries (no
per-step host sync), before any checkpoint is written, so the checkpoint on disk predates a divergence.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from probe.errors import UserError
from probe.provenance import digest_json
from probe.train.run_folder import RunFolder


class Resumable(Protocol):
    """Everything a checkpoint must restore besides the loop's own progress (modules, optimisers, RNGs)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclass(frozen=True)
class Schedule:
    steps: int
    log_every: int
    checkpoint_every: int


def open_run(folder: RunFolder, record: dict, identity_of: Callable[[dict], dict], *, steps: int,
             resume: bool, overwrite: bool = False) -> Session | None:
    """Create ``folder`` or find the checkpoint to continue it from; None when it is already complete.

    ``record`` is written as the folder's config; ``identity_of(config)`` is what must match for a resume
    to continue the same run. A finished run may be extended to more ``steps``, never shortened; without
    ``resume`` an existing run is an error. A run that never wrote a checkpoint, or that stopped on a NaN loss
    (``FAILED``), holds nothing to continue: it is replaced, whatever its configuration, so a retry with a
    new configuration works in the same place; ``overwrite`` replaces any run.
    """
    path = folder.path
    identity = identity_of(record)
    identity_digest = digest_json(identity)
    checkpoint = None
    if not path.exists():
        if not path.parent.exists():
            raise UserError(f"the folder {path.parent} does not exist; create it first")
        path.mkdir()
    elif not path.is_dir():
        raise UserError(f"{path} exists and is not a run folder")
    elif folder.config_path.exists() and (overwrite or folder.is_failed
                                           or not (folder.has_checkpoint or folder.is_complete)):
        folder.reset()
    elif not folder.config_path.exists():
        if any(path.iterdir()):
            raise UserError(f"{path} exists, is not empty and holds no run ({folder.CONFIG} missing); "
                            "choose another --out")
    else:
        if not resume:
            held = "a complete" if folder.is_complete else "an unfinished"
            raise UserError(f"{path} already exists and holds {held} {folder.noun}; pass --resume to continue it "
                            "or remove it to start over")
        folder.check_config(identity, identity_of)
        if folder.is_complete:
            done_steps = int(folder.read_done()["steps"])
            if done_steps == steps:
                return None
            if done_steps > steps:
                raise UserError(f"{path} is complete at {done_steps} steps, more than the {steps} requested; "
                                "a run cannot be shortened (choose another --out)")
        if folder.has_checkpoint:
            checkpoint = folder.load_checkpoint()
            folder.require_continuable(checkpoint, steps)  # a compacted run holds weights only
            if checkpoint["identity_digest"] != identity_digest:
                raise UserError(f"{folder.checkpoint_path} belongs to a different configuration than "
                                f"{folder.config_path}; remove the run folder")
            if checkpoint["step"] > steps:
                raise UserError(f"{path} has a checkpoint at step {checkpoint['step']}, beyond the {steps} steps "
                                "requested; a run cannot be shortened")
    folder.write_config(record)
    folder.clear_done()
    return Session(folder, checkpoint, identity_digest)


class Session:
    """One sitting of a run, from a fresh start or from the checkpoint :func:`open_run` found."""

    def __init__(self, folder: RunFolder, checkpoint: dict | None, identity_digest: str):
        self.folder, self.checkpoint, self.identity_digest = folder, checkpoint, identity_digest

    @property
    def resumed(self) -> bool:
        return self.checkpoint is not None

    def drive(self, state: Resumable, step: Callable[[int], dict], schedule: Schedule, *,
              finish: Callable[[dict], dict], label: str, device: torch.device, watch: str | None = None,
              images_per_step: int | None = None, progress: bool = True, stop_after: int | None = None) -> bool:
        """Run ``step(i)`` for the steps left up to ``schedule.steps``; True when the run completed.

        ``step`` returns the step's logs ({name: scalar tensor or number}); log rows are their means over
        the interval, plus throughput and wall time when ``images_per_step`` is given. ``watch``: the log
        entry whose first non-finite value stops the run with a UserError. ``finish(last_row)`` gives the
        done record's entries besides steps and wall time. ``stop_after`` (testing hook): stop like a
        killed process after that many steps, without a final checkpoint or done record.
        This is :func:`drive_members` with one member.
        """
        outcome = drive_members([self], _OneMember(state), lambda i: _one_member_logs(step(i)), schedule,
                                finish=finish, label=label, device=device, watch=watch,
                                images_per_step=images_per_step, progress=progress, stop_after=stop_after)[0]
        if outcome is not None and "failed_at" in outcome:
            raise divergence_error(self.folder, outcome, watch, schedule.steps, label)
        return outcome is None


def divergence_error(folder: RunFolder, outcome: dict, watch: str, steps: int, label: str) -> UserError:
    """The message of a run stopped on a non-finite ``watch`` value (``outcome`` from :func:`drive_members`)."""
    last = outcome["last_checkpoint"]
    kept = (f"the last good checkpoint (step {last}) is kept in {folder.checkpoint_path}" if last is not None
            else "no checkpoint had been written yet")
    return UserError(f"training diverged: the {watch} became NaN or infinite at step {outcome['failed_at']} of {steps} "
                     f"({label}); the run stopped and {kept}. "
                     "Lower the learning rate (--set lr=...) or change the configuration, then train again.")


class _OneMember:
    """A single run's ``Resumable`` as the one member of :func:`drive_members`."""

    def __init__(self, state: Resumable):
        self.state = state

    def member_state_dict(self, member: int) -> dict:
        return self.state.state_dict()

    def load_member_state_dicts(self, states: list[dict]) -> None:
        self.state.load_state_dict(states[0])


def _one_member_logs(logs: dict) -> dict:
    """A single run's logs as one member's: scalar tensors get the member dimension, numbers stay numbers."""
    return {k: v.detach().reshape(1) if isinstance(v, torch.Tensor) and v.numel() == 1 else v
            for k, v in logs.items()}


class MemberStates(Protocol):
    """The state of S runs trained together (probe.train.batched): one checkpoint payload per member."""

    def member_state_dict(self, member: int) -> dict: ...

    def load_member_state_dicts(self, states: list[dict]) -> None: ...


def drive_members(sessions: list[Session], state: MemberStates, step: Callable[[int], dict], schedule: Schedule, *,
                  finish: Callable[[dict], dict], label: str, device: torch.device, watch: str | None = None,
                  images_per_step: int | None = None, progress: bool = False, stop_after: int | None = None,
                  until: int | None = None) -> list[dict | None]:
    """The one checkpoint/resume loop, for S runs stepped together (S = 1: :meth:`Session.drive`).

    ``step(i)`` returns logs whose entries have one value per member ([S] tensors; numbers are shared). Every
    member's folder gets what a run trained alone writes: its log rows (running means over the interval, plus
    throughput and wall time when ``images_per_step`` is given), its checkpoints (``state.member_state_dict``)
    and its done record (``finish(last_row)`` gives the entries besides steps and wall time). All sessions must
    start at the same step. Non-finite values of the ``watch`` entry are flagged on the device and read only at
    log and checkpoint boundaries, before any checkpoint is written: such a member gets ``failed.json`` and is
    no longer written (the others go on; the loop stops when none is left). ``stop_after`` (testing hook): stop
    like a killed process after that many steps. ``until``: stop after checkpointing that step, without done
    records (to bring members level). Returns, per member, None when it completed, else
    {"failed_at": step, "last_checkpoint": step or None} or {"stopped_at": step}.
    """
    import contextlib

    from tqdm.auto import tqdm

    members = len(sessions)
    starts = {int(s.checkpoint["step"]) if s.checkpoint is not None else 0 for s in sessions}
    if len(starts) != 1:
        raise ValueError(f"members start at different steps {sorted(starts)}; bring them level first")
    start_step, steps = starts.pop(), schedule.steps
    last = steps if until is None else min(until, steps)
    walls = [float(s.checkpoint["wall_time_s"]) if s.checkpoint is not None else 0.0 for s in sessions]
    sums, count = {}, 0
    if sessions[0].checkpoint is not None:
        state.load_member_state_dicts([s.checkpoint for s in sessions])
        # the running means of the current log interval, so that log lines match an uninterrupted run
        log_states = [s.checkpoint["log_state"] for s in sessions]
        count = int(log_states[0]["count"])
        for key, first in log_states[0]["sums"].items():
            stacked = torch.stack([ls["sums"][key].reshape(()) for ls in log_states])
            sums[key] = stacked if first.dtype == torch.float64 else stacked.to(device)
    for s in sessions:
        s.folder.trim_log(start_step)

    outcome: list[dict | None] = [None] * members
    last_checkpoint = [start_step if s.checkpoint is not None else None for s in sessions]
    first_bad = torch.full((members,), -1, dtype=torch.long, device=device)
    t_session = time.perf_counter()
    t_interval, steps_interval = t_session, 0
    last_rows: list[dict] = [{} for _ in sessions]

    def live() -> list[int]:
        return [m for m in range(members) if outcome[m] is None]

    def check_finite() -> bool:
        """Mark members whose watched value went non-finite; False when no member is left."""
        if watch is None:
            return True
        for m, at in enumerate(first_bad.tolist()):
            if at >= 0 and outcome[m] is None:
                sessions[m].folder.write_failed({"step": at, "watch": watch, "last_checkpoint": last_checkpoint[m]})
                outcome[m] = {"failed_at": at, "last_checkpoint": last_checkpoint[m]}
        return bool(live())

    bar = tqdm(total=steps, initial=start_step, disable=not progress, unit="step", dynamic_ncols=True,
               desc=label if members == 1 else f"{label} ×{members}", mininterval=0.5)
    try:
        with contextlib.ExitStack() as stack:
            logs_out = [stack.enter_context(s.folder.open_log()) for s in sessions]
            for i in range(start_step + 1, last + 1):
                logs = step(i)
                if watch is not None:
                    first_bad = _flag_non_finite(first_bad, logs[watch], i, members)
                for key, v in _member_logs(logs, members).items():
                    sums[key] = sums[key] + v if key in sums else v
                count += 1
                steps_interval += 1
                bar.update(1)
                if stop_after is not None and i >= stop_after:
                    return [o or {"stopped_at": i} for o in outcome]
                if i % schedule.log_every == 0 or i == steps:
                    if not check_finite():
                        return outcome
                    now = time.perf_counter()
                    values = {k: v.tolist() for k, v in sums.items()}  # float32 sums as floats, as float(v.item())
                    for m in live():
                        row = {"step": i, **{k: vals[m] / count for k, vals in values.items()}}
                        if images_per_step is not None:
                            row["img_per_s"] = steps_interval * images_per_step / max(now - t_interval, 1e-9)
                            row["wall_time_s"] = walls[m] + now - t_session
                        logs_out[m].write(json.dumps(row) + "\n")
                        logs_out[m].flush()
                        last_rows[m] = row
                    bar.set_postfix(_postfix(last_rows, watch, images_per_step, members))
                    sums, count = {}, 0
                    t_interval, steps_interval = now, 0
                if i % schedule.checkpoint_every == 0 or i == steps or i == last:
                    if not check_finite():
                        return outcome
                    for m in live():
                        logs_out[m].flush()
                        os.fsync(logs_out[m].fileno())
                        sessions[m].folder.save_checkpoint({
                            "step": i, "wall_time_s": walls[m] + time.perf_counter() - t_session,
                            "identity_digest": sessions[m].identity_digest, **state.member_state_dict(m),
                            "log_state": {"sums": {k: v[m].detach().cpu() for k, v in sums.items()}, "count": count}})
                        last_checkpoint[m] = i
            if last < steps:
                return [o or {"stopped_at": last} for o in outcome]
    finally:
        bar.close()

    for m in live():
        # resumed at the final step (nothing left to do): the last logged row
        row = last_rows[m] or (sessions[m].folder.read_log() or [{}])[-1]
        wall = walls[m] + time.perf_counter() - t_session
        sessions[m].folder.write_done({"steps": steps, "wall_time_s": wall, **finish(row)})
    return outcome


def _postfix(rows: list[dict], watch: str | None, images_per_step: int | None, members: int) -> dict:
    live_rows = [r for r in rows if r]
    postfix = {}
    if watch is not None and members == 1 and live_rows:
        postfix[watch] = f"{live_rows[0][watch]:.4g}"
    if images_per_step is not None and live_rows:
        postfix["img_s"] = f"{live_rows[0]['img_per_s'] * members:.0f}"
    return postfix


def _flag_non_finite(first_bad: torch.Tensor, value, step: int, members: int) -> torch.Tensor:
    """``first_bad`` [S] set to ``step`` where still unset and ``value`` is not finite (stays on the device)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().float().reshape(members)
    else:
        value = torch.full((members,), float(value), device=first_bad.device)
    return torch.where((first_bad < 0) & ~torch.isfinite(value), torch.full_like(first_bad, step), first_bad)


def _member_logs(logs: dict, members: int) -> dict:
    """Per-member entries ([S] tensors, float32 on the device) of a step's logs; numbers as float64 on the CPU.
    Entries of another size are not logged."""
    out = {}
    for key, value in logs.items():
        if isinstance(value, torch.Tensor):
            if value.numel() == members:
                out[key] = value.detach().float().reshape(members)
            elif value.numel() == 1:
                out[key] = value.detach().float().reshape(()).expand(members)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = torch.full((members,), float(value), dtype=torch.float64)
    return out
