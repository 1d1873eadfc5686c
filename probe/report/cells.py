"""Table-cell formats the report's sections share (build.py and the sections kept beside it)."""

from __future__ import annotations

import math

import numpy as np


def fmt(x, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.{digits}f}"


def fmt_p(p) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "—"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def cell(vals) -> str:
    if not vals:
        return "—"
    if len(vals) == 1:
        return f"{vals[0]:.2f} (n=1)"
    return f"{np.mean(vals):.2f} ± {np.std(vals, ddof=1):.2f}"


def change(c: dict | None, with_p: bool = True) -> str:
    if c is None:
        return "no runs"
    lo, hi = c["ci"]
    ci = "" if math.isnan(lo) else f" [{lo:+.2f}, {hi:+.2f}]"
    return f"{c['delta']:+.2f}{ci}" + (f", p={fmt_p(c['p'])}" if with_p else "")
