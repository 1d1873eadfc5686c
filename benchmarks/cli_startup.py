"""How fast the CLI answers: `probe --help` and the read-only pipeline commands, against a bare interpreter start.

Prints, per command, the median wall time of N runs (fresh processes), the ratio to `python -c pass` measured in the
same run, and whether it is under the limit (issue 17: `probe --help`, `pipeline list`, `show` and `status` in < 1 s
on the 2-core VM). `pipeline show --check` (the model and metric checks `run` makes, importing torch and scipy) is
timed for comparison and not held to the limit.

usage: python benchmarks/cli_startup.py [--repeats 5] [--workdir WORKDIR]   (WORKDIR: a pipeline workdir for `status`)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

LIMIT_S = 1.0


def wall(argv: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    probe = [sys.executable, "-c", "import sys; from probe.cli import main; main(sys.argv[1:])"]
    commands = {"probe --help": ["--help"], "probe pipeline list": ["pipeline", "list"],
                "probe pipeline show modify-shapes3d --preset quick": ["pipeline", "show", "modify-shapes3d",
                                                                       "--preset", "quick"]}
    if args.workdir:
        commands["probe pipeline status WORKDIR"] = ["pipeline", "status", args.workdir]
    unlimited = {"probe pipeline show modify-shapes3d --preset quick --check": ["pipeline", "show", "modify-shapes3d",
                                                                              "--preset", "quick", "--check"]}
    reference = wall([sys.executable, "-c", "pass"], args.repeats)
    print(f"reference `python -c pass`: {reference:.3f} s (median of {args.repeats})")
    for label, argv in {**commands, **unlimited}.items():
        t = wall(probe + argv, args.repeats)
        mark = f"{'under' if t < LIMIT_S else 'OVER'} the {LIMIT_S:.0f} s limit" if label in commands else "(no limit)"
        print(f"{label:62s} {t:6.3f} s  {t / reference:5.1f}× reference  {mark}")


if __name__ == "__main__":
    main()
