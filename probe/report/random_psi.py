"""Report section "Learned vs random ψ": the learned manipulation m(w) beside the frozen random-ψ control (issue 24).

From the report inputs' ``manipulation`` (the learned run, stage manipulate) and ``manipulation_random`` (the control,
stage manipulate-random: the same training loop with ψ frozen at its seeded initialisation), and the "why" entry's
``global_pca`` / ``global_pca_random`` (orig → x′ of each). A table of the decoder losses and their gap dis − ent
before/after (and after with the images' m permuted), |m|∞ and smoothness of m, and the global-PCA change; a figure
of both runs' decoder loss curves.
``random_psi_section`` returns the numbers it shows (summary.json's ``manipulation_random``), or None when the inputs
hold no control. Kept out of build.py, as why.py is.
"""

from __future__ import annotations

from pathlib import Path

from probe.report.schema import resolve_path
from probe.report.why import RANK_TOLERANCE

CURVE_KEYS = ("decoder_rec_entangled", "decoder_rec_disentangled")
EIGENVALUES_SHOWN = 4


def decoders_frozen(record: dict | None) -> bool:
    """Whether a manipulation record's decoders stayed at the restarts' weights (its config's
    ``decoder_batches_per_step`` 0) instead of being fine-tuned on x′ as in the paper's appendix B.1."""
    cfg = (record or {}).get("config") or {}
    return cfg.get("decoder_batches_per_step") == 0


def pairing_sentence(record: dict | None) -> str | None:
    """What of a manipulation's gap on x′ needs each image's own m: the gap with m(w) on its image against the same
    decoders' gap when every image gets another image's m (``after_shuffled``, the eval rows permuted once); None for
    records made before it was measured. One permutation: on the Shapes3D-like cpu run's m three of them spread the
    gap by ± 1.6 nats of its 9.5 (docs/notes/perturb.md)."""
    gap = (record or {}).get("dis_minus_ent") or {}
    before, after, shuffled = gap.get("before"), gap.get("after"), gap.get("after_shuffled")
    if after is None or shuffled is None:
        return None
    text = (f"With every image given another image's m (the rows permuted once, seeded; same decoders) the gap is "
            f"{shuffled:+.2f}: {after - shuffled:+.2f} nats per image of the gap on x′ depend on m being the image's "
            "own — the local change the paper's m(w) is for; the rest is a change of the data as a whole")
    if decoders_frozen(record) and before is not None and after != before:
        text += (f" ({100 * (shuffled - before) / (after - before):.0f} % of the gap's change from x survives the "
                 "permutation)")
    return text + "."


def random_psi_section(builder, doc, inputs: dict) -> dict | None:
    learned = inputs.get("manipulation") or {}
    control = inputs.get("manipulation_random")
    if not control:
        return None
    label = builder._label(inputs)
    doc.heading(f"Learned vs random ψ ({label})")
    cfg = control.get("config") or {}
    budget = ("each image's random m is rescaled to ‖m‖∞ = 1, so it spends the whole budget ε as the saturated learned "
              "m does (an untrained renderer's m is small: median |m|∞ ≈ 0.005 at 32×32)" if control.get("full_budget", cfg.get("normalise_linf"))
              else "the random m is used as initialised (not rescaled: it may spend little of ε)")
    frozen = decoders_frozen(control)
    decoders = ("both decoders stay frozen at the restarts' weights, as for the learned m, and are scored on x′ = "
                "fold(x + ε·m_random(w))" if frozen else
                "both decoders are fine-tuned on x′ = fold(x + ε·m_random(w)) exactly as on the learned m's x′")
    doc.para("The control runs the manipulation's training loop once more with ψ frozen at its seeded random "
             f"initialisation, the learned ψ's starting point (ε {_num(cfg.get('epsilon'), 'g')}, seed "
             f"{cfg.get('seed', '?')}, {cfg.get('steps', '?')} steps, the same batches and decoder schedule): "
             f"{decoders}; {budget}. No model is retrained on it. If *learning* m is what favours the entangled alignment, the gap "
             "dis − ent (Bernoulli nats per image; > 0: the entangled alignment is the cheaper one) grows more with the "
             "learned m than with the random one, while for both the global PCA of x′ stays close to orig's.")
    why = inputs.get("why") or {}
    sides = {"learned": _numbers(learned, why.get("global_pca")),
             "random": _numbers(control, why.get("global_pca_random"))}
    rows = [[name.format(decoders="frozen" if frozen else "fine-tuned")] + [fmt(sides[s]) for s in ("learned", "random")]
            for name, fmt in _ROWS]
    doc.table(["", "learned ψ", "random ψ (frozen)"], rows)
    gain_l, gain_r = sides["learned"].get("gap_change"), sides["random"].get("gap_change")
    after_l, after_r = sides["learned"].get("gap_after"), sides["random"].get("gap_after")
    if None not in (gain_l, gain_r, after_l, after_r):
        doc.para(f"After {'training' if frozen else 'fine-tuning'} the gap is {after_l:+.2f} with the learned m and {after_r:+.2f} with the random m: "
                 f"learning ψ moved it {after_l - after_r:+.2f} nats per image beyond the random ψ (change from x: learned "
                 f"{gain_l:+.2f}, random {gain_r:+.2f}; one run each, no spread over seeds).")
    for side, g in (("learned", why.get("global_pca")), ("random", why.get("global_pca_random"))):
        if isinstance(g, dict) and "error" in g:
            doc.para(f"Global PCA orig → x′ ({side} ψ): not computed ({g['error']}).")
    curves = {}
    for side, record in (("learned", learned), ("random", control)):
        path = resolve_path(inputs, record.get("losses"))
        if path is not None and path.exists():
            curves[side] = path
    if curves:
        path = _figure(curves, builder._figure(f"manipulation_random_{label}.png"), label)
        doc.image(path, "Both decoders' losses on x′ during the manipulation training, learned ψ (solid) and random ψ "
                        "frozen (dashed), and their gap dis − ent.")
    return sides


