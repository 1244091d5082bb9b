"""The arithmetic of rlm-lab validate --published (rlm_lab.validate.published_report) on hand-derived cases: the
error, the direction (a mutant whose direction is wrong is counted wrong), the medians and the bars' words; the
fit's machinery on a synthetic cost model; the text and the book's table."""

import math
from dataclasses import replace

import pytest

from rlm_lab.validate import published_predict as PP
from rlm_lab.validate import published_report as R
from rlm_lab.validate.published import PublishedCase, PublishedValue, Registry, load_published


def _case(id, quantity, value, split="validation", stage=None):
    return PublishedCase(id=id, source="src", where="table 1", split=split, quantity=quantity,
                         published=PublishedValue(value, None, "read"),
                         hardware={"gpu": "X", "count": 8, "nodes": 1, "profile": "h100-sxm"},
                         model={"name": "m", "config": "qwen3-4b.config.json"}, algorithm={"name": "grpo", "beta": 0},
                         workload={}, placement={"name": "colocated"}, mode="sync", assumed=(), stage=stage,
                         variant={"mode": "async"} if quantity == "speedup" else {})


def _out(case, predicted, why=""):
    return PP.Outcome(case, predicted, why)


def test_error_and_direction_by_hand():
    up = _case("a", "speedup", 2.0)
    assert _out(up, 1.5).error == pytest.approx(-0.25)          # 1.5 / 2 - 1
    assert R.direction_right(_out(up, 1.5)) is True             # both faster than 1
    mutant = _out(up, 0.8)                                      # predicted a slow-down: direction wrong
    assert R.direction_right(mutant) is False
    assert R.direction_right(_out(up, 1.0)) is False            # no direction is not the right one
    share = _case("s", "stage_share", 0.6, stage="generation")
    assert R.direction_right(_out(share, 0.55)) is True         # both above one half
    assert R.direction_right(_out(share, 0.4)) is False
    assert R.direction_right(_out(_case("t", "step_time", 10.0), 12.0)) is None   # no direction for a time
    assert R.direction_right(_out(up, None, "does not fit")) is None
    assert _out(up, None, "does not fit").error is None


def test_group_summary_by_hand():
    cases = [_case("r1", "speedup", 2.0), _case("r2", "speedup", 1.5), _case("r3", "stage_share", 0.6, stage="generation"),
             _case("r4", "speedup", 1.2), _case("t1", "step_time", 100.0), _case("t2", "step_time", 50.0)]
    outs = [_out(cases[0], 1.5),    # -25 %, right
            _out(cases[1], 1.8),    # +20 %, right
            _out(cases[2], 0.45),   # -25 %, wrong (below one half)
            _out(cases[3], None, "no profile"),
            _out(cases[4], 160.0),  # +60 %
            _out(cases[5], 40.0)]   # -20 %
    s = R.summary(outs)
    ratio = s["ratio"]
    assert (ratio["cases"], ratio["priced"], ratio["direction_right"]) == (4, 3, 2)
    assert ratio["median_abs_error"] == pytest.approx(0.25)     # median of 0.25, 0.20, 0.25
    assert ratio["direction_share"] == pytest.approx(2 / 3)
    # a median of three cases has no 95 % interval ([min, max] holds it 75 % of the time): the bar is undecided
    assert ratio["median_abs_error_interval"] is None
    assert ratio["verdicts"]["ratio_median"].startswith("undecided")
    # 2 right of 3: the exact binomial interval, by hand: lower p with P(X >= 2) = 0.025, upper with P(X <= 2) = 0.025
    lo, hi = ratio["direction_interval"]
    from scipy.stats import binom
    assert binom.sf(1, 3, lo) == pytest.approx(0.025) and binom.cdf(2, 3, hi) == pytest.approx(0.025)
    assert ratio["verdicts"]["ratio_direction"].startswith("undecided (67% [9%, 99%] straddles 90%")   # 3 cases decide nothing
    step = s["step"]
    assert step["median_abs_error"] == pytest.approx(0.40)      # median of 0.60 and 0.20
    assert step["verdicts"]["step_median"].startswith("undecided (2 cases priced, 3 needed")
    assert step["under_predicted"] == 1


