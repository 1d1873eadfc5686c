"""How much of each factor the images themselves determine: the ceiling on any encoder's normalised MI.

The regime gate counts a factor as encoded when some latent holds ≥ 0.2 of its entropy (normalised MI). A factor whose
values render identical images cannot be held beyond what the images carry: a square rotated by 90° is the same
square. Over the store's full grid (each grid point one image, uniform), this script groups identical images (by
a hash of their bytes) and computes, per factor k,

    ceiling_k = I(w_k; x) / H(w_k) = 1 − H(w_k | x) / H(w_k),

with H(w_k | x) the entropy of w_k among the grid points that render the same image, averaged over images. An
encoder that is a function of x reaches at most ceiling_k (before MIG's 20-bin discretisation, which can only lose
more). ``--by FACTOR`` also prints each factor's ceiling within each value of FACTOR (e.g. per shape).

Usage::

    python benchmarks/factor_visibility.py STORE [--by shape] [--json OUT]
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import defaultdict

import numpy as np

from probe.data import open_store


def entropy(counts: np.ndarray) -> float:
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def visibility(store, by: int | None = None, block: int = 8192) -> dict:
    sizes = [int(s) for s in store.factor_sizes]
    factors = np.asarray(store.factors)
    groups: dict[bytes, list[int]] = defaultdict(list)  # image bytes' hash -> the grid rows rendering that image
    for start in range(0, store.num_images, block):
        for i, image in enumerate(np.asarray(store.images[start:start + block])):
            groups[hashlib.blake2b(image.tobytes(), digest_size=16).digest()].append(start + i)
    n = store.num_images
    cond = np.zeros(len(sizes))                                   # H(w_k | x), averaged over images
    cond_by = defaultdict(lambda: np.zeros(len(sizes)))           # the same within each value of factor `by`
    count_by: dict[int, int] = defaultdict(int)
    for rows in groups.values():
        block_factors = factors[rows]
        h = np.array([entropy(np.unique(block_factors[:, k], return_counts=True)[1]) for k in range(len(sizes))])
        cond += len(rows) / n * h
        if by is not None:
            for value in block_factors[:, by]:
                cond_by[int(value)] += h
                count_by[int(value)] += 1
    ceiling = [1.0 - c / np.log(s) if s > 1 else None for c, s in zip(cond, sizes)]
    out = {"factor_names": list(store.factor_names), "factor_sizes": sizes, "images": n, "distinct_images": len(groups),
           "ceiling": [None if c is None else round(float(c), 4) for c in ceiling]}
    if by is not None:
        out["by"] = {"factor": store.factor_names[by], "ceiling": {
            value: [None if s <= 1 else round(float(1.0 - cond_by[value][k] / count_by[value] / np.log(s)), 4)
                    for k, s in enumerate(sizes)] for value in sorted(count_by)}}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--by", help="a factor name: ceilings within each of its values too")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    store = open_store(args.store)
    by = None if args.by is None else list(store.factor_names).index(args.by)
    result = visibility(store, by)
    print(f"{result['distinct_images']} distinct images of {result['images']}")
    for name, size, c in zip(result["factor_names"], result["factor_sizes"], result["ceiling"]):
        print(f"  {name:14s} {size:3d} values  ceiling on normalised MI {'—' if c is None else f'{c:.3f}'}")
    for value, row in (result.get("by") or {}).get("ceiling", {}).items():
        cells = ", ".join(f"{n} {'—' if c is None else f'{c:.3f}'}" for n, c in zip(result["factor_names"], row))
        print(f"  {result['by']['factor']} = {value}: {cells}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
