"""What runs on a worker: the job wrapper (log file, job.json / error.json) and the context a job gets."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import socket
import time
import traceback
from pathlib import Path

from probe.imports import qualified_name
from probe.pipeline.workdir import ERROR_FILE, JOB_FILE, STARTED_FILE, now
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


def run_job(spec: dict) -> dict:
    """Run one job: log to its log file, write ``job.json`` atomically on success, ``error.json`` on
    failure (and re-raise). ``spec`` is plain data plus the job's function, a module-level function
    that pickles by reference, so it goes to any worker."""
    job_dir = Path(spec["job_dir"])
    job_dir.mkdir(parents=True, exist_ok=True)
    log_path = Path(spec["log"])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    (job_dir / ERROR_FILE).unlink(missing_ok=True)
    write_json_atomic(job_dir / STARTED_FILE, {"pid": os.getpid(), "host": socket.gethostname(), "started": now()})
    if spec.get("torch_threads"):
        try:
            import torch

            torch.set_num_threads(int(spec["torch_threads"]))
        except ImportError:  # pragma: no cover
            pass
    ctx = JobContext(job_dir=job_dir, inputs=spec["inputs"], stage=spec["stage"], key=spec["key"],
                     device=spec.get("device") or _worker_device())
    handler = None
    with open(log_path, "a", buffering=1) as logf:
        logf.write(f"--- {now()} {spec['stage']}/{spec['key']} pid {os.getpid()} ({qualified_name(spec['fn'])})\n")
        root = logging.getLogger()
        handler = logging.StreamHandler(logf)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        start = time.time()
        try:
            with contextlib.redirect_stdout(logf), contextlib.redirect_stderr(logf):
                result = spec["fn"](ctx, **spec["kwargs"])
            if result is None:
                result = {}
            json.dumps(result, default=str)  # fail here, with the job's name, if not JSON-able
        except BaseException as exc:
            tb = traceback.format_exc()
            logf.write(tb)
            write_json_atomic(job_dir / ERROR_FILE, {"error": f"{type(exc).__name__}: {exc}", "traceback": tb,
                                                     "log": str(log_path), "time": now()})
            raise
        finally:
            root.removeHandler(handler)
        elapsed = time.time() - start
        logf.write(f"--- done in {elapsed:.1f}s\n")
    write_json_atomic(job_dir / JOB_FILE, {"result": result, "wall_time_s": elapsed, "finished": now()})
    return result
