"""The files of a pipeline workdir: stage folders, the run lock, how paths are recorded, and what ``probe pipeline
status`` reads.

Layout::

    WORKDIR/pipeline.lock                 held while a run is active ({"pid", "host", "started"})
    WORKDIR/pipeline.json                 the plan of the latest run (config, stage digests, job keys)
    WORKDIR/legs.json                     every `pipeline run` here (a leg): start, wall time, the stages it computed
    WORKDIR/<stage>/<digest>/             a complete stage: stage.json (written last) + its job folders
    WORKDIR/<stage>/<digest>.partial/     a stage being computed; finished jobs inside are kept
    WORKDIR/<stage>/<digest>.partial/jobs/<key>/   one job: job.json (its result), started.json, error.json
    WORKDIR/logs/<stage>/<job>.log        one log per job (stdout, stderr, logging)

Paths (a workdir is relocatable: copied or moved, it resumes and reports where it now stands). In memory, results
name absolute paths under the workdir where the pipeline now runs (what jobs get as ``ctx.inputs``, what
``run_stages`` returns). On disk, every file the engine writes (stage.json, job.json, error.json, pipeline.json)
records a path under the workdir as ``$WORKDIR/<path relative to it>`` (``WORKDIR_MARK``, ``probe.rooted``; the workdir itself as
``$WORKDIR``), in values and in dict keys alike (the select stage keys its MIGs by run folder). The marker makes
reading unambiguous: only strings that begin with it are paths to make absolute again, and a result string that
begins with it but is not a path under the workdir is refused when written. A path outside the workdir (an official
dataset file, a plug-in's source) stays absolute. Paths under a stage's ``.partial`` folder are recorded under its
final name, where they are once the stage is complete. ``to_record`` and ``from_record`` are the one pair that
converts, used by the engine (stage.json, the plan, reused job.json) and the worker (job.json, error.json).

``report_inputs.json`` records its paths with the same marker (``probe.rooted``; its writer and reader:
probe.report.schema), and names the workdir relative to its own folder.

Damage (``stage_damage``): a complete stage whose stage.json or a job.json is unreadable, or whose result names a
path that is gone, and a stage whose final folder is missing while stages computed from it are complete. Repairing
a stage whose jobs are intact (only stage.json lost) rebuilds the same result; any other repair may change it, so
the complete stages computed from it are *stale*: ``probe pipeline status`` says so and exits 2, and ``pipeline run``
refuses (nothing is deleted unasked) until ``--force`` recomputes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import logging
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

from probe import rooted
from probe.errors import UserError

log = logging.getLogger(__name__)

STAGE_FILE = "stage.json"
JOB_FILE = "job.json"
ERROR_FILE = "error.json"
STARTED_FILE = "started.json"
LOCK_FILE = "pipeline.lock"
PLAN_FILE = "pipeline.json"
LEGS_FILE = "legs.json"
LEG_HEARTBEAT_S = 60.0  # how often a running leg rewrites its wall time (Leg)


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


# -- paths: absolute in memory, relative to the workdir on disk -----------------------------------------

WORKDIR_MARK = rooted.MARK


def to_record(obj: Any, workdir: str | os.PathLike, *, staged: tuple | None = None) -> Any:
    """``obj`` as the engine writes it: every string (value or dict key) that is the workdir or an absolute path
    under it becomes ``$WORKDIR`` or ``$WORKDIR/<relative path>`` (``probe.rooted.mark``); other strings are kept.
    ``staged``: (partial, final) folders of the stage being computed: a path under ``partial`` is recorded under
    ``final``. ValueError for a string that begins with the marker (it would be read back as a path)."""
    if staged is not None:
        obj = moved_paths(obj, staged[0], staged[1])

    def refuse(text: str) -> str:
        if text.startswith(WORKDIR_MARK):
            raise ValueError(f"a result string cannot begin with {WORKDIR_MARK} (the marker of recorded paths): {text!r}")
        return text

    return rooted.mark(rooted.map_strings(obj, refuse), workdir)


def from_record(obj: Any, workdir: str | os.PathLike, *, staged: tuple | None = None) -> Any:
    """The inverse of ``to_record`` for the workdir where the pipeline now runs: ``$WORKDIR/...`` strings become
    absolute paths under ``workdir``; ``staged``: (partial, final): paths under ``final`` are mapped back to
    ``partial`` (a job reused while its stage is still being computed)."""
    obj = rooted.unmark(obj, workdir)
    return moved_paths(obj, staged[1], staged[0]) if staged is not None else obj


def recorded_paths(record: Any, workdir: str | os.PathLike) -> list[Path]:
    """The absolute paths (in ``workdir``) of every marked string in ``record`` (as read from disk)."""
    found: list[str] = []

    def collect(text: str) -> str:
        if rooted.is_marked(text):
            found.append(text)
        return text

    rooted.map_strings(record, collect)
    return [Path(from_record(text, workdir)) for text in dict.fromkeys(found)]


def moved_paths(obj: Any, old: str | os.PathLike, new: str | os.PathLike) -> Any:
    """``obj`` with every path string (value or key) equal to or under ``old`` moved under ``new``."""
    old, new = str(old), str(new)

    def move(text: str) -> str:
        return new + text[len(old):] if text == old or text.startswith(old + os.sep) else text

    return rooted.map_strings(obj, move)


# -- stage folders ----------------------------------------------------------------------------------

def load_stage_result(workdir: Path, stage: str, digest: str, jobs: list[str] | None = None) -> dict | None:
    """The cached result of a finished stage (paths absolute in ``workdir``), or None when it must run.

    A finished stage's folder that is damaged (``stage_damage``: a truncated ``stage.json``, an unreadable
    ``job.json``, a result naming a path that is gone) is handed back to job-level resumption: the folder is renamed
    to its ``.partial`` name, so the stage runs again, reuses every intact job in it and writes a new record. (The
    engine refuses beforehand when later complete stages were computed from a stage whose repair may change it.)"""
    final = final_dir(workdir, stage, digest)
    if not final.exists():
        return None
    if stage_damage(workdir, stage, digest, jobs or []) is None:
        return from_record(read_json(final / STAGE_FILE)["result"], workdir)
    partial = partial_dir(workdir, stage, digest)
    if partial.exists():
        shutil.rmtree(partial)
    final.rename(partial)
    return None


def read_job_result(folder: Path, workdir: Path, staged: tuple | None = None) -> dict | None:
    """The result in job folder ``folder``'s ``job.json`` (paths absolute in ``workdir``; ``staged`` as in
    ``from_record``), or None when the job must run: no record, an unreadable one, or one naming a path that is
    gone (its files were lost)."""
    record = read_json(folder / JOB_FILE)
    if not isinstance(record, dict) or "result" not in record:
        return None
    paths = [str(path) for path in recorded_paths(record["result"], workdir)]
    if any(not Path(path).exists() for path in (moved_paths(paths, *staged[::-1]) if staged else paths)):
        return None
    return from_record(record["result"], workdir, staged=staged)


def stage_record_ok(folder: Path) -> bool:
    """Whether a finished stage's folder holds a readable record."""
    record = read_json(folder / STAGE_FILE)
    return isinstance(record, dict) and isinstance(record.get("result"), dict)


