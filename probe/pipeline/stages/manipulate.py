"""Stage ``manipulate``: learn the manipulation m(w) from the selected restarts (probe.perturb), and Fig. 4."""

from __future__ import annotations

from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages.common import single_job_result
from probe.pipeline.worker import JobContext


def job_manipulate(ctx: JobContext, *, config: dict, figure4: bool) -> dict:
    from probe.perturb import figure4 as make_figure4
    from probe.perturb import train_manipulation

    store_path = ctx.inputs["store"]["path"]
    select = ctx.inputs["select"]
    out = train_manipulation(store_path, select["entangled"], select["disentangled"], ctx.job_dir / "manipulation",
                             config, resume=True, progress=False, device=ctx.device)
    png = make_figure4(store_path, out, ctx.job_dir / "figure4.png") if figure4 else None
    from probe.perturb.adversarial import manipulation_final
    from probe.train import ManipulationRunFolder

    final = manipulation_final(out)
    return {"dir": str(out), "losses": str(ManipulationRunFolder(out).log_path), "figure4": str(png) if png else None,
            "coverage": final.get("coverage"),
            "dis_minus_ent": {"before": (final.get("before") or {}).get("dis_minus_ent"),
                              "after": (final.get("after") or {}).get("dis_minus_ent")}}


def stage(config: dict, meta: dict) -> Stage:
    return Stage("manipulate", config["manipulate"], ["store", "select"],
                 lambda c: [Job("manipulate", job_manipulate, dict(c), work=c["config"].get("steps", 1))],
                 single_job_result("manipulate"))
