"""The throughput window every arm of the runtime-overhead comparison is measured with, on hand-made steps."""

import pytest

from rlm_lab.train.tracer import window_throughput


def steps(walls, gap=0.5):
    out, t = [], 0.0
    for k, w in enumerate(walls, start=1):
        out.append({"step": k, "start_s": t, "wall_s": w})
        t += w + gap  # logging and callbacks between steps
    return out


def test_window_by_hand():
    st = steps([10.0, 1.0, 2.0, 3.0])  # ends at 10, 11.5, 14, 17.5
    log = [{"step": k, "num_tokens": n} for k, n in ((1, 100), (2, 250), (3, 400), (4, 600))]
    tp = window_throughput(st, log, warmup=1)
    # tokens 600 - 100 over 17.5 - 10 s: the first (slow) step left out, the gaps between steps counted
    assert tp["tokens"] == 500 and tp["seconds"] == pytest.approx(7.5)
    assert tp["tokens_per_s"] == pytest.approx(500 / 7.5) and tp["step_s"] == pytest.approx(2.5)
    # an evaluation of 1.5 s inside the window is left out
    assert window_throughput(st, log, warmup=1, excluded_s=1.5)["tokens_per_s"] == pytest.approx(500 / 6.0)
    # rows without tokens (an eval log) are ignored; too short a run gives nothing
    assert window_throughput(st, log + [{"step": 4, "eval": 1}], warmup=1)["tokens"] == 500
    assert window_throughput(st[:1], log[:1], warmup=1) == {}
    assert window_throughput(st, [], warmup=1) == {}


def test_the_record_is_consistent_with_itself():
    # a short window with more decimals than the record keeps: the rate a reader recomputes from the record's
    # tokens and seconds is the rate the record states (a rate from the unrounded seconds differed by ~1e-6)
    st = [{"step": 1, "start_s": 0.0, "wall_s": 0.1234567891}, {"step": 2, "start_s": 0.2, "wall_s": 0.1470000004},
          {"step": 3, "start_s": 0.4, "wall_s": 0.1000000007}]
    log = [{"step": k, "num_tokens": n} for k, n in ((1, 300), (2, 611), (3, 917))]
    tp = window_throughput(st, log, warmup=1)
    assert tp["seconds"] == round(0.5000000007 - 0.1234567891, 6)
    assert tp["tokens_per_s"] == tp["tokens"] / tp["seconds"] and tp["step_s"] == tp["seconds"] / tp["steps"]
