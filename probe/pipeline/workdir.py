"""The files of a pipeline workdir: stage folders, the run lock, and what ``probe pipeline status`` reads.

Layout::

    WORKDIR/pipeline.lock                 held while a run is active ({"pid", "host", "started"})
    WORKDIR/pipeline.json                 the plan of the latest run (config, stage digests, job keys)
    WORKDIR/legs.json                     every `pipeline run` here (a leg): start, wall time, the stages it computed
    WORKDIR/<stage>/<digest>/             a complete stage: stage.json (written last) + its job folders
    WORKDIR/<stage>/<digest>.partial/     a stage being computed; finished jobs inside are kept
    WORKDIR/<stage>/<digest>.partial/jobs/<key>/   one job: job.json (its result), started.json, error.json
    WORKDIR/logs/<stage>/<job>.log        one log per job (stdout, stderr, logging)
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from probe.errors import UserError

log = logging.getLogger(__name__)

STAGE_FILE = "stage.json"
JOB_FILE = "job.json"
ERROR_FILE = "error.json"
STARTED_FILE = "started.json"
LOCK_FILE = "pipeline.lock"
PLAN_FILE = "pipeline.json"
LEGS_FILE = "legs.json"


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def final_dir(workdir: Path, stage: str, digest: str) -> Path:
    return workdir / stage / digest


def partial_dir(workdir: Path, stage: str, digest: str) -> Path:
    return workdir / stage / f"{digest}.partial"


def job_dir(stage_dir: Path, key: str) -> Path:
    return stage_dir / "jobs" / key


def log_path(workdir: Path, stage: str, key: str) -> Path:
    return workdir / "logs" / stage / f"{key}.log"


def load_stage_result(workdir: Path, stage: str, digest: str) -> dict | None:
    """The cached result of a finished stage, or None when it must run.

    A finished stage's folder whose record is missing or damaged (a truncated ``stage.json``) is handed back to
    job-level resumption: the folder is renamed to its ``.partial`` name, so the stage runs again, reuses every
    finished job in it and writes a new record."""
    final = final_dir(workdir, stage, digest)
    if not final.exists():
        return None
    if stage_record_ok(final):
        return read_json(final / STAGE_FILE)["result"]
    partial = partial_dir(workdir, stage, digest)
    if partial.exists():
        shutil.rmtree(partial)
    final.rename(partial)
    return None


def stage_record_ok(folder: Path) -> bool:
    """Whether a finished stage's folder holds a readable record (``workdir_status`` and the engine agree)."""
    record = read_json(folder / STAGE_FILE)
    return isinstance(record, dict) and isinstance(record.get("result"), dict)


# -- legs: the runs that computed a result ------------------------------------------------------------

class Leg:
    """One ``pipeline run`` in a workdir: a run interrupted (killed, a failed job) and run again has several legs,
    and its report gives their total wall time. A leg's record in ``LEGS_FILE`` holds its start, its wall time so far
    and the digests of the stages it computed (not the cached ones); the wall time is rewritten as jobs finish, so a
    killed leg keeps the time up to its last finished job. The caller holds the workdir lock."""

    def __init__(self, workdir: Path):
        self.path = Path(workdir) / LEGS_FILE
        self.t0 = time.time()
        self.index = len(read_legs(workdir))
        self.record = {"started": now(), "t0": self.t0, "pid": os.getpid(), "host": socket.gethostname(),
                       "wall_time_s": 0.0, "finished": False, "stages": []}
        self.tick()

    def computing(self, digest: str) -> None:
        """This leg computes (or continues) the stage with ``digest``."""
        if digest not in self.record["stages"]:
            self.record["stages"].append(digest)
        self.tick()

    def tick(self, finished: bool = False) -> None:
        from probe.provenance import write_json_atomic

        self.record.update(wall_time_s=time.time() - self.t0, finished=finished)
        legs = read_legs(self.path.parent)
        legs[self.index:self.index + 1] = [self.record]
        write_json_atomic(self.path, legs)


def read_legs(workdir: Path) -> list[dict]:
    legs = read_json(Path(workdir) / LEGS_FILE)
    return legs if isinstance(legs, list) else []


