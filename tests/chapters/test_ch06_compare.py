"""Chapter 6's campaign analysis on hand-made records (numbers worked out by hand in the comments)."""

import pytest

from rlm_lab.chapters.ch06_async import compare as A


def run(step, finals, wall=10.0, tokens=5000, waits=(0.25, 0.25), pred=None, hist=None, evals=(0.0, 0.4, 0.1)):
    pts = [{"step": 20 * i, "accuracy": a, "wall_s": wall * i / (len(finals) - 1), "eval_s": e}
           for i, (a, e) in enumerate(zip(finals, evals))]
    return {"step_seconds_median": step, "prediction": {"step_s": pred, "inputs": {"step_s": 0.4}} if pred else None,
            "glue": {"curve": {"points": pts}, "num_tokens": tokens, "steps": [{"wait_s": w} for w in waits],
                     "buffer": {"staleness_hist": hist or {"0": 8}}}}


def test_degraded_and_the_eta_beyond():
    sync = [0.60, 0.62, 0.61]  # mean 0.61, range 0.02
    assert A.degraded([0.57, 0.58, 0.575], sync)  # mean 0.575 < 0.61 - 0.02
    assert not A.degraded([0.60, 0.59, 0.605], sync)  # mean 0.598 > 0.59
    assert not A.degraded([0.55, 0.58, 0.60], sync)  # mean 0.577, but its own range 0.05: 0.61 - 0.05 = 0.56
    etas = [0, 1, 2, 4, 8, None]
    assert A.eta_beyond(etas, {0: False, 1: False, 2: False, 4: True, 8: False, None: True}) == 2
    assert A.eta_beyond(etas, dict.fromkeys(etas, False)) is None  # none degraded: infinity


def test_tokens_and_idle_fractions_by_hand():
    r = run(0.5, [0.5, 0.55, 0.6])
    assert A.tokens_per_s(r) == pytest.approx(500.0)  # 5000 tokens over 10 s of training wall
    # trainer steps span 0 .. 2 s; the eval at the middle point (0.4 s) is inside: window 1.6 s
    trace = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "trainer"}},
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "rollout0"}},
        {"ph": "X", "cat": "step", "pid": 0, "ts": 0.0, "dur": 1e6},
        {"ph": "X", "cat": "step", "pid": 0, "ts": 1.4e6, "dur": 0.6e6},
        {"ph": "X", "name": "generate", "pid": 1, "ts": -0.5e6, "dur": 1.0e6},   # 0.5 s inside the window
        {"ph": "X", "name": "weight_sync", "pid": 1, "ts": 1.5e6, "dur": 0.3e6},  # 0.3 s
        {"ph": "X", "name": "reward", "pid": 1, "ts": 0.0, "dur": 2e6}]}       # not generation work
    idle = A.idle_fractions(r, trace)
    assert idle["trainer"] == pytest.approx(0.5 / 1.6)  # waits 0.25 + 0.25
    assert idle["rollout0"] == pytest.approx(1 - 0.8 / 1.6)


def test_table_speedups_predictions_and_the_goal():
    eta = {"sync": 0, "eta2": 2}.get
    cells = {("sync", None): A.cell_summary([{"results": run(0.4, [0.5, 0.55, f])} for f in (0.60, 0.62, 0.61)]),
             ("eta2", None): A.cell_summary([{"results": run(0.25, [0.5, 0.55, f], pred=0.21)}
                                             for f in (0.57, 0.58, 0.575)])}
    rows = A.table(cells, ["sync", "eta2"], [None], eta)
    r = rows[1]
    assert r["speedup"] == pytest.approx(0.4 / 0.25)  # 1.6x measured
    # predicted from a sync step of 0.4 s (the prediction's inputs): 0.4 / 0.21 = 1.905
    assert r["predicted_speedup"] == pytest.approx(0.4 / 0.21)
    assert r["speedup_error"] == pytest.approx((0.4 / 0.21 - 1.6) / 1.6) and r["met"] == "met"  # +19 % at both ends
    cells[("eta2", None)]["predicted_speedup"] = 0.4 / 0.15  # 2.67x predicted: +67 %, not met
    assert A.table(cells, ["sync", "eta2"], [None], eta)[1]["met"] == "not met"
    assert r["degraded"] is True and A.beyond(rows, None) == 0
    assert cells[("eta2", None)]["curve"][-1]["accuracy"] == pytest.approx(0.575)
    ref = A.cell_summary([{"results": run(1.0, [0.5, 0.55, f], tokens=2000)} for f in (0.58, 0.58, 0.58)])
    g = A.goal_vs_reference(r, ref)  # 500 vs 200 tokens/s: 2.5x; 0.575 vs 0.58 within the larger range
    assert g["tokens_ratio"] == pytest.approx(2.5) and g["same_curve"] and g["met"] == "met"


def _cells(sync_steps, mode_steps, pred=None):
    mk = lambda steps, **kw: A.cell_summary([{"results": run(x, [0.5, 0.55, 0.6], **kw), "seed": k}  # noqa: E731
                                             for k, x in enumerate(steps)])
    return {("sync", None): mk(sync_steps), ("eta2", None): mk(mode_steps, pred=pred)}


def test_one_seed_is_undecided_and_a_decided_interval_gives_the_word():
    eta = {"sync": 0, "eta2": 2}.get
    one = A.table(_cells([0.4], [0.25], pred=0.25), ["sync", "eta2"], [None], eta)[1]
    assert one["speedup"] == pytest.approx(1.6) and one["speedup_word"] == "undecided"  # one seed: no interval
    assert one["met"] == "undecided"  # error 0 %, yet one run decides nothing
    # three seeds, each mode step well under its sync step (ratios 1.6, 1.5, 1.7): faster, and met within 25 %
    three = A.table(_cells([0.4, 0.45, 0.34], [0.25, 0.30, 0.20], pred=0.25), ["sync", "eta2"], [None], eta)[1]
    assert three["speedup"] == pytest.approx(1.6) and three["speedup_word"] == "faster"
    assert three["met"] == "met"  # predicted 0.4 / 0.25 = 1.6; the error interval lies within +-25 %
    # ratios 0.8, 1.2, 1.0 straddle 1: undecided, not "faster" from the point 1.0
    mixed = A.table(_cells([0.4, 0.36, 0.3], [0.5, 0.3, 0.3]), ["sync", "eta2"], [None], eta)[1]
    assert mixed["speedup_word"] == "undecided"


def test_seeds_pair_by_seed_not_by_position():
    a, b = {0: 2.0, 2: 4.0}, {1: 9.0, 2: 2.0, 0: 1.0}  # seed 1 has no partner; seeds 0 and 2 give 2 and 2
    assert A.by_seed_ratio(a, b).estimate == pytest.approx(2.0)
