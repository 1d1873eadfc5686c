"""Stage ``manipulate-random``: the frozen random-ψ control of the learned manipulation (issue 24, appendix B).

The manipulation training loop of stage ``manipulate`` run once more with ψ frozen at its seeded random
initialisation (``freeze_psi``): the same config (ε, seed, steps, batches, decoder schedule), the same entangled and
disentangled runs (the selected restarts, or the rotated partner), the same batch and noise draws, so the two
decoders are fine-tuned on x′ = fold(x + ε·m_random(w)) exactly as they are on the learned m's x′; and ψ starts where
the learned ψ started. The difference between the two runs' decoder loss gaps is what *learning* m adds. With
``full_budget`` (default) each image's random m is rescaled to ‖m‖∞ = 1 (``normalise_linf``): an untrained renderer's
m is small (median |m|∞ 0.005 on the 32×32 Shapes3D quick store, 0.018 on its 16×16 smoke store), so without it the
control would spend almost none of the budget ε the learned m saturates. No store is
written and nothing is retrained on it; the report stage measures the global-PCA change orig → x′_random
(probe.pipeline.why) on the fly.

Why a stage of its own rather than a key of ``manipulate``: ``apply``, ``retrain`` and everything after read
``manipulate``'s digest, so a control inside it would retrain every model whenever the control is switched on or off;
as its own stage it is cached, resumed and switched on its own, and only the report reads it. It reads the selection,
not the learned manipulation (its ψ is frozen at the seeded initialisation, not taken from ``manipulate``), so on a
cluster it trains beside ``manipulate`` (probe.pipeline.engine runs independent stages side by side): on the 2-core
VM the two ran one after the other on one core each, ≈ 1.4 h of the cpu preset with the other core idle.

``[manipulate-random]``: ``enabled`` (default true in modify.toml), ``full_budget``. The result records the run
folder, the log, both sides' losses before/after, the coverage and smoothness of m, and the resolved config (its
``seed`` is the manipulation's).
"""

from __future__ import annotations

import dataclasses

from probe.errors import UserError
from probe.pipeline.engine import Job, Stage
from probe.pipeline.stages import manipulate, select, store
from probe.pipeline.stages.face import input_names
from probe.pipeline.worker import JobContext

NAME = "manipulate-random"
INPUTS = (store, select)
DEFAULTS = {"enabled": False, "full_budget": True}   # a pipeline without the table runs no control


@dataclasses.dataclass(frozen=True)
class RandomControlResult:
    dir: str                     # the control's manipulation run folder (probe.perturb)
    losses: str                  # its log (the same keys as the learned run's)
    full_budget: bool            # each image's m rescaled to ‖m‖∞ = 1
    record: dict                 # the whole result (the report inputs' ``manipulation_random`` entry)


def settings(config: dict) -> dict:
    """The ``[manipulate-random]`` table over its defaults."""
    return {**DEFAULTS, **(config.get(NAME) or {})}


def control_config(manipulation_config: dict, full_budget: bool) -> dict:
    """The learned manipulation's config with ψ frozen (and, with ``full_budget``, m rescaled to ‖m‖∞ = 1)."""
    return {**manipulation_config, "freeze_psi": True, "normalise_linf": bool(full_budget)}


def job_manipulate_random(ctx: JobContext, *, config: dict, full_budget: bool, partner: str,
                          partner_rotation_deg: float) -> dict:
    from probe.perturb import train_manipulation

    entangled, disentangled = manipulate.training_runs(ctx, partner, partner_rotation_deg)
    out = train_manipulation(store.result(ctx.inputs).path, entangled, disentangled,
                             ctx.job_dir / "manipulation", control_config(config, full_budget), resume=True,
                             progress=False, device=ctx.device)
    return {**manipulate.run_record(out), "full_budget": bool(full_budget), "entangled": entangled,
            "disentangled": disentangled}


def result(inputs: dict) -> RandomControlResult | None:
    """The control's result, None where the stage is disabled (or the pipeline does not run it)."""
    if NAME not in inputs:
        return None
    job = inputs[NAME]["jobs"].get(NAME)
    if not job:
        return None
    return RandomControlResult(job["dir"], job["losses"], bool(job.get("full_budget", True)), dict(job))


def check(config: dict, *, deep: bool = True) -> None:
    c = settings(config)
    unknown = sorted(set(c) - set(DEFAULTS))
    if unknown:
        raise UserError(f"unknown {NAME} setting(s) {', '.join(unknown)} (known: {', '.join(DEFAULTS)})")
    for key in DEFAULTS:
        if not isinstance(c[key], bool):
            raise UserError(f"{NAME}.{key} must be true or false, got {c[key]!r}")
    if c["enabled"] and deep:
        from probe.perturb.adversarial import resolve_manipulation_config

        resolve_manipulation_config(control_config(manipulate.manipulation_config(config), c["full_budget"]),
                                    config["pipeline"]["dataset"])


def stage(config: dict, meta: dict) -> Stage:
    c = settings(config)
    # the stage's digest covers what it runs: the manipulation's config and the runs it trains against
    stage_config = {**c, "config": dict(manipulate.manipulation_config(config)), **manipulate.partner_settings(config)}
    return Stage(NAME, stage_config, input_names(INPUTS),
                 lambda s: [Job(NAME, job_manipulate_random, {"config": dict(s["config"]), "full_budget": s["full_budget"],
                                                              "partner": s["partner"],
                                                              "partner_rotation_deg": s["partner_rotation_deg"]},
                                work=s["config"].get("steps", 1))] if s["enabled"] else [])
