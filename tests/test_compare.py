"""The comparison every chapter shares: whole-step error first, per-stage median second, a verdict against
goals fixed in advance. Checked on hand-computed rows (the numbers below are worked out by hand)."""

import math

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab import compare as C


def rows(run, stages, other, step_pred, step_meas):
    out = [{"run": run, "stage": s, "predicted": p, "measured": m, "rel_error": C.relative_error(p, m)}
           for s, p, m in stages]
    out.append({"run": run, "stage": C.OTHER, "predicted": 0.0, "measured": other, "rel_error": float("nan")})
    out.append({"run": run, "stage": C.STEP, "predicted": step_pred, "measured": step_meas,
                "rel_error": C.relative_error(step_pred, step_meas)})
    return out


def test_whole_step_error_holds_the_unmodelled_share_that_the_stage_median_hides():
    # Run a: two stages predicted exactly (error 0), 2 s of "other" in a 10 s step: predicted step 8 s.
    # Run b: stages off by +10 % and -30 %; other 0; step predicted 9 s for 10 s measured.
    a = rows("a", [("gen", 5.0, 5.0), ("train", 3.0, 3.0)], 2.0, 8.0, 10.0)
    b = rows("b", [("gen", 5.5, 5.0), ("train", 3.5, 5.0)], 0.0, 9.0, 10.0)
    s = C.step_summary(a + b)
    assert s["step_errors"] == pytest.approx({"a": -0.2, "b": -0.1})
    assert s["step_error"] == pytest.approx(0.15)                  # median of |-0.2|, |-0.1|
    assert s["stage_error"] == pytest.approx(0.05)                 # median of 0, 0, 0.1, 0.3
    assert s["other_share"] == pytest.approx({"a": 0.2, "b": 0.0})


def test_median_leaves_out_the_step_row_and_rows_without_an_error():
    r = [{"stage": "x", "rel_error": 0.1}, {"stage": "y", "rel_error": -0.4}, {"stage": C.STEP, "rel_error": 9.0},
         {"stage": C.OTHER, "rel_error": float("nan")}]
    assert C.median_abs_error(r) == pytest.approx(0.25)
    assert C.median_abs_error(r, stages_only=False) == pytest.approx(0.4)
    with pytest.raises(RlmLabError):
        C.median_abs_error([{"stage": "x", "rel_error": float("nan")}])
    with pytest.raises(RlmLabError, match="step"):
        C.step_summary([{"run": "a", "stage": "x", "predicted": 1, "measured": 1, "rel_error": 0.0}])


def test_verdict_names_the_goal_met_or_says_not_met_with_the_live_number():
    assert C.BAR == 0.25 and C.GOAL == 0.10  # the goals named before any measurement
    # one error is one run: no interval, so no word but "undecided", whatever the point says
    assert C.verdict(0.05) == "undecided: one run, no interval (5.0%)"
    # a median needs 6 errors for a 95 % interval (exact order statistics): four decide nothing
    assert C.verdict([0.05, -0.04, 0.06, 0.05]).startswith("undecided: 4 errors, too few")
    assert C.verdict([0.05, -0.04, 0.06, 0.05, 0.03, 0.07]) == "meets the 10% goal"  # the interval too
    assert C.verdict([0.2, 0.23, -0.21, 0.22, 0.2, 0.24]) == "meets the 25% bar, not yet the 10% goal"
    assert C.verdict([0.31, 0.33, -0.32, 0.30, 0.34, 0.36]).startswith("not met: 32.")
    assert C.verdict([0.25] * 6).startswith("meets the 25% bar")     # the bar is inclusive
    assert C.verdict([0.05, 0.4, 0.2, 0.3, 0.1, 0.35]).startswith("undecided: ")  # the interval straddles the bar
    assert C.verdict([0.05, 0.08, 0.12, 0.2, 0.09, 0.15]).startswith("meets the 25% bar; the 10% goal undecided")
    assert C.verdict(float("nan")).startswith("no comparison")
    assert math.isnan(C.relative_error(1.0, 0.0))
