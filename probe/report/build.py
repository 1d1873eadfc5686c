"""``make_report``: report_inputs.json (one or more workdirs) -> Markdown + HTML + PNG figures.

A pure function of report_inputs.json (``probe.report.schema``) and the files it names (training logs, the
manipulation's losses and Figure 4, the restarts' traversal PNGs): it opens no store and loads no model; what needs
them was computed by the pipeline's report stage (probe.pipeline.report_data). Layout of the output folder:
``report.md``, ``report.html`` (self-contained), ``figures/*.png``, ``summary.json`` (the numbers behind the tables
and verdicts), ``runs.csv``. Missing pieces of the inputs (no robustness runs, no restarts, restarts that could not
be loaded, no linear-PCA result, sections of an older file) are stated in the report instead of failing it.
"""

from __future__ import annotations

import csv
import json
import math
import platform
from pathlib import Path

import numpy as np

from probe.data.variants import RANDOM_M, VARIANTS
from probe.errors import UserError
from probe.metrics.alignment import GLOBAL_PCA
from probe.metrics.registry import PRIMARY_METRIC
from probe.report import figures as fig
from probe.report import paper
from probe.report.capture import best_nmi_on_orig, capture_of, encoded_by_run, summarise_capture
from probe.report.cells import cell as _cell, change as _change, fmt as _fmt, fmt_p as _fmt_p
from probe.report.control import control_section
from probe.report.document import Document
from probe.report.gates import (
    ACTIVE_VARIANCE, CAPTURE_MEASURE, CAPTURE_THRESHOLD, GATE_RULE, failed_gate, noise_gate, regime_gate,
)
from probe.report.inputs import (
    ALIGNMENT_TARGETS, TIDY_COLUMNS, UNTRAINED_FRACTION, active_latent_count, alignment_value, group_stats,
    metric_label, metric_value, model_order, present_metrics, retrained_runs, seeded_values_by_group, tidy_rows,
    untrained_runs, values_by_group, verdict_metrics,
)
from probe.report.pool import parts, pool, pooled_legs
from probe.report.random_m import random_m_section
from probe.report.random_psi import decoders_frozen, pairing_sentence, random_psi_section
from probe.report.schema import (ARCHIVE_DIR, archive_inputs, load_inputs, missing_section, recorded_code_version,
                                 recorded_config, resolve_path, setting, store_fact)
from probe.report.stats import ALPHA, MARGIN, compare, holm_adjust, verdict, verdict_rule_text, welch_t_test
from probe.report.why import linear_pca_judgement, status_cell, why_section

REPORT_FILES = ("report.md", "report.html")
SMOKE_FIGURE_LABEL = "smoke — not results"
# the alignment table's rows per model: the verdict's variants and the random-ψ control's m (does learning m move them?)
ALIGNMENT_VARIANTS = VARIANTS + (RANDOM_M,)


def _run_name(run_dir) -> str:
    """A run's identity for tables: its folder, or the job folder around it when the folder is the pipeline's
    generic ``run`` (``WORKDIR/<stage>/<digest>/<job>/run``)."""
    path = Path(str(run_dir or ""))
    return path.parent.name if path.name == "run" and path.parent.name else path.name


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.exists():
        if not out_dir.is_dir():
            raise UserError(f"{out_dir} exists and is not a folder")
        entries = [p.name for p in out_dir.iterdir()]
        if entries and "report.md" not in entries:
            raise UserError(f"{out_dir} exists, is not empty and holds no earlier report; choose another --out")
    elif not out_dir.parent.exists():
        raise UserError(f"the folder {out_dir.parent} does not exist; create it first")


def make_report(workdir, out_dir=None, *, primary_metric: str = PRIMARY_METRIC, seed: int = 0) -> dict:
    """Write the report for ``workdir`` (or a list of workdirs: one column group per dataset, workdirs of one
    experiment pooled into one: probe.report.pool) into ``out_dir`` (default ``WORKDIR/report``). Returns
    {"markdown", "html", "figures", "summary", "csv"} paths.
    ``seed``: the bootstrap's (the image samples behind the inputs were drawn by the pipeline)."""
    from probe.provenance import atomic_path

    workdirs = [workdir] if isinstance(workdir, (str, Path)) else list(workdir)
    if not workdirs:
        raise UserError("no workdir given")
    loaded = [load_inputs(w) for w in workdirs]
    all_inputs = pool(loaded)  # workdirs of one experiment (more seeds) become one group
    usable = verdict_metrics()
    if primary_metric not in usable:
        raise UserError(f"primary metric must be one of {', '.join(usable)} (higher is better), got {primary_metric!r}")
    out_dir = Path(out_dir) if out_dir is not None else Path(all_inputs[0]["_workdir"]) / "report"
    _check_out_dir(out_dir)
    with atomic_path(out_dir, overwrite=True) as tmp:
        tmp.mkdir()
        (tmp / "figures").mkdir()
        builder = _Builder(all_inputs, tmp, primary_metric=primary_metric, seed=seed, archived_parts=len(loaded))
        # a smoke run's figures must not pass for results when one is looked at alone (issue 23)
        smoke = any(i.get("preset") == "smoke" for i in all_inputs)
        with fig.figure_label(SMOKE_FIGURE_LABEL if smoke else None):
            doc = builder.build()
        (tmp / "report.md").write_text(doc.to_markdown(tmp))
        (tmp / "report.html").write_text(doc.to_html())
        (tmp / "summary.json").write_text(json.dumps(builder.summary, indent=2, default=str) + "\n")
        write_runs_csv(all_inputs, tmp / "runs.csv")
        for number, inputs in enumerate(loaded, 1):  # what renders this report again once the workdirs are gone
            archive_inputs(inputs, tmp / ARCHIVE_DIR / f"part-{number}")
        figure_names = [p.name for p in builder.figures]
    return {"markdown": out_dir / "report.md", "html": out_dir / "report.html",
            "figures": [out_dir / "figures" / n for n in figure_names], "summary": out_dir / "summary.json",
            "csv": out_dir / "runs.csv"}


