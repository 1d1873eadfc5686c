"""Which factors each retrained run encodes: the per-factor terms behind MIG (``probe.metrics.mig.factor_capture``).

Two runs with equal MIG can encode different factors; a β-VAE with two active latents for six factors has a MIG
capped near 2/6 whatever else happens. For every retrained run (orig, mod, noise) the report encodes MIG's own
sample on the run's training store (the factor rows ``draw_train_test`` draws with the evaluation's seed and
sizes, recorded in ``provenance.config.evaluate``; as ``benchmarks/factor_capture.py``) and keeps, per factor,
the normalised MI gap, the latent carrying it and the best normalised MI. The mean of the gaps is the run's MIG:
the report compares it with the MIG the pipeline recorded, as a check that the sample is the same.

Works on any workdir the report reads (report_inputs.json is unchanged); a run that cannot be loaded is
recorded with its error, never raised.
"""

from __future__ import annotations

import time

import numpy as np

from probe.report.gates import CAPTURE_THRESHOLD, encoded_factor_count
from probe.report.inputs import VARIANTS, metric_value, resolve_path


def mig_sample_settings(inputs: dict) -> dict:
    """{"seed", "num_train", "num_test", "draw_batch_size", "num_bins"} of the evaluation that produced the runs'
    metrics (``provenance.config.evaluate``; the metric defaults where the inputs do not record them)."""
    from probe.metrics.registry import default_settings

    evaluate = (((inputs.get("provenance") or {}).get("config") or {}).get("evaluate") or {})
    settings = {**default_settings(), **(evaluate.get("sample_sizes") or {})}
    return {"seed": int(evaluate.get("seed", 0)), "recorded": bool(evaluate),
            **{k: int(settings[k]) for k in ("num_train", "num_test", "draw_batch_size", "num_bins")}}


def run_capture(run_dir, store, sample: dict, device: str = "cpu") -> dict:
    """``factor_capture`` of one run on MIG's sample of ``store``, with the number of active latents
    (E[σ²] < 0.8 over that sample; None without a posterior variance)."""
    from probe.metrics.mig import factor_capture
    from probe.metrics.sampler import draw_train_test
    from probe.train import run_encoder

    factors, _ = draw_train_test(np.asarray(store.factor_sizes), sample["num_train"], sample["num_test"],
                                 sample["seed"], sample["draw_batch_size"])
    # each distinct image encoded once, as the evaluation's code cache does
    unique, inverse = np.unique(store.index_of(factors), return_inverse=True)
    out = run_encoder(run_dir, device=device).encode(store.read(unique))
    capture = factor_capture(out["codes"][inverse], factors, num_bins=sample["num_bins"])
    variance = out.get("variance")
    capture["active"] = int((variance[inverse].mean(axis=0) < 0.8).sum()) if variance is not None else None
    return capture


def capture_runs(inputs: dict, sample: dict) -> dict:
    """{"runs": [{model, variant, seed, run_dir, gap, latent, best_nmi, mig, mig_recorded, encoded, active} or
    {model, variant, seed, run_dir, error}], "factor_names", "sample", "device", "wall_time_s"} for every retrained
    run of one workdir. A GPU encodes when there is one: the full preset's 10,000-image samples over hundreds of
    runs take long on a CPU."""
    import torch

    from probe.data import open_store

    device = "cuda" if torch.cuda.is_available() else "cpu"
    started = time.time()
    stores, entries = {}, []
    factor_names = None
    for run in sorted(inputs["runs"],
                      key=lambda r: (str(r["model"]), VARIANTS.index(r["variant"]), r.get("seed") or 0)):
        entry = {"model": run["model"], "variant": run["variant"], "seed": run.get("seed"),
                 "run_dir": run.get("run_dir")}
        try:
            if run["variant"] not in stores:
                path = resolve_path(inputs, ((inputs.get("stores") or {}).get(run["variant"]) or {}).get("path"))
                if path is None:
                    raise FileNotFoundError(f"the inputs name no {run['variant']} store")
                stores[run["variant"]] = open_store(path)
            store = stores[run["variant"]]
            factor_names = factor_names or list(store.factor_names)
            capture = run_capture(resolve_path(inputs, run.get("run_dir")), store, sample, device)
            entry.update(capture, mig_recorded=metric_value(run.get("metrics"), "mig"),
                         encoded=encoded_factor_count(capture["best_nmi"]))
        except Exception as exc:  # noqa: BLE001 - a missing checkpoint or store is stated in the report
            entry["error"] = f"{type(exc).__name__}: {exc}"
        entries.append(entry)
    return {"runs": entries, "factor_names": factor_names, "sample": sample, "device": device,
            "wall_time_s": time.time() - started}


def summarise_capture(entries: list[dict], threshold: float = CAPTURE_THRESHOLD) -> dict:
    """{(model, variant): {"mean_gap": [per factor, None where no run measured it], "encoding": [seeds with gap ≥
    threshold, per factor], "n": runs}} over the entries without an error."""
    groups: dict = {}
    for e in entries:
        if "error" not in e:
            groups.setdefault((e["model"], e["variant"]), []).append(e["gap"])
    out = {}
    for key, gaps in groups.items():
        columns = list(zip(*gaps))
        out[key] = {"mean_gap": [float(np.mean([g for g in c if g is not None])) if any(g is not None for g in c)
                                 else None for c in columns],
                    "encoding": [sum(1 for g in c if g is not None and g >= threshold) for c in columns],
                    "n": len(gaps)}
    return out


def encoded_by_run(capture: dict | None, model: str, variant: str = "orig") -> list[int]:
    """Encoded-factor counts (best normalised MI ≥ threshold) of one model's runs on one variant."""
    return [e["encoded"] for e in (capture or {}).get("runs", [])
            if e["model"] == model and e["variant"] == variant and "error" not in e]
