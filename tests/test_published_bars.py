"""Issue 39's bars (rlm_lab.validate.published_bars): gain error, decisive direction beside the constant, per-source
aggregation with exact intervals, checked against independent computations."""

import itertools
import math
from types import SimpleNamespace

import pytest

from rlm_lab.validate import published_bars as B


class _O:   # the parts of an Outcome the bars read
    def __init__(self, source, quantity, published, predicted, cid=None):
        self.case = SimpleNamespace(id=cid or f"{source}-{quantity}-{published}-{predicted}", source=source,
                                    quantity=quantity, published=SimpleNamespace(value=published), split="validation")
        self.predicted = predicted

    @property
    def error(self):
        return None if self.predicted is None else self.predicted / self.case.published.value - 1


def test_gain_error_reads_the_gain_not_the_ratio():
    assert B.gain_error(1.0, 1.11) == pytest.approx(-1.0)        # "no speed-up" is all of the gain wrong
    assert B.gain_error(1.5, 2.0) == pytest.approx(-0.5)
    assert B.gain_error(0.9, 1.4) == pytest.approx(-1.25)        # the wrong sign: more than 100 %
    assert B.gain_error(2.66, 2.66) == pytest.approx(0.0)


def test_decisive_band():
    assert B.decisive(0.55, "stage_share") and B.decisive(0.45, "stage_share")
    assert not B.decisive(0.52, "stage_share") and not B.decisive(0.47, "stage_share")
    assert B.decisive(1.05, "speedup") and B.decisive(1 / 1.05, "speedup") and B.decisive(2.0, "speedup")
    assert not B.decisive(1.04, "speedup") and not B.decisive(0.97, "speedup")
    assert not B.decisive(100.0, "step_time")


def _coverage(n, k):   # independent: count the binomial tail by hand
    tail = sum(math.comb(n, i) for i in range(k)) / 2 ** n
    return 1 - 2 * tail


