"""The throughput goal's word from a protocol record, on hand-made repeats."""

import pytest

from rlm_lab.chapters.ch06_async import throughput as T
from rlm_lab.errors import RlmLabError


def results(pick_tps, plain_tps, pick_acc, plain_acc):
    rows = []
    for p, (a, b, x, y) in enumerate(zip(pick_tps, plain_tps, pick_acc, plain_acc)):
        rows += [{"pair": p, "arm": "A", "report": {"tokens_per_s": a, "accuracy": x}},
                 {"pair": p, "arm": "B", "report": {"tokens_per_s": b, "accuracy": y}}]
    return {"repeats": rows}


ACC = [0.60, 0.58, 0.62, 0.61, 0.59, 0.60]


def test_met_not_met_and_undecided():
    plain = [5000.0] * 6
    # every paired ratio 2.2-2.6: the whole interval above 2; accuracies alike -> met
    g = T.goal(results([11000, 12000, 13000, 11500, 12500, 12000], plain, ACC, ACC))
    assert g["speed_word"] == "met" and g["accuracy_overlap"] and g["word"] == "met"
    assert g["tokens_ratio"]["estimate"] == pytest.approx(2.4)
    # ratios 1.1-1.3: wholly below 2 -> not met, whatever the accuracy
    assert T.goal(results([5500, 6000, 6500, 6000, 5800, 6200], plain, ACC, ACC))["word"] == "not met"
    # ratios straddling 2 -> undecided
    assert T.goal(results([9000, 11000, 9500, 10500, 9800, 10200], plain, ACC, ACC))["word"] == "undecided"
    # fast enough but the pick's accuracy wholly below plain TRL's -> not met
    low = [a - 0.2 for a in ACC]
    g = T.goal(results([11000, 12000, 13000, 11500, 12500, 12000], plain, low, ACC))
    assert g["speed_word"] == "met" and g["accuracy_overlap"] is False and g["word"] == "not met"


def test_incomplete_pairs_are_refused():
    r = results([11000, 12000], [5000, 5000], ACC[:2], ACC[:2])
    r["repeats"].pop()
    with pytest.raises(RlmLabError, match="complete pairs"):
        T.goal(r)


# ---- the pick's generation settings: the rule fixed before the exploration, on hand-made rounds ---------------
from rlm_lab.chapters.ch06_async import generation_options as G  # noqa: E402


def rounds(*tps):
    return {"rounds": [{"tokens_per_s": float(x)} for x in tps]}


def test_choose_keeps_an_option_only_when_every_round_beats_trls_fastest():
    dyn = rounds(100, 110, 105)
    name, settings, why = G.choose({"dynamic": dyn, "static": rounds(150, 160, 155)})
    assert (name, settings) == ("static", {"cache_implementation": "static"}) and "150" in why and "110" in why
    # the best median (160) but one round (108) below dynamic's fastest (110): TRL's own stays
    name, settings, why = G.choose({"dynamic": dyn, "static": rounds(108, 160, 170)})
    assert (name, settings) == ("dynamic", {}) and "not faster in every round" in why
    # compiled wins: its settings carry the compile flag the rollout workers read
    name, settings, _ = G.choose({"dynamic": dyn, "static": rounds(120, 121, 122),
                                  "static_compiled": rounds(200, 210, 220)})
    assert settings == {"cache_implementation": "static", "compile": True}
    # faster options a worker cannot be given (eager attention, two batches a call) are not picked
    assert G.choose({"dynamic": dyn, "eager": rounds(500, 500), "batch2x": rounds(900, 900)})[0] == "dynamic"
    with pytest.raises(RlmLabError, match="no rounds of 'dynamic'"):
        G.choose({"static": rounds(1, 2)})


def _record(folder, results, status_ok=True):
    from rlm_lab.record import RunRecord

    if status_ok:
        with RunRecord(folder, {"size": "cpu"}) as rec:
            rec.update(**results)
    else:
        with pytest.raises(RuntimeError):
            with RunRecord(folder, {"size": "cpu"}) as rec:
                rec.update(**results)
                raise RuntimeError("killed")


def test_chosen_reads_the_newest_completed_exploration(tmp_path):
    root = tmp_path / "ch06_generation_options"
    assert G.chosen("cpu", root)[0] == {} and "no exploration committed" in G.chosen("cpu", root)[1]
    _record(root / "20261201T000000Z", {"options": {"dynamic": rounds(100, 110), "static": rounds(200, 210)}})
    # a newer exploration that failed is passed over
    _record(root / "20261202T000000Z", {"options": {"dynamic": rounds(100, 110)}}, status_ok=False)
    settings, why = G.chosen("cpu", root)
    assert settings == {"cache_implementation": "static"} and "20261201T000000Z" in why


def test_section_reads_the_committed_goal_or_says_it_is_not_measured(tmp_path):
    import json

    base = tmp_path / "ch06_goal"
    text, values = T.section("cpu", base)
    assert "has not been measured" in text and values["ch06_tg_word"].startswith("undecided")
    g = T.goal(results([5500, 6000, 6500, 6000, 5800, 6200], [5000.0] * 6, ACC, ACC))
    _record(base / "20261203T000000Z", {"window": "w-test", "repeats": []})
    (base / "20261203T000000Z" / "goal.json").write_text(json.dumps(g | {"generation": {"cache_implementation": "static"},
                                                                         "generation_why": "hand-made"}))
    text, values = T.section("cpu", base)
    assert values["ch06_tg_word"] == "not met" and values["ch06_tg_pairs"] == "6"
    assert values["ch06_tg_ratio"].startswith(f"{g['tokens_ratio']['estimate']:.2f} [")
    assert values["ch06_tg_generation"] == "cache_implementation=static" and values["ch06_tg_window"] == "w-test"
    assert "the goal: not met" in text and "hand-made" in text
