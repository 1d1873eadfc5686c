"""Stage ``select``: the MIG of every restart, then the ``select.k`` most entangled and most disentangled."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.worker import JobContext


def job_select_mig(ctx: JobContext, *, restart: str, seed: int) -> dict:
    from probe.perturb import evaluate_restarts

    run = ctx.inputs["restarts"]["jobs"][restart]
    mig = evaluate_restarts([run["run_dir"]], ctx.inputs["store"]["path"], seed=seed)
    return {"run_dir": run["run_dir"], "seed": run["seed"], "mig": float(mig[run["run_dir"]])}


def _collect(c, inputs, results):
    from probe.perturb import select_restarts

    chosen = select_restarts({r["run_dir"]: r["mig"] for r in results.values()}, k=c["k"])
    return {"entangled": chosen["entangled"], "disentangled": chosen["disentangled"], "mig": chosen["mig"],
            "jobs": results}


def stage(config: dict, meta: dict) -> Stage:
    count = config["restarts"]["count"]
    return Stage("select", config["select"], ["restarts", "store"],
                 lambda c: [Job(f"seed{s}", job_select_mig, {"restart": f"seed{s}", "seed": c["seed"]})
                            for s in range(count)], _collect)
