"""Provenance and atomic writes shared by every stage.

Every run, stage and store records its config, seed, code version and input digests; everything is
written to a temporary sibling path and renamed into place only when complete, so a crash or a bad
input never leaves a partial result at the final path.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any, Iterator

from probe import __version__
from probe.errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: the input of every config digest."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def digest_json(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def sha256_file(path: str | os.PathLike, chunk_bytes: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk_bytes), b""):
            h.update(block)
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """sha256 over the package's Python sources: changes whenever the code that computes results does."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        h.update(str(path.relative_to(PACKAGE_DIR)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(PACKAGE_DIR), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5,
        )
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def code_version() -> dict:
    """What produced a result: package version, git commit (if any) and a digest of the sources."""
    return {"probe_version": __version__, "git_commit": git_commit(), "source_digest": source_digest()}


# Switches that change which CPU kernels torch runs besides ATen's capability: oneDNN's convolutions and MKL's GEMMs
# choose their own code path, and the CPU's maker moves them too (the same seed trains another model on an Intel and
# an AMD AVX512 host; ONEDNN_MAX_CPU_ISA=AVX2 on an AMD AVX512 host repeats an AMD AVX2 host's run: presets.md).
KERNEL_SWITCHES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
                   "MKL_CBWR")


@functools.lru_cache(maxsize=1)
def cpu_model() -> str | None:
    """The CPU's model name as the kernel reports it (Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def environment() -> dict:
    import numpy

    env = {"python": platform.python_version(), "platform": platform.platform(),
           "numpy": numpy.__version__, "cpu": cpu_model()}
    switches = {name: os.environ[name] for name in KERNEL_SWITCHES if name in os.environ}
    if switches:
        env["kernel_switches"] = switches
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        # the vector instruction set torch's CPU kernels run (AVX2, AVX512, ...): one training step rounds
        # differently under another, so a CPU run repeats bit for bit only where this matches (docs/notes/train.md)
        env["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass
    try:
        import sklearn

        env["sklearn"] = sklearn.__version__
    except ImportError:  # pragma: no cover
        pass
    return env


def _tmp_sibling(final: Path) -> Path:
    return final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling of ``final``; rename it to ``final`` when the block succeeds.

    On any exception the temporary path is removed and ``final`` is untouched. Refuses (UserError)
    to replace an existing ``final`` unless ``overwrite``.
    """
    final = Path(final)
    if final.exists() and not overwrite:
        raise UserError(f"output path {final} already exists; remove it or choose another path")
    if not final.parent.exists():
        raise UserError(f"the folder {final.parent} does not exist; create it first")
    tmp = _tmp_sibling(final)
    try:
        yield tmp
        if overwrite and final.exists():
            old = _tmp_sibling(final)
            os.replace(final, old)
            os.replace(tmp, final)
            _remove(old)
        else:
            os.replace(tmp, final)
    except BaseException:
        _remove(tmp)
        raise


def write_json_atomic(path: str | os.PathLike, obj: Any, *, overwrite: bool = True) -> None:
    with atomic_path(path, overwrite=overwrite) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")
