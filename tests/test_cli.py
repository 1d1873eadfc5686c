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


HEAVY_MODULES = ("torch", "scipy", "sklearn", "zarr", "dask", "distributed")


def test_read_only_pipeline_commands_import_no_heavy_module(tmp_path):
    # `pipeline list`, `show` and `status` answer in about a tenth of a second (benchmarks/cli_startup.py): none
    # imports torch, scipy, sklearn, zarr or dask; `show --check` validates the models too, importing torch
    import json

    workdir = tmp_path / "wd"
    workdir.mkdir()
    (workdir / "pipeline.json").write_text(json.dumps({"pipeline": "modify-shapes3d", "preset": "smoke", "started": "t",
                                                       "stages": [{"name": "store", "digest": "d", "jobs": ["store"]}]}))
    commands = {"list": ["pipeline", "list"], "status": ["pipeline", "status", str(workdir)],
                "show": ["pipeline", "show", "modify-shapes3d", "--preset", "quick"],
                "show --check": ["pipeline", "show", "modify-shapes3d", "--preset", "quick", "--check"]}
    for label, argv in commands.items():
        code = (f"import sys; from probe.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit as e:\n"
                "    print('EXIT', e.code)\n"
                f"print('HEAVY', [m for m in {HEAVY_MODULES!r} if m in sys.modules])")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert "EXIT 0" in out, (label, out)
        heavy = out.split("HEAVY ")[1].strip()
        assert (heavy == "[]") == (label != "show --check"), (label, heavy)
    assert "modify-shapes3d" in out and "models' hyperparameters" not in out  # --check: nothing left unchecked


def test_show_checks_the_models_only_with_check(capsys):
    from conftest import run_probe

    argv = ["pipeline", "show", "modify-shapes3d", "--preset", "quick", "--set", "retrain.model_config.beta-vae.beta=abc"]
    code, out, err = run_probe(argv, capsys)
    assert code == 0 and "checked by `run` before any work (or here with --check)" in out
    code, out, err = run_probe(argv + ["--check"], capsys)
    assert code == 2 and "hyperparameter 'beta' must be a number" in err
    code, out, err = run_probe(argv[:5] + ["--set", "pipeline.keep_checkpoints=some"], capsys)
    assert code == 2 and "pipeline.keep_checkpoints must be one of 'all', 'final-weights', got 'some'" in err
