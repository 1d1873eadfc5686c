"""benchmarks/curves_summary.py on hand-made rows: a leg is known by its run folder's name and steps, merging into a
committed results file keeps the rows (and notes) already there, and the per-step summary counts what it says."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "curves_summary", Path(__file__).resolve().parents[1] / "benchmarks" / "curves_summary.py")
curves_summary = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(curves_summary)


def _row(workdir, seed, steps, mig, best_nmi):
    return {"model": "beta-vae", "tag": "t", "seed": seed, "steps": steps, "train_leg_s": 1.0,
            "metrics": {"mig": mig}, "run_dir": f"{workdir}/beta-vae-t-s{seed}",
            "factors": {"gap": [0.0] * len(best_nmi), "best_nmi": best_nmi, "latent": list(range(len(best_nmi)))}}


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_merge_adds_only_new_legs_keeps_old_notes_and_sorts(tmp_path):
    results = tmp_path / "results.jsonl"
    old = {**_row("/host-a/w", 1, 5000, 0.4, [0.9, 0.1]), "note": "session A"}
    _write(results, [old])
    # the same leg measured in another workdir (another host) is not added twice; its old note stays
    again = _row("/host-b/w", 1, 5000, 0.4, [0.9, 0.1])
    new = [_row("/host-b/w", 1, 10000, 0.5, [0.9, 0.3]), _row("/host-b/w", 0, 5000, 0.2, [0.1, 0.1])]
    assert curves_summary.merge_into(results, [again, *new], "session B") == 2
    merged = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["seed"], r["steps"], r["note"]) for r in merged] == [
        (0, 5000, "session B"), (1, 5000, "session A"), (1, 10000, "session B")]
    assert curves_summary.merge_into(results, new, "session C") == 0  # a second merge changes nothing
    assert [json.loads(line) for line in results.read_text().splitlines()] == merged


def test_summary_counts_factors_at_the_gate_threshold_and_bounds_the_mean(tmp_path):
    threshold = curves_summary.CAPTURE_THRESHOLD
    rows = [_row("/w", 0, 100, 0.0, [threshold, threshold - 1e-9]), _row("/w", 1, 100, 1.0, [threshold, threshold])]
    assert [curves_summary.factors_encoded(r) for r in rows] == [1, 2]
    last = curves_summary.summary_lines(rows, enough=2)[-1]
    assert "n 2  mig 0.500 ± 0.707" in last and "≥2 factors in 1 of 2" in last
    # mean + t(0.95, 1) · sd / √2 = 0.5 + 6.3138 · 0.7071 / 1.4142
    assert curves_summary.upper_bound_95([0.0, 1.0]) == pytest.approx(0.5 + 6.313752 * 0.5, abs=1e-5)


def test_a_missing_rows_file_is_one_message_and_exit_2_with_nothing_written(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    with pytest.raises(SystemExit) as stop:
        curves_summary.main([str(tmp_path / "s*" / "curves.jsonl"), "--into", str(results), "--note", "n"])
    assert stop.value.code == 2
    assert "no such rows file" in capsys.readouterr().err
    assert not results.exists()