def write_runs_csv(all_inputs: list[dict], path: Path) -> Path:
    """``runs.csv``: one row per run × metric (``inputs.tidy_rows``), plain CSV with a header row, so
    ``pandas.read_csv`` or any spreadsheet reads it as is. Missing values are empty cells."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(TIDY_COLUMNS))
        writer.writeheader()
        for inputs in all_inputs:
            for row in tidy_rows(inputs):
                writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in TIDY_COLUMNS})
    return path


class _Builder:
    def __init__(self, all_inputs, out, *, primary_metric, seed, archived_parts):
        self.all_inputs = all_inputs
        self.archived_parts = archived_parts  # one ``ARCHIVE_DIR/part-<n>`` per workdir given (make_report)
        self.out = out
        self.fig_dir = out / "figures"
        self.primary = primary_metric
        self.seed = seed
        self.figures: list[Path] = []
        self.summary: dict = {"datasets": []}

    def _label(self, inputs) -> str:
        return str(inputs.get("dataset") or "dataset")

    def _figure(self, name: str) -> Path:
        path = self.fig_dir / name
        self.figures.append(path)
        return path

    # -- document ---------------------------------------------------------------------------------
    def build(self) -> Document:
        names = ", ".join(sorted({str(i.get("pipeline") or "?") for i in self.all_inputs}))
        presets = ", ".join(sorted({str(i.get("preset") or "?") for i in self.all_inputs}))
        datasets = ", ".join(self._label(i) for i in self.all_inputs)
        doc = Document(f"probe report: {names} (preset {presets}; {datasets})")
        self._not_results_banner(doc)
        doc.para("Does each method disentangle for the right reason? Models are trained on the original data "
                 "(**orig**), on data with the learned adversarial manipulation m(w) (**mod**, Zietlow et al. 2021 "
                 "§4.4) and on data with uniform noise of the same magnitude (**noise**, §5.2). A method that relies "
                 "on the local variance structure loses disentanglement on mod but not on noise.")
        self._pooled(doc)
        self.capture = {self._label(i): capture_of(i) for i in self.all_inputs}
        self._verdicts(doc)
        self._control(doc)
        for inputs in self.all_inputs:  # what the verdict's drop on mod is a drop of: the learned m, or any m(w)
            numbers = random_m_section(self, doc, inputs, primary=self.primary, seed=self.seed)
            if numbers is not None:
                self.summary.setdefault("random_m", {})[self._label(inputs)] = numbers
        self._gates_table(doc)
        self._capture_section(doc)
        self._tables(doc)
        self._statistics(doc)
        self._bar_charts(doc)
        self._robustness(doc)
        self._alignment(doc)
        for inputs in self.all_inputs:
            self._restarts(doc, inputs)
            self._manipulation(doc, inputs)
            control = random_psi_section(self, doc, inputs)  # the frozen random-ψ control beside the learned m
            if control is not None:
                self.summary.setdefault("manipulation_random", {})[self._label(inputs)] = control
        self._curves(doc)
        for inputs in self.all_inputs:
            self._linear_pca(doc, inputs)
            why_section(self, doc, inputs)
        self._provenance(doc)
        return doc

    def _pooled(self, doc: Document):
        """Where a column group holds the runs of several workdirs of one experiment (probe.report.pool), say so."""
        for group in self.all_inputs:
            pooled = parts(group)
            if len(pooled) < 2:
                continue
            described = []
            for inputs in pooled:
                runs = inputs["runs"]
                seeds = sorted({r.get("seed") for r in runs if r.get("seed") is not None})
                described.append(f"`{inputs['_path']}` ({', '.join(model_order(runs))}; seeds "
                                 f"{', '.join(str(s) for s in seeds)})")
            legs = pooled_legs(group)
            total = sum(leg["wall_time_s"] for leg in legs)
            wall = (f" Wall time over all their legs, each counted once: {_fmt(total, 0)} s in {len(legs)} legs."
                    if legs else "")
            doc.para(f"**Pooled runs.** The {self._label(group)} runs come from {len(pooled)} workdirs of one "
                     "experiment: the same stores (equal digests), code, setting and configuration, told apart only "
                     "by which seeds and models they retrained. Each model × variant is one sample over all of them: "
                     + "; ".join(described) + "." + wall)
            self.summary.setdefault("pooled", {})[self._label(group)] = [i["_path"] for i in pooled]

    def _control(self, doc: Document):
        """The positive control's L1/L2/L3 section (probe.report.control) for inputs of the control pipeline."""
        for inputs, entry in zip(self.all_inputs, self.summary["datasets"]):
            if not inputs.get("control"):
                continue
            labels = {model: v.get("label") for model, v in entry["models"].items()}
            self.summary.setdefault("control", {})[self._label(inputs)] = control_section(
                doc, inputs, primary=self.primary, verdict_labels=labels, figure_path=self._figure, seed=self.seed,
                smoke=inputs.get("preset") == "smoke")

    # -- verdicts -----------------------------------------------------------------------------------
    def _not_results_banner(self, doc: Document):
        """First lines of a report whose runs cannot mean anything: a smoke run, or models trained fewer than
        MIN_VERDICT_STEPS steps. Their verdicts are withheld (``_verdicts``)."""
        for inputs in self.all_inputs:
            if inputs.get("preset") == "smoke":
                doc.para(f"**Smoke run: these are not results.** {self._label(inputs)} was run with the `smoke` "
                         "preset, which trains every model for a few steps on a tiny store to check that every "
                         "stage runs. Its numbers mean nothing, and no verdict is given. Use the `quick` preset (or "
                         "larger) for results.")
                continue
            short = {m: n for m, n in retrain_steps(inputs).items() if n is not None and n < MIN_VERDICT_STEPS}
            if short:
                doc.para(f"**Too short to mean anything:** on {self._label(inputs)}, "
                         + ", ".join(f"{m} ({n} steps)" for m, n in short.items())
                         + f" trained fewer than {MIN_VERDICT_STEPS} steps; their verdicts are withheld.")

    def _withheld(self, inputs, model: str) -> str | None:
        """Why a model's verdict is withheld, or None."""
        if inputs.get("preset") == "smoke":
            return "smoke run: a few training steps check the wiring, not the model"
        steps = retrain_steps(inputs).get(model)
        if steps is not None and steps < MIN_VERDICT_STEPS:
            return f"{steps} training steps, fewer than the {MIN_VERDICT_STEPS} a verdict needs"
        return None

    def _verdicts(self, doc: Document):
        """Per model: withheld (smoke, too short), did not train, a failed validity gate (``probe.report.gates``) or
        the verdict rule, in that order. The Holm family is the models that reach the rule, over all datasets."""
        label = metric_label(self.primary)
        doc.heading("Verdicts")
        doc.para(verdict_rule_text() + f" Primary metric: **{label}**. " + GATE_RULE + " A model gets **did not "
                 f"train** instead when any of its orig or mod runs reconstructs no better than {UNTRAINED_FRACTION:.0%} "
                 "of the mean image's MSE on that variant's store (its score changes would compare training failures).")
        models = []  # one dict per model and dataset, the verdict filled in below
        for inputs in self.all_inputs:
            runs = inputs["runs"]
            groups = values_by_group(runs, self.primary)
            untrained = self._untrained(inputs)
            num_factors = self._num_factors(inputs)
            entry = {"dataset": self._label(inputs), "primary_metric": self.primary, "models": {}}
            self.summary["datasets"].append(entry)
            for model in model_order(runs):
                orig, mod, noise = (groups.get((model, v), []) for v in VARIANTS)
                if not orig or not mod:
                    missing = [v for v, vals in (("orig", orig), ("mod", mod)) if not vals]
                    entry["models"][model] = {"label": "no data", "outcome": "no-data", "missing": missing}
                    models.append({"inputs": inputs, "model": model, "missing": f"no {label} for {', '.join(missing)}"})
                    continue
                noise_active = [a for _, a in self._active_by_variant(inputs, model).get("noise", [])]
                gates = [self._regime_gate(inputs, model, num_factors), noise_gate(orig, noise, noise_active)]
                bad = [u for u in untrained if u["model"] == model and u["variant"] in ("orig", "mod")]
                withheld = self._withheld(inputs, model)
                if withheld:
                    override = {"label": "withheld", "outcome": "withheld", "reason": withheld}
                elif bad:
                    where = ", ".join(f"{u['variant']} seed {u['seed']} ({u['mse']:.3f} vs {u['baseline']:.3f})" for u in bad)
                    override = {"label": "did not train", "outcome": "did-not-train", "untrained": bad,
                                "reason": f"reconstruction MSE no better than the mean image's in {where}"}
                else:
                    override = failed_gate(gates)  # None: the model reaches the verdict rule
                models.append({"inputs": inputs, "entry": entry, "model": model, "orig": orig, "mod": mod,
                               "noise": noise, "override": override, "gates": gates,
                               "p": welch_t_test(orig, mod)["p"]})
        # the Holm family: the models that reach the rule with a p (at least 2 seeds in both groups)
        family = [m for m in models if "missing" not in m and m["override"] is None and math.isfinite(m["p"])]
        for m, p_holm in zip(family, holm_adjust([m["p"] for m in family])):
            m["p_holm"] = p_holm
        rows = []
        for m in models:
            if "missing" in m:
                rows.append([self._label(m["inputs"]), m["model"]] + ["—"] * 6 + [m["missing"]])
                continue
            tested = "p_holm" in m
            v = verdict(m["orig"], m["mod"], m["noise"] or None, p_adjusted=m.get("p_holm"),
                        family_size=len(family) if tested else 0, seed=self.seed)
            if not tested:
                v["p_holm"] = None  # outside the family: its p is shown, not used
            v = {**v, **(m["override"] or {}), "gates": {g["gate"]: g for g in m["gates"]}}
            holm = f"{_fmt_p(v['p_holm'])} (m={v['family_size']})" if v["p_holm"] is not None else "— (not tested)"
            rows.append([self._label(m["inputs"]), m["model"], _change(v["to_mod"], with_p=False), _fmt_p(v["p"]), holm,
                         _fmt(v["hedges_g"]), _fmt(v["detectable_drop"], 3), _change(v["to_noise"]),
                         f"**{v['label']}** ({v['reason']})"])
            m["entry"]["models"][m["model"]] = v
        if rows:
            doc.table(["dataset", "model", f"Δ {label} orig→mod [95% CI]", "Welch p", "p_Holm (m)", "Hedges' g",
                       "smallest detectable drop", f"Δ {label} orig→noise [95% CI], p", "verdict"], rows)
            doc.para("Welch p: the primary test (two-sided Welch t-test of orig vs mod on "
                     f"{label}); p_Holm: adjusted over the m models that reach the rule (models withheld, untrained or "
                     "stopped by a gate are not tested). Hedges' g < 0: mod below orig, in pooled SDs. Smallest "
                     "detectable drop: a true drop of this size would be found with probability 0.8 at these seeds "
                     "(formula in the rule above); smaller drops are likely missed.")
        else:
            doc.para("The inputs hold no retrained runs, so there is nothing to compare.")

    def _active_by_variant(self, inputs, model: str) -> dict:
        """{variant: [(seed, active latents) in seed order]}; the count is None where the run has none."""
        out: dict = {}
        for run in sorted(inputs["runs"], key=lambda r: r.get("seed") or 0):
            if run["model"] == model:
                out.setdefault(run["variant"], []).append((run.get("seed"), active_latent_count(run)))
        return out

    def _regime_gate(self, inputs, model: str, num_factors: int | None) -> dict:
        """The regime gate by the factors the orig runs encode (``capture``, when the report could encode them)
        and by their active latents (models with a posterior variance)."""
        active = [a for _, a in self._active_by_variant(inputs, model).get("orig", [])]
        capture = self.capture.get(self._label(inputs)) or {}
        encoded = encoded_by_run(capture, model)
        why = (f"its runs were not encoded: {capture['unavailable']}" if "unavailable" in capture
               else "its orig runs could not be encoded")
        return regime_gate(num_factors, active=active, captured=encoded, missing=f"no posterior variance, and {why}")

    # -- validity: active latents per run, per-factor capture ----------------------------------------------
    def _gates_table(self, doc: Document):
        """Active latents of every retrained run (model × variant, per seed) beside the two gates' outcomes."""
        doc.heading("Validity gates: active latents and the noise control")
        doc.para(f"Active latents per retrained run (E[σ²] < {ACTIVE_VARIANCE}: the `active_units` metric on the "
                 "run's own store), in seed order, and the outcome of the two gates the verdicts above went through. "
                 f"The regime gate reads both counts: the {CAPTURE_MEASURE} (next section) when the runs could be "
                 "encoded, and the active latents of models with a posterior variance.")
        rows, numbers = [], {}
        for inputs, entry in zip(self.all_inputs, self.summary["datasets"]):
            name = self._label(inputs)
            n = self._num_factors(inputs)
            capture = self.capture.get(name) or {}
            for model in model_order(inputs["runs"]):
                active = self._active_by_variant(inputs, model)
                numbers.setdefault(name, {})[model] = {
                    v: {"seeds": [seed for seed, _ in pairs], "values": [a for _, a in pairs]}
                    for v, pairs in active.items()}
                cells = []
                for variant in VARIANTS:
                    values = [a for _, a in active.get(variant, [])]
                    if not values:
                        cells.append("—")
                    elif all(a is None for a in values):
                        cells.append("— (no posterior variance)")
                    else:
                        cells.append(", ".join("?" if a is None else str(a) for a in values))
                encoded = encoded_by_run(capture, model)
                gates = (entry["models"].get(model) or {}).get("gates") or {}
                rows.append([name, model, f"{n if n is not None else '?'}", *cells,
                             ", ".join(map(str, encoded)) or "—",
                             *(_gate_cell(gates.get(g)) for g in ("regime", "noise_control"))])
        self.summary["active_latents"] = numbers
        if rows:
            doc.table(["dataset", "model", "factors", "active latents orig (per seed)", "mod", "noise",
                       f"orig factors encoded (best normalised MI ≥ {CAPTURE_THRESHOLD}), per seed", "regime gate",
                       "noise-control gate"], rows)

    def _capture_section(self, doc: Document):
        doc.heading("Which factors each run encodes (per-factor MIG gap)")
        doc.para("For each factor w_k: gap = (largest − second-largest I(z_j; w_k)) / H(w_k), the term MIG averages "
                 "over factors, and the latent z_j with the largest MI. The cells count the seeds whose gap for the factor "
                 f"is ≥ {CAPTURE_THRESHOLD} (one latent holds it clearly more than any other); the regime gate's count "
                 f"of encoded factors is the more lenient best normalised MI ≥ {CAPTURE_THRESHOLD} (some latent holds "
                 "it, possibly shared with another). Codes are the "
                 "posterior means of MIG's own sample: the factor rows the evaluation drew (its seed and num_train, "
                 "recorded in the pipeline config), 20-bin histograms, each run on the store it was trained on.")
        summary = {}
        for inputs in self.all_inputs:
            name = self._label(inputs)
            capture = self.capture.get(name) or {}
            doc.heading(name, 3)
            if "unavailable" in capture:
                doc.para(f"Not computed: {capture['unavailable']}.")
                continue
            entries = capture["runs"]
            failed = [e for e in entries if "error" in e]
            good = [e for e in entries if "error" not in e]
            sample = capture["sample"]
            sample_text = (f"sample: {sample['num_train']} factor rows, seed {sample['seed']}, "
                           f"{sample['num_bins']} bins" + ("" if sample["recorded"] else
                                                           " (the metric defaults: the inputs record no evaluation "
                                                           "settings)"))
            if failed:
                doc.para(f"{len(failed)} of {len(entries)} runs could not be encoded, so they are missing below "
                         f"(first: {_run_name(failed[0]['run_dir'])}: {failed[0]['error']}).")
            summary[name] = {"sample": sample, "threshold": CAPTURE_THRESHOLD, "factor_names": capture["factor_names"],
                             "runs": entries}
            if not good:
                continue
            names = capture["factor_names"] or [f"factor {k}" for k in range(len(good[0]["gap"]))]
            checked = [abs(e["mig"] - e["mig_recorded"]) for e in good if e.get("mig_recorded") is not None]
            if checked:
                within = "exactly" if max(checked) == 0 else f"to within {max(checked):.1g}"
                check = f"; the mean of the gaps reproduces the recorded MIG {within} over {len(checked)} runs"
            else:
                check = ""
            doc.para(f"{sample_text}{check}; encoded on {capture['device']} in {capture['wall_time_s']:.0f} s. "
                     f"Cells: mean gap over seeds (seeds with gap ≥ {CAPTURE_THRESHOLD} / runs).")
            groups = summarise_capture(good)
            order = model_order(inputs["runs"])
            ordered = sorted(groups.items(), key=lambda kv: (order.index(kv[0][0]), VARIANTS.index(kv[0][1])))
            doc.table(["model", "variant"] + list(names),
                      [[model, variant] + [f"{_fmt(m)} ({c}/{g['n']})" if m is not None else "—"
                                           for m, c in zip(g["mean_gap"], g["encoding"])] for (model, variant), g in ordered])
            ceiling = store_fact(inputs, "orig", "factor_ceiling")
            if ceiling and len(ceiling) == len(names):
                best = best_nmi_on_orig(good)
                doc.para("What the original images determine of each factor: I(w_k; x)/H(w_k) over the store's whole "
                         "grid, identical images grouped (1: every value renders differently; below 1 where values "
                         "render alike, as a symmetric shape turned), the most of a factor's entropy any latent can "
                         f"hold; beside it each model's highest best normalised MI over its orig runs (the regime gate "
                         f"asks ≥ {CAPTURE_THRESHOLD}).")
                doc.table(["", *names], [["orig images (ceiling)", *[_fmt(c) for c in ceiling]]]
                          + [[f"{model} orig (highest over seeds)", *[_fmt(v) for v in values]]
                             for model, values in sorted(best.items(), key=lambda kv: order.index(kv[0]))])
                summary[name]["factor_ceiling"] = list(ceiling)
            doc.para(f"Split factors: seeds whose second-best latent also holds ≥ {CAPTURE_THRESHOLD} of the factor "
                     "(normalised MI, best − gap): the factor is encoded across two latents, which is what keeps its "
                     "gap small, rather than left out (cells: split seeds / runs).")
            doc.table(["model", "variant"] + list(names),
                      [[model, variant] + [f"{c}/{g['n']}" for c in g["split"]] for (model, variant), g in ordered])
            summary[name]["groups"] = {f"{m}/{v}": g for (m, v), g in groups.items()}
            doc.para("Per run: each factor's gap and (latent) carrying it.")
            doc.table(["model", "variant", "seed", "MIG recorded / recomputed", "active latents"] + list(names),
                      [[e["model"], e["variant"], e.get("seed"),
                        f"{_fmt(e.get('mig_recorded'), 3)} / {_fmt(e['mig'], 3)}",
                        "—" if e.get("active") is None else e["active"]]
                       + [f"{_fmt(gap)} (z{z})" if gap is not None else "—" for gap, z in zip(e["gap"], e["latent"])]
                       for e in good])
        self.summary["factor_capture"] = summary

    def _untrained(self, inputs) -> list[dict]:
        """Orig and mod runs that did not learn to reconstruct (``inputs.untrained_runs``) against the mean-image
        MSE of those two stores, which the report stage measured on up to 10,000 images each (noise runs do not
        enter the verdict). Stores without a recorded baseline are not judged."""
        baselines = {v: store_fact(inputs, v, "mean_image_mse") for v in ("orig", "mod")}
        return untrained_runs(inputs["runs"], {v: b for v, b in baselines.items() if b is not None})

    # -- Table 1/3/4/5 ------------------------------------------------------------------------------
    def _present(self) -> list[str]:
        runs = [r for i in self.all_inputs for r in i["runs"]]
        return present_metrics(runs)

    def _tables(self, doc: Document):
        doc.heading("Scores (mean ± std over seeds)")
        seeds = sorted({r.get("seed") for i in self.all_inputs for r in i["runs"] if r.get("seed") is not None})
        doc.para(f"Rows are models, columns the three data variants per dataset; cells are mean ± sample std over "
                 f"seeds {seeds} (Tables 1, 3, 4, 5 of Zietlow et al. 2021). Metrics absent from the inputs are not shown.")
        present = self._present()
        if not present:
            doc.para("No metric values were found in the runs.")
            return
        models = []
        for i in self.all_inputs:
            models += [m for m in model_order(i["runs"]) if m not in models]
        # summary.json: the numbers behind each cell, {metric: {"label", "models": {model: {"label",
        # "datasets": {dataset: {variant: {mean, std, n, values, seeds}}}}}}}
        tables = {}
        for key in present:
            label = metric_label(key)
            headers = ["model"] + [f"{self._label(i)} {v}" for i in self.all_inputs for v in VARIANTS]
            rows = []
            numbers = {}
            for model in models:
                row = [self._model_label(model)]
                cells = {}
                for inputs in self.all_inputs:
                    groups = seeded_values_by_group(inputs["runs"], key)
                    row += [_cell([v for _, v in groups.get((model, variant), [])]) for variant in VARIANTS]
                    cells[self._label(inputs)] = {variant: group_stats(groups[(model, variant)])
                                                  for variant in VARIANTS if (model, variant) in groups}
                rows.append(row)
                numbers[model] = {"label": self._model_label(model), "datasets": cells}
            doc.heading(label, 3)
            doc.table(headers, rows)
            tables[key] = {"label": label, "models": numbers}
            if key == self.primary:
                self._table1_figures(doc)
        self.summary["tables"] = tables

    def _setting(self, inputs) -> str:
        """What our runs used (preset, store source and resolution, retraining steps), from the inputs' setting."""
        store = setting(inputs, "data") or {}
        steps = (setting(inputs, "retraining") or {}).get("steps")
        per_model = retrain_steps(inputs)
        parts = [f"preset `{inputs.get('preset') or '?'}`"]
        if store:
            res = store.get("resolution")
            parts.append(f"{store.get('source') or '?'} store"
                         + (f" at {res}×{res}" if res else "")
                         + (f", factor sizes {store['factor_sizes']}" if store.get("factor_sizes") else "")
                         + (", rendering options " + ", ".join(f"{k} = {v}" for k, v in store["options"].items())
                            + " (a deviation from the generator's default images)" if store.get("options") else ""))
        else:
            parts.append("store settings not recorded in the inputs")
        if len(set(per_model.values())) > 1:
            parts.append("training steps " + ", ".join(f"{m} {n}" for m, n in per_model.items()))
        else:
            parts.append(f"{steps} training steps" if steps is not None else "training steps not recorded")
        seeds = sorted({r.get("seed") for r in inputs["runs"] if r.get("seed") is not None})
        parts.append(f"{len(seeds)} seed(s)")
        return ", ".join(parts)

    def _table1_figures(self, doc: Document):
        """Per-seed dots of the primary metric per model × variant, with the paper's Table 1 beside them
        (only for MIG, the metric Table 1 reports, and only for the models and datasets it covers)."""
        label = metric_label(self.primary)
        for inputs in self.all_inputs:
            name = self._label(inputs)
            groups = values_by_group(inputs["runs"], self.primary)
            if not groups:
                continue
            reference = paper.table1(name, self.primary)
            path = fig.seed_dots(groups, model_order(inputs["runs"]), self._figure(f"table1_{name}.png"), label,
                                 title=f"{label} on {name}", reference=reference, reference_label="Zietlow et al. 2021")
            caption = f"{label} on {name}: dots are seeds, black bars the mean over seeds."
            if inputs.get("preset") == "smoke":
                caption = "Smoke run, not results. " + caption
            if reference:
                caption += " Hollow markers: the paper's Table 1 (mean ± std over 10 seeds)."
                doc.para(f"**Not like for like:** the paper's values ({paper.CITATION}) were measured on the "
                         f"{paper.SETTING}; ours on {name} used {self._setting(inputs)}. Compare the direction of "
                         "the orig → mod / noise changes, not the levels.")
            elif self.primary == paper.METRIC:
                caption += f" The paper reports no {label} for {name}."
            doc.image(path, caption)

    def _model_label(self, model: str) -> str:
        for inputs in self.all_inputs:
            for run in inputs["runs"]:
                hp = run.get("hyperparameter") or {}
                if run["model"] == model and hp.get("name") is not None:
                    return f"{model} ({hp['name']}={hp.get('value')})"
        return model

    def _statistics(self, doc: Document):
        present = self._present()
        if not present:
            return
        doc.heading("Changes per metric (Welch t-test, bootstrap 95% CI)")
        doc.para("Δ = mean(variant) − mean(orig); p is the two-sided Welch t-test; the interval is the percentile "
                 f"bootstrap 95% CI of the difference of means (α = {ALPHA}, margin {MARGIN} as in the verdict rule).")
        stats = {}
        for key in present:
            label = metric_label(key)
            rows = []
            for inputs in self.all_inputs:
                groups = values_by_group(inputs["runs"], key)
                for model in model_order(inputs["runs"]):
                    orig = groups.get((model, "orig"), [])
                    if not orig:
                        continue
                    cells = []
                    for variant in ("mod", "noise"):
                        vals = groups.get((model, variant), [])
                        c = compare(orig, vals, seed=self.seed) if vals else None
                        cells.append(_change(c))
                        stats.setdefault(key, {}).setdefault(self._label(inputs), {}).setdefault(model, {})[variant] = c
                    rows.append([self._label(inputs), model, *cells])
            if rows:
                doc.heading(label, 3)
                doc.table(["dataset", "model", "orig→mod", "orig→noise"], rows)
        self.summary["changes"] = stats

    def _bar_charts(self, doc: Document):
        present = self._present()
        if not present:
            return
        doc.heading("Figures: scores per variant")
        for inputs in self.all_inputs:
            models = model_order(inputs["runs"])
            panels = [(metric_label(key), values_by_group(inputs["runs"], key)) for key in present]
            panels = [(label, groups) for label, groups in panels if groups]
            if panels:
                path = fig.grouped_bars(panels, models, self._figure(f"bars_{self._label(inputs)}.png"))
                doc.image(path, f"Scores on {self._label(inputs)} per model and variant: mean ± std over seeds, "
                                "dots are seeds.")

    # -- Fig. 5 ---------------------------------------------------------------------------------------
    def _num_factors(self, inputs) -> int | None:
        """Factors with more than one value in the orig store (dSprites' single colour is no factor a code can
        encode); from the store's recorded facts, else from the recorded store setting; None when neither says."""
        sizes = store_fact(inputs, "orig", "factor_sizes")
        sizes = sizes if sizes is not None else (setting(inputs, "data") or {}).get("factor_sizes")
        return sum(1 for size in sizes if int(size) > 1) if sizes is not None else None

    def _robustness(self, doc: Document):
        doc.heading("Robustness over the primary hyperparameter (Fig. 5)")
        label = metric_label(self.primary)
        any_runs = False
        for inputs in self.all_inputs:
            runs = inputs["robustness"]
            if not runs:
                doc.para(f"{self._label(inputs)}: no robustness runs in the inputs (the pipeline's preset ran no "
                         "hyperparameter line search).")
                continue
            any_runs = True
            k = self._num_factors(inputs)
            points: dict = {}
            counts: dict = {}
            hyper = {}
            for run in runs:
                model, variant = run["model"], run["variant"]
                hyper[model] = (run.get("hyperparameter") or {}).get("name")
                c = counts.setdefault((model, variant), {"kept": 0, "dropped": 0, "unknown_active": 0})
                value = metric_value(run.get("metrics"), self.primary)
                if value is None:
                    continue
                active = active_latent_count(run)
                if k is not None and active is not None and active < k:
                    c["dropped"] += 1
                    continue
                if active is None or k is None:
                    c["unknown_active"] += 1
                c["kept"] += 1
                scale = float(run.get("scale", (run.get("hyperparameter") or {}).get("value", 0.0)))
                points.setdefault(model, {}).setdefault(variant, {}).setdefault(scale, []).append(value)
            rule = (f"runs with fewer active units (E[σ²] < 0.8) than the {k} factors were dropped as over-pruned"
                    if k is not None else "the number of factors is unknown (store unreadable), so no run was dropped")
            if points:
                dropped = ({m: sum(c["dropped"] for (mm, _), c in counts.items() if mm == m) for m in points}
                           if k is not None else None)
                path = fig.line_search(points, label, self._figure(f"linesearch_{self._label(inputs)}.png"), hyper,
                                       dropped=dropped)
                doc.image(path, f"{label} vs scale of the literature hyperparameter on {self._label(inputs)} "
                                f"(mean ± std over kept seeds); {rule}.")
            rows = [[m, v, c["kept"], c["dropped"], c["unknown_active"]] for (m, v), c in counts.items()]
            doc.table(["model", "variant", "kept", "dropped (over-pruned)", "kept without active-unit count"], rows)
            self.summary.setdefault("robustness", {})[self._label(inputs)] = {
                "num_factors": k, "counts": {f"{m}/{v}": c for (m, v), c in counts.items()}}
        if not any_runs:
            self.summary.setdefault("robustness", {})

    # -- alignment with the selected restarts ------------------------------------------------------------
    def _alignment(self, doc: Document):
        """Per model × variant (orig, mod, noise and mod-random): mean ± std over seeds of each run's best-match
        |corr|, best-match NMI and linear R² to the entangled and to the disentangled restarts, the difference of
        the |corr|s, and how it holds the global PCA (span R², blocks on their best latents). Omitted when no run
        carries ``alignment``."""

        with_alignment = [i for i in self.all_inputs
                          if any(alignment_value(r, t, "best_match_corr") is not None
                                 for r in retrained_runs(i) for t in ALIGNMENT_TARGETS)]
        if not with_alignment:
            return
        doc.heading("Alignment with the selected restarts")
        doc.para("Best-match |corr| = mean over the restart's active latents of the largest |Pearson correlation| "
                 "with any latent of the run (1: the run's axes coincide with that restart's axes); best-match NMI = "
                 "the same with the normalised mutual information of the two latents in 20 equal-count bins in place "
                 "of |corr| (1: one latent of the run is that restart's latent up to any monotone map; a latent equal "
                 "to it up to noise reads 0.59 at correlation 0.99 and 0.28 at 0.9; two latents rotated by 45° "
                 "≈ 0.13, unrelated ones ≈ 0.01); linear R² = how well a linear map from the run's codes predicts "
                 "the restart's (1: the same information up to a linear map). Difference = disentangled − "
                 "entangled, per seed. How to read it: on mod, a VAE that "
                 "relies on local structure should move towards the entangled restart (difference falls compared "
                 f"with orig); PCL should not. Rows {RANDOM_M} (where models were retrained on the random-ψ "
                 "control's m of the same ε) tell whether that move is what *learning* m does: if the runs on the "
                 "random m move as far towards the entangled restart, any m(w) of this budget pushes them there. "
                 "|corr| and R² are correlations, so they also fall when a run lays a "
                 "factor on its latent in another order than the restart does (a circular factor such as hue cut "
                 "at another place) while capturing the same factor, which MIG does not see: a fall of the correlation "
                 "to the disentangled restart without a rise towards the entangled one may be such a change of "
                 "order rather than entanglement. The NMI keeps 0.77-1 under such a change of order, so where it "
                 "moves with |corr| the move is one of alignment. `benchmarks/factor_capture.py WORKDIR --order "
                 "FACTOR` shows which factors each run captures and in which order. The last two columns ask "
                 "whether a run holds the global PCA of the original images (its top K principal components, K the "
                 "number of factors, at the same points) — the linear VAE's solution (Theorem 1), what is left to a "
                 "VAE once the local structure no longer singles out axes: span R² = mean R² of the standardised PC "
                 "scores regressed linearly on the run's active codes; blocks = mean over groups of near-equal "
                 "eigenvalues (a hue's circle gives two: its cos and sin, any rotation of which is as good) of the R² "
                 "of a group's scores on as many of the run's latents as it has directions. Both are invariant to "
                 "rotations inside a group; a run in the PCA's alignment reads near 1 on both, one that holds a hue "
                 "as a single latent (its angle) ≈ 0.3 on that hue's pair. Missing (—) where the evaluate stage "
                 "predates it.")
        summary = {}
        for inputs in with_alignment:
            name = self._label(inputs)
            runs = retrained_runs(inputs)  # the runs on the random m are the mechanism's control

            def corr(target):
                return lambda run: alignment_value(run, target, "best_match_corr")

            def difference(run):
                ent, dis = corr("entangled")(run), corr("disentangled")(run)
                return None if ent is None or dis is None else dis - ent

            series = {"entangled": seeded_values_by_group(runs, "", corr("entangled")),
                      "disentangled": seeded_values_by_group(runs, "", corr("disentangled")),
                      "difference": seeded_values_by_group(runs, "", difference),
                      "entangled_nmi": seeded_values_by_group(
                          runs, "", lambda r: alignment_value(r, "entangled", "best_match_nmi")),
                      "disentangled_nmi": seeded_values_by_group(
                          runs, "", lambda r: alignment_value(r, "disentangled", "best_match_nmi")),
                      "entangled_linear_r2": seeded_values_by_group(
                          runs, "", lambda r: alignment_value(r, "entangled", "linear_r2")),
                      "disentangled_linear_r2": seeded_values_by_group(
                          runs, "", lambda r: alignment_value(r, "disentangled", "linear_r2")),
                      "pca_span_r2": seeded_values_by_group(
                          runs, "", lambda r: alignment_value(r, GLOBAL_PCA, "span_r2")),
                      "pca_block_r2": seeded_values_by_group(
                          runs, "", lambda r: alignment_value(r, GLOBAL_PCA, "mean_block_r2"))}
            rows, numbers = [], {}
            for model in model_order(runs):
                for variant in ALIGNMENT_VARIANTS:
                    if not any((model, variant) in s for s in series.values()):
                        continue
                    cells = {k: group_stats(s.get((model, variant), [])) for k, s in series.items()}
                    numbers.setdefault(model, {})[variant] = cells
                    rows.append([model, variant] + [_stats_cell(cells[k]) for k in series])
            doc.heading(name, 3)
            doc.table(["model", "variant", "best-match |corr| to entangled", "to disentangled",
                       "difference (dis − ent)", "best-match NMI to entangled", "to disentangled",
                       "linear R² to entangled", "to disentangled", "global PCA: span R²",
                       "PCA blocks on their best latents (R²)"], rows)
            groups = {g: [v for _, v in pairs] for g, pairs in series["difference"].items()}
            if groups:
                path = fig.seed_dots(groups, model_order(runs), self._figure(f"alignment_{name}.png"),
                                     "best-match |corr|: dis − ent", title=f"alignment with the restarts on {name}",
                                     zero_line=True,
                                     variants=tuple(v for v in ALIGNMENT_VARIANTS if any(g[1] == v for g in groups)))
                doc.image(path, f"Difference of best-match |corr| (disentangled − entangled restart) per seed on {name}; "
                                "below 0 the run's axes resemble the entangled restart more.")
            summary[name] = numbers
        self.summary["alignment"] = summary

    # -- restarts: NMI heatmaps, traversals ---------------------------------------------------------
    def _restarts(self, doc: Document, inputs):
        name = self._label(inputs)
        doc.heading(f"β-VAE restarts and the selected alignments ({name})")
        restarts = inputs["restarts"]
        if not restarts:
            doc.para("No restarts in the inputs: the selection stage did not run, so there are no NMI heatmaps or "
                     "traversals.")
            return
        rows = [[_run_name(r.get("run_dir")), r.get("seed"), _fmt(r.get("mig"), 3), r.get("selected") or ""]
                for r in sorted(restarts, key=lambda r: (r.get("mig") is None, r.get("mig") or 0))]
        doc.table(["run", "seed", "MIG", "selected"], rows)
        selected = [r for r in restarts if r.get("selected") in ("entangled", "disentangled")]
        if not selected:
            doc.para("No restart is marked entangled/disentangled.")
            return
        latents = inputs.get("restart_latents")
        if not latents:
            doc.para(f"NMI heatmaps and latent traversals are not available: {missing_section('restart_latents')}.")
            return
        if "unavailable" in latents:
            doc.para(f"NMI heatmaps and latent traversals are not available: the selected restarts could not be "
                     f"loaded ({latents['unavailable']}).")
            self.summary.setdefault("restarts_unavailable", {})[name] = latents["unavailable"]
            return
        panels, traversals = self._restart_panels(inputs, latents)
        path = fig.nmi_heatmaps(panels, latents["factor_names"], self._figure(f"nmi_{name}.png"))
        doc.image(path, f"Normalised mutual information I(w_k; z_j)/H(w_k) ({latents['bins']}-bin histograms of the "
                        f"posterior means, {latents['nmi_samples']} images) of the selected restarts on {name}.")
        if len(traversals) == len(panels):
            path = fig.traversal_figure(traversals, self._figure(f"traversals_{name}.png"))
            doc.image(path, "2-D latent traversals (Fig. 10/11) of the selected restarts along their two most "
                            f"important latents (smallest mean σ², Eq. 14) in [−{latents['limit']:g}, "
                            f"{latents['limit']:g}], other latents at the code of a random image.")
        else:
            doc.para(f"The latent traversals' images are missing ({len(panels) - len(traversals)} of "
                     f"{len(panels)} not readable).")
        self.summary.setdefault("nmi", {})[name] = {p["title"]: np.asarray(p["nmi"]).tolist() for p in panels}

    def _restart_panels(self, inputs, latents: dict) -> tuple[list[dict], list[dict]]:
        """NMI panels {"title", "nmi"} and traversal panels {"title", "grid", "dims"} of the selected restarts, from
        the report stage's record; a traversal whose PNG cannot be read is left out."""
        panels, traversals = [], []
        for p in latents["panels"]:
            title = f"{p['selected']}: {_run_name(p['run_dir'])} (MIG {_fmt(p.get('mig'), 3)})"
            panels.append({"title": title, "nmi": p["nmi"]})
            grid = fig.read_tiles(p.get("traversal_png"), latents["steps"])
            if grid is not None:
                traversals.append({"title": title, "grid": grid, "dims": tuple(p["dims"])})
        return panels, traversals

    # -- manipulation -----------------------------------------------------------------------------------
    def _manipulation(self, doc: Document, inputs):
        name = self._label(inputs)
        doc.heading(f"Manipulation ({name})")
        stores = inputs.get("stores") or {}
        eps = {v: (stores.get(v) or {}).get("epsilon") for v in ("mod", "noise")}
        if any(e is not None for e in eps.values()):
            doc.para(f"ε (max-norm bound of the change per pixel): mod {eps['mod']}, noise {eps['noise']}.")
        man = inputs.get("manipulation") or {}
        if not man:
            doc.para("No manipulation in the inputs.")
            return
        gap = man.get("dis_minus_ent") or {}
        if gap.get("before") is not None and gap.get("after") is not None:
            doc.para(f"Decoder loss gap dis − ent (Bernoulli nats per image; > 0: the entangled alignment is the "
                     f"cheaper one): {gap['before']:+.2f} on x with the restarts' decoders, {gap['after']:+.2f} on x′ "
                     + ("with the same decoders (frozen)." if decoders_frozen(man) else "with the fine-tuned decoders."))
        pairing = pairing_sentence(man)
        if pairing:
            doc.para(pairing)
        deviations = inputs.get("manipulation_deviations")  # appendix_b1_deviations, listed by the report stage
        if deviations:
            doc.para("Deviations from the paper's manipulation (appendix B.1): " + "; ".join(deviations) + ".")
        coverage = man.get("coverage")
        if isinstance(coverage, dict) and coverage:
            names = store_fact(inputs, "orig", "factor_names")
            if not coverage.get("factor_names") and names:  # older manipulation records: the store's factor names
                coverage = {**coverage, "factor_names": list(names)}
            doc.para(_coverage_line(coverage))
            self.summary.setdefault("manipulation", {})[name] = {"coverage": coverage}
        fig4 = resolve_path(inputs, man.get("figure4"))
        if fig4 is not None and fig4.exists():
            target = fig.copy_image(fig4, self._figure(f"figure4_{name}.png"))
            doc.image(target, "Original images, additive manipulations and altered images (Fig. 4).")
        else:
            doc.para("The perturb stage's Fig. 4 image triplets are not available.")
        losses = resolve_path(inputs, man.get("losses"))
        if losses is not None and losses.exists():
            series = {}
            for key in self._curve_keys(losses):
                steps, values = fig.read_curve(losses, key)
                if steps:
                    series[key] = (steps, values)
            if series:
                path = fig.loss_curve(series, self._figure(f"manipulation_losses_{name}.png"),
                                      "manipulation training losses")
                doc.image(path, "Training losses of the manipulation network and the two decoders.")

    @staticmethod
    def _curve_keys(path: Path) -> list[str]:
        try:
            with open(path) as f:
                first = json.loads(f.readline())
        except (OSError, json.JSONDecodeError):
            return []
        return [k for k, v in first.items() if k != "step" and isinstance(v, (int, float))][:6]

    # -- training curves ----------------------------------------------------------------------------------
    def _curves(self, doc: Document):
        doc.heading("Training curves")
        for inputs in self.all_inputs:
            curves: dict = {}
            missing = 0
            for run in inputs["runs"]:
                path = resolve_path(inputs, run.get("curve"))
                steps, values = fig.read_curve(path) if path is not None else ([], [])
                if not steps:
                    missing += 1
                    continue
                curves.setdefault(run["model"], []).append((run["variant"], steps, values))
            if curves:
                path = fig.training_curves(curves, self._figure(f"curves_{self._label(inputs)}.png"))
                doc.image(path, f"Training loss of every retrained run on {self._label(inputs)} (one line per seed).")
            if missing:
                doc.para(f"{self._label(inputs)}: {missing} run(s) have no readable training log.")

    # -- linear VAE vs PCA ----------------------------------------------------------------------------------
    def _linear_pca(self, doc: Document, inputs):
        doc.heading(f"Linear VAE vs PCA ({self._label(inputs)})")
        res = inputs.get("linear_pca")
        if not res:
            doc.para("No linear-PCA result in the inputs (stage not run).")
            return
        # a smoke run's check is as short as its training: its pass/fail is withheld like the verdicts
        withheld = "smoke run" if inputs.get("preset") == "smoke" else None
        rows = []
        if res.get("kind") == "synthetic":
            for c in res.get("cases", []):
                name = f"synthetic D={c['data_dim']} d={c['num_latent']} noise={c['noise']}"
                rows.append(_pca_row(name, c, withheld))
        elif res.get("kind") == "store":
            s = res.get("settings", {})
            rows.append(_pca_row(f"{(res.get('store') or {}).get('name')} images → {s.get('project_dims')} PCA dims, "
                                 f"d={s.get('num_latent')}", res["linear_vae"], withheld))
        if rows:
            doc.table(["case", "subspace mean cos²", "alignment mean |cos|", "σ-order", "V signed-perm error", "pass"], rows)
        linear_pca_judgement(doc, res, withheld=withheld)
        for t in res.get("theorem1", []) or []:
            doc.bullets([f"Theorem 1 (dim {t['dim']}): objective − closed-form minimum {t['objective_gap']:.1e}, "
                         f"V signed-permutation error {t['v_signed_permutation']['max_abs_error']:.1e}, "
                         f"U vs V_X mean |cos| {t['u_alignment_mean_abs_cos']:.6f}"])
        local = res.get("local_alignment")
        if local and "local_mean_abs_cos" in local:
            doc.para(f"Fig. 1 on the nonlinear run {Path(local['run_dir']).name}: decoder Jacobian columns vs PCA of the "
                     f"{local['neighbours']} latent-space neighbours: mean |cos| {local['local_mean_abs_cos']:.3f} "
                     f"(± {local['local_std']:.3f}); vs global PCA: {local['global_mean_abs_cos']:.3f} "
                     f"(± {local['global_std']:.3f}) over {local['num_anchors']} anchors.")

    # -- provenance -----------------------------------------------------------------------------------
    def _provenance(self, doc: Document):
        from probe.provenance import code_version

        doc.heading("Provenance")
        for group in self.all_inputs:
            pooled = parts(group)
            for number, inputs in enumerate(pooled, 1):
                title = self._label(inputs) + (f", part {number} of {len(pooled)}" if len(pooled) > 1 else "")
                doc.heading(title, 3)
                doc.bullets(self._provenance_items(inputs))
                config = recorded_config(inputs)
                if config:
                    doc.code(json.dumps(config, indent=2, sort_keys=True, default=str))
        doc.para(f"The inputs are archived beside this report in `{ARCHIVE_DIR}/part-1`"
                 + (f" … `part-{self.archived_parts}`" if self.archived_parts > 1 else "")
                 + " (report_inputs.json with the training curves, loss logs and Fig. 4 it opens; no store, no "
                   f"checkpoint): `probe report {ARCHIVE_DIR}/part-*` renders it again, and pools with a later workdir "
                   "of the same experiment, without the workdir.")
        cv = code_version()
        doc.para(f"Report generated by probe {cv['probe_version']} (git {cv['git_commit'] or '—'}, sources "
                 f"{cv['source_digest'][:16]}) on {platform.platform()}.")
        self.summary["report_code_version"] = cv

    @staticmethod
    def _provenance_items(inputs: dict) -> list[str]:
        """The provenance bullets of one workdir's inputs."""
        prov = inputs.get("provenance") or {}
        cv = recorded_code_version(inputs)
        env = prov.get("environment") or {}
        seeds = sorted({r.get("seed") for r in inputs["runs"] if r.get("seed") is not None})
        items = [
            f"inputs: `{inputs['_path']}`",
            f"pipeline `{inputs.get('pipeline')}`, preset `{inputs.get('preset')}`, dataset `{inputs.get('dataset')}`",
            f"started {prov.get('started', '—')}, {wall_time_text(prov)}",
            step_costs_text(inputs.get("step_costs")),
            f"code version: probe {cv.get('probe_version', '—')}, git {cv.get('git_commit') or '—'}, "
            f"sources {str(cv.get('source_digest') or '—')[:16]}",
            f"hardware/software: {', '.join(f'{k} {v}' for k, v in env.items()) or '—'}",
            f"retraining seeds: {seeds}; restart seeds: {sorted({r.get('seed') for r in inputs['restarts']})}",
            f"runs: {len(inputs['runs'])} retrained, {len(inputs['robustness'])} robustness, "
            f"{len(inputs['restarts'])} restarts",
        ]
        for variant, store in (inputs.get("stores") or {}).items():
            store = store or {}
            eps = f", ε={store['epsilon']}" if store.get("epsilon") is not None else ""
            items.append(f"store {variant}: `{store.get('path')}` digest {str(store.get('digest'))[:16]}{eps}")
        return items


