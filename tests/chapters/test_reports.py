"""The chapters' reports: what the notebooks print and glue, checked on hand-made inputs against values worked out
by hand, and on the committed records against an independent computation from the records themselves.

A glued value is text, formatted as the page shows it (``rlm_lab.tables.text``: ``format(value, fmt)`` or
``str(value)``); "n/a" wherever a record is missing, never a number from nowhere.
"""

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlm_lab.tables import format_table, text
from rlm_lab.ledger import Entry


def test_text_is_format_with_a_format_and_str_without():
    assert text(0.1234, ".1%") == "12.3%" and text(-0.05, "+.0%") == "-5%" and text(7) == "7" and text("n/a") == "n/a"
    assert text(0.5, "") == "0.5"


def test_format_table_pads_columns_and_writes_missing_cells_as_a_dash():
    got = format_table([{"a": 1, "b": 0.5}, {"a": 22, "b": None}], ["a", "b"]).splitlines()
    assert got == ["a   b    ", "1   0.500", "22  -    "]
    assert format_table([]) == "(no runs)"


# ---- chapter 1 ----------------------------------------------------------------------------------------------

def _run(name, accuracy, seconds, load):
    return SimpleNamespace(dir=Path("/x") / name, results={"accuracy_after": accuracy, "total_seconds": seconds,
                                                           "load_average": load})


def test_ch01_sweep_section_judges_the_aim_on_its_reference_run(tmp_path):
    from rlm_lab.chapters.ch01_quickstart.report import sweep_section

    (tmp_path / "ch01_sweep.json").write_text(json.dumps({
        "rows": [{"setting": "base", "accuracy_rl": 0.5, "load_average": [1.25, 1.0, 0.5]},
                 {"setting": "aim", "accuracy_rl": 0.96}],
        "aim": {"accuracy": 0.95, "seconds": 180.0}}))
    body, values = sweep_section([_run("ch01_grpo_aim", 0.955, 179.6, [0.42, 0.81, 1.0])], root=tmp_path)
    inside = "undecided (one run, no interval; its point is inside the aim)"  # one run decides nothing
    assert values == {"ch01_aim_accuracy": "95.5%", "ch01_aim_seconds": "180", "ch01_aim_verdict": inside,
                      "ch01_aim_load": "0.4 / 0.8"}
    header = body.splitlines()[0].split()
    assert header == ["setting", "accuracy_rl", "load_1min"]  # columns no row fills are left out
    assert body.splitlines()[-1].endswith(f"95.5% in 180 s: {inside}")
    # one second over the aim's time: the point is outside, still one run
    assert sweep_section([_run("ch01_grpo_aim", 0.99, 180.5, [1, 1])], root=tmp_path)[1]["ch01_aim_verdict"] == \
        "undecided (one run, no interval; its point is outside the aim)"
    # without the aim's reference run: every aim value is "n/a", the table is still shown
    body, values = sweep_section([_run("ch01_grpo", 0.99, 10, [1, 1])], root=tmp_path)
    assert set(values.values()) == {"n/a"} and len(values) == 4 and "base" in body


def test_ch01_parameter_count_is_the_micro_models_with_thin_spaces():
    from rlm_lab.chapters.ch01_quickstart.report import config_text
    from rlm_lab.models import build_model

    model = build_model("micro")[0]
    n = sum(p.numel() for p in model.parameters())
    body, values = config_text(SimpleNamespace(model="nano", task="t", sft_steps=1, rl_steps=2, batch_size=3,
                                               num_generations=4, rl_lr=1e-4, eval_problems=5))
    assert values == {"ch01_micro_params": f"{n:,}".replace(",", "\u2009")}
    assert body.splitlines()[0] == "           model: nano" and body.splitlines()[-1].startswith("nano model: ")


# ---- chapter 2 ----------------------------------------------------------------------------------------------

