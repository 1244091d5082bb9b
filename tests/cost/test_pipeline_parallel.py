"""Pipeline parallelism in placements (issue 39): the 1F1B bubble and in-flight activations against the schedule's
hand counts, a stage's share of the model, the layout rules, and a set priced with pp against one priced without."""

from pathlib import Path

import pytest

from rlm_lab.cost import load_profile, model_spec
from rlm_lab.cost.placement import (pipeline_bubble, pipeline_in_flight, pipeline_micro_batches, pp_shard,
                                    predict_placement)
from rlm_lab.cost.placement_spec import Cluster, Placement, PlacementError, ResourceSet, get_placement, layout
from rlm_lab.cost.workload import Workload
from rlm_lab.errors import RlmLabError
from rlm_lab.stages import Stage as S

REPO = Path(__file__).resolve().parents[2]
LLAMA_70B = str(REPO / "configs/models/llama3.1-70b.config.json")
QWEN_7B = str(REPO / "configs/models/qwen2.5-7b.config.json")


def _schedule_time(m: int, p: int) -> int:
    """Slots of a 1F1B schedule of m micro-batches through p stages, one forward and one backward slot each,
    counted by simulating it: stage s can run micro-batch i's forward after stage s-1 did, its backward after
    stage s+1's backward of i (and each stage does one thing at a time, forwards before backwards of the same i)."""
    fwd = [[0] * m for _ in range(p)]
    bwd = [[0] * m for _ in range(p)]
    free = [0] * p
    order = []   # 1F1B per stage: p - s warm-up forwards, then alternate, then the cool-down backwards
    for s in range(p):
        warm = min(p - s, m)
        seq = [("f", i) for i in range(warm)]
        f, b = warm, 0
        while b < m:
            seq.append(("b", b))
            b += 1
            if f < m:
                seq.append(("f", f))
                f += 1
        order.append(seq)
    pos = [0] * p
    done = 0
    while done < p:
        progressed = False
        for s in range(p):
            while pos[s] < len(order[s]):
                kind, i = order[s][pos[s]]
                if kind == "f":
                    ready = fwd[s - 1][i] if s else 0
                    if s and ready == 0:
                        break
                    fwd[s][i] = max(free[s], ready) + 1
                    free[s] = fwd[s][i]
                else:
                    ready = bwd[s + 1][i] if s < p - 1 else fwd[s][i]
                    if ready == 0:
                        break
                    bwd[s][i] = max(free[s], ready) + 1
                    free[s] = bwd[s][i]
                pos[s] += 1
                progressed = True
                if pos[s] == len(order[s]):
                    done += 1
        assert progressed
    return max(free)


@pytest.mark.parametrize("m,p", [(1, 1), (4, 1), (4, 2), (8, 4), (3, 4), (16, 8)])
def test_bubble_matches_a_simulated_1f1b_schedule(m, p):
    assert pipeline_bubble(m, p) == pytest.approx(_schedule_time(m, p) / (2 * m))


def test_bubble_fraction_and_in_flight():
    assert 1 - 1 / pipeline_bubble(8, 4) == pytest.approx(3 / 11)        # (p - 1) / (m + p - 1)
    assert pipeline_in_flight(8, 4) == 4 and pipeline_in_flight(2, 4) == 2 and pipeline_in_flight(5, 1) == 1
    with pytest.raises(RlmLabError):
        pipeline_bubble(0, 2)


