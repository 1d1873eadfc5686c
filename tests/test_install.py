"""A non-editable install ships the pipeline definitions (issue 25 item 3): build the wheel, install it into a fresh
venv and run `probe pipeline list` / `show` from a folder outside the repository."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _wheel_build_missing() -> str | None:
    """Why this interpreter cannot build probe's wheel offline and install it, or None. setuptools builds wheels
    itself from 70.1 on; older ones need the `wheel` package. (Versions from the metadata: importing setuptools
    here would patch distutils in the test process.)"""
    def version(name):
        try:
            return tuple(int(part) for part in metadata.version(name).split(".")[:2])
        except metadata.PackageNotFoundError:
            return None

    setuptools = version("setuptools")
    if setuptools is None:
        return "setuptools is not installed: the wheel cannot be built without build isolation (offline)"
    if setuptools < (70, 1) and version("wheel") is None:
        return f"setuptools {metadata.version('setuptools')} needs the `wheel` package to build a wheel, and it is not installed"
    if (version("pip") or (0, 0)) < (22, 3):
        return "pip before 22.3 has no --python option to install into the fresh venv"
    return None


def _run(argv, **kwargs) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    assert out.returncode == 0, (argv, out.stdout[-2000:], out.stderr[-2000:])
    return out


@pytest.mark.slow
@pytest.mark.skipif(_wheel_build_missing() is not None, reason=str(_wheel_build_missing()))
def test_the_wheel_ships_the_pipelines_and_finds_them_outside_the_repository(tmp_path):
    # build from a copy of what the wheel is made of, so that no build/ folder in the checkout (stale files from
    # an earlier build) can leak into it and nothing is written into the repository
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "probe", source / "probe", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(tmp_path / "dist"),
          str(source)])
    wheel, = (tmp_path / "dist").glob("probe-*.whl")

    # a fresh venv that sees this environment's packages (torch, numpy, click, ...) but not its probe: the
    # site-packages folders are listed in a .pth file, so their own .pth files (an editable install's finder) do not run
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    venv_site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    outer = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()]
    (venv_site / "_outer_site_packages.pth").write_text("\n".join(outer) + "\n")
    _run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)])

    elsewhere = tmp_path / "elsewhere"  # no pipeline definitions, no repository around it
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    probe = str(venv / "bin" / "probe")
    where = _run([str(python), "-c", "import probe; print(probe.__file__)"], cwd=elsewhere, env=env).stdout.strip()
    assert Path(where).is_relative_to(venv_site), where  # the wheel's probe, not the checkout's

    listing = _run([probe, "pipeline", "list"], cwd=elsewhere, env=env).stdout
    lines = {line.split()[0]: line for line in listing.splitlines() if line.strip()}
    assert {"modify-shapes3d", "modify-dsprites", "modify-control", "linear-pca", "audit"} <= set(lines)
    assert "modify" not in lines  # the base is shipped but is not a pipeline
    assert "smoke" in lines["modify-shapes3d"] and "quick" in lines["modify-shapes3d"]
    assert f"definitions: {venv_site / 'probe' / 'pipeline' / 'definitions'} " in listing

    argv = ["pipeline", "show", "modify-shapes3d", "--preset", "smoke"]
    shown = _run([probe, *argv], cwd=elsewhere, env=env).stdout
    assert shown.startswith("pipeline modify-shapes3d  preset smoke")
    assert "pipeline.dataset = 'shapes3d'" in shown and "store.resolution = 16" in shown
    # the installed definitions resolve to exactly what the checkout's do
    in_tree = _run([sys.executable, "-m", "probe.cli", *argv], cwd=REPO).stdout
    assert shown == in_tree