def _numbers(record: dict, global_pca: dict | None) -> dict:
    """The numbers one side shows (None where the record lacks them)."""
    before, after = record.get("before") or {}, record.get("after") or {}
    gap = record.get("dis_minus_ent") or {}
    coverage = record.get("coverage") or {}
    q = coverage.get("linf_quantiles") or {}
    smooth = coverage.get("smoothness") or {}
    out = {"gap_before": gap.get("before", before.get("dis_minus_ent")),
           "gap_after": gap.get("after", after.get("dis_minus_ent")),
           "gap_after_shuffled": gap.get("after_shuffled", (record.get("after_shuffled") or {}).get("dis_minus_ent")),
           "entangled_before": before.get("entangled"), "entangled_after": after.get("entangled"),
           "disentangled_before": before.get("disentangled"), "disentangled_after": after.get("disentangled"),
           "entangled_excess_after": after.get("entangled_excess"),
           "disentangled_excess_after": after.get("disentangled_excess"),
           "linf_p05": q.get("p05"), "linf_p50": q.get("p50"), "linf_p95": q.get("p95"),
           "fraction_covered": coverage.get("fraction_covered"), "coverage_threshold": coverage.get("threshold"),
           "neighbour_diff_ratio": smooth.get("neighbour_diff_ratio"),
           "high_frequency_share": smooth.get("high_frequency_share"),
           "white_noise_high_frequency_share": smooth.get("white_noise_high_frequency_share")}
    out["gap_change"] = (out["gap_after"] - out["gap_before"]
                         if out["gap_after"] is not None and out["gap_before"] is not None else None)
    out["gap_own_m"] = (out["gap_after"] - out["gap_after_shuffled"]
                        if out["gap_after"] is not None and out["gap_after_shuffled"] is not None else None)
    g = global_pca if isinstance(global_pca, dict) and "error" not in global_pca else {}
    a = [float(v) for v in g.get("eigenvalues_a") or []]
    b = [float(v) for v in g.get("eigenvalues_b") or []]
    rank = sum(1 for v in a if a and v > RANK_TOLERANCE * a[0])
    out.update({"pca_subspace_mean_cos2": g.get("subspace_mean_cos2"),
                "pca_eigenvalues_orig": a[:EIGENVALUES_SHOWN] or None, "pca_eigenvalues_x": b[:EIGENVALUES_SHOWN] or None,
                "pca_max_relative_change": (max(abs(y - x) / x for x, y in zip(a[:rank], b[:rank]))
                                            if rank and b else g.get("max_relative_eigenvalue_change")),
                "pca_rank": rank or None, "mean_sq_pixel_difference": g.get("mean_sq_pixel_difference")})
    return out


def _num(value, spec: str) -> str:
    try:
        return format(float(value), spec)
    except (TypeError, ValueError):
        return "—"


def _arrow(a, b, spec: str = ".2f") -> str:
    return f"{_num(a, spec)} → {_num(b, spec)}" if a is not None or b is not None else "—"


