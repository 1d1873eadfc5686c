"""Batched training throughput (issue 16): aggregate img/s of S members in one vmapped step against the single-model
loop, measured in the same run, and the paper preset's projected wall time on this device.

Workload: disentanglement_lib's β-VAE (64×64×1, batch 64 per member, Adam), data resident on the device as uint8
and gathered there, exactly the trainer's step (``probe.train.trainer``) and the batched engine's step
(``probe.train.batched.StackedMembers``). Reference: the single-model loop (S = 1, no vmap) in the same process.
The loop engine trains members one after another with the single-run code, so its aggregate rate is the reference's.

Projection: training images of the paper preset of ``--pipeline`` (restarts + retrain = "without line search",
robustness = the §5.3 line search), from its plan, divided by the aggregate rate measured at the preset's group
size (seeds per batched job; the nearest measured S below it), assuming every model costs per image what the β-VAE
costs. That is optimistic for the adversarial and quantized models (FactorVAE's 6×1000 discriminator; Tripod's
Hessian penalty evaluates the decoder 8 more times), so read it as a lower bound.

``--quantized`` also times QLAE and Tripod alone at their papers' batch sizes (s/iteration; Tripod's paper: 0.040 s
QLAE, 0.106 s Tripod on its GPU), published widths.

usage: python benchmarks/train_batched.py [--device auto] [--sizes 1,4,16,64] [--seconds 4] [--quantized]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from probe.models.base import Batch
from probe.models.beta_vae import BetaVAE
from probe.train.batched import StackedMembers
from probe.train.data import ResidentData
from probe.train.trainer import _autocast, effective_precision, select_device, seed_globals

RESOLUTION, BATCH, NUM_IMAGES = 64, 64, 8192
TARGET_IMG_S = 100_000  # issue 16: 64×64 β-VAE aggregate on one H100


def synthetic_data(dev: torch.device, num_images: int = NUM_IMAGES, resolution: int = RESOLUTION) -> ResidentData:
    """A ResidentData over random uint8 images (the trainer's gather and conversion; no store needed)."""
    data = ResidentData.__new__(ResidentData)
    gen = torch.Generator().manual_seed(0)
    data.device = dev
    data.images = torch.randint(0, 256, (num_images, 1, resolution, resolution), generator=gen, dtype=torch.uint8).to(dev)
    data.factors = torch.zeros((num_images, 1), dtype=torch.long, device=dev)
    data.strides = torch.ones(1, dtype=torch.long, device=dev)
    data.num_images = num_images
    return data


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(step, dev, seconds: float, min_steps: int = 3) -> float:
    """Seconds per step: two warm-up steps, then steps until ``seconds`` have passed (at least ``min_steps``)."""
    for i in range(2):
        step(i)
    _sync(dev)
    t0, n = time.perf_counter(), 0
    while n < min_steps or time.perf_counter() - t0 < seconds:
        step(n)
        n += 1
        if n % 10 == 0 or dev.type == "cpu":
            _sync(dev)
    _sync(dev)
    return (time.perf_counter() - t0) / n


def single_step(config, data, dev, precision):
    seed_globals(0)
    model = BetaVAE(config, image_shape=(1, RESOLUTION, RESOLUTION), num_factors=5).to(dev)
    optimizers = model.configure_optimizers()
    gen = torch.Generator(device=dev).manual_seed(1)

    def step(i):
        batch = data.sample(BATCH, gen)
        with _autocast(precision, dev):
            model.training_step(batch, i, optimizers)
    return step


def vmapped_step(config, data, dev, precision, members: int):
    models, cpu_states = [], []
    for s in range(members):
        seed_globals(s)
        models.append(BetaVAE(config, image_shape=(1, RESOLUTION, RESOLUTION), num_factors=5))
        cpu_states.append(torch.get_rng_state())
    stacked = StackedMembers(models, list(range(members)), cpu_states, dev)
    return stacked.step_fn(data, BATCH, None, precision)


def quantized_seconds(dev, precision, seconds: float) -> dict:
    from probe.models.qlae import QLAE
    from probe.models.tripod import Tripod

    out = {}
    for cls, batch_size in ((QLAE, QLAE.train_defaults["batch_size"]), (Tripod, 64)):
        seed_globals(0)
        model = cls(cls.default_config(), image_shape=(3, 64, 64), num_factors=6).to(dev)
        optimizers = model.configure_optimizers()
        x = torch.rand(batch_size, 3, 64, 64, device=dev)

        def step(i, model=model, optimizers=optimizers, x=x):
            with _autocast(precision, dev):
                model.training_step(Batch(x=x), i, optimizers)
        out[cls.name] = {"batch_size": batch_size, "s_per_iter": timed(step, dev, seconds, min_steps=2)}
    return out


def paper_images(pipeline: str) -> dict:
    """Training images and the seeds per batched job of each training stage of the paper preset."""
    from probe.models.registry import get_model_class
    from probe.pipeline.config import resolve
    from probe.pipeline.graph import graph_of
    from probe.train.config import TRAIN_DEFAULTS

    config = resolve(pipeline, "paper")  # the stages' jobs only: no validation, which wants the official file here
    out = {}
    for stage in graph_of(config).stages(config, {}):
        jobs = [j for j in stage.jobs(stage.config) if j.batch is not None]
        if not jobs:
            continue
        images, groups = 0, {}
        for job in jobs:
            train = job.kwargs["run_config"]["train"]
            model_cls = get_model_class(job.kwargs["model"])
            batch = train.get("batch_size") or model_cls.train_defaults.get("batch_size") or TRAIN_DEFAULTS["batch_size"]
            images += int(train.get("steps") or TRAIN_DEFAULTS["steps"]) * int(batch)
            groups[job.batch] = groups.get(job.batch, 0) + 1
        out[stage.name] = {"runs": len(jobs), "images": images, "group_size": max(groups.values())}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--sizes", default="1,4,16,64")
    parser.add_argument("--seconds", type=float, default=4.0, help="time each configuration for about this long")
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    parser.add_argument("--pipeline", default="modify-shapes3d")
    parser.add_argument("--quantized", action="store_true", help="also time QLAE and Tripod (s/iteration)")
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    args = parser.parse_args()

    dev = select_device(args.device)
    precision = effective_precision(args.precision, dev)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or platform.machine()
    print(f"device {dev} ({name}), torch {torch.__version__}, {torch.get_num_threads()} thread(s), precision {precision}")
    config = {**BetaVAE.default_config(), "beta": 8.0}
    data = synthetic_data(dev)

    plan = paper_images(args.pipeline)
    sizes = sorted({int(s) for s in args.sizes.split(",")} | {p["group_size"] for p in plan.values()})
    reference = BATCH / timed(single_step(config, data, dev, precision), dev, args.seconds)
    print(f"\nsingle-model loop (reference): {reference:,.0f} img/s")
    print(f"{'S':>4} {'aggregate img/s':>16} {'× reference':>12} {'s/step':>8}")
    rates = {}
    for members in sizes:
        try:
            per_step = timed(vmapped_step(config, data, dev, precision, members), dev, args.seconds, min_steps=2)
        except torch.OutOfMemoryError:
            print(f"{members:>4} out of memory")
            break
        rates[members] = members * BATCH / per_step
        print(f"{members:>4} {rates[members]:>16,.0f} {rates[members] / reference:>12.2f} {per_step:>8.3f}")
    best = max(rates, key=rates.get)
    print(f"best: S = {best}, {rates[best]:,.0f} img/s aggregate "
          f"({'meets' if rates[best] >= TARGET_IMG_S else 'below'} the {TARGET_IMG_S:,} img/s GPU target)")

    # what the pipeline's engine="auto" takes here: the loop engine (the reference rate) on CPU, vmap on CUDA
    engine = "vmap" if dev.type == "cuda" else "loop"
    print(f"\npaper preset of {args.pipeline} (β-VAE cost per image for every model: a lower bound; "
          f"engine auto = {engine} on {dev.type})")
    total = {"without line search": 0.0, "with line search": 0.0}
    for stage, p in plan.items():
        usable = max([s for s in rates if s <= p["group_size"]] or [min(rates)])
        rate = rates[usable] if engine == "vmap" else reference
        hours = p["images"] / rate / 3600
        print(f"  {stage:<11} {p['runs']:>5} runs, {p['images']:.2e} images, {p['group_size']} seeds per job: "
              f"{hours:,.1f} h ({engine}), vmap at S = {usable}: {p['images'] / rates[usable] / 3600:,.1f} h, "
              f"single-model loop: {p['images'] / reference / 3600:,.1f} h")
        total["with line search"] += hours
        if stage != "robustness":
            total["without line search"] += hours
    for label, hours in total.items():
        print(f"  projected {label}: {hours:,.1f} h ({hours / 24:,.1f} days) on this device")

    quantized = quantized_seconds(dev, precision, args.seconds) if args.quantized else {}
    for model, q in quantized.items():
        print(f"{model}: {q['s_per_iter']:.3f} s/iteration at batch {q['batch_size']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(dev), "device_name": name, "precision": precision, "reference_img_s": reference, "engine": engine,
                       "aggregate_img_s": rates, "plan": plan, "projected_hours": total, "quantized": quantized}, f,
                      indent=1)


if __name__ == "__main__":
    main()
