"""``rlm-lab reference`` (rlm_lab/reference.py): the registries, the budget, one window end to end.

The fast tests run the window with each repeat replaced by a tiny child that reports a known value (so the paired
ratios, the window id on every record and the refusals are checked against hand-made numbers in seconds); the
real chapter 5 at smoke size (in-situ calibration, then 4 placement runs on Ray, each a fresh process) is the
slow test: on 2 cores one smoke placement run costs about 25 s of CPU (imports, Ray and its actors), so the four
cannot fit the 60 s of a `make test` test.
"""

import importlib
import json
import sys

import pytest

from rlm_lab import reference
from rlm_lab.errors import RlmLabError
from rlm_lab.protocol import Reference
from rlm_lab.record import reference_root


def test_registries_have_one_shape_and_name_committed_records():
    for chapter in reference.REGISTRIES:
        refs = reference.references(chapter)
        assert refs and all(isinstance(r, Reference) for r in refs)
        assert len({r.name for r in refs}) == len(refs)
        for r in refs:
            module, func = r.run.split(":")
            assert callable(getattr(importlib.import_module(module), func))
            for folder in r.replaces:  # what it re-measures is a committed record the page reads
                assert (reference_root("cpu") / folder).is_dir(), (chapter, r.name, folder)


def test_budget_fits_the_issue():
    per = {c: reference.estimate_s(c, "cpu") for c in reference.REGISTRIES}
    assert all(0 < s <= reference.CHAPTER_BUDGET_S for s in per.values()), per
    assert sum(per.values()) + reference.INSITU_CPU_S <= reference.BOOK_BUDGET_S
    # by hand: chapter 5 is 4 references x 4 pairs x 2 arms at 28, 28, 28 and 30 s a repeat
    assert per[5] == pytest.approx(8 * (28 + 28 + 28 + 30))


def test_smoke_runs_the_first_reference_of_each_chapter():
    assert [r.name for _, r in reference.plan([5], "smoke")] == [reference.references(5)[0].name]
    assert len(reference.plan([5], "cpu")) == len(reference.references(5))


@pytest.mark.parametrize("chapter,message", [(11, "unknown chapter 11"), ("x", "unknown chapter 'x'"),
                                             (8, "chapter 8 has no references"), (3, "chapter 3 has no references")])
def test_bad_chapter_is_one_error(chapter, message):
    with pytest.raises(RlmLabError, match=message):
        reference.check_chapter(chapter)


# each repeat: a child that reports step_s = 2.0 for arm A and 1.0 for arm B (A / B = 2 in every pair)
_CHILD = ("import os, sys; from rlm_lab.protocol import report; "
          "report(step_s=2.0 if sys.argv[1] == 'A' else 1.0, window=os.environ.get('RLM_WINDOW'))")


def _fake_arms(monkeypatch):
    names = {}

    def command(chapter, ref, arm, size, runs):
        names[arm] = "A" if arm == ref.arms[0] else "B"
        return (sys.executable, "-c", _CHILD, names[arm])

    monkeypatch.setattr(reference, "arm_command", command)


def test_window_end_to_end_with_known_values(tmp_path, monkeypatch):
    _fake_arms(monkeypatch)
    monkeypatch.delenv("RLM_WINDOW", raising=False)
    out = tmp_path / "w"
    res = reference.run_window([5], "smoke", out, insitu=False, say=lambda *a: None, gate_timeout_s=1.0)
    rec = json.loads((out / "record.json").read_text())
    assert rec["status"] == "completed" and rec["provenance"]["window"] == res["window"]
    (row,) = res["references"]
    assert row["summary"]["ratios"] == [2.0, 2.0] and row["summary"]["ratio"]["estimate"] == 2.0
    assert row["summary"]["word"] == "undecided"  # two pairs (smoke) have no interval: they decide nothing
    proto = json.loads((out / row["dir"] / "record.json").read_text())
    assert proto["config"]["window"] == res["window"]
    assert {r["report"]["window"] for r in proto["results"]["repeats"]} == {res["window"]}  # the children saw it
    assert "RLM_WINDOW" not in __import__("os").environ  # the window ends with the call


def test_out_with_records_is_refused_before_work_then_force_moves_them(tmp_path, monkeypatch):
    _fake_arms(monkeypatch)
    out = tmp_path / "w"
    reference.run_window([5], "smoke", out, insitu=False, say=lambda *a: None, gate_timeout_s=1.0)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(RlmLabError, match="already holds a run"):
        reference.run_window([5], "smoke", out, insitu=False, say=lambda *a: None)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    reference.run_window([5], "smoke", out, force=True, insitu=False, say=lambda *a: None, gate_timeout_s=1.0)
    assert (tmp_path / ".replaced").is_dir() and len(list((tmp_path / ".replaced").iterdir())) == 1