@dataclasses.dataclass
class Damage:
    """What is wrong with one stage of a plan (``stage_damage``, ``plan_damage``)."""

    stage: str
    problem: str                # for a person: what is unreadable or missing
    keeps_result: bool          # the next run rebuilds the same result (only stage.json was lost)
    stale: list[str] = dataclasses.field(default_factory=list)  # complete stages computed from it (not keeps_result)


def stage_damage(workdir: Path, stage: str, digest: str, jobs: list[str]) -> Damage | None:
    """What is wrong with the final folder of a stage, or None (intact, or no final folder): an unreadable
    ``stage.json`` or ``job.json`` (of one of ``jobs``, the plan's job keys), or a recorded path that is gone."""
    final = final_dir(workdir, stage, digest)
    if not final.exists():
        return None
    problems = []
    record_ok = stage_record_ok(final)
    if record_ok:
        missing = [p for p in recorded_paths(read_json(final / STAGE_FILE)["result"], workdir) if not p.exists()]
        if missing:
            problems.append(f"its result names {len(missing)} path(s) that are gone, e.g. {missing[0]}")
    for key in jobs:
        folder = job_dir(final, key)
        record = read_json(folder / JOB_FILE)
        if not isinstance(record, dict) or "result" not in record:
            problems.append(f"job {key}: {folder / JOB_FILE} is missing or unreadable")
            break
        missing = [p for p in recorded_paths(record["result"], workdir) if not p.exists()]
        if missing:
            problems.append(f"job {key} names {len(missing)} path(s) that are gone, e.g. {missing[0]}")
            break
    if problems:
        return Damage(stage, "; ".join(problems), keeps_result=False)
    if not record_ok:
        return Damage(stage, f"{final / STAGE_FILE} is unreadable (its {len(jobs)} job(s) are intact)",
                      keeps_result=True)
    return None


