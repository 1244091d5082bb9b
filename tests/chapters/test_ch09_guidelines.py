"""Chapter 9: the guideline registry as committed, the evidence read from records (checked against the records read
by hand), the predictions at scale that need no advisor, the decision map's choice, and the validated band."""

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlm_lab.chapters.ch09_guidelines import cases, run, upstream
from rlm_lab.chapters.ch09_guidelines.cases import DEVICES, load_guideline, load_guidelines
from rlm_lab.errors import RlmLabError

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "data" / "runs" / "cpu"
BY_ID = {g.id: g for g in load_guidelines()}


def newest(folder: Path) -> dict:
    """A record read by hand: the folder's own record.json, else its newest timestamped run's."""
    path = folder / "record.json"
    if not path.exists():
        path = sorted(folder.glob("*/record.json"))[-1]
    return json.loads(path.read_text())["results"]


def test_the_registry_has_at_least_fifteen_sourced_guidelines():
    assert len(BY_ID) >= 15
    for g in BY_ID.values():
        assert g.sources and all(s["url"].startswith("https://") and len(s["read"]) == 10 for s in g.sources), g.id
        assert g.evidence["kind"] == "none" or g.evidence.get("quantity"), g.id
        assert g.predict is None or sorted(g.holds) == sorted(DEVICES), g.id


def test_the_registry_names_exactly_the_predictions_that_exist():
    assert set(cases.PREDICTIONS) == set(run.SCALE)


def test_every_record_a_guideline_names_exists():
    for g in BY_ID.values():
        ev = g.evidence
        names = [n for k in ("a", "b", "runs") if k in ev for n in (ev[k] if isinstance(ev[k], list) else [ev[k]])]
        if ev["kind"] in ("exact", "single", "repeats"):   # folder:metric references
            names += [ev[k].split(":")[0] for k in ("value", "over", "reps") if k in ev]
        for name in names:
            assert run.folders(name, CPU), f"{g.id}: no record folder matches {name}"


def test_a_record_name_never_leaves_its_folder(tmp_path):
    path = tmp_path / "g.yaml"
    for bad in ("../x", "/etc", "a/b", "", ".."):
        with pytest.raises(RlmLabError, match="is not a folder name or glob"):
            cases.check_name(bad, path, "evidence.a")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "ch06_x_seed0").mkdir()
    (tmp_path / "outside_seed0").mkdir()
    assert [p.name for p in run.folders("*seed0", tmp_path / "runs")] == ["ch06_x_seed0"]


def test_a_guideline_file_round_trips(tmp_path):
    src = ROOT / "data" / "guidelines" / "g20-zero3-volume.yaml"
    (tmp_path / src.name).write_text(src.read_text())
    g = load_guideline(tmp_path / src.name)
    assert g == BY_ID["g20-zero3-volume"].__class__(**{**BY_ID["g20-zero3-volume"].__dict__, "path": src.name})


def test_paired_evidence_is_the_ratio_per_seed():
    ev = run.evidence(BY_ID["g01-one-step-off-faster"])
    by_hand = []
    for seed in (0, 1, 2):
        s = newest(CPU / f"ch06_sync_tis_seed{seed}")["step_seconds_median"]
        o = newest(CPU / f"ch06_one_step_off_tis_seed{seed}")["step_seconds_median"]
        by_hand.append(s / o)
    assert ev.values == pytest.approx(by_hand) and ev.basis == "seeds" and ev.decides
    assert ev.interval.estimate == pytest.approx(statistics.fmean(by_hand)) and ev.interval.method == "Student-t"
    assert len(ev.sources) == 6


def test_accuracy_questions_use_chapter_6s_pre_registered_test():
    """One verdict per question: g08 and g09 ask what chapter 6's 10-seed plan tests, so its word decides."""
    from rlm_lab.chapters.ch06_async import accuracy_test as A
    from rlm_lab.record import REPO_ROOT

    finals, _ = A.load_finals(REPO_ROOT / A.ROOT)
    tests = {r["test"]: r for r in A.decide(finals)["tests"]}
    ev = run.evidence(BY_ID["g09-staleness-accuracy"])
    by_hand = [finals[("sync", None)][k] - finals[("eta8", None)][k] for k in range(10)]
    assert list(ev.values) == pytest.approx(tests["falls_uncorrected"]["diffs"])
    assert list(ev.values) == pytest.approx(by_hand)
    assert ev.basis == "pre-registered test" and ev.interval.n == 10
    assert ev.interval.estimate == pytest.approx(-statistics.fmean(by_hand))   # eta 8 minus sync: sign -1
    assert ev.decision == ("for" if tests["falls_uncorrected"]["word"] == "decided" else "undecided")
    g08 = run.evidence(BY_ID["g08-is-correction"])
    assert g08.decision == ("for" if tests["tis_recovers"]["word"] == "decided" else "undecided")