def test_ch02_reference_section_without_records_glues_n_a_but_the_goals():
    from rlm_lab.chapters.ch02_anatomy.report import reference_section
    from rlm_lab.compare import BAR, GOAL

    body, figures, values = reference_section({}, have_ref=False)
    assert body == "" and figures == []
    assert values.pop("ch02_bar") == f"{BAR:.0%}" and values.pop("ch02_goal") == f"{GOAL:.0%}"
    assert set(values.values()) == {"n/a"} and "ch02_step_error_ppo" in values and "ch02_generate_error" in values


def test_ch02_whole_step_errors_are_the_records_against_their_prediction():
    """Each run's glued whole-step error is (predicted step - measured median step) / measured, worked out here
    from the record and the cost model directly."""
    from rlm_lab.chapters import ch02_anatomy as A
    from rlm_lab.chapters.ch02_anatomy.report import reference_section

    ref = A.load_reference("cpu")
    if not {"grpo", "dapo", "ppo", "reward_calibration"} <= set(ref):
        pytest.skip("no committed chapter-2 records in this checkout")
    _, figures, values = reference_section(ref, have_ref=True)
    assert len(figures) == 3
    reward_s = ref["reward_calibration"].results["reward_s_per_sample"]
    for name in ("grpo", "dapo", "ppo"):
        pred = A.predict_case(A.case_of(ref[name]), A.CPU_PROFILE, reward_s)
        measured = ref[name].results["trace"]["step_wall_s"]["median"]
        by_hand = (sum(r.seconds for r in pred.rows) - measured) / measured
        assert values[f"ch02_step_error_{name}"] == f"{by_hand:+.1%}", name
    errs = sorted(abs(float(values[f"ch02_step_error_{n}"].rstrip("%")) / 100) for n in ("grpo", "dapo", "ppo"))
    assert abs(float(values["ch02_step_error"].rstrip("%")) / 100 - errs[1]) < 0.0011  # the median of three


def test_ch02_validation_section_without_the_suite_judges_nothing(monkeypatch):
    from rlm_lab.chapters.ch02_anatomy import report
    from rlm_lab.validate import BARS, SHARE_MIN

    monkeypatch.setattr(report, "have_validation", lambda: False)
    body, values = report.validation_section()
    assert body.endswith("no committed validation records or in-situ profile in this checkout")
    for key, bar in BARS.items():
        assert values.pop(f"ch02_val_bar_{key}") == f"{bar:.0%}"
    assert values.pop("ch02_val_share_min") == f"{SHARE_MIN:.0%}"
    assert set(values.values()) == {"n/a"} and len(values) == 20


# ---- chapter 3 ----------------------------------------------------------------------------------------------