def plan_damage(workdir: Path, stages: list[dict]) -> list[Damage]:
    """Every damaged stage of a plan (``stages``: the plan's entries {"name", "digest", "inputs", "jobs"}), in plan
    order, each with the complete stages computed from it that its repair makes stale. Besides ``stage_damage``: a
    stage whose final folder is missing while stages computed from it are complete."""
    workdir = Path(workdir)
    complete = {s["name"] for s in stages if final_dir(workdir, s["name"], s["digest"]).exists()}
    upstream: dict[str, set[str]] = {}
    for s in stages:  # plan order: a stage's inputs come before it
        upstream[s["name"]] = {u for name in s.get("inputs", []) for u in (name, *upstream.get(name, ()))}
    out = []
    for s in stages:
        computed_from = [d["name"] for d in stages if s["name"] in upstream[d["name"]] and d["name"] in complete]
        if s["name"] in complete:
            damage = stage_damage(workdir, s["name"], s["digest"], s["jobs"])
        elif computed_from:
            damage = Damage(s["name"], f"its folder {final_dir(workdir, s['name'], s['digest'])} is missing, but "
                                       f"stages computed from it are complete", keeps_result=False)
        else:
            damage = None
        if damage is not None:
            damage.stale = [] if damage.keeps_result else computed_from
            out.append(damage)
    return out


def damage_advice(damages: list[Damage], plan: dict, workdir: Path) -> str:
    """One message for a person: what is damaged, what is stale, and what to run."""
    lines = [f"stage {d.stage!r} in {workdir} is damaged: {d.problem}"
             + (f"; stale (computed from it): {', '.join(d.stale)}" if d.stale else "") for d in damages]
    stale_from = next((d for d in damages if d.stale), None)
    if stale_from is not None:
        command = (f"probe pipeline run {plan.get('pipeline') or 'PIPELINE'} --preset {plan.get('preset') or 'PRESET'} "
                   f"--workdir {workdir} --force {stale_from.stage}")
        lines.append(f"to recompute {stale_from.stage!r} and every stage after it, run `{command}` (with the --set "
                     "options of the run that made it, if any), or restore the lost files")
    else:
        lines.append("no complete stage was computed from what was lost: the next `probe pipeline run` of this "
                     "workdir repairs it (it rebuilds the record from the intact jobs and reruns the others)")
    return "\n".join(lines)


# -- legs: the runs that computed a result ------------------------------------------------------------

