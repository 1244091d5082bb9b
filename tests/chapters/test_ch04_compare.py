"""Chapter 4's verdict numbers, on hand-made rows whose answers are worked out by hand."""

import pytest

from rlm_lab.chapters.ch04_parallelism import compare as I


def row(layout, meas, pred, base_meas=10.0, base_pred=5.0):
    return {"layout": layout, "measured_ms": meas, "predicted_ms": pred, "time_rel_err": (pred - meas) / meas,
            "slowdown_measured": meas / base_meas, "slowdown_predicted": pred / base_pred}


def test_summary_counts_errors_faster_layouts_and_concordant_pairs():
    rows = [row("single", 10.0, 5.0), row("a", 20.0, 8.0), row("b", 30.0, 20.0), row("c", 40.0, 4.0),
            {"layout": "pp2", "measured_ms": 50.0, "predicted_ms": None, "time_rel_err": None}]
    s = I.summary(rows)
    # time errors: single -0.5, a -0.6, b -1/3, c -0.9 -> |.| median of (1/3, 0.5, 0.6, 0.9) = 0.55
    assert s["step_error"] == pytest.approx(0.55)
    assert (s["step_error_min"], s["step_error_max"]) == pytest.approx((-0.9, -1 / 3))
    # slowdowns measured a 2, b 3, c 4; predicted a 1.6, b 4, c 0.8 -> ratio errors -0.2, +1/3, -0.8
    assert s["slowdown_error"] == pytest.approx(1 / 3)
    assert s["faster_predicted"] == ["c"] and s["faster_measured"] == []
    # pairs (a,b) agree, (a,c) and (b,c) disagree
    assert (s["pairs_concordant"], s["pairs"]) == (1, 3)
    assert s["layouts"] == 4 and s["unpredicted"] == 1 and s["compared"] == 3
    assert s["step_verdict"].startswith("undecided: 4 errors, too few")   # a median of 4 has no 95 % interval


def test_without_any_time_prediction_there_is_no_verdict():
    assert I.summary([{"layout": "x", "predicted_ms": None}]) == {"layouts": 0, "unpredicted": 1}