def test_ch03_replica_and_closing_values_from_a_hand_made_headline():
    from rlm_lab.chapters.ch03_work_depth.report import closing_section, replica_section

    rows = [{"assignment": "round_robin", "replicas": p, "lower": 1.0, "measured_sim": 1.5, "measured_real": None,
             "upper": 2.0, "predicted": 1.2, "pred_lower": 1.0, "pred_upper": 2.0, "rel_error": -0.2} for p in (1, 2)]
    head = {"replica_rows": rows, "above_upper": [("by_length", 8)], "real_over_sim": {1: 1.04, 2: 1.26},
            "whole_error": 0.1234, "whole_verdict": "w", "step_error": 0.5, "step_verdict": "s", "all_error": 0.25,
            "all_verdict": "a"}
    ref = {"replicas": SimpleNamespace(results={"loadavg": [1.26, 0.5, 0.04]})}
    # the glued numbers are the ledger's (rlm_lab.ledger: ch03.*), here hand-made entries
    entries = [Entry("ch03.replicas.real_over_sim.max", 3, "", "x", "one run", 1.26),
               Entry("ch03.whole_error", 3, "", "", "over cases", 0.1234, 0.05, 0.2, "exact order statistics", 9,
                     verdict="w"),
               Entry("ch03.step_error", 3, "", "", "over cases", 0.5, verdict="s"),
               Entry("ch03.all_error", 3, "", "", "over cases", 0.25, verdict="a")]
    body, figures, values = replica_section(ref, head, entries)
    assert values == {"ch03_n_above": "1", "ch03_n_replica_rows": "2", "ch03_real_over_sim": "1.3 (one run, no interval)",
                      "ch03_replicas_load": "1.3 / 0.5 / 0.0"}
    assert len(figures) == 2 and "simulated T_p above the measured W/p + D: by_length p=8" in body
    assert "{1: '1.04x', 2: '1.26x'}" in body
    body, values = closing_section(head, entries)
    assert values["ch03_whole_error"] == "12.3% [5.0%, 20.0%]" and values["ch03_all_verdict"] == "a"
    assert body.splitlines()[0] == "whole generation times (long tail + replicas): median |error| 12.3% [5.0%, 20.0%]: w"
    _, figures, values = replica_section({}, None)
    assert figures == [] and set(values.values()) == {"n/a"}
    assert {k: v for k, v in closing_section(None)[1].items() if k not in ("ch03_bar", "ch03_goal")} == dict.fromkeys(
        [f"ch03_{k}_{s}" for k in ("whole", "step", "all") for s in ("error", "verdict")], "n/a")


# ---- chapter 4 ----------------------------------------------------------------------------------------------

def _layout(name, measured, predicted, slowdown_m, slowdown_p):
    return {"layout": name, "measured_ms": measured, "predicted_ms": predicted,
            "time_rel_err": (predicted - measured) / measured, "slowdown_measured": slowdown_m,
            "slowdown_predicted": slowdown_p, "check_ok": True, "bytes_equal": True if name != "single" else None}


def test_ch04_verdict_section_from_hand_made_rows():
    from rlm_lab.chapters.ch04_parallelism.report import verdict_section

    rows = [_layout("single", 100, 90, 1.0, 1.0), _layout("dp2", 200, 260, 2.0, 2.6), _layout("tp2", 400, 300, 4.0, 0.9)]
    body, values = verdict_section(rows)
    # |errors| 10 %, 30 %, 25 %: median 25 %; signed from -25 % to +30 %
    assert values["ch04_step_error"] == "25.0%" and values["ch04_step_error_min"] == "-25%"
    assert values["ch04_step_error_max"] == "+30%" and values["ch04_n_layouts"] == "3"
    # slowdowns (not the one-process row): 2.6/2 - 1 = 30 %, 0.9/4 - 1 = -77.5 %: median |e| 53.75 %
    assert values["ch04_slowdown_error"] == "53.8%"
    assert values["ch04_faster_predicted"] == "tp2" and values["ch04_n_faster_measured"] == "0"
    assert values["ch04_pairs"] == "1" and values["ch04_pairs_concordant"] == "0"  # dp2 < tp2 measured, > predicted
    assert body.splitlines()[0] == ("3 layouts; all match one process: True; counted bytes equal the formula wherever "
                                    "one exists: True")


def test_ch04_distributed_terms_without_a_profile_are_n_a_but_the_bar():
    from rlm_lab.chapters.ch04_parallelism import out_of_sample
    from rlm_lab.chapters.ch04_parallelism.report import DIST_KEYS, distributed_terms_section

    body, tables, values = distributed_terms_section([], [], None, Path("/nowhere"))
    assert values.pop("ch04_dist_bar") == f"{out_of_sample.BAR:.0%}" and tables == []
    assert values == {f"ch04_dist_{k}": "n/a" for k in DIST_KEYS} and "left out" in body


# ---- chapter 5 ----------------------------------------------------------------------------------------------

def test_ch05_hybrid_sections_without_records_glue_n_a():
    from rlm_lab.chapters.ch05_placement.report import HYB_KEYS, NA, hybrid_section

    body, figure, values = hybrid_section(None, [], {})
    assert figure is None and values == {f"ch05_hyb_{k}": NA for k in HYB_KEYS}


