"""Report sections for the mechanism behind the verdicts (Zietlow et al. 2021 §3.3, Fig. 1, Theorem 1).

* ``why_section``: "Why: local vs global alignment" from the report inputs' ``"why"`` entry
  (probe/pipeline/why.py): a table and a figure of how well each decoder's directions match the
  local vs the global principal directions of its training data, and the global-PCA change orig → mod.
* ``linear_pca_judgement``: the linear-PCA check's spectrum blocks, verdict and reasons
  (probe.analysis.verify.judge), shown below its table.

Kept out of build.py so that other edits to the report merge cleanly; build.py calls these two.
"""

from __future__ import annotations

from pathlib import Path

from probe.report.schema import FILE_NAME, store_fact

STATUS = {"pass": "yes", "pass-blocks": "yes, per block (near-degenerate eigenvalues)", "fail": "no"}


def status_cell(check: dict) -> str:
    """The linear-PCA table's "pass" cell: per-direction pass, pass per spectral block, or no."""
    status = (check.get("judgement") or {}).get("status")
    return STATUS.get(status, "yes" if check.get("passed") else "no")


def linear_pca_judgement(doc, res: dict, withheld: str | None = None) -> None:
    """Spectrum blocks and the reasons of the verdict, for a store result (``verify_store``). ``withheld``: why
    the verdict and its reasons are not printed (a smoke run); the blocks are."""
    if not res or res.get("kind") != "store":
        return
    check = res.get("linear_vae") or {}
    spectrum, judgement = check.get("spectrum"), check.get("judgement")
    if not spectrum or not judgement:
        doc.para("This result predates the spectral-gap check (no eigenvalue blocks recorded); re-run "
                 "`probe pca verify --store STORE` for the judgement.")
        return
    thr = spectrum["ratio_threshold"]
    rows = []
    for b in spectrum["blocks"]:
        rng = f"{b['start'] + 1}" if b["size"] == 1 else f"{b['start'] + 1}–{b['end'] + 1}"
        rows.append([rng, ", ".join(f"{v:.3g}" for v in b["eigenvalues"]), f"{b['ratio_last_first']:.3f}",
                     "near-degenerate (subspace)" if b["degenerate"] else "well separated (direction)",
                     ", ".join(str(x) for x in b["latents"]), f"{b['mean_score']:.4f}"])
    doc.para(f"PCA spectrum of the projected images, grouped into blocks: adjacent eigenvalues with "
             f"λ_(i+1)/λ_i ≥ {thr} form one near-degenerate block. Theorem 1 assumes distinct eigenvalues; inside "
             "such a block any rotation is (almost) optimal, so the decoder is judged against the block's span "
             "(mean |cos| of its columns to the span) instead of single eigenvectors.")
    doc.table(["components", "eigenvalues", "λ_last/λ_first", "block", "latents", "mean |cos| to block"], rows)
    fit = check.get("fit") or {}
    fitted = (f" (fit: {fit.get('evaluations')} objective evaluations, loss {fit.get('loss'):.6g})"
              if fit.get("loss") is not None else "")
    if withheld:
        items = [f"verdict: **withheld** ({withheld}: the check's numbers are shown, its pass/fail is not)" + fitted]
    else:
        items = [f"verdict: **{judgement['status']}**" + fitted] + (judgement.get("reasons") or [])
    items.append(f"decoder columns: max |cos| between two columns {check['column_orthogonality']['max_abs_cos']:.3f} "
                 "(V's signed-permutation error is undefined when singular values are nearly equal; column "
                 "orthogonality is the invariant form of the same check)")
    doc.bullets(items)


