"""Pipeline definitions: TOML files with a base config and ``[presets.NAME]`` overrides.

The shipped definitions are package data, ``probe/pipeline/definitions/*.toml`` (``DEFINITIONS_DIR``), so
``pip install .`` finds them exactly as ``pip install -e .`` does; a user's own definition is passed by its path
(``probe pipeline run my.toml``) and may ``extends`` a shipped one.

Resolution: the definition this one ``extends`` (deep merge, recursively) <- its own tables <-
``presets.<preset>`` (deep merge) <- ``--set key=value`` (dotted keys into the resolved config).
A definition with ``base = true`` (definitions/modify.toml) is only extended, never run or listed; its
``must_set`` names the dotted keys every definition extending it has to set itself. A definition's ``shared_presets``
(e.g. ``["cpu"]`` in modify.toml) names presets it defines that reach a definition extending it only when that one
defines a ``[presets.NAME]`` of its own (merged over the shared one, the child's values winning); a child without one
neither lists nor accepts that preset (every other preset of a base reaches every child; a name it does not define
is a UserError). ``--set`` may only replace keys that exist, except inside the free-form tables named
in ``free_form`` (e.g. ``retrain.model_config``: per-model hyperparameter overrides, checked later by
the model itself); anything else is a UserError before any work starts.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

from probe.errors import UserError

# next to this module, inside the package: pyproject.toml ships it as package data
DEFINITIONS_DIR = Path(__file__).resolve().parent / "definitions"
RESERVED = ("presets", "free_form", "extends", "base", "must_set", "shared_presets")


def pipeline_files() -> dict[str, Path]:
    """Every shipped definition (``DEFINITIONS_DIR``), bases included."""
    if not DEFINITIONS_DIR.is_dir():
        return {}
    return {p.stem: p for p in sorted(DEFINITIONS_DIR.glob("*.toml"))}


def pipeline_names() -> list[str]:
    """The runnable shipped pipelines (not the bases)."""
    return [name for name, path in pipeline_files().items() if not _read(path).get("base")]


def load_definition(name: str) -> tuple[str, dict]:
    """(pipeline name, raw TOML dict with what it extends merged in) for a shipped pipeline's name or a path
    to a .toml file."""
    files = pipeline_files()
    if name in files:
        path = files[name]
    elif name.endswith(".toml") and Path(name).is_file():
        path = Path(name)
    elif name.endswith(".toml"):
        raise UserError(f"pipeline file {name} does not exist")
    else:
        known = ", ".join(pipeline_names()) or f"(none found in {DEFINITIONS_DIR})"
        raise UserError(f"unknown pipeline {name!r}; known pipelines: {known} (or pass a path to a .toml file)")
    raw = _read(path)
    if raw.get("base"):
        users = [n for n, p in files.items() if _read(p).get("extends") == path.stem]
        raise UserError(f"{path.stem!r} is the base of {', '.join(users) or 'other pipelines'}, not a pipeline; "
                        "run one of those")
    raw = _extended(raw, path)
    _shared_presets(raw, path)
    return raw.get("pipeline", {}).get("name", path.stem), raw


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: invalid TOML: {exc}") from None


def _extended(raw: dict, path: Path, chain: tuple = ()) -> dict:
    """``raw`` deep-merged onto the definition it ``extends`` (found next to ``path``, else a shipped one).
    The merge keeps the base's key order, so the resolved config reads as the base does. A preset the base
    names in ``shared_presets`` is kept only when ``raw`` defines a preset of that name too."""
    parent = raw.get("extends")
    if not parent:
        return raw
    if parent in chain:
        raise UserError(f"{path}: extends {parent!r}, which extends it back ({' -> '.join((*chain, parent))})")
    sibling = path.parent / f"{parent}.toml"
    parent_path = sibling if sibling.is_file() else pipeline_files().get(parent)
    if parent_path is None:
        raise UserError(f"{path}: extends {parent!r}, which is not a pipeline definition")
    base = _extended(_read(parent_path), parent_path, (*chain, path.stem))
    missing = [key for key in base.get("must_set", []) if not _has_dotted(raw, key)]
    if missing:
        raise UserError(f"{path}: extends {parent!r} but does not set {', '.join(missing)}")
    shared = _shared_presets(base, parent_path)
    inherited = {k: v for k, v in base.items() if k not in ("base", "must_set", "shared_presets")}
    if shared:
        own = raw.get("presets", {})
        inherited["presets"] = {n: p for n, p in base.get("presets", {}).items() if n not in shared or n in own}
    merged = deep_merge(inherited, {k: v for k, v in raw.items() if k != "extends"})
    return merged


def _shared_presets(raw: dict, path: Path) -> list[str]:
    """``raw``'s ``shared_presets``, checked: a list of names of presets it defines."""
    shared = raw.get("shared_presets", [])
    if not isinstance(shared, list) or not all(isinstance(n, str) for n in shared):
        raise UserError(f"{path}: shared_presets must be a list of preset names, got {shared!r}")
    presets = raw.get("presets", {})
    undefined = [n for n in shared if n not in presets]
    if undefined:
        raise UserError(f"{path}: shared_presets names {', '.join(map(repr, undefined))} but it defines no such "
                        f"[presets.NAME]; its presets: {', '.join(presets) or '(none)'}")
    return shared