def _linf(n: dict) -> str:
    if n.get("linf_p50") is None:
        return "—"
    return f"{_num(n['linf_p50'], '.3f')} ({_num(n.get('linf_p05'), '.3f')}–{_num(n.get('linf_p95'), '.3f')})"


def _eigen(n: dict) -> str:
    a, b = n.get("pca_eigenvalues_orig"), n.get("pca_eigenvalues_x")
    if not a or not b:
        return "—"
    return ", ".join(f"{x:.3g} → {y:.3g}" for x, y in zip(a, b))


def _hf(n: dict) -> str:
    share = _num(n.get("high_frequency_share"), ".3f")
    white = n.get("white_noise_high_frequency_share")
    return share + (f" (white noise {white:.2f})" if white is not None and share != "—" else "")


_ROWS = (
    ("gap dis − ent on x (restarts' decoders)", lambda n: _num(n.get("gap_before"), "+.2f")),
    ("gap dis − ent on x′ ({decoders} decoders)", lambda n: _num(n.get("gap_after"), "+.2f")),
    ("change of the gap", lambda n: _num(n.get("gap_change"), "+.2f")),
    ("gap on x′ with every image given another image's m (rows permuted)",
     lambda n: _num(n.get("gap_after_shuffled"), "+.2f")),
    ("of the gap on x′, what needs each image's own m (x′ − permuted)", lambda n: _num(n.get("gap_own_m"), "+.2f")),
    ("entangled decoder loss x → x′", lambda n: _arrow(n.get("entangled_before"), n.get("entangled_after"))),
    ("disentangled decoder loss x → x′", lambda n: _arrow(n.get("disentangled_before"), n.get("disentangled_after"))),
    ("KL excess on x′, entangled / disentangled",
     lambda n: f"{_num(n.get('entangled_excess_after'), '.2f')} / {_num(n.get('disentangled_excess_after'), '.2f')}"),
    ("median |m|∞ (5th–95th percentile)", _linf),
    ("images with |m|∞ ≥ threshold", lambda n: (f"{100 * n['fraction_covered']:.1f} % (≥ {n.get('coverage_threshold')})"
                                               if n.get("fraction_covered") is not None else "—")),
    ("m: mean |neighbour difference| / RMS (checkerboard 2, white noise ≈ 1.1, smooth ≪ 1)",
     lambda n: _num(n.get("neighbour_diff_ratio"), ".3f")),
    ("m: energy share at ≥ ¼ cycle/pixel (checkerboard 1, smooth → 0)", _hf),
    ("global PCA orig → x′: subspace mean cos² (1 = unchanged)", lambda n: _num(n.get("pca_subspace_mean_cos2"), ".4f")),
    ("global PCA: top eigenvalues orig → x′", _eigen),
    ("global PCA: largest relative eigenvalue change", lambda n: (_num(100 * n["pca_max_relative_change"], ".1f") + " %"
                                                                  if n.get("pca_max_relative_change") is not None else "—")),
    ("mean squared pixel change x → x′", lambda n: _num(n.get("mean_sq_pixel_difference"), ".3g")),
)


def _figure(curves: dict, path: Path, label: str) -> Path:
    from probe.report.figures import _plt, _save, read_curve

    plt = _plt()
    fig, (ax, gap_ax) = plt.subplots(1, 2, figsize=(8.4, 2.9))
    colours = {"decoder_rec_entangled": "C0", "decoder_rec_disentangled": "C3"}
    for side, path_ in curves.items():
        style = "-" if side == "learned" else "--"
        series = {key: read_curve(path_, key) for key in CURVE_KEYS}
        for key, (steps, values) in series.items():
            if steps:
                ax.plot(steps, values, style, color=colours[key], lw=1.0,
                        label=f"{key.split('_')[-1]}, {side} ψ")
        (s_ent, v_ent), (s_dis, v_dis) = series[CURVE_KEYS[0]], series[CURVE_KEYS[1]]
        if s_ent and s_ent == s_dis:
            gap_ax.plot(s_ent, [d - e for e, d in zip(v_ent, v_dis)], style, color="black", lw=1.0, label=f"{side} ψ")
    ax.set_title(f"decoder losses on x′ ({label})", fontsize=9)
    gap_ax.set_title("gap dis − ent (> 0: entangled cheaper)", fontsize=9)
    gap_ax.axhline(0, color="grey", lw=0.6)
    for a in (ax, gap_ax):
        a.set_xlabel("step")
        a.legend(fontsize=7, frameon=False)
        a.spines[["top", "right"]].set_visible(False)
    return _save(fig, path)
