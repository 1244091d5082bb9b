"""Hybrid sharding (HSDP: FSDP's HYBRID_SHARD, verl's fsdp_size): ZeRO shards inside groups, gathers inside a
group, one all-reduce across the replicas per optimizer step; against the collective costs computed directly."""

from pathlib import Path

import pytest

from rlm_lab.cost import load_profile, model_spec, predict
from rlm_lab.cost.comm import RankSpan, collective_time
from rlm_lab.cost.placement import predict_placement
from rlm_lab.cost.placement_spec import Cluster, Placement, PlacementError, ResourceSet
from rlm_lab.cost.workload import Workload, algorithm
from rlm_lab.stages import Stage as S

REPO = Path(__file__).resolve().parents[2]
QWEN_7B = str(REPO / "configs/models/qwen2.5-7b.config.json")
WL = dict(prompts=16, group_size=4, prompt_len=64, response=64, minibatches=2, micro_batch=2, devices=16,
          zero_stage=3, precision="bf16-mixed")


def _rows(pred, stage):
    return sum(r.seconds for r in pred.rows if r.stage == stage)


@pytest.fixture(scope="module")
def h100():
    return load_profile("h100-sxm")


def test_hsdp_gathers_inside_a_node_and_all_reduces_across(h100):
    spec = model_spec(QWEN_7B)
    wl = Workload(**WL)
    full = predict(spec, "dapo", wl, h100, layout=RankSpan(dp_nodes=2))
    hsdp = predict(spec, "dapo", wl, h100, layout=RankSpan(dp_nodes=2, shard=8, shard_nodes=1))
    p = spec.params * wl.dtype_bytes
    g_full = collective_time("all_gather", p, 16, h100, 2)
    g_hsdp = collective_time("all_gather", p, 8, h100, 1)
    assert g_hsdp < g_full
    calls = next(r.calls for r in full.rows if r.stage == S.OLD_LOGPROB)
    assert _rows(full, S.OLD_LOGPROB) - _rows(hsdp, S.OLD_LOGPROB) == pytest.approx(calls * (g_full - g_hsdp),
                                                                                    rel=1e-6)
    # the persistent training state: sharded 8 ways instead of 16
    assert hsdp.persistent.weights == pytest.approx(2 * full.persistent.weights, rel=1e-6)


def test_hsdp_gradient_sync_adds_the_replicas_all_reduce(h100):
    spec = model_spec(QWEN_7B)
    wl = Workload(**WL)
    from rlm_lab.cost.predict import _Assembler

    a = _Assembler(spec, algorithm("dapo"), wl, h100, spec, spec, layout=RankSpan(dp_nodes=2, shard=8, shard_nodes=1))
    grad = 4.0 * spec.params
    want = (2 * collective_time("all_gather", spec.params * wl.dtype_bytes, 8, h100, 1)
            + collective_time("reduce_scatter", grad, 8, h100, 1)
            + collective_time("all_reduce", grad / 8, 2, h100, 2))
    assert a._grad_comm(grad, spec) == pytest.approx(want, rel=1e-12)


def test_a_set_with_shard(h100):
    with pytest.raises(PlacementError, match="shard=3"):
        ResourceSet("t", 16, "gpu", dp=16, zero=3, shard=3)
    sets = (ResourceSet("rollout", 8, "gpu", dp=8), ResourceSet("train", 16, "gpu", dp=16, zero=3, shard=8))
    p = Placement("d", sets, {"actor": "train", "rollout": "rollout"}, sync="collective")
    assert "shard8" in p.describe()
    c = Cluster(24, "gpu", 80, devices_per_node=8)   # the trainer: devices 8-23, two nodes
    wl = {k: v for k, v in WL.items() if k not in ("devices", "zero_stage")}
    with_shard = predict_placement(p, QWEN_7B, "dapo", wl, h100, c)
    without = predict_placement(Placement("d", (sets[0], ResourceSet("train", 16, "gpu", dp=16, zero=3)),
                                          p.roles, sync="collective"), QWEN_7B, "dapo", wl, h100, c)
    t1 = next(s for s in with_shard.sets if s.name == "train")
    t0 = next(s for s in without.sets if s.name == "train")
    assert t1.memory.weights == pytest.approx(2 * t0.memory.weights, rel=0.01)
    # the forward's gathers stay inside one node; each rank steps twice the optimizer's share (1/8, not 1/16)
    assert t1.stages[S.OLD_LOGPROB] < t0.stages[S.OLD_LOGPROB]
    assert t1.stages[S.OPTIMIZER] > t0.stages[S.OPTIMIZER]