def test_ch05_hybrid_values_are_the_records_own_numbers():
    """The glued step error is the stored prediction against the measured median step, and the memory comparison
    says below / above from the two peaks of rank 0, recomputed here from the records."""
    from rlm_lab.chapters.ch05_placement import report
    from rlm_lab.chapters.ch05_placement.compare import comparison
    from rlm_lab.chapters.ch05_placement.run import latest
    from rlm_lab.errors import RlmLabError
    from rlm_lab.record import reference_root

    try:
        hyb, mem = latest(reference_root("cpu"), "hybrid"), latest(reference_root("cpu"), "hybrid_memory")
    except RlmLabError:
        pytest.skip("no committed hybrid-engine records in this checkout")
    _, _, values = report.hybrid_section(hyb, comparison({"hybrid": hyb}), {})
    r = hyb.results
    err = (r["prediction"]["step_s"] - r["step_seconds_median"]) / r["step_seconds_median"]
    assert values["ch05_hyb_error"] == f"{err:+.0%}" and values["ch05_hyb_measured"] == f"{r['step_seconds_median']:.3f}"
    assert values["ch05_hyb_met"] == "undecided (one run, no interval)"  # one record is one run: no interval
    _, values = report.hybrid_memory_section()
    r0 = mem.results["reshard"]["per_rank"][0]
    diff = (r0["train_peak_rss_bytes"] - r0["generate_peak_rss_bytes"]) / 2**20
    assert values["ch05_hybm_cmp"] == f"{abs(diff):.0f} MiB {'below' if diff > 0 else 'above'}"
    assert values["ch05_hybm_verdict"].startswith("the gathered copy fit" if diff > 0 else "the gathered copy raised")


# ---- chapter 6 ----------------------------------------------------------------------------------------------

def _cell(mode, correction, speedup=None, predicted=None, met=None, finals=(0.5,)):
    row = {"mode": mode, "correction": correction, "eta": {"sync": 0, "eta2": 2, "async": None}[mode],
           "final_accuracy": statistics.mean(finals), "finals": list(finals)}
    if predicted is not None:
        from rlm_lab.evidence import Interval

        iv = Interval(speedup, speedup - 0.1, speedup + 0.1, 3)
        row.update(predicted_speedup=predicted, speedup=speedup, speedup_iv=iv, speedup_word="faster",
                   speedup_error=(predicted - speedup) / speedup, met=met)
    return row


def test_ch06_speedup_section_counts_only_predicted_cells():
    from rlm_lab.chapters.ch06_async.report import speedup_section

    rows = [_cell("sync", None), _cell("eta2", None, 1.5, 1.6, "met"),
            _cell("async", "token_truncate", 1.2, 2.0, "not met")]
    body, values = speedup_section(rows)
    assert values == {"ch06_pred_met": "1 of 2"}
    assert body.splitlines() == [
        "eta2          none  predicted 1.60x  measured 1.50 [1.40, 1.60]x (faster)  error +7%  met",
        "async         tis   predicted 2.00x  measured 1.20 [1.10, 1.30]x (faster)  error +67%  not met"]


def test_ch05_step_word_needs_repeats():
    from rlm_lab.chapters.ch05_placement.compare import step_word

    row = {"predicted_s": 0.10, "measured_s": 0.10}
    assert step_word(row) == "undecided (one run, no interval)"  # error 0 %, but one run decides nothing
    # four fresh-process repeats around 0.1 s: the whole error interval is within 25 %
    assert step_word(dict(row, measured_runs=[0.098, 0.1, 0.102, 0.101])) == "met"
    assert step_word(dict(row, measured_runs=[0.2, 0.21, 0.19, 0.2])) == "not met"  # predicted half of it: -50 %
    assert step_word(dict(row, measured_runs=[0.07, 0.1, 0.14, 0.12])).startswith("undecided (the interval")


