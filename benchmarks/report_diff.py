"""Do two reports say the same? Diff report.md, runs.csv and summary.json of two `probe report` folders, ignoring
only what must differ between two runs of the same workdir: the workdir's own path, digests (stage folders, stores,
sources, git commits), code versions, timings and dates.

usage: python benchmarks/report_diff.py REPORT_A REPORT_B [--workdir-a DIR] [--workdir-b DIR]

Each report's workdir is read from its "inputs: `WORKDIR/report_inputs.json`" line unless given. Prints, per file,
"identical" or the unified diff of the normalised text, and exits 1 when any file differs.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

FILES = ("report.md", "runs.csv", "summary.json")

# (pattern, replacement), applied in order to every line after the workdir's path is replaced
VOLATILE = [
    (re.compile(r"\b[0-9a-f]{64}\b"), "<sha256>"),
    (re.compile(r"\b[0-9a-f]{40}\b"), "<git>"),
    (re.compile(r"/[0-9a-f]{16}(?=/|\.partial|\b)"), "/<stage-digest>"),
    (re.compile(r"(digest |sources )[0-9a-f]{16}\b"), r"\1<digest>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+\d\d:\d\d|Z)?"), "<time>"),
    (re.compile(r"wall time [\d.]+ s"), "wall time <s> s"),
    (re.compile(r"(encoded on \w+) in [\d.]+ s"), r"\1 in <s> s"),
    (re.compile(r'("wall_time_s": )[-\d.e+]+'), r"\1<s>"),
    (re.compile(r"probe \d+\.\d+\.\d+\S*"), "probe <version>"),
    (re.compile(r'("probe_version": )"[^"]*"'), r'\1"<version>"'),
    (re.compile(r" on (Linux|Darwin|Windows)-\S+\.$"), r" on <platform>."),
]


def workdir_of(report: Path) -> str | None:
    match = re.search(r"inputs: `(.+)/report_inputs\.json`", (report / "report.md").read_text())
    return match.group(1) if match else None


def normalise(text: str, workdir: str | None) -> list[str]:
    if workdir:
        text = text.replace(workdir, "<WORKDIR>")
    lines = []
    for line in text.splitlines():
        for pattern, replacement in VOLATILE:
            line = pattern.sub(replacement, line)
        lines.append(line)
    return lines


def diff_reports(a: Path, b: Path, workdir_a: str | None = None, workdir_b: str | None = None) -> dict:
    """{file: [unified diff lines]} (empty list: identical after normalisation)."""
    workdir_a = workdir_a or workdir_of(a)
    workdir_b = workdir_b or workdir_of(b)
    out = {}
    for name in FILES:
        la = normalise((a / name).read_text(), workdir_a)
        lb = normalise((b / name).read_text(), workdir_b)
        out[name] = list(difflib.unified_diff(la, lb, f"a/{name}", f"b/{name}", n=1, lineterm=""))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--workdir-a")
    parser.add_argument("--workdir-b")
    args = parser.parse_args()
    diffs = diff_reports(args.a, args.b, args.workdir_a, args.workdir_b)
    for name, lines in diffs.items():
        size_a, size_b = (args.a / name).stat().st_size, (args.b / name).stat().st_size
        print(f"{name}: " + ("identical" if not lines else f"{sum(1 for x in lines if x[:1] in '+-') - 2} lines differ")
              + f" after normalisation ({size_a} / {size_b} bytes)")
        for line in lines[:200]:
            print("    " + line)
    return 1 if any(diffs.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