def test_insitu_runs_first_and_its_profile_is_recorded(tmp_path, monkeypatch):
    _fake_arms(monkeypatch)
    calls = []

    def fake_insitu(size, folder, say):
        calls.append(size)
        folder.mkdir(parents=True)
        (folder / "profile.json").write_text("{}")
        return folder / "profile.json"

    monkeypatch.setattr(reference, "insitu_window", fake_insitu)
    res = reference.run_window([5], "smoke", tmp_path / "w", say=lambda *a: None, gate_timeout_s=1.0)
    assert calls == ["smoke"] and res["profile"] == "insitu/profile.json"


def test_window_waits_at_the_load_gate_before_its_calibration(tmp_path, monkeypatch):
    """The calibration's runs are timings: a window that starts on a busy machine waits first, and one that gave up
    waiting says so in its record (the load it started at, the gate's result)."""
    _fake_arms(monkeypatch)
    order = []
    busy = {"cores": 2, "loadavg": [2.4, 1.0, 0.5], "per_core": 1.2}

    def fake_gate(timeout_s):
        order.append(("gate", timeout_s))
        return {"passed": False, "waited_s": timeout_s, "load": busy}

    def fake_insitu(size, folder, say):
        order.append(("insitu", size))
        folder.mkdir(parents=True)
        (folder / "profile.json").write_text("{}")
        return folder / "profile.json"

    said = []
    monkeypatch.setattr(reference, "start_gate", fake_gate)
    monkeypatch.setattr(reference, "insitu_window", fake_insitu)
    res = reference.run_window([5], "smoke", tmp_path / "w", say=said.append, gate_timeout_s=1.0)
    assert order == [("gate", 1.0), ("insitu", "smoke")]
    assert res["gate_start"] == {"passed": False, "waited_s": 1.0} and res["load_start"] == busy
    assert any("gave up" in s and "1.20" in s for s in said)


def test_start_gate_is_the_protocols_gate(monkeypatch):
    seen = []

    def fake_gate(timeout_s):
        seen.append(timeout_s)
        return {"passed": True}

    monkeypatch.setattr(reference, "gate", fake_gate)
    assert reference.start_gate(7.0) == {"passed": True} and seen == [7.0]


def test_arm_child_refuses_an_arm_the_reference_lacks(tmp_path):
    with pytest.raises(RlmLabError, match="has arms disaggregated, colocated, not 'hybrid'"):
        reference.run_arm(5, "disaggregated_vs_colocated", "hybrid", "smoke", tmp_path)


# in make test: the issue asks for it there (about 2-3 min on 2 cores: four Ray starts)
def test_chapter5_at_smoke_size_end_to_end(tmp_path):
    """The issue's "done when": rlm-lab reference --chapter 5 at smoke size, for real (the placements on Ray under
    the protocol), each record stamped with the window; about 2 min on 2 cores. The window's in-situ calibration is
    left out here (a calibration suite of its own in fresh processes: CI's budget); the fast tests above drive the
    window with it, through stand-in children."""
    from rlm_lab.record import RunRecord

    out = tmp_path / "w"
    res = reference.run_window([5], "smoke", out, insitu=False, say=lambda *a: None, gate_timeout_s=1.0)
    (row,) = res["references"]
    s = row["summary"]
    assert len(s["ratios"]) == 2 and all(v > 0 for vs in s["values"].values() for v in vs)
    runs = sorted((out / "ch05" / "runs").glob("ch05_*/*/record.json"))
    assert len(runs) == 4
    for r in runs:
        rec = RunRecord.load(r.parent)
        assert rec.data["provenance"]["window"] == res["window"]
        arm = r.parent.parent.name.removeprefix("ch05_")
        assert rec.results["step_seconds_median"] in s["values"][arm]  # the protocol read what the run recorded


# ---- the window's predictions, and the page's table of a committed window ----------------------------------
# A stand-in chapter module (written to a temporary folder on sys.path): its predict function says 2.2 for arm A
# and 0.5 for arm B, remembers when it was asked and with which profile; its children report A = 2.0, B = 1.0
# (as _CHILD), the time they ran and the profile they were pointed at.
_STANDIN = '''
import time
ASKED = []
def predict(arm, size, profile):
    ASKED.append((time.time(), arm, profile))
    if arm == "broken":
        from rlm_lab.errors import RlmLabError
        raise RlmLabError("no model for this arm")
    return {"fast": 0.5, "slow": 2.2}[arm]
'''
_TIMED_CHILD = ("import os, sys, time; from rlm_lab.protocol import report; "
                "report(step_s=2.0 if sys.argv[1] == 'A' else 1.0, at=time.time(), "
                "profile=os.environ.get('RLM_CPU_PROFILE'), insitu=os.environ.get('RLM_INSITU_PROFILE'))")


