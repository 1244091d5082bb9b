"""Ulysses sequence parallelism in a resource set: activations kept per rank divided by sp, the all-to-alls around
attention against the collective costs computed by hand, the layout rules."""

from pathlib import Path

import pytest

from rlm_lab.cost import load_profile, model_spec
from rlm_lab.cost.comm import RankSpan, collective_time
from rlm_lab.cost.placement import predict_placement, ulysses_comm_time
from rlm_lab.cost.placement_spec import Cluster, Placement, PlacementError, ResourceSet
from rlm_lab.errors import RlmLabError
from rlm_lab.stages import Stage as S

REPO = Path(__file__).resolve().parents[2]
QWEN_7B = str(REPO / "configs/models/qwen2.5-7b.config.json")
WL = dict(prompts=16, group_size=4, prompt_len=256, response=768, minibatches=2, micro_batch=2,
          precision="bf16-mixed", gradient_checkpointing=False)


def test_all_to_all_volume_by_hand():
    prof = load_profile("h100-sxm")
    spec = model_spec(QWEN_7B)
    lay = RankSpan(sp=4, sp_nodes=1)
    tokens = 8192
    local = tokens / 4
    qkv = local * (spec.heads * spec.head_dim + 2 * spec.kv_heads * spec.head_dim) * 2
    out = local * spec.heads * spec.head_dim * 2
    want = 4 * spec.layers * (collective_time("all_to_all", qkv, 4, prof) + collective_time("all_to_all", out, 4, prof))
    assert ulysses_comm_time(spec, tokens, prof, lay) == pytest.approx(want, rel=1e-12)


def _train(sp):
    prof = load_profile("h100-sxm")
    sets = (ResourceSet("rollout", 4, "gpu", dp=4), ResourceSet("train", 4, "gpu", dp=4, zero=3, sp=sp))
    p = Placement("d", sets, {"actor": "train", "rollout": "rollout"}, sync="collective")
    pp = predict_placement(p, QWEN_7B, "dapo", WL, prof, Cluster(8, "gpu", 80))
    return next(s for s in pp.sets if s.name == "train")


def test_sp_divides_activations_and_adds_the_all_to_alls():
    plain, sp4 = _train(1), _train(4)
    assert sp4.memory.activations < 0.5 * plain.memory.activations
    assert sp4.stages[S.ACTOR_BACKWARD] > plain.stages[S.ACTOR_BACKWARD]        # same compute, plus all-to-alls
    assert sp4.stages[S.OPTIMIZER] == pytest.approx(plain.stages[S.OPTIMIZER])  # ZeRO still over all 4 ranks


def test_layout_rules():
    with pytest.raises(PlacementError, match="sp=3"):
        ResourceSet("t", 4, "gpu", dp=4, sp=3)
    prof = load_profile("h100-sxm")
    sets = (ResourceSet("rollout", 8, "gpu", dp=8), ResourceSet("train", 8, "gpu", dp=8, zero=3, sp=8))
    p = Placement("d", sets, {"actor": "train", "rollout": "rollout"}, sync="collective")
    assert "sp8" in p.describe()
    with pytest.raises(RlmLabError, match="attention heads"):      # Qwen2.5-7B has 28 heads
        predict_placement(p, QWEN_7B, "dapo", WL, prof, Cluster(16, "gpu", 80))
