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
    # fixed lengths (the default): TRL's own log says every completion was max_completion_length tokens long
    n = O.arm_config("smoke", 3).max_completion_length
    logged = [r for r in rec.metrics() if "completions/mean_length" in r]
    assert logged and all(r["completions/mean_length"] == r["completions/min_length"] == n for r in logged)
    assert rec.results["trainer_threads"] >= 1


def test_stage_table_reads_each_repeat(tmp_path):
    rows = []
    for i, (arm, gen) in enumerate([("a", 0.2), ("b", 0.1), ("a", 0.4), ("b", 0.3), ("a", 0.3)]):
        folder = tmp_path / f"r{i}"
        with RunRecord(folder, {}) as rec:
            rec.update(tracer={"stages": {"generate": {"mean_s": gen}}, "step_wall_s": {"median": 2 * gen}})
        rows.append({"name": arm, "report": {"record": str(folder)}})
    table = O.stage_table({"repeats": rows}, tmp_path)
    assert table == {"a": {"generate": pytest.approx(0.3), "step": pytest.approx(0.6)},
                     "b": {"generate": pytest.approx(0.2), "step": pytest.approx(0.4)}}


def test_command_is_one_fresh_run():
    argv = O.command("sync_all", "cpu", "/x", steps=5)
    assert argv[1:] == ("-m", "rlm_lab.cli", "chapter", "6", "overhead", "--arm", "sync_all", "--size", "cpu", "--out", "/x",
                        "--lengths", "fixed", "--steps", "5")
    assert O.command("plain", "cpu", "/x", lengths="sampled")[-2:] == ("--lengths", "sampled")


def _protocol_record(root, arm, arm_tps, plain_tps, stamp="20260101T000000Z", lengths="sampled"):
    with RunRecord(O.comparison_folder(root, arm, "plain", lengths) / stamp, {}) as rec:
        rec.update(summary={"values": {arm: arm_tps, "plain": plain_tps}}, window="w1")


def test_section_words_follow_the_interval_of_the_paired_ratios(tmp_path):
    # colocated: every pair 0.95 +- 0.01 -> within 10 % (met) and slower; sync: about 0.6 -> not met;
    # sync_all: one pair -> no interval -> undecided both ways
    _protocol_record(tmp_path, "colocated", [95, 94, 96, 95, 95.5, 94.5], [100] * 6)
    _protocol_record(tmp_path, "sync", [60, 62, 58, 61, 59, 60], [100] * 6)
    _protocol_record(tmp_path, "sync_all", [120], [100])
    text, v = O.section(tmp_path)
    assert (v["ch06_ovh_colocated_word"], v["ch06_ovh_colocated_goal"]) == ("slower", "met")
    assert (v["ch06_ovh_sync_word"], v["ch06_ovh_sync_goal"]) == ("slower", "not met")
    assert (v["ch06_ovh_sync_all_word"], v["ch06_ovh_sync_all_goal"]) == ("undecided", "undecided")
    assert v["ch06_ovh_sync"].startswith("0.60 [")
    assert "sync_lean" not in text  # no record, no row


def test_section_reads_the_newest_record_and_says_when_there_is_none(tmp_path):
    _protocol_record(tmp_path, "colocated", [50] * 3, [100] * 3, "20260101T000000Z")
    _protocol_record(tmp_path, "colocated", [100, 101, 99], [100] * 3, "20260102T000000Z")
    assert O.section(tmp_path)[1]["ch06_ovh_colocated"].startswith("1.00")
    assert O.section(tmp_path / "empty")[0].startswith("no overhead records")


def test_pairs_go_with_a_comparison_and_are_checked_before_any_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        O.main(["--arm", "sync_all", "--pairs", "12", "--size", "smoke"])  # one run has no pairs
    assert e.value.code == 2 and "--pairs goes with --against" in capsys.readouterr().err
    from rlm_lab.errors import RlmLabError

    with pytest.raises(RlmLabError, match="1 repeats"):
        O.compare_arms("sync_all", "smoke", tmp_path, "plain", pairs=1)
    assert not any(tmp_path.rglob("*.json"))  # refused before any run or record


def test_fixed_lengths_and_sampled_ones_are_separate_rows_and_keys(tmp_path):
    _protocol_record(tmp_path, "sync_all", [80, 81, 79, 80], [100] * 4)                      # sampled: 0.80
    _protocol_record(tmp_path, "sync_all", [96, 97, 95, 96], [100] * 4, lengths="fixed")     # same work: 0.96
    text, v = O.section(tmp_path)
    assert v["ch06_ovh_sync_all"].startswith("0.80") and v["ch06_ovh_sync_all_goal"] == "not met"
    assert v["ch06_ovh_sync_all_fixed"].startswith("0.96") and v["ch06_ovh_sync_all_fixed_goal"] == "met"
    assert text.count("sync_all") == 2 and "fixed" in text and "sampled" in text
    assert O.comparison_folder(tmp_path, "sync_all").name == "overhead_sync_all_vs_plain_fixed_lengths"


def test_fixed_lengths_reach_trl_and_the_rollout_engine_alike():
    """The fixed-length config's generation_kwargs are what TRL builds its GenerationConfig from (the plain arm) and
    what the rollout workers' engine is configured with (every Ray arm): on a tiny random model every completion
    comes out exactly max_completion_length long, where the sampled config's do not all reach it."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from rlm_lab.placement.rollout import RolloutEngine

    fixed, sampled = O.arm_config("smoke", 3, "fixed"), O.arm_config("smoke", 3, "sampled")
    n = fixed.max_completion_length
    assert fixed.extra["generation_kwargs"] == {"min_new_tokens": n} and "generation_kwargs" not in sampled.extra
    assert fixed.replace(extra=sampled.extra) == sampled  # nothing else differs
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    eos = 2  # a 16-token vocabulary: a sampled completion hits EOS early
    lens = {}
    for name, cfg in (("fixed", fixed), ("sampled", sampled)):
        gen = GenerationConfig(max_new_tokens=n, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                               **cfg.extra.get("generation_kwargs", {})).to_dict()
        out = RolloutEngine(model, gen, pad_token_id=0, eos_token_ids=[eos]).generate([[1, 3, 4]] * 16, seed=1)
        lens[name] = [len(c) for c in out["completion_ids"]]
    assert lens["fixed"] == [n] * 16
    assert min(lens["sampled"]) < n
    with pytest.raises(Exception, match="lengths"):
        O.arm_config("smoke", 3, "short")


def test_a_repeat_path_that_leaves_its_folder_is_refused(tmp_path):
    inside, outside = tmp_path / "root" / "runs" / "r0", tmp_path / "elsewhere" / "r1"
    for folder in (inside, outside):
        with RunRecord(folder, {}) as rec:
            rec.update(tracer={"stages": {}})
    ok = {"repeats": [{"name": "a", "report": {"record": "runs/r0"}}]}          # relative: from base
    assert [n for n, _ in O.repeat_records(ok, tmp_path / "root", base=tmp_path / "root")] == ["a"]
    from rlm_lab.errors import RlmLabError

    for bad in ("../elsewhere/r1", str(outside)):
        with pytest.raises(RlmLabError, match="leaves"):
            list(O.repeat_records({"repeats": [{"name": "b", "report": {"record": bad}}]}, tmp_path / "root",
                                  base=tmp_path / "root"))