@pytest.mark.parametrize("n", [5, 6, 7, 10, 15])
def test_median_interval_is_the_exact_order_statistic_one(n):
    xs = [float(i * i) for i in range(n)]        # sorted already; shuffled below
    lo, hi, cover = B.median_ci_exact(list(reversed(xs)))
    ks = [k for k in range(1, n // 2 + 1) if _coverage(n, k) >= 0.95]
    if not ks:
        assert lo is None and hi is None and cover == pytest.approx(_coverage(n, 1))
    else:
        k = max(ks)
        assert (lo, hi) == (xs[k - 1], xs[n - k]) and cover == pytest.approx(_coverage(n, k))
    if n == 7:
        assert (lo, hi) == (xs[0], xs[-1]) and cover == pytest.approx(1 - 2 / 128)
    if n == 10:
        assert (lo, hi) == (xs[1], xs[8])


def test_cluster_bootstrap_enumeration_matches_ordered_resamples():
    hits = [("a", True), ("a", True), ("a", False), ("b", True), ("c", False), ("c", False), ("d", True)]
    lo, hi = B.cluster_share_interval(hits, level=0.8)
    clusters = {"a": (2, 3), "b": (1, 1), "c": (0, 2), "d": (1, 1)}
    vals = list(clusters.values())
    shares = sorted(sum(vals[i][0] for i in t) / sum(vals[i][1] for i in t)
                    for t in itertools.product(range(4), repeat=4))         # all 4^4 ordered resamples, equal weight
    n = len(shares)
    ref_lo = shares[math.ceil(0.1 * n - 1e-9) - 1]
    ref_hi = shares[math.ceil(0.9 * n - 1e-9) - 1]
    assert (lo, hi) == pytest.approx((ref_lo, ref_hi))


def test_mcnemar_counts_only_the_discordant_cases():
    assert B.mcnemar_exact([True] * 5 + [True] * 9, [False] * 5 + [True] * 9) == pytest.approx(1 / 32)
    assert B.mcnemar_exact([True, False], [True, False]) == 1.0
    assert B.mcnemar_exact([False] * 3, [True] * 3) == pytest.approx(1.0)


def _registry_like():
    # one page with many speed-ups and others with one each: the per-source median must not be the pooled one
    out = [_O("big", "speedup", 2.0, 1.05, f"big{i}") for i in range(6)]                  # gain error 95 %
    out += [_O(s, "speedup", 2.0, 1.9, s) for s in ("p", "q", "r", "s", "t", "u")]     # gain error 10 %
    out += [_O("p", "stage_share", 0.70, 0.65), _O("q", "stage_share", 0.30, 0.60),    # right, wrong
            _O("r", "stage_share", 0.52, 0.40)]                                        # within the band: not judged
    out += [_O(s, "step_time", 100.0, 100.0 * (1 + e)) for s, e in zip("pqrstu", (.1, -.1, .15, .05, -.3, .2))]
    out.append(_O("v", "speedup", 1.5, None))                                           # not priced: left out
    return out


def test_judge_aggregates_by_source_and_scores_the_constant():
    b = B.judge(_registry_like())
    g = b["gain"]
    assert g["cases"] == 12 and g["sources"] == 7
    assert g["value"] == pytest.approx(0.10) and g["pooled_median"] == pytest.approx((0.95 + 0.10) / 2)
    assert g["per_source"]["big"] == pytest.approx(0.95) and g["constant"] == 1.0 and g["under"] == 12
    assert g["interval"] == pytest.approx([0.10, 0.95])                  # 7 sources: [min, max] at 98.4 %
    d = b["direction"]
    assert d["ratios"] == 15 and d["decisive"] == 14 and d["right"] == 13
    assert d["constant_side"] == "above" and d["constant_right"] == 13      # shares 0.70 above, 0.30 below
    assert "undecided" in d["verdict"] or "not met" in d["verdict"]         # never met while not ahead of it
    s = b["step"]
    assert s["value"] == pytest.approx(0.125) and s["sources"] == 6


def test_the_constant_never_meets_the_direction_bar():
    outs = [_O(f"s{i}", "speedup", 1.5 + i / 10, 1.0001) for i in range(40)]
    b = B.judge(outs)
    assert b["direction"]["right"] == b["direction"]["constant_right"] == 40
    assert not b["direction"]["verdict"].startswith("met")
    assert b["gain"]["value"] == pytest.approx(1.0, abs=1e-3) and b["gain"]["verdict"].startswith("not met")


def test_a_good_predictor_meets_the_bars_with_enough_sources():
    outs = [_O(f"s{i}", "speedup", 2.0, 2.0 * (1.0 + 0.01 * (i % 3)), f"a{i}") for i in range(30)]
    outs += [_O(f"s{i}", "speedup", 0.8, 0.81, f"b{i}") for i in range(30)]       # the constant is wrong on these
    outs += [_O(f"s{i}", "step_time", 10.0, 10.5, f"c{i}") for i in range(30)]
    b = B.judge(outs)
    assert b["gain"]["verdict"].startswith("met") and b["step"]["verdict"].startswith("met")
    assert b["direction"]["right"] == 60 and b["direction"]["constant_right"] == 30
    assert b["direction"]["verdict"].startswith("met")


def test_too_few_sources_decide_nothing():
    b = B.judge([_O("one", "speedup", 2.0, 2.0, f"x{i}") for i in range(20)])
    assert b["gain"]["verdict"].startswith("undecided") and b["direction"]["verdict"].startswith("undecided")


def test_format_prints_the_constant_and_the_intervals():
    text = "\n".join(B.format_bars(B.judge(_registry_like())))
    for part in ("constant (no gain): 100%", "McNemar", "cluster bootstrap by source", "bar gain_median",
                 "bar direction", "bar step_median", "coverage"):
        assert part in text


def test_the_command_prints_the_bars_of_the_committed_record():
    from rlm_lab.validate.published_report import format_report, record_report

    rep = record_report()
    text = format_report(rep)
    assert "issue 39's bars" in text and "constant (no gain): 100%" in text
    d = rep["bars"]["direction"]
    assert d["decisive"] < d["ratios"]                          # some validation ratios lie within the band
    assert rep["bars"]["gain"]["cases"] == sum(r["quantity"] == "speedup" and r["split"] == "validation"
                                               and r["error_value"] is not None for r in rep["rows"])


def test_the_record_keeps_the_bars_and_its_history_carries_them(tmp_path, monkeypatch):
    import json

    from rlm_lab.validate import published_predict as PP
    from rlm_lab.validate import published_report as R
    from rlm_lab.validate.published import load_published

    outs = R.record_outcomes()
    monkeypatch.setattr(R, "predict_all", lambda registry, values=None: outs)    # the committed predictions
    path = tmp_path / "validation.json"
    old = json.loads(R.RECORD.read_text())
    path.write_text(json.dumps(dict(old, registry_sha256="0" * 64, bars={"gain_median": 0.5})))
    R.write_record(load_published(), PP.load_fit(), path)
    new = json.loads(path.read_text())
    live = B.judge([o for o in outs if o.case.split == "validation"])
    assert new["bars"]["gain_median"] == pytest.approx(live["gain"]["value"])
    assert new["bars"]["direction_decisive"] == live["direction"]["decisive"]
    assert new["bars"]["constant_right"] == live["direction"]["constant_right"]
    assert new["history"][-1]["bars"] == {"gain_median": 0.5}                  # the earlier record's, as it said
