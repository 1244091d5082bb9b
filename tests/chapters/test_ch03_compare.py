"""Chapter 3's comparison step (rlm_lab.chapters.ch03_work_depth.compare) on a synthetic record and a
hand-written cost model, so that every expected number below is worked out by hand."""

from types import SimpleNamespace

import pytest

from rlm_lab.chapters.ch03_work_depth import compare as C

STEP = 0.01  # the stand-in cost model: a static batch takes R_max steps of 10 ms, whatever its size


@pytest.fixture(autouse=True)
def hand_model(monkeypatch):
    monkeypatch.setattr(C, "predicted_generate", lambda model, lengths, profile, batch=None: STEP * max(lengths))


def replicas_record():
    # lengths 8, 4, 2, 2; one replica: 0.1 s; the longest alone: 0.09 s
    return SimpleNamespace(config={"model": "m"}, results={
        "lengths": [8, 4, 2, 2], "depth_s": 0.09,
        "simulated": {"round_robin": {"1": [0.10], "2": [0.085, 0.05]},
                      "by_length": {"1": [0.10], "2": [0.095, 0.03]}},
        "real": {"1": [0.2], "2": [0.17, 0.1]}})


def test_replica_table_bounds_errors_and_excess():
    rows = {(r["assignment"], r["replicas"]): r for r in C.replica_table(replicas_record(), "any")}
    rr2, bl2 = rows[("round_robin", 2)], rows[("by_length", 2)]
    # measured bounds from W = 0.10, D = 0.09 at p = 2: lower max(0.05, 0.09) = 0.09, upper 0.05 + 0.09 = 0.14
    assert (rr2["lower"], rr2["upper"]) == pytest.approx((0.09, 0.14))
    # round robin: shares [8, 2] and [4, 2] -> predicted max(0.08, 0.04) = 0.08 against 0.085 measured
    assert rr2["predicted"] == pytest.approx(0.08) and rr2["rel_error"] == pytest.approx(0.08 / 0.085 - 1)
    # predicted bounds from predicted W = 0.08 (all four: R_max 8) and D = 0.08: lower 0.08, upper 0.12
    assert (rr2["pred_lower"], rr2["pred_upper"]) == pytest.approx((0.08, 0.12))
    assert not rr2["above_upper"] and bl2["measured_sim"] == 0.095
    assert rr2["measured_real"] == 0.17


def test_tail_table_slowdown_against_the_static_batch_law():
    rec = SimpleNamespace(config={"model": "m"}, results={"rows": [
        {"label": "fixed", "lengths": [4, 4], "r_mean": 4, "r_max": 4, "bubble": 0.0, "seconds": 0.05},
        {"label": "tail", "lengths": [1, 7], "r_mean": 4, "r_max": 7, "bubble": 1 - 8 / 14, "seconds": 0.1}]})
    rows = C.tail_table(rec, "any")
    assert rows[1]["slowdown_measured"] == pytest.approx(2.0)
    assert rows[1]["slowdown_law"] == pytest.approx(14 / 8)
    assert rows[1]["rel_error"] == pytest.approx(0.07 / 0.1 - 1)


def test_headline_leads_with_whole_generation_times(monkeypatch):
    monkeypatch.setattr(C, "predicted_decode_steps", lambda model, batches, k0, k1, profile: [0.001] * len(batches))
    knee = SimpleNamespace(config={"batches": [1, 2], "k0": 1, "k1": 2}, results={"step_s": {"m": [0.001, 0.002]}})
    tail = SimpleNamespace(config={"model": "m"}, results={"rows": [
        {"label": "fixed", "lengths": [4], "r_mean": 4, "r_max": 4, "bubble": 0.0, "seconds": 0.05}]})
    h = C.headline({"decode_knee": knee, "long_tail": tail, "replicas": replicas_record()}, "any")
    whole = sorted(abs(r["rel_error"]) for r in h["tail_rows"] + h["replica_rows"])
    assert h["whole_error"] == pytest.approx(whole[len(whole) // 2] if len(whole) % 2 else
                                             (whole[len(whole) // 2 - 1] + whole[len(whole) // 2]) / 2)
    assert h["step_error"] == pytest.approx(0.25)  # decode steps: errors 0 and -0.5 -> median 0.25
    # knee: the largest batch within 1.5x of batch 1 -> measured 1 (0.002 > 1.5 ms); predicted flat -> None
    assert h["knees"] == [{"model": "m", "knee_measured": 1, "knee_predicted": None}]
    assert h["real_over_sim"][2] == pytest.approx(0.17 / 0.085)


def test_sweep_overrides_a_size_and_refuses_unknown_keys():
    from rlm_lab.chapters import ch03_work_depth as wd
    from rlm_lab.errors import RlmLabError

    p = wd.sweep("gpu", {"n": 256, "mean": 48})
    assert (p["n"], p["mean"], p["tail_model"]) == (256, 48, wd.params("gpu")["tail_model"])
    assert [d.n for d in wd.distributions("gpu", p)] == [256] * 4  # the overrides reach the distributions
    assert max(max(d.values(0)) for d in wd.distributions("gpu", p)) == 8 * 48  # the lognormal cap: 8 x mean
    with pytest.raises(RlmLabError, match="unknown work-depth parameter"):
        wd.sweep("gpu", {"nn": 3})