def wall_time_text(provenance: dict) -> str:
    """The run's wall time; for a run interrupted and run again, the total over its legs and each leg's."""
    total, legs = provenance.get("wall_time_s"), provenance.get("legs") or []
    if total is None:
        return "wall time —"
    if len(legs) < 2:
        return f"wall time {_fmt(total, 0)} s"
    each = ", ".join(f"{_fmt(leg['wall_time_s'], 0)} s from {leg['started']}" for leg in legs)
    return f"wall time {_fmt(total, 0)} s in {len(legs)} legs (interrupted and resumed: {each})"


def step_costs_text(costs: dict | None) -> str:
    """The host's speed as the retrained runs logged it: wall times of runs on other machines compare through it."""
    if costs is None:
        return f"training step cost: — ({missing_section('step_costs')})"
    if not costs:
        return "training step cost: — (no retrained run logged two steps)"
    each = ", ".join(f"{model} {c['median_s']:.3f} s ({c['fastest_decile_s']:.3f})" for model, c in costs.items())
    return (f"training step cost on this host, median (fastest decile) of the retrained runs' logged intervals: {each} "
            "per step; a wall time on another host scales with it")


# Fewer retraining steps than this and a verdict means nothing: the learning curves (docs/notes/presets.md) show
# MIG at 500 steps far from its plateau for every model measured (β-VAE 0.03-0.13, PCL 0.07-0.09).
MIN_VERDICT_STEPS = 500