def test_ch06_sections_without_a_campaign_glue_n_a():
    from rlm_lab.chapters.ch06_async.report import ADVISOR_KEYS, advisor_section, eta_text, outlook_section

    empty = {"cells": {}, "reference": [], "failed": []}
    assert advisor_section(empty, [], None) == ("", dict.fromkeys(ADVISOR_KEYS, "n/a"))
    assert outlook_section(empty)[1] == dict.fromkeys(("ch06_out_eta", "ch06_out_speedup", "ch06_out_split"), "n/a")
    assert eta_text(None) == "∞" and eta_text(8) == "8"


def test_ch06_verdict_section_names_the_sync_finals_and_whether_async_trained_as_eta8():
    from rlm_lab.chapters.ch06_async.report import verdict_section

    cells = {("sync", None): {"finals": [0.5, 0.25]}, ("eta8", None): {"finals": [1]}, ("async", None): {"finals": [1]},
             ("eta8", "token_truncate"): {"finals": [1]}, ("async", "token_truncate"): {"finals": [2]}}
    rows = [_cell("sync", None), _cell("async", None, finals=(0.25, 0.5))]
    # the mean final accuracies are the ledger's entries (rlm_lab.ledger: ch06.campaign.<mode>.<corr>.*)
    entries = [Entry("ch06.campaign.sync.none.final_accuracy", 6, "", "accuracy", "repeats", 0.5),
               Entry("ch06.campaign.async.none.final_accuracy", 6, "", "accuracy", "repeats", 0.375)]
    _, values = verdict_section(rows, cells, entries)
    assert values["ch06_sync_finals"] == "0.500, 0.250"
    assert values["ch06_async_is_eta8"] == "different final accuracies"  # the corrected cells differ
    assert values["ch06_trend_none"] == "η=0: 0.500, η=∞: 0.375" and values["ch06_trend_tis"] == "n/a"
    assert values["ch06_beyond_none"] == "n/a"  # no row has a degradation verdict


# ---- chapter 7 ----------------------------------------------------------------------------------------------

def test_ch07_overprovision_values_from_a_record_and_without_one():
    from rlm_lab.chapters.ch07_long_tail.report import overprovision_values

    rec = SimpleNamespace(results={"predicted": {"short_bias": -0.114},
                                   "measured": {"short_bias_first": -0.096, "short_bias_all": 0.004, "early_s": [1, 2, 3]}})
    assert overprovision_values(rec) == {"ch07_op_bias_pred": "-11%", "ch07_op_bias_first": "-10%",
                                         "ch07_op_bias_all": "+0%", "ch07_op_steps": "3"}
    assert set(overprovision_values(None).values()) == {"n/a"}


def test_ch07_length_log_rows_average_five_stretches_of_steps():
    from rlm_lab.chapters.ch07_long_tail.report import length_log_rows

    log = [{"step": s, "mean_length": s, "min_length": 1, "max_length": 2 * s, "clipped_ratio": 0.0} for s in range(10)]
    rows = length_log_rows({"baseline": [(0, {"length_log": log})]})
    assert [r["stage (GRPO steps)"] for r in rows] == ["0-1", "2-3", "4-5", "6-7", "8-9"]
    assert [r["mean_length"] for r in rows] == [0.5, 2.5, 4.5, 6.5, 8.5] and rows[-1]["max_length"] == 17.0
    assert length_log_rows({"baseline": []}) is None


def test_ch07_lengths_bubble_is_one_minus_mean_over_the_expected_longest():
    from rlm_lab.chapters import ch07_long_tail as L
    from rlm_lab.chapters.ch07_long_tail.report import lengths_rows

    (row,) = lengths_rows(L.params("smoke"))
    e_max = row[f"E[max of {L.params('smoke')['n']}]"]
    assert row["q10"] <= row["q50"] <= row["q90"] <= row["max"] and row["mean"] <= e_max <= row["max"]
    assert row["bubble ~ 1 - mean / E[max]"] == pytest.approx(1 - row["mean"] / e_max)


