"""Chapter 6's accuracy test: the exact sign-flip p against a hand enumeration, Holm by hand, the plan's rules."""

import itertools
import json

import pytest

from rlm_lab.chapters.ch06_async import accuracy_test as T
from rlm_lab.errors import RlmLabError


def enumerated_p(diffs):
    """An independent computation: enumerate every sign pattern, count means >= the observed mean."""
    obs = sum(diffs) / len(diffs)
    pats = list(itertools.product((1, -1), repeat=len(diffs)))
    return sum(1 for s in pats if sum(a * b for a, b in zip(s, diffs)) / len(diffs) >= obs - 1e-12) / len(pats)


def test_sign_flip_p_matches_hand_enumeration():
    assert T.sign_flip_p([1, 1, 1]) == pytest.approx(1 / 8)  # only the observed pattern reaches its mean
    d = [0.1, 0.2, -0.05, 0.3]
    assert T.sign_flip_p(d) == pytest.approx(enumerated_p(d))
    assert T.sign_flip_p(d) == pytest.approx(2 / 16)  # (+,+,+,+) and (+,+,-,+) = observed; nothing else
    d = [0.014, 0.30, 0.162, -0.02, 0.05, 0.0, 0.11, 0.07]
    assert T.sign_flip_p(d) == pytest.approx(enumerated_p(d))
    # the other direction is not "greater": the same data swapped is not significant
    assert T.sign_flip_p([-x for x in d]) > 0.9
    with pytest.raises(RlmLabError):
        T.sign_flip_p([])
    with pytest.raises(RlmLabError):
        T.sign_flip_p([0.1, float("nan")])


def test_holm_by_hand():
    # m = 3, alpha 0.05: sorted 0.01 (vs 0.05/3: yes, adj 0.03), 0.02 (vs 0.025: yes, adj 0.04), 0.04 (vs 0.05: yes)
    out = T.holm({"a": 0.02, "b": 0.01, "c": 0.04}, 0.05)
    assert out == {"b": (pytest.approx(0.03), True), "a": (pytest.approx(0.04), True), "c": (pytest.approx(0.04), True)}
    # 0.03 > 0.025 stops it and every later one, even 0.04 < 0.05
    out = T.holm({"a": 0.03, "b": 0.01, "c": 0.04}, 0.05)
    assert [out[k][1] for k in "bac"] == [True, False, False]
    assert out["a"][0] == pytest.approx(0.06) and out["c"][0] == pytest.approx(0.06)  # running max


def finals(fall=0.1, recover=0.08, n=10):
    sync = {s: 0.6 + 0.01 * s for s in range(n)}
    return {("sync", None): sync, ("sync", "token_truncate"): dict(sync),
            ("eta8", None): {s: v - fall - 0.001 * s for s, v in sync.items()},
            ("eta8", "token_truncate"): {s: v - fall + recover for s, v in sync.items()}}


def test_decide_on_clear_and_on_null_data():
    res = T.decide(finals())
    assert res["status"] == "complete"
    words = {r["test"]: r["word"] for r in res["tests"]}
    # every seed falls (p = 2^-10 each), every seed recovers, and with TIS it still falls by 0.02 everywhere
    assert words == {"falls_uncorrected": "decided", "tis_recovers": "decided", "falls_corrected": "decided"}
    row = res["tests"][0]
    assert row["p"] == pytest.approx(2 ** -10) and row["mean_diff"] == pytest.approx(0.1 + 0.0045)
    # no effect: alternating signs -> undecided
    f = finals(fall=0.0, recover=0.0)
    f[("eta8", None)] = {s: v + (0.02 if s % 2 else -0.02) for s, v in f[("sync", None)].items()}
    res = T.decide(f)
    assert {r["test"]: r["word"] for r in res["tests"]}["falls_uncorrected"] == "undecided"
    json.dumps(res)  # a record can hold it


def test_swapped_cells_are_not_decided():
    f = finals()
    f[("sync", None)], f[("eta8", None)] = f[("eta8", None)], f[("sync", None)]  # a bug swapping the arms
    words = {r["test"]: r["word"] for r in T.decide(f)["tests"]}
    assert words["falls_uncorrected"] == "undecided"


def test_an_incomplete_plan_decides_nothing():
    f = finals()
    del f[("eta8", None)][9]
    res = T.decide(f)
    assert res["status"] == "incomplete" and res["missing"] == [[["eta8", None], 9]]
    assert all(r["word"] == "undecided" for r in res["tests"])
    assert "incomplete" in T.summary_lines(res)[0]


def test_the_plan_is_what_the_docstring_says():
    assert len(T.PLAN["seeds"]) >= 8 and T.PLAN["alpha"] == 0.05
    assert {("sync", None), ("eta8", None), ("sync", "token_truncate"), ("eta8", "token_truncate")} == \
        set(T.PLAN["cells"])
    for _, a, b, _ in T.PLAN["tests"]:
        assert a in T.PLAN["cells"] and b in T.PLAN["cells"]


def test_section_counts_the_plan_runs_and_decides_nothing_while_incomplete(tmp_path, monkeypatch):
    import rlm_lab.chapters.ch06_async.compare as C
    from rlm_lab.chapters.ch06_async.cases import cell_name
    from rlm_lab.record import RunRecord

    monkeypatch.setattr(C, "final_accuracy", lambda results: results.get("final"))
    for (mode, corr) in T.PLAN["cells"][:2]:
        for s in (0, 1, 2):
            with RunRecord(tmp_path / cell_name(mode, corr, s) / "20260101T000000Z", {}) as rec:
                rec.update(final=0.5 if mode == "sync" else 0.3)
    text, v = T.section(tmp_path)
    assert v["ch06_acc_runs"] == "6 of 40" and v["ch06_acc_status"] == "incomplete"
    assert all(v[f"ch06_acc_{t[0]}"] == "undecided (incomplete)" for t in T.PLAN["tests"])
    assert "runs present: 6 of 40" in text and "nothing is decided" in text
    assert "falls_uncorrected: mean difference +0.200" in text  # the partial pairs are shown, not decided


def test_section_of_a_complete_plan_glues_the_word_with_its_numbers(tmp_path, monkeypatch):
    """Hand-made finals: eta 8 without correction is 0.2 below every other cell for every seed, so the first two
    tests are decided (10 of 10 seeds one way: exact p = 2^-10, Holm p = 3 x 2^-10 and 2 x 2^-10) and the third,
    all differences 0, is undecided."""
    import rlm_lab.chapters.ch06_async.compare as C
    from rlm_lab.chapters.ch06_async.cases import cell_name
    from rlm_lab.record import RunRecord

    monkeypatch.setattr(C, "final_accuracy", lambda results: results.get("final"))
    for (mode, corr) in T.PLAN["cells"]:
        for s in T.PLAN["seeds"]:
            with RunRecord(tmp_path / cell_name(mode, corr, s) / "20260101T000000Z", {}) as rec:
                rec.update(final=0.3 if (mode, corr) == ("eta8", None) else 0.5)
    _, v = T.section(tmp_path)
    assert v["ch06_acc_status"] == "complete" and v["ch06_acc_runs"] == "40 of 40"
    assert v["ch06_acc_falls_uncorrected"] == "yes (mean difference +0.200 [+0.200, +0.200] over 10 seeds, Holm p = 0.003)"
    assert v["ch06_acc_tis_recovers"].startswith("yes (mean difference +0.200")
    assert v["ch06_acc_falls_corrected"].startswith("undecided (mean difference +0.000")