def test_an_exact_count_is_read_from_the_wire():
    ev = run.evidence(BY_ID["g20-zero3-volume"])
    z3, dp = newest(CPU / "ch04_dp2-zero3")["comm"], newest(CPU / "ch04_dp2")["comm"]
    by_hand = sum(v["wire_bytes"] for v in z3.values()) / sum(v["wire_bytes"] for v in dp.values())
    assert by_hand == 1.5 and ev.interval.estimate == by_hand and ev.interval.lo == ev.interval.hi == by_hand
    assert ev.basis == "exact count" and ev.decides


def test_a_within_target_is_read_from_records():
    g = BY_ID["g05-lora-sync-bytes"]
    value, sources = run.target_value(g.test.target, CPU)
    full, lora = newest(CPU / "ch05_disaggregated"), newest(CPU / "ch05_disaggregated_lora")
    assert value == full["parameters"] / lora["trainable_parameters"] and len(sources) == 2


def test_single_runs_and_one_run_each_do_not_decide():
    for gid in ("g07-dynamic-sampling-cost", "g25-pp-bubble"):
        ev = run.evidence(BY_ID[gid])
        assert not ev.decides and ev.interval.lo is None, gid


def _record(folder: Path, results: dict):
    folder.mkdir(parents=True)
    (folder / "record.json").write_text(json.dumps({"status": "completed", "config": {}, "provenance": {},
                                                    "results": results}))


def test_several_runs_each_give_the_conservative_ratio_interval(tmp_path):
    for side, values in (("a", (4.0, 5.0, 6.0)), ("b", (2.0, 2.5, 3.0))):
        for i, v in enumerate(values):
            _record(tmp_path / f"cell_{side}" / f"2026010{i}T000000Z", {"step_seconds_median": v})
    ev = run.evidence(cases.Guideline("x", "x", "x", (), False, None, {"kind": "runs", "a": "cell_a", "b": "cell_b",
                                                                         "metric": "step_seconds_median"},
                                      cases.Check("above", 1.0), None), tmp_path)
    a, b = run.repeat_interval([4.0, 5.0, 6.0]), run.repeat_interval([2.0, 2.5, 3.0])
    assert ev.interval.estimate == 2.0 and ev.basis == "runs" and ev.decides
    assert (ev.interval.lo, ev.interval.hi) == (a.lo / b.hi, a.hi / b.lo)


def test_two_runs_each_decide_nothing(tmp_path):
    """n <= 2 never decides: two runs a side have no interval (a bootstrap of two is their range)."""
    for side, values in (("a", (4.0, 6.0)), ("b", (2.0, 3.0))):
        for i, v in enumerate(values):
            _record(tmp_path / f"cell_{side}" / f"2026010{i}T000000Z", {"step_seconds_median": v})
    ev = run.evidence(cases.Guideline("x", "x", "x", (), False, None, {"kind": "runs", "a": "cell_a", "b": "cell_b",
                                                                         "metric": "step_seconds_median"},
                                      cases.Check("above", 1.0), None), tmp_path)
    assert ev.interval.estimate == 2.0 and not ev.decides and ev.interval.lo is None


def test_evidence_from_a_superseded_record_is_not_current():
    """The window 20261204T084630Z replaces chapter 5's single runs: g06 and g22 read them and decide nothing;
    g18 reads the window itself (fused / after there: fusion is slower, so the claim is contradicted)."""
    from rlm_lab.chapters.ch09_guidelines.compare import judge

    for gid in ("g06-lora-sync-time", "g22-collective-sync"):
        ev = run.evidence(BY_ID[gid])
        assert ev.basis == "superseded" and not ev.decides and "replaces" in ev.note, gid
        assert judge(BY_ID[gid])["verdict"].word == "undecided"
    ev = run.evidence(BY_ID["g18-fusion"])
    assert ev.sources == ("data/runs/cpu/reference/20261204T084630Z",) and ev.basis == "paired repeats"
    win = json.loads((CPU / "reference" / "20261204T084630Z" / "record.json").read_text())["results"]
    vals = next(r for r in win["references"] if r["name"] == "fusion")["summary"]["values"]
    assert ev.values == pytest.approx([b / a for a, b in zip(vals["fused"], vals["after"])])


