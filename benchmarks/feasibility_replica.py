"""An independent replica of ../shared/reference/cpu-feasibility.md, to locate the gap between its dSprites-like MIG
(β 8, 5 latents, 6k steps: 0.326, 0.021, 0.263) and probe's (≤ 0.066 in 26 runs on the same description, train.md).

Two things can differ from that throwaway experiment: the trainer (model, loss, loop) and the data (the generator's
geometry, which the note does not state). This script replaces each by code that shares nothing with probe's:

* ``render``: a dSprites-like store (square / 2:1 ellipse / heart, white on black, binary at the pixel centre, factors
  shape 3 × scale 6 in [0.5, 1] × orientation 10 in [0, 2π) × posX 16 × posY 16) whose geometry is set by two
  numbers: ``--side`` (a scale-1 square's side as a fraction of the image) and ``--travel`` (the fraction of the image
  the sprite's centre moves over, centred). probe's generator is side 18/64 = 0.281, travel 48/64 = 0.75.
  Written through ``probe.data.write_store`` so probe's trainer (``benchmarks/train_quick_check.py --store``) reads it.
* ``train``: the note's model as written there — three stride-2 4×4 convs (32, 32, 64) to 4×4×64, dense 256,
  Gaussian heads; the mirrored decoder; PyTorch's default initialisation; Bernoulli loss summed over pixels + β·KL,
  Adam lr 5e-4, batch 64 drawn uniformly with replacement, one torch thread — on any store (probe's or a rendered one).
  MIG of the posterior means on 10,000 random images with probe.metrics.mig (= disentanglement_lib's, 20 bins).

Usage:
  python benchmarks/feasibility_replica.py render OUT.zarr [--side 0.281] [--travel 0.75] [--resolution 32]
  python benchmarks/feasibility_replica.py steps STORE [STORE ...]
  python benchmarks/feasibility_replica.py train STORE --seeds 0,1,2 [--steps 6000] [--beta 8] [--tag T] [--rows F]
Each trained seed prints one JSON row (MIG, per-factor best / second normalised MI, active latents, wall).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

SIZES = (3, 6, 10, 16, 16)
NAMES = ("shape", "scale", "orientation", "posX", "posY")


def inside(shape: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Unit-box sprites (half side 1): square, ellipse with axes 1.4 / 0.7, heart scaled into the box."""
    if shape == 0:
        return np.maximum(np.abs(u), np.abs(v)) <= 1.0
    if shape == 1:
        return (u / 1.4) ** 2 + (v / 0.7) ** 2 <= 1.0
    x, y = u * 1.15, v * 1.15 + 0.15
    return (x * x + y * y - 1.0) ** 3 <= x * x * y ** 3


def render(side: float, travel: float, resolution: int) -> tuple[np.ndarray, np.ndarray]:
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in SIZES], indexing="ij"), -1).reshape(-1, len(SIZES))
    scale = np.linspace(0.5, 1.0, SIZES[1])[grid[:, 1]]
    angle = np.linspace(0.0, 2 * np.pi, SIZES[2], endpoint=False)[grid[:, 2]]
    lo = 0.5 - travel / 2
    cx = (lo + travel * np.linspace(0, 1, SIZES[3])[grid[:, 3]]) * resolution
    cy = (lo + travel * np.linspace(0, 1, SIZES[4])[grid[:, 4]]) * resolution
    centres = np.arange(resolution) + 0.5
    images = np.zeros((len(grid), resolution, resolution, 1), np.uint8)
    for start in range(0, len(grid), 4096):
        sl = slice(start, start + 4096)
        dx = centres[None, None, :] - cx[sl, None, None]
        dy = cy[sl, None, None] - centres[None, :, None]  # sprite y up, rows down
        half = (side * resolution / 2 * scale[sl])[:, None, None]
        c, s = np.cos(angle[sl])[:, None, None], np.sin(angle[sl])[:, None, None]
        u, v = (c * dx + s * dy) / half, (-s * dx + c * dy) / half
        mask = np.zeros(u.shape, bool)
        for k in range(3):
            m = grid[sl, 0] == k
            mask[m] = inside(k, u[m], v[m])
        images[sl, :, :, 0] = mask * np.uint8(255)
    return images, grid.astype(np.int64)


