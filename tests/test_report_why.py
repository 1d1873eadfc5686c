"""The report's "why" section and linear-PCA judgement (probe/report/why.py) on hand-made inputs."""

from __future__ import annotations

from probe.report.document import Document
from probe.report.why import linear_pca_judgement, status_cell, why_section


class _Builder:
    def __init__(self, tmp_path):
        self.dir = tmp_path

    def _label(self, inputs):
        return inputs["dataset"]

    def _figure(self, name):
        return self.dir / name


def test_why_section_table_figure_and_global_pca(tmp_path):
    run = {"variant": "orig", "seed": 0, "num_active": 3, "local_mean_abs_cos": 0.8, "local_std": 0.1,
           "global_mean_abs_cos": 0.5, "global_std": 0.05, "local_minus_global": 0.3,
           "direction_source": "decoder Jacobian"}
    why = {"settings": {"num_images": 100, "num_anchors": 4, "neighbours": 16},
           "runs": [{**run, "model": "restart", "role": "disentangled"}, {**run, "model": "beta-vae", "role": None},
                    {**run, "model": "pcl", "role": None, "variant": "mod", "direction_source": "regression of x on z"},
                    {"model": "beta-vae", "role": None, "variant": "mod", "seed": 1, "error": "UserError: gone"}],
           "global_pca": {"k": 4, "num_images": 100, "subspace_mean_cos2": 0.99, "direction_match_mean_abs_cos": 0.98,
                          "block_match_mean": 0.99, "block_match_min": 0.97, "max_relative_eigenvalue_change": 0.02}}
    doc = Document("t")
    why_section(_Builder(tmp_path), doc, {"dataset": "toy", "why": why})
    md = doc.to_markdown(tmp_path)
    assert "Why: local vs global alignment (toy)" in md and "restart (disentangled)" in md and "pcl*" in md
    assert "UserError: gone" in md and "subspace mean cos² 0.9900" in md
    assert (tmp_path / "why_toy.png").exists()
    empty = Document("t")
    why_section(_Builder(tmp_path), empty, {"dataset": "toy"})
    assert "no \"why\" entry" in empty.to_markdown(tmp_path)


def test_linear_pca_judgement_lists_blocks_and_reasons(tmp_path):
    check = {"passed": True, "column_orthogonality": {"max_abs_cos": 0.01}, "fit": {"evaluations": 10, "loss": 1.0},
             "spectrum": {"ratio_threshold": 0.9, "blocks": [
                 {"start": 0, "end": 1, "size": 2, "eigenvalues": [2.0, 1.9], "ratio_last_first": 0.95,
                  "degenerate": True, "latents": [0, 1], "mean_score": 0.999}]},
             "judgement": {"status": "pass-blocks", "reasons": ["assumption not met for components 1–2 (eigenvalue ratio 0.950 ≥ 0.9)"]}}
    doc = Document("t")
    linear_pca_judgement(doc, {"kind": "store", "linear_vae": check})
    md = doc.to_markdown(tmp_path)
    assert "near-degenerate (subspace)" in md and "assumption not met for components 1–2" in md
    assert "pass-blocks" in md and status_cell(check).startswith("yes, per block")
