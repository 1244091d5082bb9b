"""Shared actor-critic (the survey arXiv 2608.27046 Sec. 4.1, App. B.4.3): a value head on the actor's backbone, one
backward through one backbone. Work counted by hand on the micro model; memory against the separate critic's state;
the survey's Sec. 4.7 claim that it reduces work but not depth; predict, placement and advise support."""

import pytest

from rlm_lab.cost import memory as M
from rlm_lab.cost import model_spec, predict, scalar_head
from rlm_lab.cost.advise import advise
from rlm_lab.cost.placement import predict_placement
from rlm_lab.cost.placement_spec import Cluster, colocated, roles_for
from rlm_lab.cost.workload import algorithm, with_critic
from rlm_lab.errors import RlmLabError
from rlm_lab.stages import Stage

S = Stage
WL = dict(prompts=4, group_size=2, prompt_len=8, response=8)     # n = 8 sequences of 16 tokens
H, N = 128, 341_632                                              # micro's hidden size and parameters


def _rows(pred):
    return {r.stage: r for r in pred.rows}


def test_roles():
    alg, crit = with_critic(algorithm("ppo"), "shared")
    assert alg.shared_critic and "critic" not in alg.models and crit is None
    assert "critic" not in roles_for(alg) and "critic" in roles_for("ppo")
    assert with_critic(alg, "shared")[0] is alg                  # idempotent
    with pytest.raises(RlmLabError, match="no critic to share"):
        predict("micro", "grpo", WL, critic="shared")


def test_work_by_hand():
    sep, sh = _rows(predict("micro", "ppo", WL)), _rows(predict("micro", "ppo", WL, critic="shared"))
    assert S.CRITIC_UPDATE in sep and S.CRITIC_UPDATE not in sh
    head = 8 * 2 * H * 16                      # the value head h -> 1 on 8 x 16 positions: 2 h FLOPs per token
    assert head == 32_768
    assert sh[S.VALUES].flops == head and sh[S.VALUES].model == "actor"
    assert sh[S.ACTOR_FORWARD].flops == sep[S.ACTOR_FORWARD].flops + head
    assert sh[S.ACTOR_BACKWARD].flops == sep[S.ACTOR_BACKWARD].flops + 2 * head
    assert sh[S.OPTIMIZER].flops == 12 * (N + H + 1)


def test_reduces_work_not_depth():
    """The survey's Sec. 4.7: inter-model schemes shorten depth, not work; shared actor-critic is the exception."""
    sep, sh = predict("micro", "ppo", WL), predict("micro", "ppo", WL, critic="shared")
    saved = sep.total_flops - sh.total_flops
    critic = _rows(sep)
    assert saved == pytest.approx(critic[S.VALUES].flops + critic[S.CRITIC_UPDATE].flops - 32_768 * 4 - 12 * (H + 1))
    assert sh.work < sep.work
    assert sh.depth == pytest.approx(sep.depth, rel=1e-3)        # the critic ran beside the actor: off the path


def test_memory_drops_the_critic_state():
    sep, sh = predict("micro", "ppo", WL), predict("micro", "ppo", WL, critic="shared")
    critic = M.train_state_bytes(scalar_head(model_spec("micro")), "fp32", 0, 1)
    grads = scalar_head(model_spec("micro")).params * 4         # gradients are counted while training only
    head = (H + 1) * (4 + 8) + 2 * 4      # the head's fp32 weights and AdamW moments, a step scalar per tensor
    assert (sep.persistent.total - sh.persistent.total) == critic - grads - head
    # and its gradients join the actor's at the peak (the counted run's actor_gradients hold them)
    assert sh.memory.gradients == model_spec("micro").params * 4 + (H + 1) * 4


def test_without_old_logprobs_the_values_need_a_forward():
    sh = _rows(predict("micro", "ppo", WL | {"recompute_old": False}, critic="shared"))
    assert S.OLD_LOGPROB not in sh
    from rlm_lab.cost import flops as F
    spec = scalar_head(model_spec("micro"))
    assert sh[S.VALUES].flops == 8 * F.forward_flops(spec, 16, 16)


def test_placement_and_advise():
    cl = Cluster(2, "cpu")
    alg = with_critic(algorithm("ppo"), "shared")[0]
    pp = predict_placement(colocated(cl, alg), "micro", "ppo", WL, "cpu-2core-epyc", cl, critic="shared")
    (only,) = pp.sets
    assert "critic" not in only.roles and S.VALUES in only.stages and S.CRITIC_UPDATE not in only.stages
    adv = advise("micro", "ppo", WL, 2, "cpu-2core-epyc", critic="shared")
    assert all("critic" not in p.placement.roles for p in adv.top(5))


def test_cli(capsys):
    from rlm_lab.cli import main

    assert main(["predict", "--algorithm", "ppo", "--critic", "shared", "--model", "micro", "--prompts", "8", "--hardware",
                 "h100-sxm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(x.startswith("values") and "actor" in x for x in lines)
    assert not any(x.startswith("critic_update") for x in lines)


def test_the_shared_config_predicts(capsys):
    """configs/predict/ppo-micro-cpu-shared.yaml: a shared actor-critic config through ``rlm-lab predict``: no
    critic row, a shorter iteration than the same config with a separate critic."""
    import json
    from pathlib import Path

    from rlm_lab.cli import main

    configs = Path(__file__).resolve().parents[2] / "configs" / "predict"
    assert main(["predict", str(configs / "ppo-micro-cpu.yaml"), "--json"]) == 0
    sep = capsys.readouterr().out
    assert main(["predict", str(configs / "ppo-micro-cpu-shared.yaml"), "--json"]) == 0
    sh = capsys.readouterr().out
    assert "critic_update" in sep and "critic_update" not in sh
    sep, sh = json.loads(sep), json.loads(sh)
    assert sh["total_s"] < sep["total_s"] and sh["memory"]["total"] < sep["memory"]["total"]
    assert sh["depth_s"] == pytest.approx(sep["depth_s"], rel=1e-3)      # the survey's Sec. 4.7: less work, same depth