def retrain_steps(inputs: dict) -> dict:
    """{model: retraining steps} from the inputs' setting (``model_steps``, else the default ``steps``); a model maps
    to None when the inputs do not record its steps."""
    retrain = setting(inputs, "retraining") or {}
    per_model = retrain.get("model_steps") or {}
    return {m: per_model.get(m, retrain.get("steps")) for m in model_order(inputs["runs"])}


def _gate_cell(gate: dict | None) -> str:
    """A gate's outcome in the gates table: passed / **failed** / not checked, with its reason."""
    if gate is None:
        return "—"
    status = "**failed**" if gate["status"] == "failed" else gate["status"]
    return f"{status}: {gate['reason']}"


def _stats_cell(stats: dict) -> str:
    if not stats["n"]:
        return "—"
    return _cell(stats["values"])


def _number(value, fmt: str) -> str | None:
    try:
        return format(float(value), fmt)
    except (TypeError, ValueError):
        return None


def _percentile_name(key: str) -> str:
    """"p05" -> "5th percentile"; other keys as they are."""
    digits = key[1:] if key.startswith("p") else ""
    return f"{int(digits)}th percentile" if digits.isdigit() else key


def _coverage_line(coverage: dict) -> str:
    """One sentence on where m(w) acts, from the manipulation's ``coverage`` dict; only the keys present."""
    threshold = _number(coverage.get("threshold"), "g") or "?"
    parts = []
    covered = coverage.get("fraction_covered")
    if covered is None and coverage.get("fraction_small") is not None:
        covered = 1 - float(coverage["fraction_small"])
    if covered is not None:
        n, of = coverage.get("num_images"), coverage.get("of_images")
        sample = (f" (a random sample of {n} of the {of} images)" if of is not None and n is not None and n < of
                  else f" ({n} images)" if n is not None else "")
        parts.append(f"m(w) is non-zero (|m|∞ ≥ {threshold}) on {_number(100 * float(covered), '.1f')} % of the images"
                     + sample)
    q = coverage.get("linf_quantiles") or {}
    if isinstance(q, dict) and q:
        named = [f"{_percentile_name(k)} {_number(v, '.3f')}" for k, v in q.items()
                 if k != "p50" and _number(v, ".3f") is not None]
        median = _number(q.get("p50"), ".3f")
        parts.append(("median |m|∞ " + median if median else "|m|∞") + (f" ({', '.join(named)})" if named else ""))
    variation = coverage.get("variation") or {}
    if isinstance(variation, dict) and variation:
        shown = [f"{k.replace('_', ' ')} {_number(v, '.3g')}" for k, v in variation.items() if _number(v, ".3g")]
        if shown:
            parts.append("variation across the factor space: " + ", ".join(shown))
        per_factor = variation.get("per_factor_rms")
        if isinstance(per_factor, dict) and per_factor:
            names = coverage.get("factor_names") or []
            label = {str(i): n for i, n in enumerate(names)}
            parts.append("RMS change of m for a one-class step of each factor alone: " + ", ".join(
                f"{label.get(str(k), 'factor ' + str(k))} {_number(v, '.3f')}" for k, v in per_factor.items()))
    smooth = coverage.get("smoothness") or {}
    ratio, share = _number(smooth.get("neighbour_diff_ratio"), ".3f"), _number(smooth.get("high_frequency_share"), ".3f")
    if ratio is not None and share is not None:
        white = _number(smooth.get("white_noise_high_frequency_share"), ".2f")
        parts.append(f"smoothness of m: mean |neighbour difference| / RMS {ratio} (a ±1 checkerboard 2, white noise ≈ "
                     f"1.1, a smooth pattern ≪ 1), energy share at ≥ ¼ cycle per pixel {share} (checkerboard 1"
                     + (f", white noise {white}" if white else "") + ")")
    return ("; ".join(parts) + ".") if parts else "The manipulation's coverage record holds no known keys."


def _pca_row(name: str, c: dict, withheld: str | None = None) -> list[str]:
    return [name, f"{c['subspace']['mean_cos2']:.4f}", f"{c['alignment_mean_abs_cos']:.4f}",
            "ok" if c["sigma_order"]["correct"] else "wrong", f"{c['v_signed_permutation']['max_abs_error']:.1e}",
            f"withheld ({withheld})" if withheld else status_cell(c)]