def test_a_bar_is_judged_by_the_interval_of_its_median():
    """Seven cases: the median's exact order-statistic interval (binomial(7, 1/2)) is [min, max], which holds the
    median 98 % of the time; three cases have none at 95 % and decide nothing."""
    cases = [_case(f"t{i}", "step_time", 10.0) for i in range(7)]
    judge = lambda ps: R.group_summary([_out(c, p) for c, p in zip(cases, ps)], "step")["verdicts"]["step_median"]
    s = R.group_summary([_out(c, p) for c, p in zip(cases, (16.0, 4.0, 16.0, 4.0, 17.0, 18.0, 30.0))], "step")
    assert s["median_abs_error"] == pytest.approx(0.6)
    assert s["verdicts"]["step_median"] == "not met (60% [60%, 200%] > 50%, 7 cases)"      # wholly over the bar
    # a median just over the bar whose interval reaches the bar decides nothing (one decimal: never "50% > 50%")
    assert judge((15.0, 15.03, 15.03, 15.03, 16.0, 16.0, 16.0)) == "undecided (50.3% [50.0%, 60%] straddles 50%, 7 cases)"
    assert judge((11.0, 9.0, 11.0, 9.0, 12.0, 12.0, 12.0)) == "met (10% [10%, 20%] <= 50%, 7 cases)"
    three = R.group_summary([_out(c, p) for c, p in zip(cases[:3], (16.0, 4.0, 30.0))], "step")
    assert three["verdicts"]["step_median"].startswith("undecided (60%, 3 cases: too few")


def test_only_the_chosen_split_is_judged():
    cal = _case("c", "speedup", 2.0, split="calibration")
    s = R.summary([_out(cal, 0.5)])
    assert s["ratio"]["cases"] == 0


def test_the_fit_reads_calibration_only_and_recovers_known_efficiencies(monkeypatch):
    """A synthetic cost model t = sum_k c_k / eta_k over the five named efficiencies: published values made at known
    efficiencies; the fit finds them from the six calibration cases and never predicts the validation case."""
    truth = {"eta_F": 0.3, "eta_A": 0.2, "eta_B": 0.6, "eta_N": 0.5, "eta_H": 0.7}
    names = list(truth)
    assert sorted(names) == sorted(PP.FIT_PARAMETERS)
    coef = {"c1": (1, .1, .1, .1, .1), "c2": (.1, 1, .1, .1, .1), "c3": (.1, .1, 1, .1, .1), "c4": (.1, .1, .1, 1, .1),
            "c5": (.1, .1, .1, .1, 1), "c6": (1, 1, 1, 1, 1), "v1": (1, 1, 1, 1, 1)}

    def t(cid, v):
        return sum(c / v[n] for c, n in zip(coef[cid], names))

    def model(case, values=None):
        if case.split != "calibration":
            raise AssertionError("the fit predicted a validation case")
        return PP.Outcome(case, t(case.id, values or {"eta_F": 0.4, "eta_A": 0.4, "eta_B": 0.7, "eta_N": 0.9,
                                                      "eta_H": 0.8}))

    cases = {cid: _case(cid, "step_time", t(cid, truth), split="calibration" if cid != "v1" else "validation")
             for cid in coef}
    reg = Registry({}, {"calibration": ("src",), "validation": ("other",)}, cases)
    monkeypatch.setattr(PP, "predict_case", model)
    fit = PP.fit_efficiencies(reg)
    assert fit["cases"] == ["c1", "c2", "c3", "c4", "c5", "c6"] and fit["left_out"] == {}
    assert fit["determined"] == "over"
    for n, v in truth.items():
        assert fit["parameters"][n]["fitted"] == pytest.approx(v, rel=1e-3), n
    assert fit["parameters"]["eta_F"]["assumed"] == 0.4          # the h100-sxm datasheet profile's value
    assert fit["parameters"]["eta_A"]["assumed"] == 0.4          # started at the profile's eta_F
    assert all(abs(r) < 1e-3 for r in fit["log_residuals_after"].values())
    assert fit["converged"] and len(fit["split_sha256"]) == 64


