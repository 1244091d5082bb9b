"""One path from a run's config to the predictor's input (rlm_lab.cost.run_input), checked against hand-built
workloads: the literal Workload each caller built before the path existed."""

import pytest

from rlm_lab.cost.run_input import from_run, run_algorithm
from rlm_lab.cost.workload import ResponseLengths, Workload
from rlm_lab.errors import RlmLabError
from rlm_lab.train.config import RunConfig


def test_a_grpo_run_is_its_batch_of_groups_at_the_length_cap():
    cfg = RunConfig(algo="grpo", batch_size=64, num_generations=8, max_completion_length=16, beta=0.04)
    alg, wl = from_run(cfg, 6)
    hand = Workload(prompts=8, group_size=8, prompt_len=6, response=ResponseLengths("fixed", length=16),
                    micro_batch=64, gen_batch=64, precision="fp32", padding="batch", engine="static",
                    logits="completion", weight_sync="none")
    assert wl == hand
    assert (alg.name, alg.reference, alg.critic, alg.reward_model) == ("grpo", True, False, False)


def test_the_mapping_and_the_object_give_one_workload_and_keep_trl_defaults_when_kept():
    cfg = RunConfig(algo="grpo", batch_size=16, num_generations=4, max_completion_length=8, cpu_bf16=True,
                    activation_checkpointing=True, num_iterations=2)
    a, b = from_run(cfg, 5), from_run(cfg.to_dict(), 5)
    assert a == b
    wl = a[1]
    assert (wl.prompts, wl.group_size, wl.autocast, wl.gradient_checkpointing, wl.epochs) == (4, 4, True, True, 2)


def test_ppo_holds_no_reward_model_and_beta_zero_drops_the_reference():
    alg = run_algorithm("ppo", 0.05)
    assert (alg.critic, alg.reference, alg.reward_model) == (True, True, False)
    assert "verifier" in alg.models
    assert not run_algorithm("ppo", 0.0).reference
    assert not run_algorithm("grpo", 0.0).reference


@pytest.mark.parametrize("bad, words", [
    ({"algo": "grpo", "batch_size": 10, "num_generations": 4, "max_completion_length": 8}, "not a multiple"),
    ({"algo": "grpo", "batch_size": 8, "max_completion_length": 8}, "num_generations"),
    ({"algo": "nope", "batch_size": 8, "num_generations": 4, "max_completion_length": 8}, "algorithm"),
])
def test_bad_configs_are_one_error(bad, words):
    with pytest.raises(RlmLabError, match=words):
        from_run(bad, 6)


def test_the_validation_suite_and_chapter_5_predict_through_the_path():
    """Both callers give the predictor what from_run gives for the run config they train."""
    from rlm_lab.chapters.ch05_placement import cases as c5, run as r5
    from rlm_lab.validate.suite import workloads
    from rlm_lab.validate.traced_case import PROMPT_LEN, predict_case, run_config

    case = workloads("smoke")[0]
    alg, wl = from_run(run_config(case, "smoke"), PROMPT_LEN)
    assert wl.prompts * wl.group_size == case.batch and wl.response.length == case.length
    from rlm_lab.cost import predict

    want = predict(case.model, alg, wl, "cpu-2core-epyc")
    got = predict_case(case, "cpu-2core-epyc")
    assert [(r.stage, r.seconds) for r in got.rows] == [(r.stage, r.seconds) for r in want.rows]
    cfg = c5.run_config("smoke")
    assert r5.workload(cfg) == from_run(cfg, r5.PROMPT_LEN)[1]


def test_a_shared_critic_run_is_priced_as_one():
    """PPOConfig's critic='shared' (in the run config's extra) drops the critic model and prices the value head."""
    from rlm_lab.cost.run_input import from_run

    base = {"algo": "ppo", "batch_size": 8, "num_generations": 4, "max_completion_length": 8, "beta": 0.04}
    sep, _ = from_run(base, 6)
    sh, _ = from_run(base | {"extra": {"critic": "shared"}}, 6)
    assert "critic" in sep.models and not sep.shared_critic
    assert "critic" not in sh.models and sh.shared_critic and "verifier" in sh.models
    assert from_run(base | {"extra": {"critic": "separate"}}, 6)[0] == sep
