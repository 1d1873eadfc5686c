"""Model registry: name -> class. Built-ins are imported lazily; plug-ins come from the entry-point
group ``probe.models`` or ad hoc as ``package.module:Class``."""

from __future__ import annotations

from importlib import metadata

from probe.errors import UserError
from probe.imports import importable, load_attr

BUILTIN_MODELS: dict[str, str] = {
    "ae": "probe.models.ae:AE",
    "beta-vae": "probe.models.beta_vae:BetaVAE",
    "beta-tcvae": "probe.models.beta_tcvae:BetaTCVAE",
    "factor-vae": "probe.models.factor_vae:FactorVAE",
    "dip-vae-i": "probe.models.dip_vae:DIPVAEI",
    "dip-vae-ii": "probe.models.dip_vae:DIPVAEII",
    "slow-vae": "probe.models.slow_vae:SlowVAE",
    "rtc-vae": "probe.models.rtc_vae:RTCVAE",
    "pcl": "probe.models.pcl:PCL",
    "linear-vae": "probe.models.linear_vae:LinearVAE",
    "qlae": "probe.models.qlae:QLAE",
    "tripod": "probe.models.tripod:Tripod",
    "factor-qvae": "probe.models.factor_qvae:FactorQVAE",
    "qvae": "probe.models.factor_qvae:QVAE",
    "dvae": "probe.models.factor_qvae:DVAE",
}

ENTRY_POINT_GROUP = "probe.models"


def entry_point_models() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available_models() -> list[str]:
    """Every registered name: built-ins that import on this install, then entry-point plug-ins."""
    names = [n for n in BUILTIN_MODELS if _builtin_importable(n)]
    return names + sorted(n for n in entry_point_models() if n not in BUILTIN_MODELS)


def _builtin_importable(name: str) -> bool:
    return importable(BUILTIN_MODELS[name])


def get_model_class(name: str):
    """Resolve a model by registry name, entry-point name or ``module:Class``."""
    if name in BUILTIN_MODELS:
        return load_attr(BUILTIN_MODELS[name], f"model {name!r}")
    eps = entry_point_models()
    if name in eps:
        try:
            return eps[name].load()
        except Exception as exc:
            raise UserError(f"plug-in model {name!r} (entry point {eps[name].value}): loading failed: {type(exc).__name__}: {exc}") from None
    if ":" in name:
        return load_attr(name, f"plug-in model {name!r}")
    raise UserError(f"unknown model {name!r}; `probe models list` shows the available ones "
                    "(or pass a plug-in as package.module:Class)")
