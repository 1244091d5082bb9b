"""Chapter 2's GPU stage table: each stage's measured mean over the archives and its datasheet prediction, checked
against the records and the cost model read here on their own."""

import json
import statistics
from pathlib import Path

import pytest

from rlm_lab.chapters.ch02_anatomy.report import gpu_stages_section
from rlm_lab.validate.traced_case import Case, predict_case

REPO = Path(__file__).resolve().parents[2]


def test_the_gpu_stage_table_matches_the_records_and_the_cost_model(tmp_path):
    recs = [json.loads(p.read_text()) for p in sorted((REPO / "data/runs/gpu").glob("ch02_grpo*/record.json"))]
    if not recs:
        pytest.skip("no GPU record of chapter 2 committed")
    text = gpu_stages_section()
    gen = statistics.mean(r["results"]["trace"]["stages"]["generate"]["median_s"] for r in recs)
    pred = predict_case(Case(**recs[0]["config"]["case"]), "h200")
    line = next(line for line in text.splitlines() if line.startswith("| generate |"))
    assert f"| {pred.seconds('generate') * 1e3:.1f} ms | {gen * 1e3:.1f} ms [" in line
    step = next(line for line in text.splitlines() if line.startswith("| step |"))
    assert f"| {pred.total_time * 1e3:.1f} ms |" in step
    assert f"over the {len(recs)} archive(s)" in text
    assert gpu_stages_section(tmp_path) == ""            # no GPU record: nothing to show
