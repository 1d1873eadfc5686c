"""The report's "Retrained on the random m" section (probe/report/random_m.py), from constructed report inputs: the
numbers it shows are the runs' own, its reading follows the test, and a report without such runs has no section."""

from __future__ import annotations

import json

import numpy as np
import pytest

from probe.report.document import Document
from probe.report.random_m import random_m_section, reading
from probe.report.stats import compare, detectable_drop

SEEDS = (100, 101, 102, 103, 104)


class _Builder:
    def __init__(self, capture=None):
        self.capture = {"shapes3d": capture or {}}

    def _label(self, inputs):
        return inputs["dataset"]


def _runs(model, variant, values):
    return [{"model": model, "variant": variant, "seed": s, "run_dir": f"/w/{model}-{variant}-s{s}",
             "metrics": {"mig": {"mig": v}}} for s, v in zip(SEEDS, values)]


def _capture(model, variant, gaps):
    return [{"model": model, "variant": variant, "seed": s, "run_dir": f"/w/{model}-{variant}-s{s}", "gap": list(g),
             "latent": [0] * len(g), "best_nmi": list(g), "mig": float(np.mean(g)), "active": 6}
            for s, g in zip(SEEDS, gaps)]


ORIG = [0.41, 0.35, 0.30, 0.02, 0.30]
MOD = [0.01, 0.07, 0.05, 0.03, 0.02]


def _inputs(random_values, model="beta-vae"):
    runs = _runs("ae", "orig", [0.05] * 5) + _runs(model, "orig", ORIG) + _runs(model, "mod", MOD) \
        + _runs(model, "noise", [0.36] * 5)
    random_runs = _runs(model, "mod-random", random_values)
    return {"dataset": "shapes3d", "runs": runs,
            "random_m": {"store": {"path": "/w/mod-random.zarr", "digest": "d", "epsilon": 0.175}, "runs": random_runs,
                         "factor_capture": {"runs": _capture(model, "mod-random", [(0.9, 0.1)] * 4 + [(0.1, 0.0)]),
                                            "factor_names": ["wall_hue", "shape"]}}}


def _table(doc, first_header):
    return next(b for b in doc.blocks if b[0] == "table" and b[1][0] == first_header)


def test_the_section_shows_the_runs_numbers_and_a_learned_m_below_the_random_one():
    random_values = [0.26, 0.30, 0.33, 0.28, 0.31]
    builder = _Builder({"runs": _capture("beta-vae", "mod", [(0.0, 0.1)] * 5)})
    doc = Document("t")
    out = random_m_section(builder, doc, _inputs(random_values), primary="mig")
    numbers = out["models"]["beta-vae"]
    assert set(out["models"]) == {"beta-vae"}  # the AE has no run on the random m
    assert numbers["mod-random"] == random_values and numbers["orig"] == ORIG and numbers["mod"] == MOD
    expected = compare(random_values, MOD)
    assert numbers["mod_minus_random_m"]["delta"] == pytest.approx(np.mean(MOD) - np.mean(random_values))
    assert numbers["mod_minus_random_m"]["p"] == pytest.approx(expected["p"]) and expected["p"] < 0.05
    assert numbers["to_random_m"]["delta"] == pytest.approx(np.mean(random_values) - np.mean(ORIG))
    assert numbers["detectable_difference"] == pytest.approx(detectable_drop(random_values, MOD))
    assert numbers["reading"].startswith("lower on mod than on the random m")
    row = _table(doc, "model").__getitem__(2)[0]
    assert row[0] == "beta-vae" and row[3] == f"{np.mean(random_values):.2f} ± {np.std(random_values, ddof=1):.2f}"
    assert row[6].startswith(f"{np.mean(MOD) - np.mean(random_values):+.2f}")
    gaps = [b for b in doc.blocks if b[0] == "table" and b[1][:2] == ["model", "variant"]][0]
    assert gaps[1] == ["model", "variant", "wall_hue", "shape"]
    assert gaps[2] == [["beta-vae", "mod", "0.00 (0/5, split 0)", "0.10 (0/5, split 0)"],
                       ["beta-vae", "mod-random", "0.74 (4/5, split 0)", "0.08 (0/5, split 0)"]]
    text = " ".join(str(b[1]) for b in doc.blocks if b[0] == "para")
    assert "ε (0.175" in text and "Not part of the verdict rule" in text and "rescaled to ‖m‖∞ = 1" in text
    json.dumps(out)  # summary.json takes it as it is
    small = Document("t")
    random_m_section(builder, small, {**_inputs(random_values), "manipulation_random": {"full_budget": False}},
                     primary="mig")
    assert "not rescaled" in " ".join(str(b[1]) for b in small.blocks if b[0] == "para")


def test_a_random_m_as_damaging_as_the_learned_one_reads_as_no_difference():
    doc = Document("t")
    numbers = random_m_section(_Builder(), doc, _inputs([0.02, 0.30, 0.01, 0.04, 0.06]), primary="mig")["models"]["beta-vae"]
    assert numbers["mod_minus_random_m"]["p"] >= 0.05
    assert numbers["reading"].startswith("no difference between the learned and the random m detected")
    assert f"{numbers['detectable_difference']:.2f}" in numbers["reading"]
    # no capture of the main runs: the gap table shows the random m's rows alone
    gaps = [b for b in doc.blocks if b[0] == "table" and b[1][:2] == ["model", "variant"]][0]
    assert [r[1] for r in gaps[2]] == ["mod-random"]


def test_reading_covers_both_directions_and_too_few_seeds():
    assert reading({"p": 0.01, "delta": 0.2}, 0.1).startswith("higher on mod than on the random m")
    assert reading({"p": float("nan"), "delta": 0.0}, float("nan")).startswith("not tested")


def test_no_runs_on_the_random_m_no_section():
    doc = Document("t")
    inputs = _inputs([0.3] * 5)
    for random_m in (None, {"store": inputs["random_m"]["store"], "runs": []}):
        assert random_m_section(_Builder(), doc, {**inputs, "random_m": random_m}, primary="mig") is None
    assert doc.blocks == []


def test_the_random_m_runs_are_rows_of_runs_csv():
    from probe.report.inputs import tidy_rows

    rows = tidy_rows(_inputs([0.3] * 5))
    assert sorted({r["variant"] for r in rows if r["model"] == "beta-vae"}) == ["mod", "mod-random", "noise", "orig"]
    assert {r["kind"] for r in rows if r["variant"] == "mod-random"} == {"retrain"}


def test_a_factor_on_two_latents_counts_as_split_not_as_encoded_clearly():
    """summarise_capture's split: best − gap (the second-best latent's normalised MI) ≥ 0.2."""
    from probe.report.capture import summarise_capture

    entries = [{"model": "beta-vae", "variant": "mod", "gap": [0.02, 0.95, 0.10], "best_nmi": [0.52, 0.99, 0.25]},
               {"model": "beta-vae", "variant": "mod", "gap": [0.30, 0.90, 0.01], "best_nmi": [0.55, 0.98, 0.05]},
               {"model": "beta-vae", "variant": "mod", "error": "no checkpoint"}]
    g = summarise_capture(entries)[("beta-vae", "mod")]
    assert g["n"] == 2 and g["encoding"] == [1, 2, 0]
    assert g["split"] == [2, 0, 0]  # 0.52 − 0.02 and 0.55 − 0.30 ≥ 0.2; 0.25 − 0.10 is not
    assert g["mean_gap"] == pytest.approx([0.16, 0.925, 0.055])