# ---- chapter 8 ----------------------------------------------------------------------------------------------

def test_ch08_default_values_name_every_tie_and_only_what_does_not_fit():
    from rlm_lab.chapters.ch08_frameworks.report import default_values, example_values

    defaults = [{"framework": "a", "fits": True, "step_s": 10.0}, {"framework": "b", "fits": True, "step_s": 10.0 + 1e-12},
                {"framework": "c", "fits": True, "step_s": 11.0}, {"framework": "d", "fits": False, "step_s": None},
                {"framework": "e", "fits": None, "step_s": None}]
    values = default_values(defaults, {"placement": "split 16+48", "step_s": 9.04})
    assert values == {"ch08_advisor": "split 16+48", "ch08_advisor_s": "9.0 s", "ch08_default_fit": "3",
                      "ch08_default_best": "a, b", "ch08_default_best_s": "10.0 s", "ch08_default_nofit": "d"}
    assert example_values([{"framework": "a", "fits": True}, {"framework": "a", "fits": False}]) == {
        "ch08_examples": "2", "ch08_example_frameworks": "1", "ch08_examples_fit": "1"}


# ---- your machine -------------------------------------------------------------------------------------------

def test_your_machine_headline_values_for_both_chapters():
    from rlm_lab.chapters.your_machine import headline_values

    ch02 = {"chapter": "ch02", "reader": True, "rows": [{"workload": "step", "ref_error": -0.3, "your_error": 0.12}]}
    assert headline_values(ch02) == {"ch02_yours_ref_error": "-30%", "ch02_yours_error": "+12%",
                                     "ch02_yours_verdict": "undecided: one run, no interval (12.0%)"}
    rows = [{"workload": "generate fixed", "ref_error": -0.2, "your_error": 0.05},
            {"workload": "generate tail", "ref_error": None, "your_error": -0.4},
            {"workload": "decode step b=64", "ref_error": 0.9, "your_error": 0.9}]
    assert headline_values({"chapter": "ch03", "reader": True, "rows": rows}) == {
        "ch03_yours_ref_error": "20%", "ch03_yours_error": "40%",
        "ch03_yours_verdict": "undecided: one run, no interval (40.0%)"}  # the reader's one run decides nothing
    assert headline_values({"chapter": "ch03", "reader": False, "rows": rows})["ch03_yours_error"] == "n/a (cpu size only)"


def test_ch06_interrupt_extra_word_needs_pairs_and_an_interval_above_zero():
    from rlm_lab.chapters.ch06_async.interrupt import extra_word

    assert extra_word(0.10, [0.1]) == "undecided (one pair, no interval)"
    assert extra_word(0.10, [0.099, 0.1, 0.101, 0.1]) == "met"  # the extra's interval ~0.1 s: error within 25 %
    assert extra_word(0.05, [0.099, 0.1, 0.101, 0.1]) == "not met"  # -50 % at both ends
    assert extra_word(0.10, [-0.02, 0.1, 0.05, 0.08]).startswith("undecided (the interval")  # it may not exist


def test_ch04_out_of_sample_bar_from_the_interval():
    from rlm_lab.chapters.ch04_parallelism.out_of_sample import bar_met

    assert bar_met([0.1], 0.25) == "undecided (one run, no interval)"
    assert bar_met([0.1, 0.12, 0.08, 0.11], 0.25).startswith("undecided (4 errors, too few")   # a median needs 6
    assert bar_met([0.1, 0.12, 0.08, 0.11, 0.09, 0.1], 0.25) == "met"
    assert bar_met([0.4, 0.5, 0.45, 0.6, 0.42, 0.55], 0.25) == "not met"
    assert bar_met([0.1, 0.3, 0.2, 0.5, 0.15, 0.35], 0.25).startswith("undecided (")
