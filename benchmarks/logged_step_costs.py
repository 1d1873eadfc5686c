"""Step costs read back from a stage's own training logs, and the stage's wall time on idle cores.

`benchmarks/step_costs.py` times a few dozen steps per model; on a loaded VM its relative costs can be far off
(the cpu preset was sized with FactorVAE at 1.46× and Tripod at 1.47× a β-VAE step; its own runs logged 3.0× and
3.6×). This script reads what a real stage logged: every run folder under the given paths (``*/metrics.jsonl``
beside a ``config.json``) writes its wall time every ``log_every`` steps, so each interval is one measurement of
the step cost under whatever load the machine had then. The fastest decile of a model's intervals is taken as its
cost on an uncontended core (the median is shown beside it: the difference is the load). Projection: the planned
steps of every run (its config's ``train.steps``, or ``--steps MODEL=N`` to size a changed preset) times that cost,
over ``--workers`` cores, perfectly packed (a lower bound), printed with its ratio to ``--limit-h``.

Usage::

    python benchmarks/logged_step_costs.py WORKDIR/retrain/<digest>[.partial] --workers 2 --limit-h 8 \\
        [--steps factor-vae=4000 --steps tripod=2000] [--reference beta-vae] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from probe.train.run_folder import RunFolder


def read_runs(paths) -> list[dict]:
    """[{"model", "run", "planned_steps", "steps_logged", "costs"}] for every run folder under ``paths``."""
    runs = []
    for root in map(Path, paths):
        for log in sorted(root.rglob(RunFolder.LOG)):
            folder = RunFolder(log.parent)  # the owner of the run folder's files and of its step log's intervals
            if not folder.config_path.exists():
                continue
            config, rows = folder.read_config(), folder.read_log()
            runs.append({"model": config["model"], "run": str(log.parent),
                         "planned_steps": int(config["train"]["steps"]),
                         "steps_logged": max((r["step"] for r in rows), default=0),
                         "costs": folder.step_costs(rows)})
    return runs


def summarise(runs: list[dict], steps_override: dict, quantile: float = RunFolder.FASTEST_QUANTILE) -> dict:
    by_model = defaultdict(list)
    for r in runs:
        by_model[r["model"]].append(r)
    models = {}
    for model, rs in sorted(by_model.items()):
        costs = sorted(c for r in rs for c in r["costs"])
        if not costs:
            continue
        fast = costs[int(quantile * (len(costs) - 1))]
        planned = sum(steps_override.get(model, r["planned_steps"]) for r in rs)
        models[model] = {"runs": len(rs), "intervals": len(costs), "s_per_step_idle": fast,
                         "s_per_step_median": statistics.median(costs), "planned_steps": planned,
                         "steps_logged": sum(r["steps_logged"] for r in rs), "core_s": planned * fast}
    return models


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="stage folders holding run folders (metrics.jsonl + config.json)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limit-h", type=float, default=None, help="the budget the projection is compared with")
    ap.add_argument("--steps", action="append", default=[], metavar="MODEL=N",
                    help="project with N steps per run of MODEL instead of the logged runs' own")
    ap.add_argument("--reference", default="beta-vae", help="model the costs are stated relative to")
    ap.add_argument("--quantile", type=float, default=RunFolder.FASTEST_QUANTILE, help="which quantile of the intervals counts as idle")
    ap.add_argument("--json", type=Path, default=None, help="write the numbers here too")
    args = ap.parse_args(argv)

    override = {}
    for item in args.steps:
        model, _, n = item.partition("=")
        if not n.isdigit():
            print(f"--steps wants MODEL=N, got {item!r}", file=sys.stderr)
            return 2
        override[model] = int(n)
    runs = read_runs(args.paths)
    if not runs:
        print(f"no run folders (metrics.jsonl beside config.json) under {', '.join(args.paths)}", file=sys.stderr)
        return 2
    models = summarise(runs, override, args.quantile)
    ref = models.get(args.reference, {}).get("s_per_step_idle")
    print(f"{'model':12s} {'runs':>4s} {'planned steps':>13s} {'s/step idle':>11s} {'median':>7s} "
          f"{'× ' + args.reference:>12s} {'core-h':>7s}")
    for model, m in models.items():
        ratio = f"{m['s_per_step_idle'] / ref:.2f}" if ref else "—"
        print(f"{model:12s} {m['runs']:4d} {m['planned_steps']:13d} {m['s_per_step_idle']:11.3f} "
              f"{m['s_per_step_median']:7.3f} {ratio:>12s} {m['core_s'] / 3600:7.2f}")
    total_core_s = sum(m["core_s"] for m in models.values())
    wall_h = total_core_s / args.workers / 3600
    line = f"projected stage wall on {args.workers} idle workers (perfect packing): {wall_h:.2f} h"
    if args.limit_h:
        line += f"; ratio to the {args.limit_h:g} h limit: {wall_h / args.limit_h:.2f}"
    print(line)
    if args.json:
        args.json.write_text(json.dumps({"paths": args.paths, "workers": args.workers, "steps_override": override,
                                         "quantile": args.quantile, "models": models, "wall_h": wall_h,
                                         "limit_h": args.limit_h}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