def test_a_parameter_the_calibration_cases_cannot_see_is_not_fitted(monkeypatch):
    """The same synthetic model with eta_N's coefficients a thousandth of the others': a 10 % change of eta_N moves
    no case by 1 %, so it keeps its assumed value (the record says why, with its elasticities), and the other four are
    still recovered. Without the rule least_squares moves it anywhere (its gradient is noise)."""
    truth = {"eta_F": 0.3, "eta_A": 0.2, "eta_B": 0.6, "eta_N": 0.5, "eta_H": 0.7}
    names = list(truth)
    tiny = 1e-3
    coef = {"c1": (1, .1, .1, tiny, .1), "c2": (.1, 1, .1, tiny, .1), "c3": (.1, .1, 1, tiny, .1),
            "c5": (.1, .1, .1, tiny, 1), "c6": (1, 1, 1, tiny, 1)}
    assumed = {"eta_F": 0.4, "eta_A": 0.4, "eta_B": 0.7, "eta_N": 0.9, "eta_H": 0.8}

    def t(cid, v):
        return sum(c / v[n] for c, n in zip(coef[cid], names))

    monkeypatch.setattr(PP, "predict_case", lambda case, values=None: PP.Outcome(case, t(case.id, values or assumed)))
    cases = {cid: _case(cid, "step_time", t(cid, truth), split="calibration") for cid in coef}
    fit = PP.fit_efficiencies(Registry({}, {"calibration": ("src",), "validation": ()}, cases))
    n = fit["parameters"]["eta_N"]
    assert n["fitted"] == 0.9 and "not identified" in n["not_fitted"]
    # hand check of one elasticity: -(c_N / eta_N) / t at the assumed values, on c1
    assert fit["elasticity"]["eta_N"]["c1"] == pytest.approx(-(tiny / 0.9) / t("c1", assumed), rel=0.1, abs=1e-4)
    assert max(abs(e) for e in fit["elasticity"]["eta_N"].values()) < PP.MIN_ELASTICITY
    for k in ("eta_F", "eta_A", "eta_B", "eta_H"):
        assert "not_fitted" not in fit["parameters"][k]
        assert fit["parameters"][k]["fitted"] == pytest.approx(truth[k], rel=0.02), k
    assert fit["determined"] == "over"                     # 5 cases for the 4 parameters it fits
    assert "not fitted: eta_N" in R.format_report({"cases": 0, "sources": 0, "projects": 0, "efficiencies": "",
                                                   "split": {"calibration": [], "validation": []}, "fit": fit,
                                                   "rows": [], "summary": {s: {g: {"priced": 0, "cases": 0,
                                                   "median_abs_error": None, "direction_right": 0, "verdicts": {}}
                                                   for g in R.GROUPS} for s in ("calibration", "validation")}})


def test_fitted_values_go_to_the_predictor_as_named_assumptions():
    case = load_published().cases["prime-rl-qwen3-4b-16k-8xh100"]
    assert PP.predict_config(case, {}, {"eta_F": 0.2})["assume"] == {"eta_F": 0.2}
    base = PP.predict_case(case).predicted
    slow = PP.predict_case(case, {"eta_F": 0.2, "eta_A": 0.2}).predicted
    assert 1.5 < slow / base <= 2.0 + 1e-9      # compute-bound training: about twice as long at half the rate
    # each efficiency reaches its own kernels: 16k-token sequences spend a large share in attention, neither alone
    # doubles the step, and the two shares add up to the whole slowdown
    f_only = PP.predict_case(case, {"eta_F": 0.2}).predicted / base - 1
    a_only = PP.predict_case(case, {"eta_A": 0.2}).predicted / base - 1
    assert 0.1 < f_only < 0.9 and 0.1 < a_only < 0.9
    assert f_only + a_only == pytest.approx(slow / base - 1, rel=0.05)
    assert "unknown fitted parameter(s) eta_X" in PP.predict_case(case, {"eta_X": 0.5}).why


def test_report_text_and_table_show_every_case_and_the_bars():
    reg = load_published()
    keep = ["prime-rl-qwen3-4b-16k-8xh100", "openrlhf-llama2-7b-dschat-gen-share", "openrlhf-llama2-70b-vllm-step"]
    few = {k: reg.cases[k] for k in keep}
    small = replace(reg, cases=few)
    rep = R.report(small, use_fit=False)
    text = R.format_report(rep)
    for cid in keep:
        assert cid in text
    assert "bar ratio_median: undecided (1 case priced, 3 needed)" in text
    assert "not priced by the cost model" in text and "openrlhf-llama2-70b-vllm-step:" in text
    html = R.html_table(rep["rows"], "validation")
    assert html.count("<tr>") == 3                      # the header and the two validation cases
    assert "not priced:" in html and "0.59" in html      # the 70B case's reason; the published share
    assert "fresh round" not in html                     # none of these comes from a fresh source
    fresh = replace(small, cases={"rlinf-verl-r1-distill-7b-64gpu-step": reg.cases["rlinf-verl-r1-distill-7b-64gpu-step"]})
    assert "rlinf-verl-r1-distill-7b-64gpu-step (fresh round)" in R.html_table(R.report(fresh, use_fit=False)["rows"],
                                                                              "validation")
    nums = R.book_numbers(rep)
    assert nums["cases"] == "3" and nums["priced"] == "1" and nums["ratio_verdict"].startswith("undecided")
    row = next(r for r in rep["rows"] if r["case"] == keep[1])
    assert math.isclose(row["error_value"], float(row["predicted_assumed"]) / 0.5862 - 1, abs_tol=0.01)
    assert row["error"] == f"{row['error_value']:+.0%}" and row["direction"] == "right"