def test_a_protocol_record_gives_its_paired_ratios(tmp_path):
    """The measurement protocol's record (paired repeats in fresh processes) decides with its own ratios."""
    _record(tmp_path / "ch05_protocol_colocated_vs_split" / "20260101T000000Z",
            {"summary": {"ratios": [1.2, 1.3, 1.25, 1.4], "word": "slower"}, "repeats": []})
    g = cases.Guideline("x", "x", "x", (), False, None, {"kind": "protocol", "record": "ch05_protocol_colocated_vs_split"},
                        cases.Check("above", 1.0), None)
    ev = run.evidence(g, tmp_path)
    assert ev.values == (1.2, 1.3, 1.25, 1.4) and ev.decides and ev.interval.estimate == pytest.approx(1.2875)


def test_a_missing_key_names_the_record(tmp_path):
    _record(tmp_path / "cell", {"x": 1.0})
    with pytest.raises(RlmLabError, match=r"cell: the record has no y\.z"):
        run.ref_value("cell:y.z", tmp_path)


def test_predictions_that_need_no_advisor():
    assert run.zero3_volume(64).value == pytest.approx(1.5)
    # 512 sequences over 64 / 8 = 8 replicas: 64 each, 8 micro-batches of 8, 8 stages: 7 / 15
    assert run.pp_bubble_at(64).value == pytest.approx(7 / 15)
    assert run.pp_bubble_at(8).value == pytest.approx(7 / 71)
    lengths = list(run.tail_lengths())
    assert len(lengths) == 512 and max(lengths) <= 4096 and min(lengths) >= 1
    assert run.packing_gain(8).value > 1


def _fake_split(g=3.0, t=2.0, s=0.5):
    phases = {"reshard": (0.0, "-"), "generation": (g, "rollout"), "preparation": (0.0, "train"),
              "advantage": (0.0, "train"), "training": (t, "train"), "sync": (s, "-")}
    placement = SimpleNamespace(rollout_separate=True, describe=lambda: "rollout | train", name="disaggregated",
                                roles={"rollout": "rollout"}, sets=(SimpleNamespace(name="rollout", devices=2),
                                                                    SimpleNamespace(name="train", devices=6)))
    return SimpleNamespace(placement=placement, phases=phases, step_s=g + t + s)


def test_one_step_off_and_balance_on_a_hand_built_split(monkeypatch):
    monkeypatch.setattr(run, "advised", lambda n, *a: run.Advised(None, None, _fake_split(), 1))
    # 64 batches, one step of overlap: the generator sets the pace (3 s a batch), the last update adds t + s
    assert run.one_step_off_speedup(8).value == pytest.approx(5.5 / ((64 * 3.0 + 2.0 + 0.5) / 64))
    assert run.split_balance(8).value == pytest.approx(0.5 / 3.0)
    assert run.capacity_bound(8).value == pytest.approx(1.0)


def test_the_map_takes_the_faster_option(monkeypatch):
    # the split's one-step-off step is (64 x 3 + 2.5) / 64 = 3.04 s: a 2.5 s colocated step beats it, a 9 s one not
    one = SimpleNamespace(placement=SimpleNamespace(name="colocated", describe=lambda: "all"), step_s=2.5)
    monkeypatch.setattr(run, "advised", lambda *a, **k: run.Advised(one, one, _fake_split(), 5))
    row = run.decide(8, "qwen2.5-7b", "fixed 1024")
    assert row["kind"] == "colocated" and row["step_s"] == 2.5 and row["considered"] == 5
    one.step_s = 9.0
    row = run.decide(8, "qwen2.5-7b", "fixed 1024")
    assert row["kind"] == "split" and row["mode"] == "one_step_off" and row["eta"] == 1
    assert row["split"] == "2 rollout + 6 train" and row["sync_step_s"] == 5.5
    assert row["step_s"] == pytest.approx((64 * 3.0 + 2.5) / 64)


