"""Chapter 7's techniques as arms of the protocol (rlm_lab.chapters.ch07_long_tail.reference)."""

import pytest

from rlm_lab import reference
from rlm_lab.chapters.ch07_long_tail import reference as R
from rlm_lab.chapters.ch07_long_tail import run as run_mod
from rlm_lab.chapters.ch07_long_tail.cases import params
from rlm_lab.chapters.ch07_long_tail.predict import Predictor
from rlm_lab.errors import RlmLabError
from rlm_lab.record import RunRecord


def test_every_arm_belongs_to_one_registered_reference():
    refs = {r.name: r.arms for r in reference.references(7)}
    assert refs == R.ARMS  # the registry and the module name the same techniques and arms, A = technique on
    assert all(R.technique_of(a) == t for t, arms in R.ARMS.items() for a in arms)
    with pytest.raises(RlmLabError, match="chapter 7 has no arm 'lpt'"):
        R.technique_of("lpt")


def test_predictions_are_the_chapters_own_from_the_given_profile():
    """The window's prediction of an arm is the number the chapter's in-process measurement records before it
    runs (run.py, a second code path over the same rows), and it follows the profile it is given."""
    p = params("smoke")
    model, tok, task, rows = run_mod._setup(p, 0)
    pr = Predictor("smoke", p["model"])
    tail = run_mod.tail_batching(p | {"reps": 1}, pr, model, tok, task, rows, 0)["predicted"]
    pack = run_mod.packing(p | {"reps": 1}, pr, model, tok, task, rows, 0)["predicted"]
    prof = pr.profile_name
    assert R.predict_arm("mixed", "smoke", prof) == pytest.approx(tail["mixed_s"])
    assert R.predict_arm("tail_batched", "smoke", prof) == pytest.approx(tail["tail_batched_s"])
    assert R.predict_arm("padded", "smoke", prof) == pytest.approx(pack["padded_s"])
    assert R.predict_arm("packed", "smoke", prof) == pytest.approx(pack["packed_s"])
    # another machine's profile (a datasheet GPU: per-call overheads dominate a nano model) predicts other seconds
    assert R.predict_arm("mixed", "smoke", "h100-sxm") != pytest.approx(tail["mixed_s"], rel=1e-3)


def test_one_repeat_writes_a_completed_record(tmp_path):
    res = reference.run_arm(7, "packing", "packed", "smoke", tmp_path)
    rec = RunRecord.load(res["record"])
    assert rec.data["status"] == "completed"
    assert res["seconds"] == rec.results["seconds"] > 0 and rec.results["first_s"] > 0
    assert rec.results["predicted_s"] == pytest.approx(R.predict_arm("packed", "smoke", Predictor("smoke", "nano").profile_name))
    with pytest.raises(RlmLabError, match="has arms fused, after"):
        reference.run_arm(7, "fusion", "packed", "smoke", tmp_path)


def test_window_agreement_groups_by_the_side_of_one(monkeypatch):
    """Hand-made: the window's ratio is on / off in seconds, so 'faster' (ratio below 1) is a gain above 1; the gain
    printed is the page's estimator, the median of the paired ratios off / on: packing's on / off ratios 0.5, 0.6,
    0.8, 1.0 give 1.46 (median of 2, 1.67, 1.25, 1), not 1 / 0.7 = 1.43."""
    from types import SimpleNamespace

    import rlm_lab.reference_report as rr
    from rlm_lab.chapters.ch07_long_tail import report as R
    from rlm_lab.evidence import Interval

    def ref(name, on, off):
        return {"chapter": 7, "name": name, "summary": {"values": {R_ARMS[name][0]: on, R_ARMS[name][1]: off}}}

    R_ARMS = {"fusion": ("fused", "after"), "packing": ("packed", "padded"), "tail_batching": ("tail_batched", "mixed")}
    rec = SimpleNamespace(results={"references": [ref("fusion", [3.0] * 4, [2.0] * 4),
                                                  ref("packing", [0.5, 0.6, 0.8, 1.0], [1.0] * 4),
                                                  ref("tail_batching", [1.0] * 4, [2.0] * 4)]})
    pairs = [{"reference": n, "a": a, "b": b, "ratio": Interval(0, 0, 0, 4), "word": w}
             for (n, (a, b)), w in zip(R_ARMS.items(), ("slower", "faster", "faster"))]
    monkeypatch.setattr(rr, "latest_window", lambda size, chapter, root=None: rec)
    monkeypatch.setattr(rr, "rows", lambda rec, chapter: ([], pairs))
    table = [{"technique": "fusion", "measured gain": 5.0, "side": "above 1"},
             {"technique": "packing", "measured gain": 1.3, "side": "above 1"},
             {"technique": "tail_batching", "measured gain": 2.0, "side": "undecided"},
             {"technique": "dispatch", "measured gain": 1.0, "side": "undecided"}]
    text = R.window_agreement(table, "cpu")["ch07_win_agree"]
    assert text.startswith("agree: packing (gain 1.30 in one process, 1.48 in the window)")
    assert "disagree: fusion (gain 5.00 in one process, 0.67 in the window)" in text
    assert "undecided: tail_batching (gain 2.00 in one process, 2.00 in the window)" in text and "dispatch" not in text
    monkeypatch.setattr(rr, "latest_window", lambda size, chapter, root=None: None)
    assert "no window" in R.window_agreement(table, "cpu")["ch07_win_agree"]
