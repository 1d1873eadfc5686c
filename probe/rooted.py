"""Paths recorded relative to a root folder, so that a folder of results can be copied or moved and still name its
own files: the one convention for every JSON file that records paths (the pipeline's stage.json/job.json,
probe.pipeline.workdir; ``report_inputs.json``, probe.report.schema).

A path under the root is written ``$ROOT``-marked: ``MARK`` for the root itself, ``MARK/<relative path>``
(``/``-separated) below it, in values and in dict keys alike. The marker makes reading unambiguous: only strings that
begin with it are paths to make absolute again; any other string (a path outside the root such as an official dataset
file, a note, a metric name) is kept as it is.
"""

from __future__ import annotations

import os
from typing import Any, Callable

MARK = "$WORKDIR"


def is_marked(text: str) -> bool:
    return text == MARK or text.startswith(MARK + "/")


def mark(obj: Any, root: str | os.PathLike) -> Any:
    """``obj`` with every string that is ``root`` or an absolute path under it written relative to it (marked)."""
    root = str(root)

    def relative(text: str) -> str:
        if text == root:
            return MARK
        if text.startswith(root + os.sep):
            return MARK + "/" + text[len(root) + 1:].replace(os.sep, "/")
        return text

    return map_strings(obj, relative)


def unmark(obj: Any, root: str | os.PathLike) -> Any:
    """The inverse of ``mark`` for where the root now is: marked strings become absolute paths under ``root``."""
    root = str(root)

    def absolute(text: str) -> str:
        if text == MARK:
            return root
        if text.startswith(MARK + "/"):
            return root + os.sep + text[len(MARK) + 1:].replace("/", os.sep)
        return text

    return map_strings(obj, absolute)


def map_strings(obj: Any, fn: Callable[[str], str]) -> Any:
    """``obj`` with ``fn`` applied to every string, dict keys included (a ``Path`` counts as its string)."""
    if isinstance(obj, os.PathLike):
        obj = os.fspath(obj)
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {fn(k) if isinstance(k, str) else k: map_strings(v, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_strings(v, fn) for v in obj)
    return obj
