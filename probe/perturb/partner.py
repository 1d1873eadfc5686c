"""A constructed entangled partner for the manipulation (the control pipeline's L2, docs/notes/control.md).

In the paper the entangled side E is the lowest-MIG restart, so its alignment is whatever a bad seed found, and it
is unknown whether the target alignment is exactly expressible by the architecture. The control replaces it by the
disentangled restart D with its latent space rotated by ``rotation_deg`` in the plane of its two most important
latents (smallest ⟨σ²⟩, Eq. 14): E encodes z_E = R·z_D and decodes with D's decoder composed with Rᵀ, so E
reconstructs the original images exactly as well from its means, and its alignment is known (45°: every factor that
D gives its own latent is split evenly over two of E's).

What E cannot inherit exactly is D's posterior noise: a rotated diagonal Gaussian is not diagonal. E's log-variances
in the rotated plane are the R²-weighted means of D's (σ²_E,i = Π_j σ²_D,j^{R_ij²}; at 45° the geometric mean of the
pair), a linear map of D's log-variance head. So E has the same total log-noise volume as D but spread evenly over the
rotated axes: the distribution of noise over the latent space is precisely what §4.4 says m(w) plays on.

The partner is written as an ordinary complete run folder (config with a ``partner`` record, weights, log, done
record), so the manipulation, evaluation and alignment code read it like any restart.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import torch

from probe.errors import UserError
from probe.provenance import atomic_path

# the GaussianVAE heads the rotation rewrites, for the shared architectures (probe/models/nets/locatello.py)
ENCODER_MEAN = "encoder.means"
ENCODER_LOGVAR = "encoder.log_var"
DECODER_INPUTS = ("decoder.dense.0", "decoder.net.0")   # conv decoder, MLP decoder: the first Linear after z


def plane_rotation(num_latent: int, dims: tuple[int, int], rotation_deg: float) -> np.ndarray:
    """[D, D] identity with a rotation by ``rotation_deg`` in the plane of latents ``dims``."""
    a = math.radians(float(rotation_deg))
    i, j = dims
    r = np.eye(num_latent)
    r[i, i], r[i, j], r[j, i], r[j, j] = math.cos(a), -math.sin(a), math.sin(a), math.cos(a)
    return r


def rotate_weights(weights: dict, rotation: np.ndarray) -> dict:
    """D's state dict -> E's: means' head R·W, log-variance head (R∘R)·W, decoder input W·Rᵀ."""
    out = dict(weights)
    r = torch.as_tensor(rotation, dtype=torch.float64)
    decoder = next((p for p in DECODER_INPUTS if f"{p}.weight" in weights), None)
    missing = [k for k in (f"{ENCODER_MEAN}.weight", f"{ENCODER_LOGVAR}.weight") if k not in weights]
    if missing or decoder is None:
        raise UserError("a rotated partner needs a Gaussian VAE on the shared architecture (encoder.means, "
                        f"encoder.log_var, decoder.dense.0 or decoder.net.0); missing {missing or 'the decoder input'}")

    def mapped(key, matrix, side):
        w = weights[key]
        m = matrix.to(torch.float64)
        return ((m @ w.to(torch.float64)) if side == "left" else (w.to(torch.float64) @ m.T)).to(w.dtype)

    for head, matrix in ((ENCODER_MEAN, r), (ENCODER_LOGVAR, r * r)):
        out[f"{head}.weight"] = mapped(f"{head}.weight", matrix, "left")
        out[f"{head}.bias"] = (matrix @ weights[f"{head}.bias"].to(torch.float64)).to(weights[f"{head}.bias"].dtype)
    out[f"{decoder}.weight"] = mapped(f"{decoder}.weight", r, "right")
    return out


def most_important_pair(run_dir, store_path, seed: int = 0, num_images: int = 2000) -> tuple[int, int]:
    """The two latents with the smallest mean posterior variance over a sample of the store (Eq. 14)."""
    from probe.data import open_store
    from probe.train import run_encoder

    store = open_store(store_path)
    n = min(num_images, store.num_images)
    idx = np.sort(np.random.RandomState(seed).choice(store.num_images, n, replace=False))
    out = run_encoder(run_dir).encode(store.read(idx))
    if "variance" not in out:
        raise UserError(f"{run_dir}: a rotated partner needs a model with a posterior variance")
    order = np.argsort(np.asarray(out["variance"]).reshape(n, -1).mean(axis=0), kind="stable")
    if order.size < 2:
        raise UserError(f"{run_dir} has one latent; a rotation needs two")
    return int(order[0]), int(order[1])


def rotated_partner(run_dir, out_dir, store_path, *, rotation_deg: float = 45.0, seed: int = 0) -> Path:
    """Write E, ``run_dir`` with its latent space rotated (module docstring), as a complete run folder at
    ``out_dir``; an existing complete partner with the same record is returned as is."""
    from probe.train import RunFolder
    from probe.train.run_folder import COMPACTED

    source = RunFolder(run_dir)
    source.require_complete("the partner is built from a finished restart")
    folder = RunFolder(out_dir)
    dims = most_important_pair(run_dir, store_path, seed=seed)
    record = {"source": str(source.path), "source_checkpoint_sha256": source.checkpoint_sha256(),
              "rotation_deg": float(rotation_deg), "dims": list(dims)}
    if folder.is_complete and _same_partner(folder.read_config().get("partner"), record):
        return folder.path
    payload = source.load_checkpoint()
    num_latent = int(payload["model"][f"{ENCODER_MEAN}.weight"].shape[0])
    rotation = plane_rotation(num_latent, dims, rotation_deg)
    config = source.read_config()
    with atomic_path(Path(out_dir), overwrite=True) as tmp:
        tmp = Path(tmp)
        tmp.mkdir(parents=True)
        if source.log_path.exists():
            shutil.copyfile(source.log_path, tmp / RunFolder.LOG)
        staged = RunFolder(tmp)
        staged.write_config({**config, "partner": record})
        # the weights only: a partner is read, never trained further
        staged.save_checkpoint({"step": payload["step"], "wall_time_s": payload.get("wall_time_s", 0.0),
                                "identity_digest": payload.get("identity_digest"),
                                "model": rotate_weights(payload["model"], rotation),
                                COMPACTED: {"bytes_before": 0, "hint": "a rotated partner is never trained further"}})
        done = json.loads(source.done_path.read_text())
        staged.write_done({**done, "partner": record, "checkpoint_sha256": staged.checkpoint_sha256()})
    return folder.path


def _same_partner(old: dict | None, new: dict) -> bool:
    """Whether a finished partner was built as ``new`` asks: the same source checkpoint, rotation and plane; the
    source's path is provenance (a pipeline workdir copied elsewhere keeps its partner)."""
    return isinstance(old, dict) and all(old.get(k) == new[k] for k in new if k != "source")


__all__ = ["plane_rotation", "rotate_weights", "rotated_partner", "most_important_pair"]
