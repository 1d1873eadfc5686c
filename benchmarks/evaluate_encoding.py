"""The evaluate stage's encoding, as it is against as it was: one encoder pass per image in CPU-sized batches.

Evaluation (``probe.metrics.evaluate_run``) encodes every image its metrics draw (on a 46,080-image store, the
FactorVAE score's fixed-factor batches alone reach most of the store). Until session 46 each image went through the
encoder twice for a Gaussian encoder (``encode`` and ``posterior_variance``, one pass each) in forward batches of
2,048 images; now ``ProbeModel.representation`` gives codes and variances from one pass and a CPU runs forward
batches of ``CPU_FORWARD_BATCH`` (256). This script times ``evaluate_run`` on finished runs both ways in the same
process, alternating, and checks that every metric is identical (the recorded settings differ only in timings).

Prints, per run and way, the wall time, and the ratio now / before (the reference is the old path measured in the
same run). Target: ratio < 1 with identical metrics (no limit is set; this is a speed-up, not a budget).

Usage::

    python benchmarks/evaluate_encoding.py --store WORKDIR/store/<digest>/jobs/store/<name>.zarr \\
        RUN_DIR [RUN_DIR ...] [--repeats 2] [--num-train 2000 ...]
"""

from __future__ import annotations

import argparse
import statistics
import time

from probe.metrics import evaluate_run
from probe.metrics.evaluate import resolve_settings
from probe.metrics.registry import small_settings
from probe.models import base
from probe.train import encoder as encoder_module

SMALL = small_settings()  # the quick presets' [evaluate] sample sizes, as the metric registry owns them
NOW_FORWARD_BATCH = encoder_module.CPU_FORWARD_BATCH  # as committed, before use_path changes it


def use_path(way: str) -> None:
    """``before``: the three protocol methods in turn, forward batches of the caller's 2,048; ``now``: as committed."""
    before = way == "before"
    encoder_module.representation_of = base.composed_representation if before else base.representation_of
    encoder_module.CPU_FORWARD_BATCH = 1 << 30 if before else NOW_FORWARD_BATCH


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--store", required=True)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    resolve_settings(SMALL)
    evaluate_run(args.runs[0], args.store, seed=0, **SMALL)  # imports and first-touch costs outside the timing
    ratios = []
    for run in args.runs:
        walls: dict = {"before": [], "now": []}
        metrics = {}
        for _ in range(args.repeats):
            for way in ("before", "now"):
                use_path(way)
                t0 = time.perf_counter()
                result = evaluate_run(run, args.store, seed=0, **SMALL)
                walls[way].append(time.perf_counter() - t0)
                metrics.setdefault(way, result["metrics"])
        use_path("now")
        same = metrics["before"] == metrics["now"]
        ratio = statistics.median(walls["now"]) / statistics.median(walls["before"])
        ratios.append(ratio)
        print(f"{run}: before {statistics.median(walls['before']):.1f} s, now {statistics.median(walls['now']):.1f} s "
              f"(median of {args.repeats}), ratio {ratio:.2f}, metrics {'identical' if same else 'DIFFERENT'}")
        if not same:
            return 1
    print(f"ratio now / before over {len(ratios)} runs: median {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
