"""How a trained run's codes align with the selected entangled and disentangled restarts, and with the global PCA
of the original images (the evaluate and robustness jobs record it; the report inputs carry it per run)."""

from __future__ import annotations

from probe.errors import UserError
from probe.pipeline.stages.face import present

ALIGNMENT_SAMPLES = 5000          # factor points encoded by the run and by each selected restart
_RESTART_CODES: dict = {}          # (restart run dir, orig store, sample seed, n, device) -> (codes, active mask)


def run_alignment(inputs: dict, run_dir, store_path, settings: dict) -> dict:
    """``{"alignment": ...}`` for a retrained run: ``probe.metrics.code_alignment`` of its posterior-mean
    codes to each selected entangled and disentangled restart (averaged over the members of a
    k-ensemble, each recorded). ``{}`` when the stage has no select input (nothing to compare with);
    ``{"alignment": None, "alignment_error": reason}`` when it fails: it never fails the evaluation.

    The same factor points for both sides: ``ALIGNMENT_SAMPLES`` grid points drawn without replacement
    with ``RandomState(evaluate seed)``; the run encodes them from the store it was trained on, each
    restart from the original store (its training data); its active units (mean posterior variance
    below ``active_threshold`` over the sample) select the reference latents. ``global_pca``: the run's active
    codes against the orig images' top principal components at the same points (``global_pca_capture``) — whether
    the run holds the linear VAE's solution, which a β-VAE whose local structure is scrambled may fall back on."""
    from probe.pipeline.stages import store

    references = reference_runs(inputs)
    if references is None or not present(inputs, store):
        return {}
    try:
        return {"alignment": alignment_of(references, run_dir, store_path, store.result(inputs).path, settings)}
    except Exception as exc:  # noqa: BLE001 - a diagnostic; recorded, never fatal
        return {"alignment": None, "alignment_error": f"{type(exc).__name__}: {exc}"}


def reference_runs(inputs: dict) -> dict | None:
    """The ``{"entangled": [...], "disentangled": [...]}`` runs a retrained run is compared with: the pair m(w) was
    trained against (the manipulate stage's result: the selected restarts, or the control pipeline's rotated partner
    as the entangled side), else the selected restarts; None when the stage has neither input."""
    from probe.pipeline.stages import manipulate, select

    if present(inputs, manipulate):
        pair = manipulate.result(inputs)
    elif present(inputs, select):
        pair = select.result(inputs)
    else:
        return None
    return {"entangled": pair.entangled, "disentangled": pair.disentangled}


def alignment_of(select: dict, run_dir, store_path, orig_path, settings: dict) -> dict:
    import numpy as np

    from probe.data import open_store
    from probe.metrics import code_alignment
    from probe.metrics.alignment import ALIGNMENT_NUMBERS, GLOBAL_PCA
    from probe.metrics.evaluate import resolve_settings
    from probe.train import run_encoder

    s = resolve_settings(settings.get("sample_sizes") or {})
    device, seed, threshold = s["device"] or "cpu", int(settings.get("seed", 0)), float(s["active_threshold"])
    orig, run_store = open_store(orig_path), open_store(store_path)
    if list(orig.factor_sizes) != list(run_store.factor_sizes):
        raise UserError(f"store {store_path} has factor sizes {list(run_store.factor_sizes)}, the original store "
                        f"{list(orig.factor_sizes)}: no shared factor points")
    n = min(ALIGNMENT_SAMPLES, orig.num_images)
    orig_idx = np.sort(np.random.RandomState(seed).choice(orig.num_images, size=n, replace=False))
    run_idx = np.asarray(run_store.index_of(np.asarray(orig.factors[orig_idx])), dtype=np.int64)

    def encode(path, store, idx):
        encode_fn = run_encoder(path, device=device, batch_size=s["encode_batch_size"]).encode
        order = np.argsort(idx, kind="stable")         # read in index order, return in sample order
        out = encode_fn(store.read(idx[order]))
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size)
        return {k: np.asarray(v)[inverse] for k, v in out.items()}

    run_out = encode(run_dir, run_store, run_idx)
    codes = run_out["codes"].reshape(n, -1).astype(np.float64)
    result = {}
    for group in ("entangled", "disentangled"):
        members = []
        for restart in select[group]:
            key = (str(restart), str(orig_path), seed, n, device)
            if key not in _RESTART_CODES:
                ref = encode(restart, orig, orig_idx)
                active = ref["variance"].mean(axis=0) < threshold if "variance" in ref else None
                if len(_RESTART_CODES) > 16:
                    _RESTART_CODES.clear()
                _RESTART_CODES[key] = (ref["codes"].reshape(n, -1).astype(np.float64), active)
            ref_codes, active = _RESTART_CODES[key]
            members.append({"run_dir": str(restart), **code_alignment(codes, ref_codes, reference_active=active)})
        result[group] = {name: _mean_or_none([m[name] for m in members]) for name in ALIGNMENT_NUMBERS}
        result[group].update({"members": members, "num_samples": int(n), "seed": seed})
    run_active = (run_out["variance"].reshape(n, -1).mean(axis=0) < threshold if "variance" in run_out
                  else np.ones(codes.shape[1], dtype=bool))   # an encoder without a posterior (PCL): every latent
    result[GLOBAL_PCA] = global_pca_capture(codes[:, run_active] if run_active.any() else codes,
                                            *_pca_reference(orig, orig_path, orig_idx, seed))
    return result


_PCA_SCORES: dict = {}      # (orig store, sample seed, n) -> (scores, blocks, explained share)


def _pca_reference(orig, orig_path, orig_idx, seed: int):
    """The orig images' scores on their top K principal components (K = the number of factors) at the sample's
    points, grouped into blocks of near-equal eigenvalues (``spectral_blocks``), and the share of variance they hold."""
    import numpy as np

    from probe.analysis.alignment import block_columns
    from probe.analysis.verify import principal_scores

    key = (str(orig_path), seed, int(orig_idx.size))
    if key not in _PCA_SCORES:
        k = len(orig.factor_sizes)
        scores, values, total = principal_scores(orig.read(orig_idx).astype(np.float32) / 255.0, k)
        _PCA_SCORES.clear()
        _PCA_SCORES[key] = (scores, block_columns(values, k), float(values.sum() / total))
    return _PCA_SCORES[key]


def global_pca_capture(codes, scores, blocks, explained: float) -> dict:
    """How a run's active codes hold the global PCA of the original images (``probe.metrics.block_capture``: span R²
    and each block's R² on its best latents, invariant to rotations inside a block of near-equal eigenvalues). A run
    in the linear VAE's solution (Theorem 1) reads ≈ 1 on both."""
    from probe.metrics import block_capture

    out = block_capture(codes, scores, blocks)
    return {**out, "blocks": blocks, "explained": explained, "num_components": int(scores.shape[1])}


def _mean_or_none(values: list):
    values = [float(v) for v in values if v is not None]
    return sum(values) / len(values) if values else None


def alignment_entry(result: dict) -> dict:
    """The report_inputs ``alignment`` of one run (None when it was not computed), with its error if any."""
    entry = {"alignment": result.get("alignment")}
    if result.get("alignment_error"):
        entry["alignment_error"] = result["alignment_error"]
    return entry