def test_the_committed_prediction_record_is_current():
    """The book's table comes from data/published/validation.json: it must have been made from this registry and this
    fit (record_report refuses another), and its numbers must be what the cost model says now (two fast cases,
    recomputed here; any change to the predictor that moves them makes this fail until the record is rewritten)."""
    rep = R.record_report()
    fit = PP.load_fit()
    values = PP.fitted_values(fit)
    reg = load_published()
    for cid in ("prime-rl-qwen3-4b-16k-8xh100", "openrlhf-llama2-7b-dschat-gen-share"):
        row = next(r for r in rep["rows"] if r["case"] == cid)
        fresh = PP.predict_case(reg.cases[cid], values)
        assert row["predicted_fitted"] == R._fmt(fresh.predicted, fresh.case.quantity), cid
        assert row["error_value"] == pytest.approx(fresh.error, rel=1e-9), cid
    assert rep["record"]["dirty"] is False          # made from committed predictor code


def test_a_record_from_another_registry_is_refused(tmp_path):
    import json

    rec = json.loads(R.RECORD.read_text())
    rec["registry_sha256"] = "0" * 64
    path = tmp_path / "validation.json"
    path.write_text(json.dumps(rec))
    with pytest.raises(Exception, match="was made from another registry"):
        R.record_report(path)


def test_advise_reads_the_validation_summary_from_the_record():
    """rlm-lab advise prints the predictor's validated error beside its ranking from the same committed record (the
    cost layer cannot import this one, so it reads the file): its numbers are the record's validation summary."""
    from rlm_lab.cost.advise import validated_error

    rep = R.record_report()
    text = validated_error()
    ratio = rep["summary"]["validation"]["ratio"]
    assert text.startswith("validated error of the predictor against published cluster measurements")
    lo, hi = ratio["median_abs_error_interval"]
    assert (f"median |error| {100 * ratio['median_abs_error']:.0f} % [{100 * lo:.0f}, {100 * hi:.0f} %] over "
            f"{ratio['priced']} cases") in text
    dlo, dhi = ratio["direction_interval"]
    assert f"direction right in {ratio['direction_right']} of {ratio['priced']} [{100 * dlo:.0f}, {100 * dhi:.0f} %]" in text


def test_rewriting_the_record_keeps_every_earlier_validation(tmp_path, monkeypatch):
    """A record made from another registry or fit goes into the new record's history with its numbers; a record from
    the same registry and fit (the same validation written again) is not repeated; an unreadable one is an error,
    not a history silently lost."""
    import json

    old = json.loads(R.RECORD.read_text())
    path = tmp_path / "validation.json"
    stale = dict(old, registry_sha256="0" * 64, written_at="2026-01-01T00:00:00Z", note="two new sources",
                 summary={"ratio": {"median_abs_error": 0.5, "direction_right": 3, "priced": 4,
                                    "verdicts": {"ratio_median": "not met (50% > 25%, 4 cases)"}},
                          "step": {"median_abs_error": 1.25, "priced": 2, "verdicts": {}}})
    path.write_text(json.dumps(stale))
    hist = R.carried_history(path)
    assert hist[:-1] == old.get("history", [])          # what the stale record carried, then the stale record
    assert hist[-1]["written_at"] == "2026-01-01T00:00:00Z" and hist[-1]["ratio_median_abs_error"] == 0.5
    assert hist[-1]["verdicts"] == {"ratio_median": "not met (50% > 25%, 4 cases)"}
    assert hist[-1]["note"] == "two new sources"         # what changed in that round travels with it
    cid, pred = next(iter(old["cases"].items()))            # and each case's prediction, the fitted one first
    assert hist[-1]["predicted"][cid] == pred.get("fitted", pred.get("assumed"))
    unpriced = next(k for k, v in old["cases"].items() if isinstance(v.get("fitted"), dict))
    assert hist[-1]["predicted"][unpriced] is None
    path.write_text(json.dumps(old))                     # same registry and fit: nothing new to keep
    assert R.carried_history(path) == old.get("history", [])
    path.write_text('{"registry_sha256": ')
    with pytest.raises(Exception, match="history would be lost"):
        R.carried_history(path)


