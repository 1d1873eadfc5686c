"""The root command: every subcommand loads, and `probe --help` lists them without importing them."""

from __future__ import annotations

import subprocess
import sys

import click

from probe.cli import SUBCOMMANDS
from probe.imports import load_attr


def test_every_subcommand_loads_a_click_command():
    for name, (target, summary) in SUBCOMMANDS.items():
        command = load_attr(target)
        assert isinstance(command, click.Command), name
        assert summary and len(summary) <= 72, name  # one line in `probe --help`


def test_help_lists_every_command_without_importing_them():
    code = ("import sys; from probe.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'scipy', 'sklearn', 'zarr', 'dask') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for name, (_, summary) in SUBCOMMANDS.items():
        assert f"{name}  " in out and summary in out
    assert "HEAVY []" in out


def test_read_only_workdir_exits_2_with_one_message(tmp_path, capsys, monkeypatch):
    # a read-only folder, emulated so that it holds for root too (root ignores permission bits)
    import errno
    import pathlib

    from conftest import run_probe

    readonly = tmp_path / "readonly"
    readonly.mkdir()
    real_mkdir = pathlib.Path.mkdir

    def mkdir(self, *args, **kwargs):
        if str(self).startswith(str(readonly)):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)
    code, _, err = run_probe(["pipeline", "run", "modify-dsprites", "--preset", "smoke", "--workdir",
                              str(readonly / "wd")], capsys)
    assert code == 2 and f"cannot write {readonly / 'wd'}: Permission denied" in err and "Traceback" not in err
