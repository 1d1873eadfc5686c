"""Does the manipulation's effect on the restarts' decoders depend on m(w) being paired with its own image?

Appendix B's m(w) is a function of the factors so that it can change each image's *local* structure — what the
paper argues the β-VAE relies on. The manipulation stage scores it by the gap of the frozen-encoder decoders' losses
on x' = fold(x + ε·m(w)) (disentangled − entangled). If that gap moves as far when every image gets another image's
m (the rows' factors permuted), or one pattern for all (m averaged over the rows), then what ψ found is a global
change of the data that the two decoder sets happen to pay for differently (on binary dSprites, a contrast change
paid in the frozen decoders' confidence: docs/notes/perturb.md), not a change of local structure.

Readings, on the manipulation's own evaluation subset with its fixed z noise (``restore_trainer(...).evaluate``),
with the decoders as the stage's checkpoint holds them (frozen: the restarts'; trained beside ψ: their final state):

- ``none``     x itself (the stage's "before");
- ``paired``   m(w) on its own image (the stage's "after");
- ``shuffled`` m(w_π) with π a random permutation of the rows (``--permutations`` of them, mean and SD);
- ``single``   one row's m(w_j) for every image (j drawn ``--permutations`` times, mean and SD): one pattern of the
               size ψ gives, with no dependence on the image;
- ``mean``     the mean of m(w) over the rows, one pattern for every image: m's image-independent part (≈ 0 where
               m's sign flips with w);
- ``negated``  −m(w) (identical to ``paired`` on binary images, where the fold sees |m| only).

For each: both sides' mean Bernoulli loss (nats per image), the gap dis − ent, and the share of the paired gap
change that the variant reproduces, (gap_variant − gap_none) / (gap_paired − gap_none).

Usage:
    python benchmarks/m_pairing.py WORKDIR/manipulate/<digest>/jobs/manipulate [more manipulation folders ...]
        [--permutations 3] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from probe.perturb.adversarial import restore_trainer


class _Fixed(nn.Module):
    """m_ψ replaced by one image-independent ``pattern``, or flipped by ``sign`` (the permuted m is the trainer's own
    ``evaluate(m_rows=...)``, as the stage's ``after_shuffled``)."""

    def __init__(self, net, *, pattern: torch.Tensor | None = None, sign: float = 1.0):
        super().__init__()
        self.net, self.pattern, self.sign = net, pattern, sign

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        if self.pattern is not None:
            return self.pattern.expand(w.shape[0], *self.pattern.shape[1:])
        return self.sign * self.net(w)


def read(manipulation_dir: str, permutations: int, seed: int) -> dict:
    trainer = restore_trainer(manipulation_dir)
    cfg = trainer.cfg
    net = trainer.net.eval()
    # the evaluation subset's factor rows: a permutation moves m between these rows only
    w_eval = trainer.w[trainer.eval_idx]
    with torch.no_grad():
        mean_m = net(w_eval).mean(0, keepdim=True)

    def gap_of(module, m_rows=None) -> dict:
        trainer.net = module
        res = trainer.evaluate(manipulated=module is not None, m_rows=m_rows)
        trainer.net = net
        return {"entangled": res["entangled"], "disentangled": res["disentangled"], "gap": res["dis_minus_ent"]}

    rng = np.random.RandomState(seed)
    out = {"dir": str(manipulation_dir), "store": str(trainer.store.path), "epsilon": cfg["epsilon"],
           "freeze_psi": cfg.get("freeze_psi", False), "decoder_batches_per_step": cfg["decoder_batches_per_step"],
           "images": int(trainer.eval_idx.shape[0])}
    with torch.no_grad():
        out["none"] = gap_of(None)
        out["paired"] = gap_of(net)
        shuffled = [gap_of(net, torch.from_numpy(rng.permutation(len(w_eval)))) for _ in range(permutations)]
        single = [gap_of(_Fixed(net, pattern=net(w_eval[j:j + 1])))
                  for j in rng.choice(len(w_eval), permutations, replace=False)]
        out["mean"] = gap_of(_Fixed(net, pattern=mean_m))
        out["negated"] = gap_of(_Fixed(net, sign=-1.0))
    for name, draws in (("shuffled", shuffled), ("single", single)):
        out[name] = {k: float(np.mean([s[k] for s in draws])) for k in ("entangled", "disentangled", "gap")}
        out[name]["gap_sd"] = float(np.std([s["gap"] for s in draws], ddof=1)) if permutations > 1 else 0.0
    moved = out["paired"]["gap"] - out["none"]["gap"]
    for name in ("shuffled", "single", "mean", "negated"):
        out[name]["share_of_paired"] = (out[name]["gap"] - out["none"]["gap"]) / moved if moved else float("nan")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manipulations", nargs="+", help="manipulation run folders (a manipulate stage's job folder)")
    parser.add_argument("--permutations", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the readings here as well")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    for path in args.manipulations:
        r = read(path, args.permutations, args.seed)
        results.append(r)
        print(f"\n{r['dir']}\n  ε {r['epsilon']}, ψ {'frozen (random)' if r['freeze_psi'] else 'learned'}, "
              f"decoder batches per ψ step {r['decoder_batches_per_step']}, {r['images']} images")
        print(f"  {'m':<10} {'ent loss':>10} {'dis loss':>10} {'gap dis−ent':>12} {'share of paired':>16}")
        for name in ("none", "paired", "shuffled", "single", "mean", "negated"):
            v = r[name]
            share = v.get("share_of_paired")
            sd = f" ± {v['gap_sd']:.2f}" if v.get("gap_sd") else ""
            print(f"  {name:<10} {v['entangled']:>10.2f} {v['disentangled']:>10.2f} {v['gap'] :>12.2f}{sd:<8}"
                  f" {'' if share is None else f'{share:>8.2f}'}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
