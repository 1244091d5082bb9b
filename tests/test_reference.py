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
    assert row["summary"]["word"] == "slower"  # step time, A twice B's: the interval [2, 2] excludes 1
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


def test_arm_child_refuses_an_arm_the_reference_lacks(tmp_path):
    with pytest.raises(RlmLabError, match="has arms disaggregated, colocated, not 'hybrid'"):
        reference.run_arm(5, "disaggregated_vs_colocated", "hybrid", "smoke", tmp_path)


@pytest.mark.slow
@pytest.mark.extended  # CI budget (four smoke placements on Ray); make test-extended
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
