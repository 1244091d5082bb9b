"""The runtime-overhead arms: the plain arm is TRL's own generate (no rollout_func, no Ray), its throughput comes
from its own trace and log, and the stage table reads each repeat's record."""

import pytest

from rlm_lab.chapters.ch06_async import overhead as O
from rlm_lab.record import RunRecord


@pytest.mark.slow  # SFT warm start and TRL's GRPOTrainer for a few steps: over half a minute on 2 cores
def test_plain_arm_is_trl_alone(tmp_path):
    out = O.run_arm("plain", "smoke", tmp_path, steps=3)
    rec = RunRecord.load(out["record"])
    stages = rec.results["tracer"]["stages"]
    assert "generate" in stages and "weight_sync" not in stages  # TRL's transformers.generate, nothing synced
    # the throughput by hand from the record's own step log: tokens after step 1 over the window's seconds
    rows = {r["step"]: r["num_tokens"] for r in rec.metrics() if "num_tokens" in r}
    tp = rec.results["throughput"]
    assert tp["tokens"] == rows[3] - rows[1] and tp["steps"] == 2
    assert out["tokens_per_s"] == pytest.approx(tp["tokens"] / tp["seconds"])
    assert rec.results["trainer_threads"] >= 1


def test_stage_table_reads_each_repeat(tmp_path):
    rows = []
    for i, (arm, gen) in enumerate([("a", 0.2), ("b", 0.1), ("a", 0.4), ("b", 0.3), ("a", 0.3)]):
        folder = tmp_path / f"r{i}"
        with RunRecord(folder, {}) as rec:
            rec.update(tracer={"stages": {"generate": {"mean_s": gen}}, "step_wall_s": {"median": 2 * gen}})
        rows.append({"name": arm, "report": {"record": str(folder)}})
    table = O.stage_table({"repeats": rows})
    assert table == {"a": {"generate": pytest.approx(0.3), "step": pytest.approx(0.6)},
                     "b": {"generate": pytest.approx(0.2), "step": pytest.approx(0.4)}}


def test_command_is_one_fresh_run():
    argv = O.command("sync_all", "cpu", "/x", steps=5)
    assert argv[1:] == ("-m", "rlm_lab.chapters.ch06_async.overhead", "--arm", "sync_all", "--size", "cpu", "--out", "/x",
                        "--steps", "5")