def _has_dotted(raw: dict, key: str) -> bool:
    node = raw
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def deep_merge(base: dict, over: dict, *, where: str = "", strict: bool = False, free: tuple = ()) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        dotted = f"{where}.{key}" if where else key
        if strict and key not in out and not _is_free(where, free):
            raise UserError(f"unknown config key {dotted!r}")
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value, where=dotted, strict=strict, free=free)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _is_free(where: str, free: tuple) -> bool:
    return any(where == f or where.startswith(f + ".") for f in free)


def resolve(name: str, preset: str, overrides: dict[str, Any] | None = None) -> dict:
    """The resolved config of pipeline ``name`` under ``preset`` with dotted ``overrides`` applied."""
    pipeline_name, raw = load_definition(name)
    presets = raw.get("presets", {})
    if preset not in presets:
        raise UserError(f"pipeline {pipeline_name!r} has no preset {preset!r}; its presets: {', '.join(presets) or '(none)'}")
    free = tuple(raw.get("free_form", []))
    base = {k: v for k, v in raw.items() if k not in RESERVED}
    config = deep_merge(base, presets[preset], strict=True, free=free)
    for key, value in (overrides or {}).items():
        set_dotted(config, key, value, free)
    config.setdefault("pipeline", {})
    config["pipeline"]["name"] = pipeline_name
    config["pipeline"]["preset"] = preset
    return config


def set_dotted(config: dict, key: str, value: Any, free: tuple = ()) -> None:
    parts = key.split(".")
    node = config
    for i, part in enumerate(parts[:-1]):
        where = ".".join(parts[: i + 1])
        if part not in node:
            if _is_free(".".join(parts[:i]), free):
                node[part] = {}
            else:
                raise UserError(f"--set {key}: unknown config key {where!r}; `probe pipeline show` lists the keys")
        if not isinstance(node[part], dict):
            raise UserError(f"--set {key}: {where!r} is a value, not a table")
        node = node[part]
    leaf = parts[-1]
    parent = ".".join(parts[:-1])
    if leaf not in node and not _is_free(parent, free):
        raise UserError(f"--set {key}: unknown config key {key!r}; `probe pipeline show` lists the keys")
    old = node.get(leaf)
    if isinstance(old, dict) and not isinstance(value, dict):
        raise UserError(f"--set {key}: {key!r} is a table; set one of its keys ({', '.join(old) or 'none'})")
    if isinstance(old, list) and not isinstance(value, list):
        if isinstance(value, str):  # comma-separated lists, bracketed or not: --set retrain.models=[ae, pcl]
            text = value.strip()
            if text.startswith("[") and text.endswith("]"):  # not JSON (names unquoted), but a list all the same
                text = text[1:-1]
            value = [_scalar(v.strip()) for v in text.split(",") if v.strip()]
        else:
            value = [value]
    if isinstance(old, bool) and not isinstance(value, bool):
        raise UserError(f"--set {key}: expected true or false, got {value!r}")
    if isinstance(old, (int, float)) and not isinstance(old, bool) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise UserError(f"--set {key}: expected a number, got {value!r}")
    node[leaf] = value


def _scalar(text: str):
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> value (leaves), for ``show``."""
    out = {}
    for key, value in config.items():
        dotted = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted))
        else:
            out[dotted] = value
    return out