class Encoder(nn.Module):
    def __init__(self, latents: int):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 32, 4, 2, 1), nn.ReLU(), nn.Conv2d(32, 32, 4, 2, 1), nn.ReLU(),
                                 nn.Conv2d(32, 64, 4, 2, 1), nn.ReLU(), nn.Flatten(), nn.Linear(1024, 256), nn.ReLU())
        self.mu, self.logvar = nn.Linear(256, latents), nn.Linear(256, latents)

    def forward(self, x):
        h = self.net(x)
        return self.mu(h), self.logvar(h)


class Decoder(nn.Module):
    def __init__(self, latents: int):
        super().__init__()
        self.dense = nn.Sequential(nn.Linear(latents, 256), nn.ReLU(), nn.Linear(256, 1024), nn.ReLU())
        self.net = nn.Sequential(nn.ConvTranspose2d(64, 32, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(32, 32, 4, 2, 1),
                                 nn.ReLU(), nn.ConvTranspose2d(32, 1, 4, 2, 1))

    def forward(self, z):
        return self.net(self.dense(z).view(-1, 64, 4, 4))


def build(arch: str, init: str, latents: int, resolution: int):
    """The replica's nets, or probe's (probe.models.nets.locatello at this resolution); PyTorch's or glorot init.
    The replica's nets keep the weights they are built with under the default init: re-initialising them would draw
    from the seeded generator again, and the committed replica rows were trained from the first draw."""
    if arch == "probe":
        from probe.models.nets.locatello import ConvEncoder, DeconvDecoder

        enc, dec = ConvEncoder((1, resolution, resolution), latents), DeconvDecoder((1, resolution, resolution), latents)
    else:
        enc, dec = Encoder(latents), Decoder(latents)
    if init == "glorot":
        from probe.models.nets.locatello import glorot_init
    for net in (enc, dec):
        if init == "glorot":
            glorot_init(net)
        elif arch == "probe":  # probe's nets are built glorot-initialised: back to PyTorch's default
            for m in net.modules():
                if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
                    m.reset_parameters()
    return enc, dec


def train_one(images: torch.Tensor, seed: int, steps: int, beta: float, latents: int, lr: float, batch: int,
              arch: str = "replica", init: str = "default"):
    torch.manual_seed(seed)
    enc, dec = build(arch, init, latents, images.shape[-1])
    opt = torch.optim.Adam([*enc.parameters(), *dec.parameters()], lr=lr)
    g = torch.Generator().manual_seed(10_000 + seed)
    for _ in range(steps):
        x = images[torch.randint(len(images), (batch,), generator=g)].float().div_(255)
        mu, logvar = enc(x)
        z = mu + torch.randn(mu.shape, generator=g) * (0.5 * logvar).exp()
        rec = F.binary_cross_entropy_with_logits(dec(z), x, reduction="sum") / batch
        kl = 0.5 * (mu.pow(2) + logvar.exp() - logvar - 1).sum() / batch
        opt.zero_grad()
        (rec + beta * kl).backward()
        opt.step()
    return enc, float(rec.detach()), float(kl.detach())


def local_steps(store) -> dict:
    """Mean squared pixel change (pixels in [0, 1]) of a one-class step up in each factor, over the grid points that
    have one; and the mean cosine between a posX step and a posY step from the same point (the paper's argument:
    the β-VAE aligns with distinct, orthogonal local directions; equal norms or a large cosine leave a rotation free)."""
    images = store.read(np.arange(store.num_images)).reshape(store.num_images, -1).astype(np.float32) / 255
    grid = images.reshape(*store.factor_sizes, -1)
    out = {}
    for k, name in enumerate(NAMES):
        d = np.diff(grid, axis=k)
        out[name] = round(float((d ** 2).sum(-1).mean()), 2)
    dx = np.diff(grid, axis=3)[:, :, :, :, :-1]
    dy = np.diff(grid, axis=4)[:, :, :, :-1, :]
    num = (dx * dy).sum(-1)
    den = np.sqrt((dx ** 2).sum(-1) * (dy ** 2).sum(-1))
    out["cos_posX_posY"] = round(float((num[den > 0] / den[den > 0]).mean()), 3)
    # how far along posX two images of the same sprite still share pixels: an image distance that keeps growing with
    # the position distance over the whole range orders the positions; one that saturates after a few steps does not
    rows = np.moveaxis(grid, 3, -2).reshape(-1, store.factor_sizes[3], grid.shape[-1])  # [rest, posX, pixels]
    shared = np.einsum("rip,rjp->rij", rows, rows) > 0
    out["posX_pairs_overlapping"] = round(float(shared.mean()), 3)
    out["mean_pixel"] = round(float(images.mean()), 4)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render")
    r.add_argument("out")
    r.add_argument("--side", type=float, default=18 / 64)
    r.add_argument("--travel", type=float, default=48 / 64)
    r.add_argument("--resolution", type=int, default=32)
    g = sub.add_parser("steps", help="local variance structure: squared image change per one-class step of each factor")
    g.add_argument("stores", nargs="+")
    t = sub.add_parser("train")
    t.add_argument("store")
    t.add_argument("--seeds", default="0")
    t.add_argument("--steps", type=int, default=6000)
    t.add_argument("--beta", type=float, default=8.0)
    t.add_argument("--latents", type=int, default=5)
    t.add_argument("--lr", type=float, default=5e-4)
    t.add_argument("--batch", type=int, default=64)
    t.add_argument("--arch", choices=["replica", "probe"], default="replica",
                   help="probe: probe's locatello nets at this resolution (conv k4, k2, k2 at 32×32) in this loop")
    t.add_argument("--init", choices=["default", "glorot"], default="default")
    t.add_argument("--tag", default="")
    t.add_argument("--rows", default=None, help="append each row to this jsonl file")
    args = ap.parse_args(argv)

    from probe.data import open_store, write_store

    if args.cmd == "render":
        images, factors = render(args.side, args.travel, args.resolution)
        write_store(args.out, images, factors, name="dsprites-replica", factor_names=list(NAMES),
                    factor_sizes=list(SIZES), factor_values=[list(range(n)) for n in SIZES],
                    origin={"kind": "synthetic", "generator": "benchmarks/feasibility_replica.py",
                            "options": {"side": args.side, "travel": args.travel, "resolution": args.resolution}})
        print(f"wrote {args.out}: {images.shape}, mean pixel {images.mean() / 255:.4f}")
        return

    if args.cmd == "steps":
        for path in args.stores:
            print(json.dumps({"store": path, **local_steps(open_store(path))}))
        return

    from probe.metrics import mig
    from probe.metrics.information import histogram_nmi

    torch.set_num_threads(1)
    store = open_store(args.store)
    images = torch.from_numpy(store.read(np.arange(store.num_images))).permute(0, 3, 1, 2).contiguous()
    factors = np.asarray(store.factors)
    idx = np.sort(np.random.default_rng(0).choice(len(images), 10_000, replace=False))
    for seed in [int(s) for s in args.seeds.split(",")]:
        start = time.perf_counter()
        enc, rec, kl = train_one(images, seed, args.steps, args.beta, args.latents, args.lr, args.batch, args.arch, args.init)
        with torch.no_grad():
            mu, logvar = enc(images[idx].float() / 255)
        codes = mu.numpy()
        nmi = histogram_nmi(codes, factors[idx])  # [factors, latents]
        top = np.sort(nmi, axis=1)[:, ::-1]
        row = {"tag": args.tag, "store": args.store, "seed": seed, "steps": args.steps, "beta": args.beta,
               "latents": args.latents, "arch": args.arch, "init": args.init, "mig": round(float(mig(codes, factors[idx])["mig"]), 4),
               "best_second": {n: [round(float(top[k, 0]), 2), round(float(top[k, 1]), 2)] for k, n in enumerate(NAMES)},
               "active": int((0.5 * (mu.pow(2).mean(0) + logvar.exp().mean(0) - logvar.mean(0) - 1) > 0.1).sum()),
               "rec": round(rec, 2), "kl": round(kl, 2), "wall_s": round(time.perf_counter() - start, 1)}
        print(json.dumps(row), flush=True)
        if args.rows:
            with open(args.rows, "a") as fh:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