class Leg:
    """One ``pipeline run`` in a workdir: a run interrupted (killed, a failed job) and run again has several legs,
    and its report gives their total wall time. A leg's record in ``LEGS_FILE`` holds its start, its wall time so far
    and the digests of the stages it computed (not the cached ones); the wall time is rewritten as jobs finish, so a
    killed leg keeps the time up to its last finished job or its last heartbeat (every ``heartbeat_s``: a batched job
    of three 30k-step restarts runs for hours, and a leg killed inside it recorded 97 s of a 2 h 52 min leg before the
    heartbeat). The caller holds the workdir lock; stages running side by side tick from their own threads (one write
    at a time)."""

    def __init__(self, workdir: Path, heartbeat_s: float = LEG_HEARTBEAT_S):
        self.path = Path(workdir) / LEGS_FILE
        self.t0 = time.time()
        self.index = len(read_legs(workdir))
        self.record = {"started": now(), "t0": self.t0, "pid": os.getpid(), "host": socket.gethostname(),
                       "wall_time_s": 0.0, "finished": False, "stages": []}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.tick()
        threading.Thread(target=self._beat, args=(heartbeat_s,), daemon=True, name="probe-leg-heartbeat").start()

    def _beat(self, every: float) -> None:
        while not self._stopped.wait(every):
            self.tick()

    def computing(self, digest: str) -> None:
        """This leg computes (or continues) the stage with ``digest``."""
        with self._lock:
            if digest not in self.record["stages"]:
                self.record["stages"].append(digest)
        self.tick()

    def tick(self, finished: bool = False) -> None:
        from probe.provenance import write_json_atomic

        with self._lock:
            if self.record["finished"]:  # a heartbeat after the last tick must not reopen the leg
                return
            if finished:
                self._stopped.set()
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
    """What the latest run's plan says and what the folders hold: per stage done/running/failed jobs, and what is
    damaged (``plan_damage``; ``"damage"``: [{"stage", "problem", "keeps_result", "stale"}], ``"advice"``: the
    message ``damage_advice`` gives, or None). A damaged stage's state is ``damaged``, a complete stage computed
    from one whose repair may change it ``stale`` (its ``"stale_from"`` names it)."""
    workdir = Path(workdir)
    plan = read_json(workdir / PLAN_FILE)
    if not isinstance(plan, dict) or not isinstance(plan.get("stages"), list):
        raise UserError(f"{workdir} holds no readable pipeline run ({PLAN_FILE} is missing or damaged); start one "
                        "with `probe pipeline run NAME --workdir DIR`")
    plan = from_record(plan, workdir)
    holder = lock_holder(workdir)
    damages = plan_damage(workdir, plan["stages"])
    damaged = {d.stage: d for d in damages}
    stale_from = {name: d.stage for d in damages for name in d.stale}
    stages = []
    for s in plan["stages"]:
        final, partial = final_dir(workdir, s["name"], s["digest"]), partial_dir(workdir, s["name"], s["digest"])
        entry = {"name": s["name"], "digest": s["digest"], "total": len(s["jobs"]), "done": 0, "running": [],
                 "failed": [], "interrupted": []}
        if final.exists():
            entry.update(state="complete", done=len(s["jobs"]))
        else:
            for key in s["jobs"]:
                folder = job_dir(partial, key)
                if (folder / JOB_FILE).exists():
                    entry["done"] += 1
                elif (folder / ERROR_FILE).exists():
                    err = from_record(read_json(folder / ERROR_FILE) or {}, workdir)
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
        if s["name"] in damaged:
            entry.update(state="damaged", problem=damaged[s["name"]].problem)
        elif s["name"] in stale_from:
            entry.update(state="stale", stale_from=stale_from[s["name"]])
        stages.append(entry)
    return {"workdir": str(workdir), "pipeline": plan.get("pipeline"), "preset": plan.get("preset"),
            "started": plan.get("started"), "running_pid": holder.get("pid") if holder else None, "stages": stages,
            "damage": [dataclasses.asdict(d) for d in damages],
            "advice": damage_advice(damages, plan, workdir) if damages else None}
