"""Memory as the frameworks run it (issue 21 part D), each mechanism against a hand-derived case: chunked log-probs,
what offload takes off the device and what the host link costs, the colocated engine's pool under a sleeping
trainer, the stated default response lengths, checkpoint-engine's host update, and the three framework examples
that run as published (verl's 7B GSM8K, OpenRLHF's 8B PPO) fitting while TRL's 7B DDP example does not, with its
number."""

import pytest

from rlm_lab.cost import load_profile, model_spec
from rlm_lab.cost import memory as M
from rlm_lab.cost.offload import check_offload, resident, transfer_seconds
from rlm_lab.cost.placement import predict_placement
from rlm_lab.cost.placement_spec import Cluster, get_placement, placement_from_dict
from rlm_lab.cost.workload import ResponseLengths, Workload, assumed_lengths, assumed_lengths_note
from rlm_lab.errors import RlmLabError
from rlm_lab.stages import Stage as S

QWEN_7B = "configs/models/qwen2.5-7b.config.json"
GIB = 2 ** 30


def test_chunked_logprobs_keep_the_logits_in_bf16_and_one_chunk_in_fp32():
    spec = model_spec("micro")
    V = spec.head_width
    # naive: fp32 logits and, with autograd, their fp32 log-softmax: 1000 x V x 4 x 2
    assert M.logprob_bytes(spec, 1000, 2, None, grad=True) == 1000 * V * 8
    assert M.logprob_bytes(spec, 1000, 2, None, grad=False) == 1000 * V * 4
    # chunked: bf16 logits and their gradient (1000 x V x 2 x 2) + 100 positions' fp32 log-softmax (100 x V x 4)
    assert M.logprob_bytes(spec, 1000, 2, 100, grad=True) == 1000 * V * 4 + 100 * V * 4
    assert M.logprob_bytes(spec, 1000, 2, 100, grad=False) == 1000 * V * 2 + 100 * V * 4
    # a chunk longer than the positions holds only the positions
    assert M.logprob_bytes(spec, 50, 2, 100, grad=False) == 50 * V * 2 + 50 * V * 4
    # a value head's "logits" are one number per position, not a vocabulary's
    from rlm_lab.cost.spec import scalar_head

    assert M.logits_bytes(scalar_head(spec), 1000) == 1000 * 4


STATE = M.MemoryBreakdown(weights=100, optimizer=600)


@pytest.mark.parametrize("kinds, role, stage, expected", [
    ((), "actor", S.DECODE, (100, 600)),
    (("optimizer",), "actor", S.ACTOR_BACKWARD, (100, 0)),      # back only for the update
    (("optimizer",), "actor", S.OPTIMIZER, (100, 600)),
    (("optimizer",), "critic", S.CRITIC_UPDATE, (100, 600)),
    (("params",), "actor", S.DECODE, (0, 600)),                 # loaded before its own stages only
    (("params",), "actor", S.OLD_LOGPROB, (100, 600)),
    (("params",), "critic", S.ACTOR_FORWARD, (0, 600)),
    (("sleep",), "actor", S.PREFILL, (0, 0)),                   # asleep while the engine generates
    (("sleep",), "actor", S.ACTOR_FORWARD, (100, 600)),
    (("host_optimizer",), "actor", S.OPTIMIZER, (100, 0)),      # ZeRO-Offload: the state never comes back
    (("frozen",), "reference", S.REF_LOGPROB, (25, 600)),       # one layer of 4 streamed at a time
    (("frozen",), "reference", S.ACTOR_FORWARD, (0, 600)),
    (("frozen",), "actor", S.ACTOR_FORWARD, (100, 600)),        # frozen offload leaves the trained models alone
    (("swap",), "reference", S.REF_LOGPROB, (100, 600)),        # swapped in whole for its own pass
    (("swap",), "reference", S.ACTOR_FORWARD, (0, 600)),        # in host memory otherwise
    (("swap",), "reference", S.DECODE, (0, 600)),
    (("swap",), "actor", S.REF_LOGPROB, (0, 600)),              # the policy's weights wait on the host meanwhile
    (("swap",), "actor", S.ACTOR_FORWARD, (100, 600)),
])
def test_what_is_on_the_device_in_each_stage(kinds, role, stage, expected):
    got = resident(STATE, role, stage, check_offload(kinds), layers=4)
    assert (got.weights, got.optimizer) == expected