def test_the_map_says_where_nothing_fits(monkeypatch):
    def nothing(*a, **k):
        raise RlmLabError(f"no placement fits ({ROOT}/configs/models/x.json)")
    monkeypatch.setattr(run, "advised", nothing)
    row = run.decide(8, "qwen2.5-7b", "fixed 1024")
    assert row["placement"] is None and "no placement fits" in row["note"] and str(ROOT) not in row["note"]


def test_the_validated_band_is_the_median_over_validation_cases():
    def outcome(split, quantity, predicted, published):
        return SimpleNamespace(predicted=predicted, case=SimpleNamespace(
            split=split, quantity=quantity, published=SimpleNamespace(value=published)))
    outs = [outcome("validation", "step_time", 12, 10), outcome("validation", "step_time", 5, 10),
            outcome("validation", "step_time", 9, 10), outcome("validation", "speedup", 1.5, 2.0),
            outcome("calibration", "step_time", 100, 10), outcome("validation", "step_time", None, 10)]
    band, why = upstream._band(outs, ("step_time",), ("speedup",))
    assert why == "" and band["step_time"] == pytest.approx(0.2) and band["ratio"] == pytest.approx(0.25)
    assert band["cases"] == 4
    assert upstream._band(outs[4:], ("step_time",), ("speedup",))[0] is None


def test_the_band_read_from_the_record_is_the_band_of_a_fresh_prediction():
    """validation_band reads data/published/validation.json instead of predicting every case again: it must give
    what predict_all with the committed fit gives now (a stale or hand-edited record would differ)."""
    from rlm_lab.chapters.ch09_guidelines import upstream
    from rlm_lab.validate import published, published_predict as pp

    fresh = pp.predict_all(published.load_published(), pp.fitted_values(pp.load_fit()))
    band, why = upstream.validation_band()
    assert band is not None, why
    assert band == upstream._band(fresh, published.STEP_QUANTITIES, published.RATIO_QUANTITIES)[0]


def test_the_memory_fraction_guideline_is_priced_by_the_engine_model():
    """g23 once said the cost model had no KV-cache-limited engine; it has one (rlm_lab.cost.engine), and the
    guideline is now predicted by it. By hand from the engine's formula K = (f M - W - A) / kappa."""
    from rlm_lab.chapters.ch09_guidelines import upstream as U

    g = BY_ID["g23-memory-fraction"]
    assert g.predict == "kv_headroom" and "no KV-cache" not in (g.scale_why or "")
    prof = U.load_profile(run.PROFILE)
    spec = U.model_spec(str(cases.REPO / U.MODEL_7B))
    seqs, chunk = (1024, 16384)   # vLLM's defaults on an 80 GB H100 (not an A100)
    reserve = seqs * spec.head_width * 4 + chunk * (4 * spec.hidden + 2 * spec.intermediate) * 2
    kappa = 2 * spec.layers * spec.kv_dim * 2
    k = (0.5 * float(prof.memory_bytes) - spec.params * 2 - reserve) / kappa
    for n in (8, 64):
        assert run.kv_headroom(n).value == pytest.approx(k / ((512 / n) * (256 + 1024)))


def test_the_map_names_what_its_assumed_overheads_move():
    from rlm_lab.chapters.ch09_guidelines import upstream as U

    bare = run.bare_profile()
    keys = [k for g in U.OVERHEAD_GROUPS.values() for k in g] + list(U.ASSUMED_TRL_STEP)
    assert all(bare.overhead.get(k, 0.0) == 0.0 for k in keys)
    row = run.decide(8, "qwen2.5-7b", "fixed 1024")
    by_hand = U.advise(str(cases.REPO / U.MODEL_7B), U.algorithm("grpo", 0), run.workload("fixed 1024"),
                       U.Cluster(8, "gpu"), bare).ranked[0].step_s
    assert row["bare_step_s"] == pytest.approx(by_hand) and row["bare_moved"] < 0   # overheads only add time


# ---- typed reasons against the code they describe (issue 36: g23 said "no KV-cache-limited engine" after the
# cost model had one). A guideline with no scale prediction says why in typed words; where those words say what the
# predictor has or lacks, a probe here asks the code, so the prose fails the day the code moves under it.

