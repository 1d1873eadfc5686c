"""The ``probe`` command. Subcommands live next to the code they drive and are imported lazily,
so ``probe --help`` stays fast and one broken area does not break the others.

Exit codes: 0 success, 2 user error (one message on stderr, no traceback), 1 bug.
"""

from __future__ import annotations

import errno
import sys

import click

from probe import __version__
from probe.errors import UserError
from probe.imports import importable, load_attr

# command name -> ("module:attribute" of a click command or group, its one-line help). The help line is kept here so
# that `probe --help` lists the commands without importing them (their modules import torch, scipy and sklearn:
# 2.5 s); tests/test_cli.py checks that every entry loads a click command and is listed.
SUBCOMMANDS = {
    "datasets": ("probe.data.cli:datasets", "Official datasets, procedural generators and Zarr stores."),
    "models": ("probe.train.cli:models", "Objectives available to `probe train` (built-ins and plug-ins)."),
    "train": ("probe.train.cli:train", "Train a model on a store."),
    "evaluate": ("probe.metrics.cli:evaluate", "Compute disentanglement metrics of a trained run."),
    "perturb": ("probe.perturb.cli:perturb", "Build the modified and noise datasets of Zietlow et al. 2021."),
    "pipeline": ("probe.pipeline.cli:pipeline", "Staged pipelines: cached, resumable, run on dask."),
    "report": ("probe.report.cli:report", "Markdown and HTML report of a pipeline workdir."),
    "audit": ("probe.pipeline.audit_cli:audit", "Audit a new method: does it rely on local variance structure?"),
    "pca": ("probe.analysis.cli:pca", "Linear VAE vs PCA (Theorem 1 of Zietlow et al. 2021)."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        # every subcommand ships with the package; checking that its module exists would import the parent
        # packages (probe.data imports zarr and dask), which is what `probe --help` must not do
        return list(SUBCOMMANDS)

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS or not importable(SUBCOMMANDS[name][0]):
            return None
        return load_attr(SUBCOMMANDS[name][0])

    def format_commands(self, ctx, formatter):
        # click's own version imports every command for its help line; these come from SUBCOMMANDS instead
        rows = [(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="probe")
def cli():
    """probe: test whether disentanglement methods succeed for the right reason.

    Typical use: `probe pipeline run modify-dsprites --preset quick --workdir runs/q`.
    """


USER_OS_ERRORS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}


def main(argv=None) -> None:
    try:
        cli.main(args=argv, prog_name="probe", standalone_mode=False)
    except UserError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except OSError as exc:
        # where probe may not write (a read-only --workdir or --out, a full disk): the user's environment, not
        # a bug, so one message naming the path and exit 2; any other OSError is a bug and keeps its traceback
        if exc.errno not in USER_OS_ERRORS:
            raise
        where = f" {exc.filename}" if exc.filename else ""
        click.echo(f"error: cannot write{where}: {exc.strerror}; choose a folder you can write to", err=True)
        sys.exit(2)
    sys.exit(0)


def parse_set_options(items, flag: str = "--set") -> dict:
    """``--set key=value`` pairs (or another ``flag``'s) -> dict; values parsed as JSON when possible (numbers, bools,
    lists)."""
    import json

    out = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UserError(f"{flag} expects key=value, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[key.strip()] = value
    return out


if __name__ == "__main__":  # pragma: no cover
    main()