def test_micro_batches_per_pipeline():
    wl = Workload(prompts=64, group_size=32, prompt_len=128, response=256, minibatches=4, micro_batch=7)
    assert pipeline_micro_batches(wl, 4, S.ACTOR_BACKWARD) == -(-512 // 28)       # a mini-batch over 4 pipelines
    assert pipeline_micro_batches(wl, 4, S.OLD_LOGPROB) == -(-2048 // 28)         # the whole batch


def test_a_stage_holds_a_quarter_of_the_layers_and_the_embeddings():
    spec = model_spec(LLAMA_70B)
    st = pp_shard(spec, 4)
    assert st.layers == 20
    emb = spec.vocab * spec.hidden
    per_layer = (spec.params - 2 * emb - spec.hidden) / spec.layers
    assert st.params == pytest.approx(20 * per_layer + 2 * emb + spec.hidden, rel=1e-9)
    with pytest.raises(RlmLabError, match="layers"):
        pp_shard(spec, 128)


def test_layout_rules():
    s = layout("t", 64, "gpu", tp=4, pp=4, zero=1)
    assert (s.dp, s.tp, s.pp) == (4, 4, 4)
    with pytest.raises(PlacementError, match="pp=4"):
        ResourceSet("t", 64, "gpu", dp=8, tp=4, pp=4)
    with pytest.raises(PlacementError, match="does not divide"):
        layout("t", 12, "gpu", tp=4, pp=2)
    c = Cluster(16, "gpu", 80)
    bad = Placement("x", (ResourceSet("all", 16, "gpu", dp=4, tp=2, pp=2),),
                    {"actor": "all", "rollout": "all"})
    with pytest.raises(PlacementError, match="pipeline-parallel generation"):
        bad.validate("dapo", c)
    ok = get_placement("colocated", c, "grpo", tp=2, pp=2, zero=1)
    assert ok.reshard and ok.sets[0].pp == 2 and "pp2" in ok.describe()


WL = dict(prompts=8, group_size=8, prompt_len=128, response=256, minibatches=2, micro_batch=2,
          precision="bf16-mixed", gradient_checkpointing=False)


def test_pp_prices_a_stage_share_with_the_bubble_and_holds_more_activations():
    """A trainer on 4 devices as pp=4 (dp 1) against the same trainer on 1 device: the stage runs a quarter of the
    layers for every micro-batch, stretched by the bubble; it holds min(p, m) micro-batches of its layers."""
    prof = load_profile("h100-sxm")
    c = Cluster(8, "gpu", 80)
    wl = Workload(**WL)

    def train_set(devices, pp):
        sets = (ResourceSet("rollout", 4, "gpu", dp=4), ResourceSet("train", devices, "gpu", dp=1, pp=pp))
        p = Placement("d", sets, {"actor": "train", "rollout": "rollout"}, sync="collective")
        return predict_placement(p, QWEN_7B, "dapo", wl, prof, Cluster(4 + devices, "gpu", 80))

    one, four = train_set(1, 1), train_set(4, 4)
    st1 = next(s for s in one.sets if s.name == "train")
    st4 = next(s for s in four.sets if s.name == "train")
    m = pipeline_micro_batches(wl, 1, S.ACTOR_BACKWARD)
    spec = model_spec(QWEN_7B)
    layer_share = pp_shard(spec, 4).params / spec.params          # the stage's share of the compute, embeddings too
    want = st1.stages[S.ACTOR_BACKWARD] * layer_share * pipeline_bubble(m, 4)
    assert st4.stages[S.ACTOR_BACKWARD] == pytest.approx(want, rel=0.25)
    assert st4.stages[S.ACTOR_BACKWARD] < st1.stages[S.ACTOR_BACKWARD]
    assert st4.memory.weights < st1.memory.weights / 2
    # 1F1B holds min(p, m) micro-batches of its quarter of the layers: about one micro-batch of all of them
    assert st4.memory.activations > 0.6 * st1.memory.activations
    assert c.devices == 8


def test_advise_tries_pp_hsdp_and_ulysses_only_when_asked():
    from rlm_lab.cost.advise import advise

    wl = dict(prompts=16, group_size=4, prompt_len=128, response=128, precision="bf16-mixed")
    c = Cluster(16, "gpu", 80, devices_per_node=8)
    plain = advise(QWEN_7B, "dapo", wl, c, "h100-sxm", modes=("sync",), max_tp=2)
    wide = advise(QWEN_7B, "dapo", wl, c, "h100-sxm", modes=("sync",), max_tp=2, max_pp=2, hsdp=True, max_sp=2)
    seen = lambda adv, word: any(word in p.placement.describe() for p in adv.ranked)   # noqa: E731
    assert not any(seen(plain, w) for w in (" pp2", " shard", " sp2"))
    assert wide.ranked[0].step_s <= plain.ranked[0].step_s * (1 + 1e-9)      # more layouts: never a slower best
    assert seen(wide, " pp2") or seen(wide, " shard") or seen(wide, " sp2")
