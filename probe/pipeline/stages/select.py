"""Stage ``select``: the MIG of every restart, then the ``select.k`` most entangled and most disentangled."""

from __future__ import annotations

import dataclasses

from probe.errors import UserError
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import restarts, store
from probe.pipeline.stages.face import input_names
from probe.pipeline.worker import JobContext

NAME = "select"
INPUTS = (restarts, store)


@dataclasses.dataclass(frozen=True)
class SelectResult:
    entangled: list[str]         # run folders of the selected most entangled restarts
    disentangled: list[str]      # ... and most disentangled
    mig: dict                    # the selection's summary (probe.perturb.select_restarts)
    restart_mig: dict[str, float]  # every restart's run folder -> its MIG

    def chosen(self) -> dict[str, str]:
        """run folder -> "entangled" | "disentangled" for the selected restarts."""
        return {**{r: "entangled" for r in self.entangled}, **{r: "disentangled" for r in self.disentangled}}


def job_select_mig(ctx: JobContext, *, restart: int, seed: int) -> dict:
    from probe.perturb import evaluate_restarts

    run = restarts.run_of(ctx.inputs, restart)
    mig = evaluate_restarts([run.run_dir], store.result(ctx.inputs).path, seed=seed)
    return {"run_dir": run.run_dir, "seed": run.seed, "mig": float(mig[run.run_dir])}


def _collect(c, inputs, results):
    from probe.perturb import select_restarts

    chosen = select_restarts({r["run_dir"]: r["mig"] for r in results.values()}, k=c["k"])
    return {"entangled": chosen["entangled"], "disentangled": chosen["disentangled"], "mig": chosen["mig"],
            "jobs": results}


def result(inputs: dict) -> SelectResult:
    r = inputs[NAME]
    return SelectResult(list(r["entangled"]), list(r["disentangled"]), r["mig"],
                        {j["run_dir"]: j["mig"] for j in r["jobs"].values()})


def check(config: dict, *, deep: bool = True) -> None:
    k = config[NAME]["k"]
    if restarts.count(config) < 2 * k:
        raise UserError(f"{restarts.NAME}.count ({restarts.count(config)}) must be at least 2 × {NAME}.k ({k})")


def stage(config: dict, meta: dict) -> Stage:
    return Stage(NAME, config[NAME], input_names(INPUTS),
                 lambda c: [Job(restarts.job_key(s), job_select_mig, {"restart": s, "seed": c["seed"]})
                            for s in restarts.seeds(config)], _collect)
