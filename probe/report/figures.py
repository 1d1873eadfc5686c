"""Report figures (matplotlib, Agg backend, PNG). Each function writes one file and returns its path."""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import shutil
from pathlib import Path

import numpy as np

from probe.data.variants import RANDOM_M, VARIANTS

VARIANT_COLORS = {"orig": "#4477aa", "mod": "#ee6677", "noise": "#999933", RANDOM_M: "#aa3377"}
VARIANT_LABELS = {"orig": "original", "mod": "modified", "noise": "noise", RANDOM_M: "random m"}
# orig and mod runs of one seed log nearly the same losses (the data differ by ε·m), and a short log has 2 points:
# each variant gets its own line style and marker, mod's small filled squares drawn inside orig's hollow circles
VARIANT_STYLES = {"orig": {"marker": "o", "ls": "-", "ms": 7, "mfc": "none"},
                  "mod": {"marker": "s", "ls": "--", "ms": 3.5, "mfc": VARIANT_COLORS["mod"]},
                  "noise": {"marker": "^", "ls": ":", "ms": 5, "mfc": "none"}}

# the text stamped on every figure saved while it is set (``figure_label``); a smoke report's figures carry it
_FIGURE_LABEL: contextvars.ContextVar[str | None] = contextvars.ContextVar("figure_label", default=None)


@contextlib.contextmanager
def figure_label(text: str | None):
    """Stamp ``text`` across every figure saved inside the block (None: no stamp)."""
    token = _FIGURE_LABEL.set(text)
    try:
        yield
    finally:
        _FIGURE_LABEL.reset(token)


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    label = _FIGURE_LABEL.get()
    if label:
        fig.text(0.5, 0.5, label, ha="center", va="center", rotation=20, fontsize=28, color="#cc0000", alpha=0.3,
                 weight="bold", zorder=100)
        fig.text(0.01, 0.99, label, ha="left", va="top", fontsize=10, color="#cc0000", weight="bold")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    _plt().close(fig)
    return path


def copy_image(source: Path, path: Path) -> Path:
    """Copy a PNG made elsewhere (the perturb stage's Fig. 4) into the report; redrawn with the stamp when a
    ``figure_label`` is set, byte for byte otherwise."""
    if not _FIGURE_LABEL.get():
        shutil.copyfile(source, path)
        return path
    plt = _plt()
    image = plt.imread(source)
    fig, ax = plt.subplots(figsize=(image.shape[1] / 100, image.shape[0] / 100))
    ax.imshow(image)
    ax.axis("off")
    return _save(fig, path)