def _pp_generation_refused() -> bool:
    from rlm_lab.cost.placement_spec import Placement, PlacementError, ResourceSet

    s = ResourceSet("all", 8, "gpu", dp=4, tp=1, pp=2)
    try:
        Placement("p", (s,), {"actor": "all", "rollout": "all", "reference": "all"}).validate("grpo")
    except PlacementError as e:
        return "pipeline-parallel generation is not priced" in str(e)
    return False


def _cost_sources() -> str:
    return "\n".join(p.read_text() for p in (ROOT / "rlm_lab" / "cost").glob("*.py")).lower()


PROBES = {   # guideline -> (the words of its typed reason that make the claim, a check of the code that holds
             # while the claim is true): the old g22 ("a collective broadcast only") fails on the first
    "g18-fusion": ("fusion_time", lambda: callable(__import__(
        "rlm_lab.cost.longtail", fromlist=["x"]).fusion_time)),
    "g22-collective-sync": ("collective and object_store", lambda: {"collective", "object_store"} <= set(__import__(
        "rlm_lab.cost.placement_spec", fromlist=["x"]).SYNCS)),
    "g28-frozen-placement": ("no quantized frozen weights", lambda: not any(w in _cost_sources()
                                                                      for w in ("quantiz", "int8", "int4", "fp8"))),
    "g29-process-rewards": ("no per-step reward term", lambda: not any(w in _cost_sources() for w in (
        "process reward", "per-step reward", "prm"))),
    "g30-dpo-not-free": ("prices DPO", lambda: 'algorithm("dpo")' in (ROOT / "rlm_lab/cost/predict.py").read_text()),
    "g37-shared-critic": ("the predictor prices it", lambda: 'critic="shared"' in (
        ROOT / "rlm_lab/cost/predict.py").read_text()),
    "g32-sp-cp-long": ("no ring-attention context parallelism", lambda: hasattr(__import__(
        "rlm_lab.cost.placement", fromlist=["x"]), "ASSUMED_SP") and "cp" not in __import__(
        "rlm_lab.cost.placement_spec", fromlist=["x"]).ResourceSet.__dataclass_fields__),
    "g39-pp-decode": ("refuses pipeline-parallel generation", _pp_generation_refused),
}
CLAIM = r"(cost model|predictor)\b.*\b(has no|is not in|not in the|ignores|only|prices|refuses)"


def test_a_typed_reason_about_the_predictor_is_checked_against_it():
    import re

    for g in load_guidelines():
        if g.predict is not None:
            assert not g.scale_why, g.id   # a priced guideline's column is the code's own text (points_text)
            continue
        if re.search(CLAIM, g.scale_why) and "scale predictions" not in g.scale_why.split(" but ")[0]:
            assert g.id in PROBES, f"{g.id}: its reason says what the predictor has or lacks; add a probe: {g.scale_why}"
        if g.id in PROBES:
            what, probe = PROBES[g.id]
            assert what in " ".join(g.scale_why.split()), f"{g.id}: its reason no longer says {what!r}: {g.scale_why}"
            assert probe(), f"{g.id}: the code no longer matches its typed reason ({what}): {g.scale_why}"
    # the old g23 reason would have failed: the engine it said was missing is there
    assert re.search(CLAIM, "the cost model has no KV-cache-limited engine yet")
    assert callable(__import__("rlm_lab.cost.engine", fromlist=["x"]).kv_capacity)


def test_the_at_scale_column_names_its_quantity_and_condition():
    """Issue 36: g02's column showed '64: 0.801 fails' beside the test 'within 25 % of 1', another quantity than the
    test's, unnamed. Every priced point says what it predicts and the condition it is held to at that scale."""
    from rlm_lab.chapters.ch09_guidelines import report
    from rlm_lab.chapters.ch09_guidelines.compare import check_text

    for r in report.guideline_rows():
        g, pts = r["guideline"], [p for p in r["points"] if p.value is not None]
        if not pts:
            continue
        text = report.points_text(r)
        assert all(p.note for p in pts), g.id   # the predicted quantity, named
        assert text.startswith(pts[0].note + ": "), (g.id, text)
        for p in pts:
            assert f"{p.devices}: " in text and check_text(g.holds[p.devices]) in text, (g.id, p.devices, text)
