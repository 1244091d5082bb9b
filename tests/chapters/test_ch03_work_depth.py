"""Chapter 3's measurement functions: length distributions, forced lengths in generate, replica splits,
the knee and Brent's bounds on a recorded (synthetic) run."""

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.chapters import ch03_work_depth as W


def test_distributions_share_a_mean_and_grow_a_tail():
    dists = W.distributions("cpu")
    vals = [d.values(0) for d in dists]
    means = [sum(v) / len(v) for v in vals]
    assert all(abs(m - W.params("cpu")["mean"]) / W.params("cpu")["mean"] < 0.1 for m in means)
    bubbles = [W.bubble(v) for v in vals]
    assert bubbles[0] == 0 and bubbles == sorted(bubbles)  # fixed < uniform < lognormal 0.5 < lognormal 1
    assert dists[2].values(0) == dists[2].values(0) and dists[2].values(0) != dists[2].values(1)


@pytest.mark.parametrize("how", ["round_robin", "by_length"])
def test_assignments_partition_the_sequences(how):
    lengths = W.distributions("cpu")[-1].values(0)
    for p in (1, 2, 3, 8):
        shares = W.assign(lengths, p, how)
        assert len(shares) == p and sorted(x for s in shares for x in s) == sorted(lengths)
    with pytest.raises(RlmLabError):
        W.assign(lengths, 0)


def test_forced_lengths_are_exact():
    model = W._load("nano")
    lengths = [1, 5, 3, 9, 2]
    seconds, produced = W.generate_timed(model, lengths)
    assert produced == lengths


def test_knee():
    b = [1, 2, 4, 8, 16]
    assert W.knee(b, [1.0, 1.0, 1.1, 1.4, 3.0]) == 8
    assert W.knee(b, [1.0] * 5) is None


def test_brent_bounds_from_a_record(tmp_path):
    from rlm_lab.record import RunRecord

    rec = RunRecord(tmp_path / "r", {"model": "nano"}, command="x")
    sim = {"1": [4.0], "2": [2.5, 2.0], "4": [1.6, 1.5, 1.4, 1.2]}
    rec.update(lengths=[8, 4, 2, 1], depth_s=1.0, simulated={"round_robin": sim}, real={"2": [2.4, 2.6]})
    rows = W.brent_table(rec)
    assert [r["replicas"] for r in rows] == [1, 2, 4]
    r1, r2, r4 = rows
    assert r1["lower"] == r1["measured_sim"] == 4.0 and r1["upper"] == 5.0
    assert r2["lower"] == 2.0 and r2["upper"] == 3.0 and r2["measured_real"] == 2.6
    # p = 4: W/p = 1.0 = D, so the lower bound is max(1.0, 1.0) and the upper 1.0 + 1.0 (hand-derived)
    assert r4["lower"] == 1.0 and r4["upper"] == 2.0 and r4["work_sim"] == pytest.approx(5.7)
    assert r4["measured_sim"] == 1.6 and r2["measured_sim"] == 2.5  # the slowest replica sets T_p
    assert "measured_real" not in r1 and "measured_real" not in r4  # only p = 2 was run for real