def why_section(builder, doc, inputs: dict) -> None:
    """The "Why: local vs global alignment" section for one dataset's inputs."""
    label = builder._label(inputs)
    doc.heading(f"Why: local vs global alignment ({label})")
    why = inputs.get("why")
    if not why:
        doc.para(f"No local-vs-global alignment in the inputs ({FILE_NAME} has no \"why\" entry; produced by "
                 "the report stage since the spectral-gap change).")
        return
    s = why.get("settings", {})
    images = images_used(inputs, s.get("num_images"), why.get("global_pca") or {})
    anchors = s.get("num_anchors")
    if isinstance(images, int) and anchors is not None:
        anchors = min(int(anchors), images)
    doc.para("Zietlow et al. (§3.3, Fig. 1) explain disentanglement by the decoder aligning with the *local* principal "
             "directions of the data (PCA of a small neighbourhood), not the global ones (PCA of all data, what a "
             "linear VAE does). For each run, at "
             f"{anchors} random anchor images of a sample of {images} images of its own training store, "
             f"the decoder's Jacobian columns (one per active latent) are matched to the top principal directions of "
             f"the anchor's {s.get('neighbours')} nearest images (local) and of all images (global); cells are the "
             "Hungarian-matched mean |cos| (1 = aligned; a random direction in image space scores ≈ 0). "
             "How to read it: on orig, a disentangled decoder should score higher locally than an entangled one and "
             "higher locally than globally; on mod the manipulation moves the local structure, so the alignment "
             "should follow the manipulated data. PCL has no decoder: its directions are the least-squares local "
             "decoder x − x̄ ≈ B(z − z̄) over the same neighbours (marked *).")
    rows, points = [], []
    for e in why.get("runs", []):
        name = e["model"] if e.get("role") is None else f"restart ({e['role']})"
        if "error" in e or "local_mean_abs_cos" not in e:
            rows.append([name, e.get("variant"), str(e.get("seed")), "—", "—", "—", "—",
                         e.get("error") or e.get("note") or "no active latents"])
            continue
        star = "*" if str(e.get("direction_source", "")).startswith("regression") else ""
        rows.append([name + star, e["variant"], str(e.get("seed")), str(e.get("num_active")),
                     f"{e['local_mean_abs_cos']:.3f} ± {e['local_std']:.3f}",
                     f"{e['global_mean_abs_cos']:.3f} ± {e['global_std']:.3f}", f"{e['local_minus_global']:+.3f}", ""])
        points.append((name, e["variant"], e["local_mean_abs_cos"], e["global_mean_abs_cos"]))
    doc.table(["run", "trained on", "seed", "active latents", "local mean |cos|", "global mean |cos|",
               "local − global", "note"], rows)
    if points:
        path = _figure(points, builder._figure(f"why_{label}.png"), label)
        doc.image(path, f"Local vs global alignment of the decoders ({label}); the diagonal is local = global.")
    g = why.get("global_pca") or {}
    if "error" in g:
        doc.para(f"Global PCA orig → mod: not computed ({g['error']}).")
    elif g:
        spectrum = global_spectrum(g)
        doc.para(f"Global PCA orig → mod (top {g['k']} directions, {g['num_images']} paired images): subspace mean cos² "
                 f"{g['subspace_mean_cos2']:.4f}, mean |cos| per direction {g['direction_match_mean_abs_cos']:.3f}, per "
                 f"block of orig's spectrum {g['block_match_mean']:.3f} (min {g['block_match_min']:.3f}); "
                 + spectrum + " The paper expects the global structure to stay (nearly) unchanged for a small ε: "
                 "values near 1 and a small change say it did.")


# orig eigenvalues below this fraction of the largest are the numerical zero of a low-rank store (the control's
# images span 2 dimensions): a relative change against them, or a match of their directions, means nothing
RANK_TOLERANCE = 1e-6


def global_spectrum(g: dict) -> str:
    """The top eigenvalues orig → mod and the largest relative change over orig's numerical rank."""
    a = [float(v) for v in g.get("eigenvalues_a") or []]
    b = [float(v) for v in g.get("eigenvalues_b") or []]
    if not a or not b:
        return f"largest relative eigenvalue change {g.get('max_relative_eigenvalue_change', float('nan')):.1%}."
    rank = sum(1 for v in a if v > RANK_TOLERANCE * a[0])
    shown = max(rank, 1) if rank < len(a) else min(len(a), 4)
    pairs = ", ".join(f"{x:.3g} → {y:.3g}" for x, y in zip(a[:shown], b[:shown]))
    change = max(abs(y - x) / x for x, y in zip(a[:rank], b[:rank])) if rank else float("nan")
    text = f"top eigenvalues {pairs}; largest relative change {change:.1%} over the orig spectrum's top {rank}."
    top_blocks = [bl for bl in g.get("blocks_a") or [] if bl.get("start", rank) < rank and bl.get("mean_score") is not None]
    if top_blocks:
        text += (" mod's directions match orig's top block(s) at |cos| "
                 + ", ".join(f"{bl['mean_score']:.3f}" for bl in top_blocks) + " (1 = unchanged).")
    if rank < len(a):
        text += (f" The orig images span {rank} dimension(s) (the other eigenvalues are < {RANK_TOLERANCE:g} of the "
                 f"largest), so the matches above include {len(a) - rank} direction(s) that are numerical noise in orig; "
                 f"mod adds variance {sum(b[rank:]):.3g} outside orig's span.")
    return text


def images_used(inputs: dict, requested, global_pca: dict):
    """How many images the "why" computation sampled: the requested number (``settings.num_images``) capped at
    the orig store's size (mod is paired with it, the same size), as ``encode_sample`` and ``global_pca_change``
    cap it. From the store's recorded size when the report stage recorded it, else from the global-PCA record
    (which counts the images it used), else "up to" the request."""
    size = store_fact(inputs, "orig", "num_images")
    if size is not None and requested is not None:
        return min(int(requested), size)
    if global_pca.get("num_images") is not None:
        return int(global_pca["num_images"])
    return f"up to {requested}"


def _figure(points, path: Path, label: str) -> Path:
    from probe.report.figures import _plt, _save

    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    colours = {}
    for name, variant, local, global_ in points:
        key = f"{name}, {variant}"
        colour = colours.setdefault(key, f"C{len(colours) % 10}")
        ax.scatter(global_, local, color=colour, marker="o" if variant == "orig" else "s",
                   label=key)
    lo = min(min(p[2], p[3]) for p in points) - 0.05
    ax.plot([lo, 1], [lo, 1], color="grey", lw=0.8, ls="--")
    handles, labels = ax.get_legend_handles_labels()
    seen = {}
    for h, lab in zip(handles, labels):
        seen.setdefault(lab, h)
    ax.legend(seen.values(), seen.keys(), fontsize=7, loc="lower right")
    ax.set_xlabel("global mean |cos|")
    ax.set_ylabel("local mean |cos|")
    ax.set_title(f"Fig. 1 measurement: {label}")
    return _save(fig, path)