def test_host_link_seconds_by_hand():
    """A 2 GB parameter shard, 6 GB of optimizer state, 1 GB of gradients, 25 GB/s: params offload pays 2 x 2 / 25 =
    0.16 s at each phase the actor runs; optimizer offload 2 x 6 / 25 = 0.48 s at the update; ZeRO-Offload 4 steps x
    2 x 1 / 25 = 0.32 s; a frozen model streamed in 3 forward calls 3 x 2 / 25 = 0.24 s; sleep 2 x 8 / 25 = 0.64 s at
    generation, and nothing when the set does not generate."""
    state, H = M.MemoryBreakdown(weights=2e9, optimizer=6e9), 25e9
    calls = {S.OLD_LOGPROB: 1, S.ACTOR_FORWARD: 4, S.OPTIMIZER: 4}
    assert transfer_seconds("actor", state, 1e9, calls, ("params",), H) == pytest.approx(
        {S.OLD_LOGPROB: 0.16, S.ACTOR_FORWARD: 0.16})
    assert transfer_seconds("actor", state, 1e9, {S.ACTOR_FORWARD: 4}, ("params",), H) == pytest.approx(
        {S.ACTOR_FORWARD: 0.16})                               # no old log-prob pass: one phase
    assert transfer_seconds("actor", state, 1e9, calls, ("optimizer",), H) == pytest.approx({S.OPTIMIZER: 0.48})
    assert transfer_seconds("actor", state, 1e9, calls, ("host_optimizer",), H, steps=4) == pytest.approx(
        {S.OPTIMIZER: 0.32})
    ref = M.MemoryBreakdown(weights=2e9)
    assert transfer_seconds("reference", ref, 0, {S.REF_LOGPROB: 3}, ("frozen",), H) == pytest.approx(
        {S.REF_LOGPROB: 0.24})
    assert transfer_seconds("actor", state, 1e9, calls, ("sleep",), H, generates=True) == pytest.approx(
        {S.PREFILL: 0.64})
    assert transfer_seconds("actor", state, 1e9, calls, ("sleep",), H, generates=False) == {}
    # sleep with the optimizer already away moves only the weights: 2 x 2 / 25
    assert transfer_seconds("actor", state, 1e9, calls, ("optimizer", "sleep"), H, generates=True)[S.PREFILL] == \
        pytest.approx(0.16)


def test_offload_kinds_are_checked():
    assert check_offload(["sleep", "params", "sleep"]) == ("params", "sleep")
    with pytest.raises(RlmLabError, match="unknown workload.offload kind"):
        check_offload(["weights"])
    with pytest.raises(RlmLabError, match="contradict"):
        Workload(offload=("optimizer", "host_optimizer"))
    with pytest.raises(RlmLabError, match="swap and frozen contradict"):
        check_offload(["frozen", "swap"])


def test_a_swapped_reference_costs_three_shards_and_frees_its_weights():
    """NeMo-RL's reference swap: 2 GB shards at 25 GB/s pay 3 x 2 / 25 = 0.24 s once a step at the reference's
    log-probs (the policy out, the reference in, the policy back), whatever its forward calls; end to end on a
    colocated GRPO set with a reference (beta > 0), the swap takes exactly the reference's weight shard off the peak
    of every other stage and adds 3 shards over the host link to the reference pass."""
    ref, H = M.MemoryBreakdown(weights=2e9), 25e9
    assert transfer_seconds("reference", ref, 0, {S.REF_LOGPROB: 3}, ("swap",), H) == pytest.approx(
        {S.REF_LOGPROB: 0.24})
    assert transfer_seconds("reference", ref, 0, {}, ("swap",), H) == {}
    wl = dict(prompts=64, group_size=4, prompt_len=256, response=256, precision="bf16-mixed", engine="continuous",
              micro_batch=4, minibatches=2, gradient_checkpointing=True, padding="none", logprob_chunk=1024)
    pl = get_placement("colocated", Cluster(8, "gpu"), "grpo", zero=3)
    kept, swapped = (predict_placement(pl, QWEN_7B, "grpo", Workload(**wl, offload=o), "h100-sxm", Cluster(8, "gpu"),
                                       beta=0.04) for o in ((), ("swap",)))
    shard = 2 * model_spec(QWEN_7B).params / 8                  # the reference's bf16 weights under ZeRO-3 over 8
    h100 = load_profile("h100-sxm")
    extra = swapped.sets[0].stages[S.REF_LOGPROB] - kept.sets[0].stages[S.REF_LOGPROB]
    assert extra == pytest.approx(3 * shard / h100.host_bandwidth(), rel=0.01)
    assert kept.sets[0].memory.weights - swapped.sets[0].memory.weights == pytest.approx(shard, rel=0.01)
    apart = placement_from_dict({"name": "ref-apart", "sets": [
        {"name": "all", "devices": 6, "kind": "gpu", "zero": 3}, {"name": "ref", "devices": 2, "kind": "gpu"}],
        "roles": {"actor": "all", "rollout": "all", "reference": "ref"}})
    with pytest.raises(RlmLabError, match="must share the actor's set"):
        predict_placement(apart, QWEN_7B, "grpo", Workload(**wl, offload=("swap",)), "h100-sxm", Cluster(8, "gpu"),
                          beta=0.04)


def _hybrid(offload=(), fraction=None):
    wl = Workload(prompts=64, group_size=4, prompt_len=256, response=256, precision="bf16-mixed", engine="continuous",
                  micro_batch=4, minibatches=2, gradient_checkpointing=True, padding="none", logprob_chunk=1024,
                  offload=offload, engine_memory_fraction=fraction)
    pl = get_placement("hybrid", Cluster(8, "gpu"), "dapo", gen_tp=2)
    return predict_placement(pl, QWEN_7B, "dapo", wl, "h100-sxm", Cluster(8, "gpu"))