def test_history_rows_end_with_the_current_record():
    rows = R.history_rows()
    rec = __import__("json").loads(R.RECORD.read_text())
    assert len(rows) == len(rec.get("history", [])) + 1
    assert rows[-1]["written"] == rec["written_at"][:10]
    assert rows[-1]["ratio_median"] == f"{rec['summary']['ratio']['median_abs_error']:.1%}"


@pytest.mark.parametrize("argv, message", [
    (["--note", "x"], "give --write with it"),
    (["--write", "--note", "  "], "one non-empty line"),
    (["--write", "--note", "a\nb"], "one non-empty line"),
])
def test_a_note_goes_with_write_and_is_one_line(argv, message, capsys):
    from rlm_lab.cli import main

    assert main(["validate", "--published", *argv]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_rows_numbers_by_hand():
    rows = [{"group": "ratio", "error_value": -0.30, "direction": "right"},
            {"group": "ratio", "error_value": 0.10, "direction": "wrong"},
            {"group": "ratio", "error_value": None, "direction": "-"},        # not priced: left out
            {"group": "step", "error_value": 0.5, "direction": "-"},
            {"group": "other", "error_value": 3.0, "direction": "-"}]
    got = R.rows_numbers(rows)
    assert got == {"cases": "5", "ratio_cases": "2", "ratio_median": "20.0%", "ratio_direction": "1 of 2",
                   "step_cases": "1", "step_median": "50.0%"}


def test_the_fresh_sources_are_validation_sources_of_the_registry():
    reg = load_published()
    assert set(R.FRESH_SOURCES) <= set(reg.split["validation"])
    rep = R.record_report()
    n = R.book_numbers(rep)
    assert int(n["fresh_cases"]) + int(n["earlier_cases"]) == int(n["validation_cases"])


def test_the_fresh_rounds_partition_the_fresh_sources_and_their_numbers_are_their_cases():
    """Each fresh source in exactly one round; a round's numbers recomputed here from the frozen predictions and the
    case files' published values (an independent path from the report's rows)."""
    import json
    import statistics

    frozen = json.loads(R.FRESH_ROUNDS.read_text())
    listed = [s for r in frozen["rounds"] for s in r["sources"]]
    assert sorted(listed) == sorted(R.FRESH_SOURCES) and len(listed) == len(set(listed))
    reg = load_published()
    got = R.fresh_round_rows(R.record_report())
    assert [g["round"] for g in got] == [r["round"] for r in frozen["rounds"]]
    for g, r in zip(got, frozen["rounds"]):
        cases = [c for c in reg.cases.values() if c.split == "validation" and c.source in r["sources"]]
        assert int(g["cases"]) == len(cases)
        assert int(g["priced"]) == sum(frozen["priced"][c.id] is not None for c in cases)
        ratio = [abs(frozen["priced"][c.id] / c.published.value - 1) for c in cases
                 if c.quantity in ("speedup", "stage_share") and frozen["priced"][c.id] is not None]
        assert g["ratio_median"] == (f"{statistics.median(ratio):.1%}" if ratio else "-")
        right = sum((frozen["priced"][c.id] > ref) == (c.published.value > ref) for c in cases
                    if (ref := {"speedup": 1.0, "stage_share": 0.5}.get(c.quantity)) is not None
                    and frozen["priced"][c.id] is not None)
        assert g["ratio_direction"] == f"{right} of {len(ratio)}"


def test_writing_the_same_validation_again_keeps_its_note(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(R, "predict_all", lambda registry, values=None: [])   # the pricing is not under test here
    reg, fit = load_published(), PP.load_fit()
    path = tmp_path / "validation.json"
    old = json.loads(R.RECORD.read_text())
    path.write_text(json.dumps(dict(old, note="N")))
    R.write_record(reg, fit, path)                          # same registry and fit: the same validation
    new = json.loads(path.read_text())
    assert new["note"] == "N" and new["history"] == old["history"]
    path.write_text(json.dumps(dict(old, note="M", registry_sha256="0" * 64)))
    R.write_record(reg, fit, path)                          # another registry: a new validation, its note is its own
    new = json.loads(path.read_text())
    assert "note" not in new and new["history"][-1]["note"] == "M"


def test_the_fresh_rounds_cases_are_as_they_were_when_priced():
    """The book reports the fresh rounds as first priced (the frozen file) and calls them blind: that holds only while
    every case file is the one its round priced and no case was added to or removed from a round's sources."""
    import json

    frozen = json.loads(R.FRESH_ROUNDS.read_text())
    assert sorted(s for r in frozen["rounds"] for s in r["sources"]) == sorted(R.FRESH_SOURCES)
    reg = load_published()
    ids = {c.id for c in reg.cases.values() if c.split == "validation" and c.source in R.FRESH_SOURCES}
    assert set(frozen["priced"]) == set(frozen["case_sha256"]) == ids, \
        "a case was added to or removed from a fresh source after its round"
    mended = frozen.get("mended", {})
    for cid, sha in frozen["case_sha256"].items():
        assert (R.case_sha256(cid) == sha) != (cid in mended), (
            f"{cid}: its file changed after its fresh round priced it; say why in fresh_rounds.json's mended"
            if cid not in mended else f"{cid}: listed as mended but its file is the one its round priced")
        assert cid not in mended or len(mended[cid]) > 20, cid


def test_the_fresh_numbers_are_the_frozen_predictions_not_the_live_ones(tmp_path):
    """A later model moves the live predictions; the rounds' numbers must stay the frozen ones, and the move be
    counted. Checked by moving one frozen prediction in a copy of the file."""
    import json

    rep = R.record_report()
    frozen = json.loads(R.FRESH_ROUNDS.read_text())
    cid = "nemo-rl-v03-qwen3-32b-megatron-gen-share"
    frozen["priced"][cid] *= 3.0                         # as if its round had priced it 3x higher (wrong direction)
    path = tmp_path / "fresh_rounds.json"
    path.write_text(json.dumps(frozen))
    moved = set(R.fresh_moved(rep, path))
    assert cid in moved and moved - {cid} == set(R.fresh_moved(rep)) - {cid}
    before = {r["round"]: r for r in R.fresh_round_rows(rep)}
    after = {r["round"]: r for r in R.fresh_round_rows(rep, path)}
    assert before[3]["ratio_direction"] == "2 of 2" and after[3]["ratio_direction"] == "1 of 2"
    assert after[3]["ratio_median"] != before[3]["ratio_median"] and after[1] == before[1]


def test_a_new_note_on_the_same_validation_keeps_the_committed_one_in_the_history(tmp_path, monkeypatch):
    """issue 42: --write --note on an unchanged registry replaced the committed note in place (in neither the record
    nor its history)."""
    import json

    monkeypatch.setattr(R, "predict_all", lambda registry, values=None: [])
    reg, fit = load_published(), PP.load_fit()
    path = tmp_path / "validation.json"
    old = json.loads(R.RECORD.read_text())
    path.write_text(json.dumps(dict(old, note="N")))
    R.write_record(reg, fit, path, note="M")
    new = json.loads(path.read_text())
    assert new["note"] == "M" and new["history"][:-1] == old["history"] and new["history"][-1]["note"] == "N"
    R.write_record(reg, fit, path, note="M")               # the same note again: nothing new to keep
    assert json.loads(path.read_text())["history"] == new["history"]


WRITER = """
import sys, time
from pathlib import Path
from rlm_lab.validate import published_predict as PP
from rlm_lab.validate import published_report as R
from rlm_lab.validate.published import load_published
R.predict_all = lambda registry, values=None: []          # the pricing is not under test
read = R._old_record
def slow_read(path):                                     # widen the read-then-write window: without a lock both
    old = read(path)                                     # writers read the same old record and one note is lost
    time.sleep(1.0)
    return old
R._old_record = slow_read
R.write_record(load_published(), PP.load_fit(), Path(sys.argv[1]), note=sys.argv[2])
"""


def test_two_concurrent_writers_each_keep_their_note(tmp_path):
    """issue 42: two concurrent --write --note both exited 0 and the last note won. Two processes write at once;
    the lock serialises them, so the record ends with one note and the history holds the other and the old one."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "validation.json"
    old = json.loads(R.RECORD.read_text())
    path.write_text(json.dumps(dict(old, note="N")))
    repo = Path(R.__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), note], env=env, cwd=repo,
                              stderr=subprocess.PIPE, text=True) for note in ("A", "B")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    rec = json.loads(path.read_text())
    notes = [h.get("note") for h in rec["history"][len(old["history"]):]] + [rec["note"]]
    assert notes in (["N", "A", "B"], ["N", "B", "A"]), notes