def _standin(tmp_path, monkeypatch, arms=("slow", "fast")):
    (tmp_path / "standin_refs.py").write_text(_STANDIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("standin_refs")
    mod.ASKED.clear()
    ref = Reference("slow_vs_fast", arms, "standin_refs:predict", "step_s", False, (), 1.0, "standin_refs:predict")
    monkeypatch.setattr(reference, "references", lambda chapter: (ref,))

    def command(chapter, r, arm, size, runs):
        return (sys.executable, "-c", _TIMED_CHILD, "A" if arm == r.arms[0] else "B")

    monkeypatch.setattr(reference, "arm_command", command)
    return mod


def _fake_insitu(size, folder, say):
    folder.mkdir(parents=True)
    (folder / "profile.json").write_text("{}")
    return folder / "profile.json"


def test_window_predicts_from_its_profile_before_the_first_repeat(tmp_path, monkeypatch):
    mod = _standin(tmp_path, monkeypatch)
    monkeypatch.setattr(reference, "insitu_window", _fake_insitu)
    monkeypatch.delenv("RLM_CPU_PROFILE", raising=False)
    out = tmp_path / "data" / "w1"
    res = reference.run_window([5], "smoke", out, say=lambda *a: None, gate_timeout_s=1.0)
    profile = str((out / "insitu" / "profile.json").resolve())
    assert [(a, p) for _, a, p in mod.ASKED] == [("slow", profile), ("fast", profile)]
    assert [(p["arm"], p["predicted"]) for p in res["predictions"]] == [("slow", 2.2), ("fast", 0.5)]
    proto = json.loads((out / res["references"][0]["dir"] / "record.json").read_text())
    reports = [r["report"] for r in proto["results"]["repeats"]]
    assert max(t for t, _, _ in mod.ASKED) < min(r["at"] for r in reports)   # predicted before any repeat ran
    assert {r["profile"] for r in reports} == {r["insitu"] for r in reports} == {profile}  # the children's too
    assert "RLM_CPU_PROFILE" not in __import__("os").environ                # restored when the window ends


def test_page_table_of_a_committed_window_by_hand(tmp_path, monkeypatch):
    from rlm_lab import reference_report as RR

    _standin(tmp_path, monkeypatch)
    root = tmp_path / "windows"
    reference.run_window([5], "smoke", root / "w1", insitu=False, say=lambda *a: None, gate_timeout_s=1.0)
    arms, pairs = RR.rows(RR.latest_window("smoke", 5, root), 5)
    slow, fast = arms
    # slow: predicted 2.2 against 2.0 in both pairs: +10 %; fast: predicted 0.5 against 1.0: -50 %. Two pairs (the
    # smoke size's) have no interval, so neither goal is decided
    assert slow["error"].estimate == pytest.approx(0.10) and slow["goal"] == "undecided"
    assert fast["error"].estimate == pytest.approx(-0.5) and fast["error"].lo is None and fast["goal"] == "undecided"
    (p,) = pairs
    assert p["ratio"].estimate == 2.0 and p["word"] == "undecided" and p["predicted_ratio"] == pytest.approx(4.4)
    text, values = RR.section(5, "smoke", root)
    assert values["ch05_win_met"] == "0" and values["ch05_win_not_met"] == "0" and values["ch05_win_undecided"] == "2"
    assert values["ch05_win_slow_vs_fast"] == "2.00 (n = 2, no interval) (undecided)" and "+10%" in text
    assert values["ch05_win_machine"].endswith("cores, torch " + __import__("torch").__version__)
    assert RR.latest_window("smoke", 4, root) is None   # a window that did not measure chapter 4


def test_a_prediction_that_fails_is_said_and_the_window_still_measures(tmp_path, monkeypatch):
    from rlm_lab import reference_report as RR

    _standin(tmp_path, monkeypatch, arms=("broken", "fast"))
    root = tmp_path / "windows"
    res = reference.run_window([5], "smoke", root / "w1", insitu=False, say=lambda *a: None, gate_timeout_s=1.0)
    assert res["predictions"][0]["predicted"] is None and res["predictions"][0]["why"] == "no model for this arm"
    arms, pairs = RR.rows(RR.latest_window("smoke", 5, root), 5)
    assert arms[0]["goal"] == "nothing predicted" and arms[1]["goal"] == "undecided"   # two pairs: no interval
    assert pairs[0]["predicted_ratio"] is None and pairs[0]["ratio"].estimate == 2.0


def test_no_committed_window_is_one_line_and_every_value_says_so(tmp_path):
    from rlm_lab import reference_report as RR

    text, values = RR.section(2, "smoke", tmp_path / "none")
    assert text.startswith("no reference window of chapter 2 committed at smoke size")
    assert values.pop("ch02_win_goal") == "±25%"
    assert set(values.values()) == {"not measured"} and "ch02_win_id" in values


def test_every_registered_reference_predicts_or_says_it_does_not():
    for chapter in reference.REGISTRIES:
        for r in reference.references(chapter):
            if r.predict:
                module, func = r.predict.split(":")
                assert callable(getattr(importlib.import_module(module), func)), r
    assert all(r.predict for c in (2, 4, 5) for r in reference.references(c))
