"""Stage ``manipulate``: learn the manipulation m(w) from the selected restarts (probe.perturb), and Fig. 4.

``manipulate.partner`` says what the entangled side is: ``lowest-mig``, the selected most entangled restart(s) (the
paper, §4.3), or ``rotated``, the disentangled restart with its latent space rotated by ``partner_rotation_deg``
(probe.perturb.partner: the control pipeline's L2, a target alignment known to be exactly expressible). The result
names the runs m(w) was trained against (``entangled``, ``disentangled``): the alignment diagnostic compares every
retrained run with them.
"""

from __future__ import annotations

import dataclasses

from probe.errors import UserError
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import select, store
from probe.pipeline.stages.face import input_names, single_job_result
from probe.pipeline.worker import JobContext

NAME = "manipulate"
INPUTS = (store, select)
PARTNERS = ("lowest-mig", "rotated")
ROTATION_DEG = 45.0            # the rotated partner's default angle (partner_rotation_deg)


@dataclasses.dataclass(frozen=True)
class ManipulateResult:
    dir: str                     # the manipulation's run folder (probe.perturb)
    losses: str                  # its log
    figure4: str | None
    partner: str
    entangled: list[str]         # the runs m(w) was trained against
    disentangled: list[str]
    record: dict                 # the whole result (the report inputs' ``manipulation`` entry)


def job_manipulate(ctx: JobContext, *, config: dict, figure4: bool, partner: str = PARTNERS[0],
                   partner_rotation_deg: float = ROTATION_DEG) -> dict:
    from probe.perturb import figure4 as make_figure4
    from probe.perturb import train_manipulation

    store_path = store.result(ctx.inputs).path
    entangled, disentangled = training_runs(ctx, partner, partner_rotation_deg)
    out = train_manipulation(store_path, entangled, disentangled, ctx.job_dir / "manipulation",
                             config, resume=True, progress=False, device=ctx.device)
    png = make_figure4(store_path, out, ctx.job_dir / "figure4.png") if figure4 else None
    return {**run_record(out), "figure4": str(png) if png else None, "partner": partner, "entangled": entangled,
            "disentangled": disentangled}


def training_runs(ctx: JobContext, partner: str, partner_rotation_deg: float) -> tuple[list[str], list[str]]:
    """(entangled, disentangled) run folders m(w) trains against, from the selection: the selected restarts, or
    with ``rotated`` the disentangled restart and its rotated partner (written into the job's folder; a
    deterministic function of that restart, so the random-ψ control builds the same one in its own folder)."""
    chosen = select.result(ctx.inputs)
    entangled, disentangled = chosen.entangled, chosen.disentangled
    if partner == "rotated":
        from probe.perturb.partner import rotated_partner

        entangled = [str(rotated_partner(disentangled[0], ctx.job_dir / "partner", store.result(ctx.inputs).path,
                                         rotation_deg=partner_rotation_deg))]
        disentangled = disentangled[:1]
    return entangled, disentangled


def partner_settings(config: dict) -> dict:
    """``[manipulate]`` ``partner`` and ``partner_rotation_deg`` with their defaults (the random-ψ control trains
    against the same runs)."""
    m = config[NAME]
    return {"partner": m.get("partner", PARTNERS[0]), "partner_rotation_deg": float(m.get("partner_rotation_deg", ROTATION_DEG))}


def run_record(out) -> dict:
    """What a stage records of a finished manipulation run folder (this stage and manipulate-random): its folder,
    log, the coverage of m (|m|∞, variation, smoothness), both sides' losses before (x, the restarts' decoders),
    after (x′, the fine-tuned decoders) and after with each image given another image's m (``after_shuffled``), their
    gap dis − ent, and the resolved config (ε, seed, ...)."""
    from probe.perturb.adversarial import manipulation_final
    from probe.train import ManipulationRunFolder

    folder = ManipulationRunFolder(out)
    final = manipulation_final(out)
    before, after = final.get("before") or {}, final.get("after") or {}
    shuffled = final.get("after_shuffled") or {}  # absent in runs recorded before session 44
    return {"dir": str(out), "losses": str(folder.log_path), "coverage": final.get("coverage"),
            "dis_minus_ent": {"before": before.get("dis_minus_ent"), "after": after.get("dis_minus_ent"),
                              "after_shuffled": shuffled.get("dis_minus_ent")},
            "before": before, "after": after, "after_shuffled": shuffled, "config": folder.read_config().get("config")}


def result(inputs: dict) -> ManipulateResult:
    r = inputs[NAME]
    return ManipulateResult(r["dir"], r["losses"], r.get("figure4"), r.get("partner", PARTNERS[0]),
                            list(r["entangled"]), list(r["disentangled"]), {k: v for k, v in r.items() if k != "jobs"})


def manipulation_config(config: dict) -> dict:
    """The ``[manipulate.config]`` table: the manipulation's own settings (ε, seed, steps, ...; probe.perturb resolves
    them), which the random-ψ control reuses and the report stage checks against appendix B.1."""
    return config[NAME]["config"]


def check(config: dict, *, deep: bool = True) -> None:
    """The ``[manipulate]`` keys this stage reads besides ``config``; with ``deep``, ``config`` itself
    (probe.perturb resolves it)."""
    m = config[NAME]
    if m.get("partner", PARTNERS[0]) not in PARTNERS:
        raise UserError(f"{NAME}.partner must be one of {', '.join(PARTNERS)}, got {m.get('partner')!r}")
    if m.get("partner", PARTNERS[0]) == "rotated":
        try:
            float(m.get("partner_rotation_deg", ROTATION_DEG))
        except (TypeError, ValueError):
            raise UserError(f"{NAME}.partner_rotation_deg must be a number, got {m.get('partner_rotation_deg')!r}") from None
    if deep:
        from probe.perturb.adversarial import resolve_manipulation_config

        resolve_manipulation_config(m["config"], config["pipeline"]["dataset"])


def stage(config: dict, meta: dict) -> Stage:
    return Stage(NAME, config[NAME], input_names(INPUTS),
                 lambda c: [Job(NAME, job_manipulate, dict(c), work=c["config"].get("steps", 1))],
                 single_job_result(NAME))
