"""The one "package.module:attr" loader: the CLI's lazy subcommands and the model registry (built-ins,
``module:Class`` plug-ins) name objects this way."""

from __future__ import annotations

import importlib
import importlib.util

from probe.errors import UserError


def load_attr(target: str, what: str | None = None):
    """The object named by ``"package.module:attr"``.

    With ``what`` (e.g. ``"plug-in model 'x'"``) the target comes from the user, and every failure is a
    UserError naming ``what``: a malformed target, the module's own import error, a missing attribute.
    Without it the target is probe's own, and failures propagate as the bugs they are."""
    module_name, _, attr = target.partition(":")
    if what is None:
        return getattr(importlib.import_module(module_name), attr)
    if not module_name or not attr:
        raise UserError(f"{what}: expected 'package.module:Class', got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the plug-in's own import error: name it, no traceback
        raise UserError(f"{what}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UserError(f"{what}: module {module_name!r} has no attribute {attr!r}") from None


def importable(target: str) -> bool:
    """Whether the module of ``"package.module:attr"`` can be found (without importing it)."""
    try:
        return importlib.util.find_spec(target.partition(":")[0]) is not None
    except ModuleNotFoundError:  # a missing parent package
        return False


def qualified_name(obj) -> str:
    """``"package.module:qualname"`` of a function or class (the form ``load_attr`` reads), for logs."""
    return f"{obj.__module__}:{obj.__qualname__}"
