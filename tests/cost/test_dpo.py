"""DPO, the survey's third family (arXiv 2608.27046 Sec. 2.4, Table 4, Algorithm 4): roles, work counted by hand
(two sequences per preference pair), depth without a generation chain, memory with and without a resident
reference, and the inputs it refuses."""

import pytest

from rlm_lab.cost import model_spec, predict
from rlm_lab.cost.advise import advise
from rlm_lab.cost.placement_spec import roles_for
from rlm_lab.cost.workload import Workload, algorithm, offline_group_size
from rlm_lab.errors import RlmLabError
from rlm_lab.stages import Stage

S = Stage
# micro: V = 52, h = 128, L = 2, 4 heads of 32 (MHA), I = 256 (SwiGLU), untied head: 341,632 parameters
PAIRS, P, R = 4, 8, 8


def _wl(**over):
    return Workload(**(dict(prompts=PAIRS, group_size=2, prompt_len=P, response=R) | over))


def _forward_by_hand(seq: int, logit_positions: int) -> int:
    """One forward of the micro model over ``seq`` tokens, counted from its shapes (not from flops.py):
    q, k, v, o 4 h^2 and the SwiGLU MLP 3 h I per layer, 2 FLOPs per weight per token; the LM head on the kept
    logit positions; QK^T and AV over the full score matrix, 4 L (a d_h) seq^2."""
    h, L, I, V, d_attn = 128, 2, 256, 52, 128
    return 2 * L * (4 * h * h + 3 * h * I) * seq + 2 * V * h * logit_positions + 4 * L * d_attn * seq * seq


def test_roles_and_algorithm():
    a = algorithm("dpo")
    assert a.models == ("actor", "reference") and a.offline and not a.critic and not a.reward_model
    assert roles_for("dpo") == ("actor", "reference")       # no rollout role: nothing generates
    assert "rollout" in roles_for("grpo")


def test_stages_and_work_by_hand():
    pred = predict("micro", "dpo", _wl())
    stages = [r.stage for r in pred.rows]
    assert stages == [S.REF_LOGPROB, S.ACTOR_FORWARD, S.ACTOR_BACKWARD, S.OPTIMIZER]
    seq, kept = P + R, R + 1                                   # TRL keeps the completion's logits (+1)
    f = _forward_by_hand(seq, kept)
    assert f == 10_867_712
    n = 2 * PAIRS                                              # chosen and rejected of every pair (Algorithm 4)
    by = {r.stage: r.flops for r in pred.rows}
    assert by[S.REF_LOGPROB] == n * f                          # C_f(ref)
    assert by[S.ACTOR_FORWARD] == n * f                        # C_f(pi)
    assert by[S.ACTOR_BACKWARD] == 2 * n * f                   # C_b(pi) = 2 C_f(pi)
    # the survey's printed W_DPO counts B_pairs sequences; Algorithm 4 scores 2 B_pairs: our work is twice it
    printed = PAIRS * (f + f + 2 * f)
    assert by[S.REF_LOGPROB] + by[S.ACTOR_FORWARD] + by[S.ACTOR_BACKWARD] == 2 * printed
    assert by[S.OPTIMIZER] == 12 * 341_632


def test_depth_has_no_generation_chain():
    dpo = predict("micro", "dpo", _wl())
    assert dpo.critical_path() == ["ref_logprob", "actor_forward", "actor_backward", "optimizer"]
    assert dpo.depth == pytest.approx(sum(r.depth_s for r in dpo.rows))
    # GRPO on the same sequences adds the R-step decode chain to its depth
    grpo = predict("micro", "grpo", _wl(group_size=2))
    decode = next(r for r in grpo.rows if r.stage == S.DECODE)
    assert decode.calls >= R - 1 and grpo.depth > dpo.depth


def test_precomputed_reference_drops_pass_and_weights():
    live = predict("micro", "dpo", _wl())
    pre = predict("micro", "dpo", _wl(precompute_ref_log_probs=True))
    assert [r.stage for r in pre.rows] == [S.ACTOR_FORWARD, S.ACTOR_BACKWARD, S.OPTIMIZER]
    assert live.persistent.weights - pre.persistent.weights == 341_632 * 4   # fp32 reference weights
    assert pre.total_time < live.total_time
    # LoRA: the reference is the actor with its adapter off, so no reference weights either way
    lo = predict("micro", "dpo", _wl(), lora=4)
    assert lo.persistent.weights < live.persistent.weights


@pytest.mark.parametrize("over, field", [
    (dict(group_size=4), "workload.group_size=4"),
    (dict(weight_sync="colocated"), "workload.weight_sync"),
    (dict(dynamic_sampling_p=0.5), "workload.dynamic_sampling_p"),
])
def test_refused_workloads(over, field):
    with pytest.raises(RlmLabError, match=field):
        predict("micro", "dpo", _wl(**over))


def test_refused_elsewhere():
    with pytest.raises(RlmLabError, match="beta = 0"):
        algorithm("dpo", beta=0)
    with pytest.raises(RlmLabError, match="precompute_ref_log_probs"):
        predict("micro", "grpo", _wl(precompute_ref_log_probs=True))
    with pytest.raises(RlmLabError, match="generates nothing"):
        advise("micro", "dpo", _wl(), 2, "cpu-2core-epyc", modes=("one_step_off",))


def test_cli_default_pair():
    assert offline_group_size("dpo", {})["group_size"] == 2
    assert offline_group_size("dpo", {"group_size": 4})["group_size"] == 4      # given: kept (and then refused)
    assert offline_group_size("grpo", {}) == {}


def test_advise_places_actor_and_reference():
    adv = advise("micro", "dpo", _wl(), 2, "cpu-2core-epyc")
    best = adv.top(1)[0]
    assert set(best.placement.roles) == {"actor", "reference"}
    assert best.sync_bytes == 0 and best.placement.rollout_separate is False


def test_cli_predict_dpo(capsys):
    from rlm_lab.cli import main

    assert main(["predict", "--algorithm", "dpo", "--model", "micro", "--hardware", "h100-sxm", "--prompts", "8"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("prediction: dpo on micro") and "n = 8x2 sequences" in lines[0]
    assert any(x.startswith("ref_logprob") for x in lines)
    assert not any(x.startswith(("prefill", "decode", "reward", "advantage", "weight_sync")) for x in lines)


def test_qwen_scale_pairs():
    """A 1.5B model, 1024 pairs of 512 + 2048 tokens (the crosswalk's configuration): the two-sequence work
    in FLOPs is 2 x pairs x 4 C_f(m) with the book's C_f."""
    from rlm_lab.cost import flops as F

    spec = model_spec("configs/models/qwen2.5-1.5b.config.json")
    wl = Workload(prompts=1024, group_size=2, prompt_len=512, response=2048, precision="bf16-mixed",
                  micro_batch=4, gradient_checkpointing=True, logits="all")
    pred = predict(spec, "dpo", wl, "h100-sxm")
    seq = 512 + 2048
    want = 2 * 1024 * 4 * F.forward_flops(spec, seq)
    got = sum(r.flops for r in pred.rows if r.stage != S.OPTIMIZER)
    assert got == want
