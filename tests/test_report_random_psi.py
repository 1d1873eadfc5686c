"""The report's "Learned vs random ψ" section (probe/report/random_psi.py) and the smoothness of m in the coverage
line, from constructed report inputs."""

from __future__ import annotations

import json
import re

import pytest

from probe.report.document import Document
from probe.report.random_psi import random_psi_section


class _Builder:
    def __init__(self, tmp_path):
        self.dir = tmp_path

    def _label(self, inputs):
        return inputs["dataset"]

    def _figure(self, name):
        return self.dir / name


def _losses(path, ent, dis):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"step": s, "decoder_rec_entangled": ent(s), "decoder_rec_disentangled": dis(s),
                                        "rec_entangled": ent(s), "rec_disentangled": dis(s),
                                        "objective": ent(s) - dis(s)}) + "\n" for s in range(1, 11)))
    return str(path)


def _record(tmp_path, name, before, after, linf, smooth, full_budget=None):
    record = {"dir": str(tmp_path / name),
              "losses": _losses(tmp_path / name / "losses.jsonl", lambda s: 40 + s, lambda s: 40 + 1.5 * s),
              "coverage": {"threshold": 0.05, "fraction_covered": 0.999,
                           "linf_quantiles": {"p05": linf[0], "p50": linf[1], "p95": linf[2]},
                           "smoothness": {"neighbour_diff_ratio": smooth[0], "high_frequency_share": smooth[1],
                                          "white_noise_high_frequency_share": 0.78}},
              "dis_minus_ent": {"before": before[1] - before[0], "after": after[1] - after[0]},
              "before": {"entangled": before[0], "disentangled": before[1]},
              "after": {"entangled": after[0], "disentangled": after[1], "entangled_excess": 5.0,
                        "disentangled_excess": 7.5},
              "config": {"epsilon": 0.175, "seed": 0, "steps": 300}}
    if full_budget is not None:
        record["full_budget"] = full_budget
    return record


def _pca(b0, cos2):
    return {"k": 4, "num_images": 100, "eigenvalues_a": [10.0, 5.0, 2.0, 1.0], "eigenvalues_b": [b0, 5.0, 2.0, 1.0],
            "subspace_mean_cos2": cos2, "max_relative_eigenvalue_change": abs(b0 - 10) / 10,
            "mean_sq_pixel_difference": 0.01}


def test_the_section_compares_learned_and_random_psi_side_by_side(tmp_path):
    learned = _record(tmp_path, "learned", (100.0, 102.0), (110.0, 119.0), (0.99, 1.0, 1.0), (1.95, 0.97))
    control = _record(tmp_path, "random", (100.0, 102.0), (108.0, 111.0), (1.0, 1.0, 1.0), (0.40, 0.12),
                      full_budget=True)
    inputs = {"dataset": "toy", "_workdir": str(tmp_path), "manipulation": learned, "manipulation_random": control,
              "why": {"global_pca": _pca(9.0, 0.98), "global_pca_random": _pca(10.5, 0.995)}}
    doc = Document("t")
    numbers = random_psi_section(_Builder(tmp_path), doc, inputs)
    md = doc.to_markdown(tmp_path)
    assert "## Learned vs random ψ (toy)" in md and "|  | learned ψ | random ψ (frozen) |" in md
    rows = {}
    for line in md.splitlines():
        if line.startswith("| "):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[cells[0]] = cells[1:]
    assert rows["gap dis − ent on x (restarts' decoders)"] == ["+2.00", "+2.00"]
    assert rows["gap dis − ent on x′ (fine-tuned decoders)"] == ["+9.00", "+3.00"]
    assert rows["change of the gap"] == ["+7.00", "+1.00"]
    assert rows["entangled decoder loss x → x′"] == ["100.00 → 110.00", "100.00 → 108.00"]
    assert rows["median |m|∞ (5th–95th percentile)"] == ["1.000 (0.990–1.000)", "1.000 (1.000–1.000)"]
    assert rows["m: mean |neighbour difference| / RMS (checkerboard 2, white noise ≈ 1.1, smooth ≪ 1)"] == ["1.950", "0.400"]
    assert rows["m: energy share at ≥ ¼ cycle/pixel (checkerboard 1, smooth → 0)"][1] == "0.120 (white noise 0.78)"
    assert rows["global PCA orig → x′: subspace mean cos² (1 = unchanged)"] == ["0.9800", "0.9950"]
    assert rows["global PCA: top eigenvalues orig → x′"][0] == "10 → 9, 5 → 5, 2 → 2, 1 → 1"
    assert rows["global PCA: largest relative eigenvalue change"] == ["10.0 %", "5.0 %"]
    assert "learning ψ moved it +6.00 nats per image beyond the random ψ" in md
    assert "rescaled to ‖m‖∞ = 1" in md and "ε 0.175, seed 0, 300 steps" in md
    assert (tmp_path / "manipulation_random_toy.png").exists() and "manipulation_random_toy.png" in md
    assert numbers["learned"]["gap_change"] == pytest.approx(7.0) and numbers["random"]["gap_after"] == pytest.approx(3.0)
    assert numbers["random"]["pca_subspace_mean_cos2"] == 0.995


