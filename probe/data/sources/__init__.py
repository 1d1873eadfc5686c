"""Official datasets: cards (``DATASETS``), download (:func:`fetch`) and conversion to stores (:func:`build`).

    fetch("shapes3d")                                  # -> ~/.cache/probe/datasets/shapes3d/3dshapes.h5
    build("shapes3d", None, "shapes3d.zarr")           # reads the fetched file, writes the store

Files live in ``$PROBE_DATA_DIR/<name>/`` (default ``~/.cache/probe/datasets``).
"""

from __future__ import annotations

import hashlib
import os
import queue
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from probe.data.store import Store, create_store, open_store
from probe.errors import UserError

from .cards import CARDS
from .importers import READERS, Source

DATASETS: dict[str, dict] = CARDS


def card(name: str) -> dict:
    if name not in DATASETS:
        raise UserError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    return DATASETS[name]


def data_dir(name: str | None = None) -> Path:
    root = Path(os.environ.get("PROBE_DATA_DIR", Path.home() / ".cache" / "probe" / "datasets"))
    return root / name if name else root


def default_source(name: str) -> Path:
    return data_dir(name) / card(name)["files"][0]["name"]


# -- fetch ---------------------------------------------------------------------------------------------------
def fetch(name: str, dest_dir: str | os.PathLike | None = None, *, progress: bool = True, timeout: float = 30.0) -> list[Path]:
    """Download the card's files with resume (HTTP Range) and check their digests.

    Offline, on an HTTP error or on a digest mismatch: UserError naming the URL and where to put the file by hand.
    """
    from tqdm import tqdm

    c = card(name)
    dest = Path(dest_dir) if dest_dir else data_dir(name)
    dest.mkdir(parents=True, exist_ok=True)
    done = []
    for entry in c["files"]:
        final = dest / entry["name"]
        by_hand = (f"download {entry['url']} by hand and put it at {final}" if entry.get("url")
                   else f"put {entry['name']} at {final}")
        if not final.exists():
            part = final.with_name(final.name + ".part")
            have = part.stat().st_size if part.exists() else 0
            request = urllib.request.Request(entry["url"], headers={"Range": f"bytes={have}-"} if have else {})
            try:
                with urllib.request.urlopen(request, timeout=timeout) as resp:
                    if have and resp.status != 206:  # server ignored the range: start over
                        have = 0
                    total = resp.headers.get("Content-Length")
                    total = int(total) + have if total else None
                    with open(part, "ab" if have else "wb") as f, tqdm(total=total, initial=have, unit="B", unit_scale=True,
                                                                       desc=entry["name"], disable=not progress) as bar:
                        for chunk in iter(lambda: resp.read(1 << 20), b""):
                            f.write(chunk)
                            bar.update(len(chunk))
            except (urllib.error.URLError, OSError, ValueError) as exc:
                raise UserError(f"cannot download {entry['url']} ({exc}); {by_hand}, then run "
                                f"`probe datasets fetch {name}` again to check it") from None
            os.replace(part, final)
        digests = check_file(final, entry)
        if entry.get("sha256") is None:
            print(f"{final}: sha256 {digests['sha256']} (no published sha256 to compare; record it in the card)",
                  file=sys.stderr)
        done.append(final)
    return done


def check_file(path: Path, entry: dict) -> dict:
    """sha256 (and md5 when the card has one) of ``path``; UserError on a mismatch with the card."""
    sha, md5 = hashlib.sha256(), hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            sha.update(block)
            md5.update(block)
    got = {"sha256": sha.hexdigest(), "md5": md5.hexdigest()}
    for kind in ("sha256", "md5"):
        want = entry.get(kind)
        if want and want != got[kind]:
            raise UserError(f"{path}: {kind} {got[kind]} does not match the published {want} for {entry['url']}; "
                            f"the download is corrupt or truncated: delete it and fetch again, or download it by hand "
                            f"and put it at {path}")
    return got


