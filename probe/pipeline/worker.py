"""What runs on a worker: the job wrapper (log file, job.json / error.json) and the context a job gets.

A job's spec (built by probe.pipeline.engine) names its workdir and its stage's (partial, final) folders:
job.json and error.json record paths relative to the workdir (probe.pipeline.workdir.to_record), paths in
the stage's partial folder under its final name."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from probe.imports import qualified_name
from probe.pipeline.workdir import ERROR_FILE, JOB_FILE, STARTED_FILE, now, to_record
from probe.provenance import write_json_atomic


@dataclasses.dataclass
class JobContext:
    """What a job function gets besides its kwargs."""

    job_dir: Path
    inputs: dict            # input stage name -> that stage's result
    stage: str
    key: str
    device: str | None = None


def _worker_device() -> str | None:
    """One GPU per LocalCluster worker: worker ``i`` uses ``cuda:i % n``; None lets the trainer choose."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    n = torch.cuda.device_count()
    if n <= 1:
        return None
    try:
        from distributed import get_worker

        name = get_worker().name
        return f"cuda:{int(name) % n}"
    except (ValueError, TypeError):
        return None
    except Exception:
        return None


def _prepare(spec: dict) -> JobContext:
    """The job's folder (``started.json``, no stale ``error.json``), its log folder and its context."""
    job_dir = Path(spec["job_dir"])
    job_dir.mkdir(parents=True, exist_ok=True)
    Path(spec["log"]).parent.mkdir(parents=True, exist_ok=True)
    (job_dir / ERROR_FILE).unlink(missing_ok=True)
    write_json_atomic(job_dir / STARTED_FILE, {"pid": os.getpid(), "host": socket.gethostname(), "started": now()})
    return JobContext(job_dir=job_dir, inputs=spec["inputs"], stage=spec["stage"], key=spec["key"],
                      device=spec.get("device") or _worker_device())


def _set_torch_threads(spec: dict) -> None:
    if spec.get("torch_threads"):
        try:
            import torch

            torch.set_num_threads(int(spec["torch_threads"]))
        except ImportError:  # pragma: no cover
            pass


class _ThreadRoutedStream:
    """Stands in for sys.stdout / sys.stderr while jobs run: each thread that runs a job writes into its own job's
    log, every other thread into the stream this replaced. A worker process can run several jobs at once in threads
    (a `dask worker` with nthreads > 1, the engine's tests), and contextlib.redirect_stdout swaps a process-wide
    name: two overlapping jobs would write into each other's logs and the later one would restore the earlier
    one's (closed) log file as sys.stderr."""

    def __init__(self, original):
        self.original = original
        self.routes: dict[int, object] = {}  # thread ident -> that thread's job log

    def _target(self):
        return self.routes.get(threading.get_ident(), self.original)

    def write(self, text):
        return self._target().write(text)

    def flush(self):
        return self._target().flush()

    def __getattr__(self, name):  # isatty, fileno, encoding, ... of the stream this thread writes to
        return getattr(self._target(), name)


_ROUTING_LOCK = threading.Lock()
_ROUTING: dict = {"jobs": 0, "streams": None}


@contextlib.contextmanager
def _logging_to(logf):
    """This thread's stdout, stderr and logging records into the job's log file; other threads' output is left
    where it was going."""
    thread = threading.get_ident()
    with _ROUTING_LOCK:
        if _ROUTING["jobs"] == 0:
            _ROUTING["streams"] = (_ThreadRoutedStream(sys.stdout), _ThreadRoutedStream(sys.stderr))
            sys.stdout, sys.stderr = _ROUTING["streams"]
        _ROUTING["jobs"] += 1
        streams = _ROUTING["streams"]
        for stream in streams:
            stream.routes[thread] = logf
    root = logging.getLogger()
    handler = logging.StreamHandler(logf)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(lambda record: record.thread == thread)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        with _ROUTING_LOCK:
            for stream in streams:
                stream.routes.pop(thread, None)
            _ROUTING["jobs"] -= 1
            if _ROUTING["jobs"] == 0:
                # put back what was there, unless someone else has replaced our streams meanwhile
                if sys.stdout is streams[0]:
                    sys.stdout = streams[0].original
                if sys.stderr is streams[1]:
                    sys.stderr = streams[1].original
                _ROUTING["streams"] = None


