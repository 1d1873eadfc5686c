"""The ``probe`` command. Subcommands live next to the code they drive and are imported lazily,
so ``probe --help`` stays fast and one broken area does not break the others.

Exit codes: 0 success, 2 user error (one message on stderr, no traceback), 1 bug.
"""

from __future__ import annotations

import sys

import click

from probe import __version__
from probe.errors import UserError
from probe.imports import importable, load_attr

# command name -> "module:attribute" of a click command or group
SUBCOMMANDS = {
    "datasets": "probe.data.cli:datasets",
    "models": "probe.train.cli:models",
    "train": "probe.train.cli:train",
    "evaluate": "probe.perturb.evaluate_cli:evaluate",
    "perturb": "probe.perturb.cli:perturb",
    "pipeline": "probe.pipeline.cli:pipeline",
    "report": "probe.report.cli:report",
    "audit": "probe.pipeline.audit_cli:audit",
    "pca": "probe.analysis.cli:pca",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return [name for name in SUBCOMMANDS if self._spec_exists(name)]

    @staticmethod
    def _spec_exists(name: str) -> bool:
        return importable(SUBCOMMANDS[name])

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS or not self._spec_exists(name):
            return None
        return load_attr(SUBCOMMANDS[name])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="probe")
def cli():
    """probe: test whether disentanglement methods succeed for the right reason.

    Typical use: `probe pipeline run modify-dsprites --preset quick --workdir runs/q`.
    """


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
    sys.exit(0)


def parse_set_options(items) -> dict:
    """``--set key=value`` pairs -> dict; values parsed as JSON when possible (numbers, bools, lists)."""
    import json

    out = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UserError(f"--set expects key=value, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[key.strip()] = value
    return out


if __name__ == "__main__":  # pragma: no cover
    main()