def test_a_sleeping_trainer_leaves_the_engine_its_state_and_pays_the_host_link():
    """Hybrid engine, 7B under ZeRO-3 over 8 H100s, DAPO-like (no reference): the actor keeps w = 2N/8 weights and
    o = 12N/8 + 4T optimizer bytes per device (T parameter tensors, torch's step scalars). Asleep while generating,
    the automatic engine pool (0.9 of the device less what the others hold) grows by exactly w + o, and generation
    pays 2 (w + o) over the host link: 2 x 13.3 GB / (64 GB/s x eta_H 0.8) = 0.52 s."""
    spec, h100 = model_spec(QWEN_7B), load_profile("h100-sxm")
    n, t = spec.params, spec.param_tensors
    w, o = 2 * n / 8, 12 * n / 8 + 4 * t
    plain, asleep = _hybrid(), _hybrid(("sleep",))
    e0, e1 = plain.sets[0].engine, asleep.sets[0].engine
    assert e1.pool_bytes - e0.pool_bytes == pytest.approx(w + o, rel=1e-6)
    extra = asleep.sets[0].stages[S.PREFILL] - plain.sets[0].stages[S.PREFILL]
    assert extra == pytest.approx(2 * (w + o) / h100.host_bandwidth(), rel=1e-9)   # the prefill itself is unchanged
    assert any("offload priced: sleep" in a for a in asleep.assumptions)


def test_the_engine_fraction_is_its_pool_beside_the_trainer():
    """vLLM's gpu_memory_utilization f: the engine's pool is f x the device, whatever the trainer keeps; the set's
    peak during generation is the trainer's resident state plus that pool."""
    pp = _hybrid(fraction=0.5)
    eng = pp.sets[0].engine
    assert eng.pool_bytes == pytest.approx(0.5 * load_profile("h100-sxm").memory_bytes)
    assert pp.sets[0].memory.total >= eng.pool_bytes


def test_default_response_lengths_are_a_stated_tail_not_the_cap():
    d = assumed_lengths(1024)
    assert d == {"kind": "lognormal", "sigma": 0.8, "max": 1024, "min": 1, "median": 128.0}
    xs = ResponseLengths(**d).sample(512)
    # the log-normal's mean 128 exp(0.8^2 / 2) = 176.3, a little less once clipped at 1024
    assert 170 < sum(xs) / len(xs) < 176.4 and max(xs) == 1024
    note = assumed_lengths_note(1024, "data.max_response_length")
    assert "only the cap 1024" in note and "mean 175" in note and "not the cap" in note
    with pytest.raises(RlmLabError, match="must be below its cap 1024"):
        assumed_lengths(1024, mean=2000)


def test_checkpoint_engine_host_update_by_hand():
    """Qwen3-235B (M = 2 x params bytes) into a TP8 engine on 8 H800s: M/8 over each device's host link
    (64 GB/s x eta_H 0.8), the all-gather of M over 8 (7/8 M per rank at the profile's beta, + its latency), a device
    copy of M/8 read and written (3.35 TB/s x eta_B 0.7)."""
    h800 = load_profile("h800")
    spec = model_spec("configs/models/qwen3-235b-a22b.config.json")
    m = spec.params * 2
    wl = Workload(prompts=8, group_size=1, prompt_len=16, response=16, precision="bf16")
    pl = get_placement("colocated", Cluster(8, "gpu"), "dapo", tp=8)
    pp = predict_placement(pl, spec, "dapo", wl, h800, Cluster(8, "gpu"))
    beta = h800.collective("all_gather")["beta_s_per_byte"]
    hand = m / 8 / (64e9 * 0.8) + 7 / 8 * m * beta + 2 * m / 8 / h800.bandwidth()
    assert pp.host_update_s == pytest.approx(hand, rel=1e-4)      # the latency term is 1e-5 s of ~4 s
    assert 3.5 < pp.host_update_s < 4.2


def test_framework_examples_fit_as_they_run_and_trl_ddp_does_not():
    from rlm_lab.frameworks.importers import import_from, predict_imported

    verl = predict_imported(import_from("verl:configs/frameworks/verl/grpo-qwen2-7b-gsm8k.yaml"))
    orlhf = predict_imported(import_from("openrlhf:configs/frameworks/openrlhf/ppo-llama3-8b-hybrid-engine.args"))
    trl = predict_imported(import_from("trl:configs/frameworks/trl/grpo-qwen2.5-7b-vllm-server.yaml"))
    assert verl.fits and orlhf.fits
    assert verl.memory_per_device() < 70 * GIB and orlhf.memory_per_device() < 70 * GIB
    # TRL loads a model id in float32 (GRPOTrainer's default dtype) and trains it under DDP: 16 B/param of state,
    # 4 + 4 + 8, on every one of the 4 trainer GPUs: 7.6e9 x 16 = 113 GiB > 74.5 GiB
    assert not trl.fits
    train = next(s for s in trl.placement.sets if s.name == "train")
    n = model_spec(QWEN_7B).params
    state = train.memory.weights + train.memory.gradients + train.memory.optimizer
    assert state == pytest.approx(16 * n, rel=1e-3)
    assert state > train.capacity