def _record(spec: dict, obj: dict) -> dict:
    return to_record(obj, spec["workdir"], staged=tuple(spec["staged"]))


def _write_error(spec: dict, exc: BaseException, tb: str) -> None:
    write_json_atomic(Path(spec["job_dir"]) / ERROR_FILE, _record(spec, {
        "error": f"{type(exc).__name__}: {exc}", "traceback": tb, "log": spec["log"], "time": now()}))


def _write_done(spec: dict, result: dict, elapsed: float) -> None:
    write_json_atomic(Path(spec["job_dir"]) / JOB_FILE,
                      {"result": _record(spec, result), "wall_time_s": elapsed, "finished": now()})


def run_task(spec: dict):
    """What an executor runs: one job (``run_job``) or a batched group of jobs (``run_job_group``)."""
    return run_job_group(spec) if "members" in spec else run_job(spec)


def run_job(spec: dict) -> dict:
    """Run one job: log to its log file, write ``job.json`` atomically on success, ``error.json`` on
    failure (and re-raise). ``spec`` is plain data plus the job's function, a module-level function
    that pickles by reference, so it goes to any worker."""
    ctx = _prepare(spec)
    _set_torch_threads(spec)
    with open(spec["log"], "a", buffering=1) as logf:
        logf.write(f"--- {now()} {spec['stage']}/{spec['key']} pid {os.getpid()} ({qualified_name(spec['fn'])})\n")
        start = time.time()
        try:
            with _logging_to(logf):
                result = spec["fn"](ctx, **spec["kwargs"])
            if result is None:
                result = {}
            json.dumps(result, default=str)  # fail here, with the job's name, if not JSON-able
            _record(spec, result)  # ... or if a string poses as a recorded path
        except BaseException as exc:
            tb = traceback.format_exc()
            logf.write(tb)
            _write_error(spec, exc, tb)
            raise
        elapsed = time.time() - start
        logf.write(f"--- done in {elapsed:.1f}s\n")
    _write_done(spec, result, elapsed)
    return result


def run_job_group(spec: dict) -> dict:
    """Run jobs that differ only in seed as one batched job: ``spec["fn"](contexts, kwargs list)`` returns one
    result or exception per member. Every member gets its own ``job.json`` or ``error.json``, exactly as if it
    ran alone; the group logs into the first member's log and the others' logs point there. Returns
    {job key: result or exception}."""
    members = spec["members"]
    contexts = [_prepare(m) for m in members]
    _set_torch_threads(members[0])
    lead = members[0]
    keys = ", ".join(m["key"] for m in members)
    for m in members[1:]:
        with open(m["log"], "a", buffering=1) as other:
            other.write(f"--- {now()} {m['stage']}/{m['key']}: trained in a batched job of {len(members)} "
                        f"({keys}); its log: {lead['log']}\n")
    with open(lead["log"], "a", buffering=1) as logf:
        logf.write(f"--- {now()} {lead['stage']}/{{{keys}}} batched, pid {os.getpid()} ({qualified_name(spec['fn'])})\n")
        start = time.time()
        try:
            with _logging_to(logf):
                outcomes = spec["fn"](contexts, [m["kwargs"] for m in members])
            for m, outcome in zip(members, outcomes):
                if not isinstance(outcome, BaseException):
                    json.dumps(outcome, default=str)
                    _record(m, outcome or {})
        except BaseException as exc:
            tb = traceback.format_exc()
            logf.write(tb)
            for m in members:
                _write_error(m, exc, tb)
            raise
        elapsed = time.time() - start
        logf.write(f"--- done in {elapsed:.1f}s\n")
    results = {}
    for m, outcome in zip(members, outcomes):
        if isinstance(outcome, BaseException):
            _write_error(m, outcome, f"{type(outcome).__name__}: {outcome}\n")
        else:
            _write_done(m, outcome or {}, elapsed)
        results[m["key"]] = outcome if isinstance(outcome, BaseException) else (outcome or {})
    return results