def plan_legs(workdir: Path) -> list[dict]:
    """The legs that computed any stage of the latest plan (``PLAN_FILE``), oldest first, each as {"started",
    "wall_time_s"}; a leg still running in this process counts up to now."""
    plan = read_json(Path(workdir) / PLAN_FILE) or {}
    digests = {s["digest"] for s in plan.get("stages", [])}
    here = (os.getpid(), socket.gethostname())
    out = []
    for leg in read_legs(workdir):
        if not digests.intersection(leg.get("stages", [])):
            continue
        running = not leg.get("finished") and (leg.get("pid"), leg.get("host")) == here
        out.append({"started": leg["started"],
                    "wall_time_s": time.time() - leg["t0"] if running else float(leg["wall_time_s"])})
    return out


# -- the lock ---------------------------------------------------------------------------------------

def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_holder(workdir: Path) -> dict | None:
    """The live holder of the workdir lock, or None (no lock, or a stale one from a dead pid)."""
    info = read_json(Path(workdir) / LOCK_FILE)
    if not info:
        return None
    if info.get("host") == socket.gethostname() and not _pid_alive(int(info.get("pid", -1))):
        return None
    return info


@contextlib.contextmanager
def workdir_lock(workdir: Path):
    """One run per workdir. A lock left by a dead pid on this host is taken over."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / LOCK_FILE
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": now()}
    for _attempt in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = lock_holder(workdir)
            if holder is not None:
                raise UserError(
                    f"workdir {workdir} is in use by another pipeline run (pid {holder.get('pid')} on "
                    f"{holder.get('host')}, started {holder.get('started')}); wait for it to finish or "
                    f"stop it, or use another --workdir (lock file: {path})") from None
            log.warning("taking over a stale lock %s", path)
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    else:  # pragma: no cover - another process won the race for a stale lock
        raise UserError(f"workdir {workdir} was locked by another run just now; try again")
    try:
        yield
    finally:
        if (read_json(path) or {}).get("pid") == os.getpid():
            path.unlink(missing_ok=True)


# -- status -----------------------------------------------------------------------------------------

def workdir_status(workdir: str | os.PathLike) -> dict:
    """What the latest run's plan says and what the folders hold: per stage done/running/failed jobs."""
    workdir = Path(workdir)
    plan = read_json(workdir / PLAN_FILE)
    if plan is None:
        raise UserError(f"{workdir} holds no pipeline run (no {PLAN_FILE}); start one with `probe pipeline run`")
    holder = lock_holder(workdir)
    stages = []
    for s in plan["stages"]:
        final, partial = final_dir(workdir, s["name"], s["digest"]), partial_dir(workdir, s["name"], s["digest"])
        entry = {"name": s["name"], "digest": s["digest"], "total": len(s["jobs"]), "done": 0, "running": [],
                 "failed": [], "interrupted": []}
        if (final / STAGE_FILE).exists() and not stage_record_ok(final):
            entry.update(state="damaged")  # the next `pipeline run` recomputes it (load_stage_result)
        elif (final / STAGE_FILE).exists():
            entry.update(state="complete", done=len(s["jobs"]))
        else:
            for key in s["jobs"]:
                folder = job_dir(partial, key)
                if (folder / JOB_FILE).exists():
                    entry["done"] += 1
                elif (folder / ERROR_FILE).exists():
                    err = read_json(folder / ERROR_FILE) or {}
                    entry["failed"].append({"job": key, "error": err.get("error"), "log": err.get("log")})
                elif (folder / STARTED_FILE).exists():
                    entry["running" if holder else "interrupted"].append(key)
            if entry["failed"]:
                entry["state"] = "failed"
            elif entry["running"]:
                entry["state"] = "running"
            elif entry["done"] or entry["interrupted"]:
                entry["state"] = "partial"
            else:
                entry["state"] = "pending"
        stages.append(entry)
    return {"workdir": str(workdir), "pipeline": plan.get("pipeline"), "preset": plan.get("preset"),
            "started": plan.get("started"), "running_pid": holder.get("pid") if holder else None, "stages": stages}
