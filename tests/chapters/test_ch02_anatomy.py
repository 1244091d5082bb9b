"""Chapter 2's measurement functions at smoke size: the cost model's memory equals the bytes of the live
tensors of a real PPO run, and the time/share tables join predicted and measured stages correctly."""

import json

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.chapters import ch02_anatomy as A
from rlm_lab.stages import Stage

PROFILE = "h200"  # any profile: these tests check the joins and the byte counts, not the seconds


def test_cases_cover_ppo_grpo_and_dapo_with_the_models_each_holds():
    cases = A.algorithm_cases("cpu")
    assert {c.algo for c in cases.values()} == {"grpo", "ppo"} and cases["dapo"].beta == 0
    stages = {name: {r.stage for r in A.predict_case(c, PROFILE).rows} for name, c in cases.items()}
    assert Stage.REF_LOGPROB in stages["grpo"] and Stage.REF_LOGPROB not in stages["dapo"]
    assert {Stage.VALUES, Stage.CRITIC_UPDATE, Stage.OLD_LOGPROB} <= stages["ppo"]
    assert not {Stage.VALUES, Stage.CRITIC_UPDATE} & stages["grpo"]
    sweep = A.sweep_cases("cpu")
    assert {c.length for c in sweep.values()} > {cases["grpo"].length} and all(c.algo == "grpo" for c in sweep.values())


def test_median_error_ignores_unmeasured_rows_and_the_step_row():
    rows = [{"stage": "a", "rel_error": 0.1}, {"stage": "b", "rel_error": -0.3}, {"stage": "c", "rel_error": 0.2},
            {"stage": "other (not modelled)", "rel_error": float("nan")}, {"stage": "step", "rel_error": 5.0}]
    assert A.median_abs_error(rows) == pytest.approx(0.2)
    with pytest.raises(RlmLabError):
        A.median_abs_error([{"stage": "x", "rel_error": float("nan")}])


@pytest.fixture(scope="module")
def ppo_record(tmp_path_factory):
    case = A.Case("ppo", "ppo", 0.04, model="nano", batch=8, group=4, length=4, steps=2, warmup=1)
    return case, A.run_case(case, "smoke", tmp_path_factory.mktemp("ch02") / "ppo")


@pytest.mark.slow
def test_memory_predicted_equals_the_bytes_of_the_live_tensors(ppo_record):
    case, rec = ppo_record
    rows = A.memory_table(rec, A.predict_case(case, PROFILE))
    items = {r["item"] for r in rows}
    assert {"actor_weights", "actor_gradients", "actor_optimizer", "reference_weights", "critic_weights",
            "critic_gradients", "critic_optimizer", "kv_cache"} <= items
    for r in rows:  # exact: parameter counts, AdamW state (m, v, step) and KV-cache layout are all formulas
        assert r["measured"] > 0 and r["rel_error"] == 0, r


@pytest.mark.slow
def test_time_table_joins_every_traced_stage(ppo_record):
    case, rec = ppo_record
    pred = A.predict_case(case, PROFILE, reward_s_per_sample=1e-6)
    rows = A.time_table(rec, pred)
    names = [r["stage"] for r in rows]
    assert names[-1] == "step" and "other (not modelled)" in names
    (step,) = [json.loads(line) for line in (rec.dir / "spans.jsonl").read_text().splitlines()][case.warmup:]
    for stage in ("generate", "old_logprob", "ref_logprob", "reward", "values", "advantage", "actor_forward",
                  "actor_backward", "critic_update", "optimizer"):
        row = next(r for r in rows if r["stage"] == stage)
        # joined with the right stage on both sides: the traced step's time and the prediction's seconds
        assert row["measured"] == pytest.approx(step["stages"][stage], rel=1e-9) and row["measured"] > 0
        assert row["predicted"] == pytest.approx(pred.seconds(stage), rel=1e-12) and row["predicted"] > 0
        assert row["rel_error"] == pytest.approx(row["predicted"] / row["measured"] - 1)
    assert rows[-1]["measured"] == pytest.approx(step["wall_s"]) and rows[-2]["measured"] == pytest.approx(
        step["stages"]["other"])
    assert rec.results["completion_mean_lengths"] == [case.length] * case.steps  # forced lengths held
    share = A.share_row(rec, A.predict_case(case, PROFILE), "ppo")
    f = share["flop_share"]  # FLOP facts independent of the normalisation: backward = 2 x forward, and the
    assert f["actor_backward"] == pytest.approx(2 * f["actor_forward"], rel=1e-12)  # three log-prob passes
    assert f["old_logprob"] == pytest.approx(f["actor_forward"]) == pytest.approx(f["ref_logprob"])  # alike
    # one traced step after the warm-up: the measured shares are that step's stage times over its wall time,
    # read here from the tracer's per-step rows (spans.jsonl), and with "other" they add up to exactly 1
    (row,) = [json.loads(line) for line in (rec.dir / "spans.jsonl").read_text().splitlines()][case.warmup:]
    assert share["time_share"] == pytest.approx({k: v / row["wall_s"] for k, v in row["stages"].items()}, rel=1e-9)
    assert sum(share["time_share"].values()) == pytest.approx(1.0, rel=1e-9)


def test_time_table_needs_a_traced_run(tmp_path):
    from rlm_lab.record import RunRecord

    rec = RunRecord(tmp_path / "r", {}, command="x")
    with pytest.raises(RlmLabError, match="tracer"):
        A.time_table(rec, A.predict_case(A.algorithm_cases("smoke")["grpo"], PROFILE))
