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