def test_the_section_is_absent_without_a_control_and_says_what_it_could_not_compute(tmp_path):
    doc = Document("t")
    assert random_psi_section(_Builder(tmp_path), doc, {"dataset": "toy", "manipulation": {}}) is None
    assert random_psi_section(_Builder(tmp_path), doc, {"dataset": "toy", "manipulation_random": None}) is None
    assert doc.blocks == []
    control = {"config": {"epsilon": 0.1, "normalise_linf": False}, "dis_minus_ent": {"before": 1.0, "after": None}}
    random_psi_section(_Builder(tmp_path), doc, {"dataset": "toy", "_workdir": str(tmp_path), "manipulation": {},
                                                 "manipulation_random": control,
                                                 "why": {"global_pca_random": {"error": "UserError: gone"}}})
    md = doc.to_markdown(tmp_path)
    assert "used as initialised" in md and "not computed (UserError: gone)" in md and "| change of the gap | — | — |" in md
    assert not (tmp_path / "manipulation_random_toy.png").exists()  # no loss logs, no figure


def test_coverage_line_prints_the_smoothness_of_m():
    from probe.report.build import _coverage_line

    line = _coverage_line({"threshold": 0.05, "fraction_covered": 1.0, "linf_quantiles": {"p50": 1.0},
                           "smoothness": {"neighbour_diff_ratio": 1.987, "high_frequency_share": 0.991,
                                          "white_noise_high_frequency_share": 0.78}})
    assert "median |m|∞ 1.000" in line
    assert "mean |neighbour difference| / RMS 1.987" in line and "¼ cycle per pixel 0.991" in line
    assert "white noise 0.78" in line
    assert "smoothness" not in _coverage_line({"threshold": 0.05, "fraction_covered": 1.0})


def test_with_frozen_decoders_the_section_says_so(tmp_path):
    """decoder_batches_per_step 0 (the cpu preset): the text and the gap row name frozen decoders, not fine-tuned ones."""
    learned = _record(tmp_path, "learned", (100.0, 102.0), (110.0, 119.0), (0.99, 1.0, 1.0), (1.95, 0.97))
    control = _record(tmp_path, "random", (100.0, 102.0), (108.0, 111.0), (1.0, 1.0, 1.0), (0.40, 0.12),
                      full_budget=True)
    for record in (learned, control):
        record["config"]["decoder_batches_per_step"] = 0
    inputs = {"dataset": "toy", "_workdir": str(tmp_path), "manipulation": learned, "manipulation_random": control}
    doc = Document("t")
    random_psi_section(_Builder(tmp_path), doc, inputs)
    md = doc.to_markdown(tmp_path)
    assert "both decoders stay frozen at the restarts' weights" in md and "fine-tuned" not in md
    assert "| gap dis − ent on x′ (frozen decoders) | +9.00 | +3.00 |" in md
    assert "After training the gap is +9.00" in md


def test_the_gap_that_needs_each_images_own_m_is_reported_beside_the_permuted_one(tmp_path):
    """``after_shuffled`` (the decoders on x′ with the images' m permuted): the section's two rows and the manipulation
    paragraph's sentence, which with frozen decoders also gives the share of the gap's change that survives the
    permutation (the cpu run's readings: +5.33 → +46.58, permuted +37.09: +9.49 nats tied to the image, 77 %)."""
    from probe.report.random_psi import pairing_sentence

    learned = _record(tmp_path, "learned", (1047.06, 1052.39), (1445.02, 1491.60), (0.99, 1.0, 1.0), (0.2, 0.01))
    control = _record(tmp_path, "random", (1047.06, 1052.39), (1523.47, 1452.78), (1.0, 1.0, 1.0), (0.2, 0.01),
                      full_budget=True)
    learned["dis_minus_ent"]["after_shuffled"] = 37.09
    control["dis_minus_ent"]["after_shuffled"] = -71.19
    for record in (learned, control):
        record["config"]["decoder_batches_per_step"] = 0
    doc = Document("t")
    numbers = random_psi_section(_Builder(tmp_path), doc, {"dataset": "toy", "_workdir": str(tmp_path),
                                                          "manipulation": learned, "manipulation_random": control})
    md = doc.to_markdown(tmp_path)
    assert "| gap on x′ with every image given another image's m (rows permuted) | +37.09 | -71.19 |" in md
    assert "| of the gap on x′, what needs each image's own m (x′ − permuted) | +9.49 | +0.50 |" in md
    assert numbers["learned"]["gap_own_m"] == pytest.approx(9.49)
    sentence = pairing_sentence(learned)
    assert "the gap is +37.09: +9.49 nats per image" in sentence and "(77 % of the gap's change" in sentence
    fine_tuned = {**learned, "config": {"decoder_batches_per_step": 3}}
    assert "%" not in pairing_sentence(fine_tuned)  # before and after are different decoders: no share
    assert pairing_sentence({"dis_minus_ent": {"before": 1.0, "after": 2.0}}) is None  # older records
