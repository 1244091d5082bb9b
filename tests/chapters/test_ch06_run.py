"""Chapter 6's prediction from a synchronous run's stage times, on a hand-made record: g = 0.3 s per batch,
push 0.1 s, step 1.0 s, so the trainer's remainder t = 0.6 s; one-step-off = max(g, t + s) = 0.7 s."""

import pytest

from rlm_lab.chapters.ch06_async.run import predict_from_sync, stage_times

SYNC = {"glue": {"steps": [{"wait_s": 5.0}] + [{"wait_s": 0.3, "importance_seconds": 0.0}] * 4},  # step 0: warm-up
        "sync": {"seconds_mean": 0.1}, "step_seconds_median": 1.0, "train_seconds": 9.0, "steps": 5}


def test_stage_times_leave_out_the_first_step():
    st = stage_times(SYNC)
    assert st["gen_s"] == [0.3] * 4 and st["push_s"] == 0.1 and st["train_s"] == pytest.approx(0.6)


def test_predictions_by_hand():
    assert predict_from_sync("one_step_off", SYNC)["step_s"] == pytest.approx(0.7, rel=0.01)
    assert predict_from_sync("async", SYNC)["step_s"] == pytest.approx(0.7, rel=0.01)  # training-bound
    assert predict_from_sync("sync", SYNC)["step_s"] == pytest.approx(0.3 + 0.6 + 0.1)
