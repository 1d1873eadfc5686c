"""Stage ``manipulate``: learn the manipulation m(w) from the selected restarts (probe.perturb), and Fig. 4.

``manipulate.partner`` says what the entangled side is: ``lowest-mig``, the selected most entangled restart(s) (the
paper, §4.3), or ``rotated``, the disentangled restart with its latent space rotated by ``partner_rotation_deg``
(probe.perturb.partner: the control pipeline's L2, a target alignment known to be exactly expressible). The result
names the runs m(w) was trained against (``entangled``, ``disentangled``): the alignment diagnostic compares every
retrained run with them.
"""

from __future__ import annotations

from probe.errors import UserError
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages.common import single_job_result
from probe.pipeline.worker import JobContext

PARTNERS = ("lowest-mig", "rotated")


def job_manipulate(ctx: JobContext, *, config: dict, figure4: bool, partner: str = "lowest-mig",
                   partner_rotation_deg: float = 45.0) -> dict:
    from probe.perturb import figure4 as make_figure4
    from probe.perturb import train_manipulation

    store_path = ctx.inputs["store"]["path"]
    select = ctx.inputs["select"]
    entangled, disentangled = list(select["entangled"]), list(select["disentangled"])
    if partner == "rotated":
        from probe.perturb.partner import rotated_partner

        entangled = [str(rotated_partner(disentangled[0], ctx.job_dir / "partner", store_path,
                                         rotation_deg=partner_rotation_deg))]
        disentangled = disentangled[:1]
    out = train_manipulation(store_path, entangled, disentangled, ctx.job_dir / "manipulation",
                             config, resume=True, progress=False, device=ctx.device)
    png = make_figure4(store_path, out, ctx.job_dir / "figure4.png") if figure4 else None
    from probe.perturb.adversarial import manipulation_final
    from probe.train import ManipulationRunFolder

    final = manipulation_final(out)
    return {"dir": str(out), "losses": str(ManipulationRunFolder(out).log_path), "figure4": str(png) if png else None,
            "coverage": final.get("coverage"), "partner": partner, "entangled": entangled,
            "disentangled": disentangled,
            "dis_minus_ent": {"before": (final.get("before") or {}).get("dis_minus_ent"),
                              "after": (final.get("after") or {}).get("dis_minus_ent")}}


def check(config: dict) -> None:
    """The ``[manipulate]`` keys this stage reads besides ``config`` (probe.perturb validates that one)."""
    m = config["manipulate"]
    if m.get("partner", "lowest-mig") not in PARTNERS:
        raise UserError(f"manipulate.partner must be one of {', '.join(PARTNERS)}, got {m.get('partner')!r}")
    if m.get("partner", "lowest-mig") == "rotated":
        try:
            float(m.get("partner_rotation_deg", 45.0))
        except (TypeError, ValueError):
            raise UserError(f"manipulate.partner_rotation_deg must be a number, got {m.get('partner_rotation_deg')!r}") from None


def stage(config: dict, meta: dict) -> Stage:
    return Stage("manipulate", config["manipulate"], ["store", "select"],
                 lambda c: [Job("manipulate", job_manipulate, dict(c), work=c["config"].get("steps", 1))],
                 single_job_result("manipulate"))
