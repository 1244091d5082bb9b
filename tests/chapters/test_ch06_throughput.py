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