# -- build ---------------------------------------------------------------------------------------------------
def _prefetch(it: Iterator, depth: int = 2) -> Iterator:
    """Run ``it`` in a background thread (decompression overlaps hashing and writing, which release the GIL)."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = object()
    cancel = threading.Event()

    def work():
        try:
            for item in it:
                if cancel.is_set():
                    return
                q.put((True, item))
            q.put((True, stop))
        except BaseException as exc:  # re-raised in the consumer
            q.put((False, exc))

    t = threading.Thread(target=work, daemon=True)
    t.start()
    try:
        while True:
            ok, item = q.get()
            if not ok:
                raise item
            if item is stop:
                return
            yield item
    finally:
        cancel.set()
        while t.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.05)


def read_source(name: str, source: str | os.PathLike | None = None, factor_sizes: Sequence[int] | None = None) -> Source:
    c = card(name)
    path = Path(source) if source is not None else default_source(name)
    if not path.exists():
        raise UserError(f"{path} not found; run `probe datasets fetch {name}` or pass --source FILE "
                        f"(official file: {c['files'][0]['name']} from {c['files'][0]['url']})")
    return READERS[name](path, c, factor_sizes)


def build(name: str, source: str | os.PathLike | None, out: str | os.PathLike, progress: bool = True, *,
          factor_sizes: Sequence[int] | None = None, require_full: bool = False) -> Store:
    """Convert an official file (or a reduced file in the same layout) into a store at ``out``."""
    c = card(name)
    out = Path(out)
    if out.exists():
        raise UserError(f"output path {out} already exists; remove it or choose another path")
    src = read_source(name, source, factor_sizes)
    full = list(src.factor_sizes) == list(c["factor_sizes"]) or any(
        list(src.factor_sizes) == list(a) for a in c.get("alternative_factor_sizes", []))
    if not full:
        if require_full:
            raise UserError(f"{name}: the file holds the grid {src.factor_sizes}, not the official {c['factor_sizes']}")
        print(f"note: {name}: reduced grid {src.factor_sizes} (official {c['factor_sizes']})", file=sys.stderr)
    if src.image_shape[2] != c["channels"]:
        raise UserError(f"{name}: images have {src.image_shape[2]} channels, the dataset has {c['channels']}")
    for f, known in zip(src.files, c["files"]):
        if known.get("sha256") and f.get("sha256") == known["sha256"] and not full:
            raise UserError(f"{name}: the official file must hold the full grid {c['factor_sizes']}")
    origin = {"kind": "official", "files": src.files,
              "config": {"dataset": name, "full_grid": full, **src.config}, "seed": None}
    try:
        return _write_source(name, c, src, out, origin, progress)
    except OSError as exc:  # disk full, permission, I/O error while writing: nothing is left at `out`
        raise UserError(f"writing {out} failed ({exc}); nothing was written") from None


def _write_source(name, c, src: Source, out: Path, origin: dict, progress: bool) -> Store:
    from tqdm import tqdm

    with create_store(out, num_images=src.num_images, image_shape=src.image_shape, factors=src.factors, name=name,
                      factor_names=c["factor_names"], factor_sizes=src.factor_sizes, factor_values=src.factor_values,
                      origin=origin) as writer:
        start = 0
        with tqdm(total=src.num_images, desc=f"build {name}", unit="img", disable=not progress) as bar:
            for block in _prefetch(src.blocks(writer.shard_size)):
                block = np.asarray(block)
                if block.shape[1:] != tuple(src.image_shape):
                    raise UserError(f"{name}: image block of shape {list(block.shape)} does not match {list(src.image_shape)}")
                writer.write(start, block)
                start += block.shape[0]
                bar.update(block.shape[0])
        if start != src.num_images:
            raise UserError(f"{name}: the file ended after {start} of {src.num_images} images (truncated)")
    return open_store(out)


__all__ = ["DATASETS", "build", "card", "check_file", "data_dir", "fetch", "read_source"]
