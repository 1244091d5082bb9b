"""The judge of issue 39 item 5 (rlm_lab.validate.published_advise): the published best's mode and split direction,
its rank in `rlm-lab advise`, first or within the validated error of the first; the record keeps the picks."""

import json
from types import SimpleNamespace

import pytest

from rlm_lab.cost.validated import validated_ratio_error
from rlm_lab.validate import published_advise as A
from rlm_lab.validate.published import load_published


def _placement(sizes: dict, roles: dict):
    return SimpleNamespace(sets=tuple(SimpleNamespace(name=n, devices=d) for n, d in sizes.items()), roles=roles)


def test_split_direction_by_hand():
    one = _placement({"all": 32}, {"actor": "all", "rollout": "all"})
    assert A.split_direction(one) == "one set"
    assert A.split_direction(_placement({"rollout": 16, "train": 16}, {"actor": "train", "rollout": "rollout"})) == "even"
    assert A.split_direction(_placement({"rollout": 144, "train": 48},
                                        {"actor": "train", "rollout": "rollout"})) == "rollout > rest"
    # three sets: the rest is every set but the rollout's (8 + 4 = 12 > 4)
    three = _placement({"r": 4, "a": 8, "ref": 4}, {"actor": "a", "rollout": "r", "reference": "ref"})
    assert A.split_direction(three) == "rollout < rest"


def _pick(rank, best, first, band=0.2):
    return A.AdvisePick("c", "async", rank, 10, "sync", best, first, band)


def test_first_within_band_and_not_picked():
    assert _pick(1, 100.0, 100.0).is_first and _pick(1, 100.0, 100.0).picked
    inside = _pick(4, 119.0, 100.0)                 # 119 <= 100 x 1.2
    assert inside.within_band and inside.picked and not inside.is_first
    outside = _pick(4, 121.0, 100.0)                # a mutant band test (<) would still pass 119; 121 must fail
    assert not outside.within_band and not outside.picked
    assert not _pick(4, 110.0, 100.0, band=None).picked    # no validated band: only first counts
    assert not A.AdvisePick("c", "-", None, 0, "-", None, None, 0.2, "no fit").picked


def test_goal_count_reads_only_the_goal_settings():
    picks = [A.AdvisePick(cid, "x", 1, 5, "x", 1.0, 1.0, 0.2) for cid in A.GOAL_SETTINGS[:2]]
    picks.append(A.AdvisePick("other", "x", 1, 5, "x", 1.0, 1.0, 0.2))
    picks.append(A.AdvisePick(A.GOAL_SETTINGS[2], "x", 9, 9, "x", 2.0, 1.0, 0.2))
    assert A.goal_count(picks) == (2, 3)


def test_comparing_cases_are_the_mode_or_split_speedups():
    reg = load_published()
    ids = {c.id for c in A.comparing_cases(reg)}
    assert set(A.GOAL_SETTINGS) <= ids
    assert all(reg.cases[i].quantity == "speedup" for i in ids)
    assert "verl-fully-async-7b-32gpu-sync-gen" not in ids


def test_validated_ratio_error_reads_the_record(tmp_path):
    p = tmp_path / "validation.json"
    p.write_text(json.dumps({"summary": {"ratio": {"median_abs_error": 0.22}}}))
    assert validated_ratio_error(p) == pytest.approx(0.22)
    p.write_text("{}")
    assert validated_ratio_error(p) is None
    assert validated_ratio_error(tmp_path / "none.json") is None


@pytest.mark.slow
def test_the_judge_on_the_goal_settings_names_mode_and_split():
    from rlm_lab.validate.published_predict import fitted_values, load_fit

    reg = load_published()
    picks = {p.case: p for p in A.judge_advise(reg, fitted_values(load_fit()), band=0.25)}
    assert set(picks) == set(A.GOAL_SETTINGS)
    assert picks["verl-fully-async-7b-32gpu-speedup"].best == "async eta 1, rollout 16 | rest 16 (even)"
    assert picks["areal-r1-distill-7b-speedup"].best.startswith("async eta 4, rollout 144 | rest 48")
    for p in picks.values():
        assert p.rank is not None and 1 <= p.rank <= p.of
        assert p.first_step_s <= p.best_step_s          # the first is never slower than a later candidate
        assert p.loose_rank is not None and p.loose_rank <= p.rank     # any proportion includes the published one
    text = "\n".join(A.format_advise(list(picks.values())))
    assert "goal settings" in text and "rank" in text


def test_the_record_keeps_the_picks_and_its_history_their_ranks(tmp_path, monkeypatch):
    from rlm_lab.validate import published_predict as PP
    from rlm_lab.validate import published_report as R

    outs = R.record_outcomes()
    monkeypatch.setattr(R, "predict_all", lambda registry, values=None: outs)    # the committed predictions
    path = tmp_path / "validation.json"
    old = json.loads(R.RECORD.read_text())
    path.write_text(json.dumps(dict(old, registry_sha256="0" * 64, advise=[{"case": "c", "rank": 8}])))
    seen = {}

    def picks(rep):
        seen["band"] = rep["summary"]["validation"]["ratio"]["median_abs_error"]
        return [A.AdvisePick("c", "async", 2, 30, "sync", 1.1, 1.0, seen["band"])]

    rep = R.write_record(load_published(), PP.load_fit(), path, advise=picks)
    new = json.loads(path.read_text())
    assert new["advise"][0]["rank"] == 2 and new["advise"][0]["band"] == pytest.approx(seen["band"])
    assert rep["advise"][0].picked == (1.1 <= 1.0 * (1 + seen["band"]))
    assert new["history"][-1]["advise_ranks"] == {"c": 8}                      # the earlier record's, as it said