def grouped_bars(panels: list[tuple[str, dict]], models: list[str], path: Path) -> Path:
    """One panel per metric: models on the x axis, one bar per variant (mean ± std over seeds), seeds
    as dots. ``panels`` = [(metric label, {(model, variant): [values]})]."""
    plt = _plt()
    width_per = max(3.2, 0.9 * len(models) + 1.2)
    # at most ~16 inches across (1,600 px at the saved dpi): with many models, fewer panels per row
    ncols = max(1, min(3, len(panels), int(16 // width_per)))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width_per * ncols, 2.9 * nrows), squeeze=False)
    width = 0.26
    for ax, (label, groups) in zip(axes.ravel(), panels):
        # one bar call, one error-bar call and one scatter per variant and panel (not one per model: with 14 models
        # and 9 panels the per-bar artists were most of the report's render time)
        dots_x, dots_y = [], []
        for v_i, variant in enumerate(VARIANTS):
            placed = [(m_i + (v_i - 1) * width, groups.get((model, variant))) for m_i, model in enumerate(models)]
            placed = [(x, vals) for x, vals in placed if vals]
            if not placed:
                continue
            xs = [x for x, _ in placed]
            ax.bar(xs, [np.mean(vals) for _, vals in placed], width, color=VARIANT_COLORS[variant],
                   label=VARIANT_LABELS[variant])
            spread = [(x, np.mean(vals), np.std(vals, ddof=1)) for x, vals in placed if len(vals) > 1]
            if spread:
                ax.errorbar(*zip(*spread), fmt="none", ecolor="black", capsize=2)
            for x, vals in placed:
                dots_x.extend([x] * len(vals))
                dots_y.extend(vals)
        if dots_x:
            ax.scatter(dots_x, dots_y, s=6, color="black", zorder=3)
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(models, rotation=45, ha="right", rotation_mode="anchor", fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.spines[["top", "right"]].set_visible(False)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    fig.legend(uniq.values(), uniq.keys(), fontsize=8, frameon=False, loc="upper right", ncol=3)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / (2.9 * nrows)))  # ~0.4 inch on top for the legend
    return _save(fig, path)


def line_search(points: dict, label: str, path: Path, hyper_names: dict, dropped: dict | None = None) -> Path:
    """Fig. 5: primary metric vs scale of the primary hyperparameter, one panel per model, one line
    per variant (mean ± std over kept seeds). ``points`` = {model: {variant: {scale: [values]}}}."""
    plt = _plt()
    models = list(points)
    fig, axes = plt.subplots(1, len(models), figsize=(3.4 * len(models), 3.0), squeeze=False)
    for ax, model in zip(axes[0], models):
        for variant, by_scale in points[model].items():
            scales = sorted(s for s in by_scale if by_scale[s])
            if not scales:
                continue
            means = [np.mean(by_scale[s]) for s in scales]
            stds = [np.std(by_scale[s], ddof=1) if len(by_scale[s]) > 1 else 0.0 for s in scales]
            ax.errorbar(scales, means, yerr=stds, marker="o", capsize=3, color=VARIANT_COLORS[variant],
                        label=VARIANT_LABELS[variant])
        if any(s > 0 for v in points[model].values() for s in v):
            ax.set_xscale("log", base=2)
        n_drop = (dropped or {}).get(model)
        ax.set_title(model if n_drop is None else f"{model} ({n_drop} over-pruned runs dropped)", fontsize=9)
        ax.set_xlabel(f"scale of {hyper_names.get(model) or 'hyperparameter'}")
        ax.spines[["top", "right"]].set_visible(False)
    axes[0][0].set_ylabel(label)
    axes[0][0].legend(fontsize=8, frameon=False)
    return _save(fig, path)


def nmi_heatmaps(panels: list[dict], factor_names: list[str], path: Path) -> Path:
    """One heatmap (factors × latents) per panel: {"title", "nmi" [K, D]}."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 1.6, 0.35 * len(factor_names) + 1.6),
                             squeeze=False, sharey=True, layout="constrained")
    image = None
    for i, (ax, panel) in enumerate(zip(axes[0], panels)):
        nmi = np.asarray(panel["nmi"])
        image = ax.imshow(nmi, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_title(panel["title"], fontsize=8)
        ax.set_xticks(range(nmi.shape[1]))
        ax.set_xlabel("latent")
        if i == 0:  # shared rows: the factor names once, so they cannot run into the previous panel
            ax.set_yticks(range(len(factor_names)))
            ax.set_yticklabels(factor_names, fontsize=7)
        for (k, j), v in np.ndenumerate(nmi):
            ax.text(j, k, f"{v:.2f}", ha="center", va="center", fontsize=6, color="white" if v < 0.5 else "black")
    fig.colorbar(image, ax=list(axes[0]), shrink=0.8, label="I(w_k; z_j) / H(w_k)")
    return _save(fig, path)


def traversal_figure(panels: list[dict], path: Path) -> Path:
    """Fig. 10/11: for each panel {"title", "grid" [S, S, H, W, C], "dims"}, a mosaic of decoded images."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.8), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        grid = np.pad(np.asarray(panel["grid"]), ((0, 0), (0, 0), (0, 1), (0, 1), (0, 0)), constant_values=0.5)
        s1, s2, h, w, c = grid.shape  # a 1-pixel grey gap after every tile
        mosaic = grid.transpose(0, 2, 1, 3, 4).reshape(s1 * h, s2 * w, c)
        ax.imshow(mosaic[..., 0] if c == 1 else mosaic, cmap="gray" if c == 1 else None, vmin=0, vmax=1)
        ax.set_title(panel["title"], fontsize=8)
        ax.set_ylabel(f"z{panel['dims'][0]}")
        ax.set_xlabel(f"z{panel['dims'][1]}")
        ax.set_xticks([])
        ax.set_yticks([])
    return _save(fig, path)


def read_tiles(encoded: str | None, steps: int) -> np.ndarray | None:
    """A traversal PNG of the report stage (base64, ``steps`` × ``steps`` tiles, probe.pipeline.report_data.encode_tiles)
    back as a grid float [steps, steps, H, W, C] in [0, 1]; None when it cannot be read."""
    import base64
    import binascii
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(base64.b64decode(encoded, validate=True))) as image:
            mosaic = np.asarray(image)
    except (OSError, TypeError, ValueError, binascii.Error):
        return None
    mosaic = mosaic[..., None] if mosaic.ndim == 2 else mosaic
    h, w, c = mosaic.shape[0] // steps, mosaic.shape[1] // steps, mosaic.shape[2]
    return mosaic.reshape(steps, h, steps, w, c).transpose(0, 2, 1, 3, 4).astype(np.float32) / 255.0


def read_curve(path: Path, key: str = "loss") -> tuple[list[float], list[float]]:
    steps, values = [], []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line of a running job
                if key in row and isinstance(row[key], (int, float)) and math.isfinite(row[key]):
                    steps.append(float(row.get("step", len(steps))))
                    values.append(float(row[key]))
    except OSError:
        pass
    return steps, values


def training_curves(curves: dict, path: Path, key: str = "loss") -> Path:
    """One panel per model; one line per run coloured by variant. ``curves`` = {model: [(variant, steps, values)]}."""
    plt = _plt()
    models = list(curves)
    # a grid of at most 4 columns: one row of 14 panels was 3,787 px wide and unreadable at 100 %
    ncols = min(4, len(models))
    nrows = math.ceil(len(models) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.4 * ncols, 2.6 * nrows), squeeze=False)
    for ax in axes.ravel()[len(models):]:
        ax.axis("off")
    for ax, model in zip(axes.ravel(), models):
        seen = set()
        for variant, steps, values in sorted(curves[model], key=lambda c: VARIANTS.index(c[0])):
            ax.plot(steps, values, color=VARIANT_COLORS[variant], lw=0.9, alpha=0.8,
                    markevery=max(1, len(steps) // 10), label=VARIANT_LABELS[variant] if variant not in seen else None,
                    **VARIANT_STYLES[variant])
            seen.add(variant)
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("step")
        ax.spines[["top", "right"]].set_visible(False)
    for row in axes:
        row[0].set_ylabel(key)
    axes[0][0].legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return _save(fig, path)


def loss_curve(series: dict, path: Path, title: str) -> Path:
    """Several named series {name: (steps, values)} on one axis (manipulation training losses)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.5, 2.8))
    for name, (steps, values) in series.items():
        ax.plot(steps, values, lw=1.0, label=name)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step")
    ax.legend(fontsize=7, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return _save(fig, path)


def seed_dots(groups: dict, models: list[str], path: Path, ylabel: str, *, title: str = "",
              reference: dict | None = None, reference_label: str = "paper", zero_line: bool = False,
              variants: tuple[str, ...] = VARIANTS) -> Path:
    """Per-seed dots per model × variant (``variants`` side by side within a model, jittered), a mean bar
    per group, and optionally a reference mean ± std beside each group (hollow marker with error bar).

    ``groups`` = {(model, variant): [values]}; ``reference`` = {model: {variant: (mean, std)}}."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(models) + 1.5), 3.2))
    rng = np.random.default_rng(0)  # fixed jitter: reruns give the same picture
    slot = 0.27 if len(variants) <= 3 else 0.8 / len(variants)  # the variants of one model stay within ±0.4
    used_ref = False
    for m_i, model in enumerate(models):
        for v_i, variant in enumerate(variants):
            x = m_i + (v_i - (len(variants) - 1) / 2) * slot
            vals = groups.get((model, variant)) or []
            ref = (reference or {}).get(model, {}).get(variant)
            x_ours = x - 0.05 if ref else x
            if vals:
                jitter = rng.uniform(-0.04, 0.04, len(vals))
                ax.scatter(x_ours + jitter, vals, s=14, color=VARIANT_COLORS[variant], zorder=3,
                           label=VARIANT_LABELS[variant])  # duplicates are merged in the legend below
                ax.hlines(np.mean(vals), x_ours - 0.08, x_ours + 0.08, color="black", lw=1.5, zorder=4)
            if ref:
                mean, std = ref
                ax.errorbar(x + 0.07, mean, yerr=std, fmt="o", mfc="white", mec=VARIANT_COLORS[variant],
                            ecolor=VARIANT_COLORS[variant], ms=5, capsize=2, lw=1, zorder=3,
                            label=None if used_ref else f"{reference_label} (mean ± std)")
                used_ref = True
    if zero_line:
        ax.axhline(0, color="grey", lw=0.6, ls="--")
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels(models, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.spines[["top", "right"]].set_visible(False)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return _save(fig, path)
