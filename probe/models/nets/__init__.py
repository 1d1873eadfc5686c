"""Architectures. ``build_encoder``/``build_decoder`` give the shared ones by name; model-specific
architectures (qlae, tripod, fqvae) live in their own modules and are built by their models."""

from __future__ import annotations

from torch import nn

from probe.errors import UserError

SHARED_ARCHS = ("locatello", "mlp")


def build_encoder(arch: str, image_shape, num_latent: int, gaussian: bool = True) -> nn.Module:
    from probe.models.nets import locatello

    if arch == "locatello":
        return locatello.ConvEncoder(image_shape, num_latent, gaussian=gaussian)
    if arch == "mlp":
        return locatello.MLPEncoder(image_shape, num_latent, gaussian=gaussian)
    raise UserError(f"unknown shared architecture {arch!r} (choose from {', '.join(SHARED_ARCHS)})")


def build_decoder(arch: str, image_shape, num_latent: int) -> nn.Module:
    from probe.models.nets import locatello

    if arch == "locatello":
        return locatello.DeconvDecoder(image_shape, num_latent)
    if arch == "mlp":
        return locatello.MLPDecoder(image_shape, num_latent)
    raise UserError(f"unknown shared architecture {arch!r} (choose from {', '.join(SHARED_ARCHS)})")
