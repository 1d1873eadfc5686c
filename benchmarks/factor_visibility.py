"""How much of each factor the images themselves determine: the ceiling on any encoder's normalised MI
(``probe.data.visibility``, which the report stage records for the orig store), here also per value of a factor.

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
import json

import numpy as np

from probe.data import open_store
from probe.data.visibility import ceilings, image_ids


def visibility(store, by: int | None = None) -> dict:
    sizes = [int(s) for s in store.factor_sizes]
    factors = np.asarray(store.factors, dtype=np.int64)
    ids = image_ids(store)
    out = {"factor_names": list(store.factor_names), "factor_sizes": sizes, "images": int(store.num_images),
           "distinct_images": int(ids.max()) + 1, "ceiling": ceilings(ids, factors)}
    if by is not None:  # within one value of factor `by` (its rows uniform again)
        out["by"] = {"factor": store.factor_names[by], "ceiling": {
            int(v): ceilings(ids[factors[:, by] == v], factors[factors[:, by] == v])
            for v in np.unique(factors[:, by])}}
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
