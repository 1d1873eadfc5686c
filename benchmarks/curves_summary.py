"""Summarise learning-curve rows (``learning_curves.py``) and gather them into a committed results file.

Prints one line per (seed, steps) row — MIG, the per-factor gap and best normalised MI, how many factors are encoded
(best normalised MI ≥ the regime gate's ``CAPTURE_THRESHOLD``), the carrying latents — then, per step count, the
number of seeds, MIG mean ± sd, the one-sided 95 % upper bound on the mean (Student t), and how many seeds encode at
least ``--enough`` factors. With ``--into RESULTS --note NOTE`` it adds to RESULTS (a committed ``.jsonl``) the rows
it does not hold yet (same run folder name and steps), each with NOTE, and leaves the rows already there — and their
notes, written by the session that measured them — as they are; the file is kept sorted by (tag, seed, steps).

usage: python benchmarks/curves_summary.py ROWS.jsonl [ROWS.jsonl ...] [--enough 5] [--into RESULTS --note NOTE]
  (ROWS: ``--out/curves.jsonl`` of learning_curves.py runs, or a committed results file; a row read twice counts once)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from scipy import stats

from probe.provenance import atomic_path
from probe.report.gates import CAPTURE_THRESHOLD


def row_key(row: dict) -> tuple:
    """A leg's identity across hosts: its run folder's name (the parent differs between workdirs) and its steps."""
    return Path(row["run_dir"]).name, int(row["steps"])


def read_rows(paths) -> list[dict]:
    """The rows of every file, the first copy of each leg only, sorted by (tag, seed, steps)."""
    rows, seen = [], set()
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row_key(row) not in seen:
                seen.add(row_key(row))
                rows.append(row)
    return sorted(rows, key=lambda r: (r.get("tag", ""), int(r["seed"]), int(r["steps"])))


def factors_encoded(row: dict) -> int | None:
    """How many factors a leg encodes (best normalised MI ≥ CAPTURE_THRESHOLD); None when the row has no factors."""
    best = row.get("factors", {}).get("best_nmi")
    return None if best is None else sum(b >= CAPTURE_THRESHOLD for b in best)


def upper_bound_95(values: list[float]) -> float:
    """One-sided 95 % upper confidence bound on the mean (Student t, n − 1 degrees of freedom)."""
    n = len(values)
    return statistics.mean(values) + stats.t.ppf(0.95, n - 1) * statistics.stdev(values) / n ** 0.5


def _two_places(values) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def summary_lines(rows: list[dict], enough: int) -> list[str]:
    lines = []
    for r in rows:
        fc = r.get("factors", {})
        lines.append(f"{r.get('tag', '')} s{r['seed']} {r['steps']:>6} mig {r['metrics']['mig']:.3f} "
                     f"leg {r['train_leg_s']:.0f}s gap {_two_places(fc.get('gap', []))} nmi {_two_places(fc.get('best_nmi', []))} "
                     f"encoded {factors_encoded(r)} latent {fc.get('latent')}")
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r.get("tag", ""), int(r["steps"])), []).append(r)
    for (tag, steps), group in sorted(groups.items()):
        migs = [r["metrics"]["mig"] for r in group]
        encoded = [factors_encoded(r) for r in group]
        spread = (f" ± {statistics.stdev(migs):.3f}  upper95 {upper_bound_95(migs):.3f}" if len(migs) > 1 else "")
        lines.append(f"{tag} {steps:>6}: n {len(migs)}  mig {statistics.mean(migs):.3f}{spread}  "
                     f"seeds {','.join(str(r['seed']) for r in group)}  "
                     f"≥{enough} factors in {sum(e is not None and e >= enough for e in encoded)} of {len(group)}")
    return lines


def merge_into(results: Path, rows: list[dict], note: str) -> int:
    """Add to ``results`` the rows it lacks, each with ``note``; returns how many were added."""
    kept = read_rows([results]) if results.exists() else []
    have = {row_key(r) for r in kept}
    new = [{**r, "note": note} for r in rows if row_key(r) not in have]
    merged = sorted(kept + new, key=lambda r: (r.get("tag", ""), int(r["seed"]), int(r["steps"])))
    with atomic_path(results, overwrite=True) as partial:  # a stop mid-write leaves the committed file whole
        partial.write_text("".join(json.dumps(r) + "\n" for r in merged))
    return len(new)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="+", help="curves.jsonl files or committed results files")
    parser.add_argument("--enough", type=int, default=5, help="factors a seed must encode to be counted (default 5)")
    parser.add_argument("--into", default=None, help="a results .jsonl to add the new rows to")
    parser.add_argument("--note", default=None, help="the note the new rows carry (where, when, which code)")
    args = parser.parse_args(argv)
    if (args.into is None) != (args.note is None):
        parser.error("--into and --note go together")
    missing = [path for path in args.rows if not Path(path).is_file()]
    if missing:  # e.g. an unexpanded glob before a run's first leg has written its curves.jsonl
        parser.error(f"no such rows file: {', '.join(missing)}")
    rows = read_rows(args.rows)
    print("\n".join(summary_lines(rows, args.enough)))
    if args.into:
        print(f"{merge_into(Path(args.into), rows, args.note)} rows added to {args.into}")


if __name__ == "__main__":
    main()
