"""Scale terms (issue 21 item 3) against hand computations: a collective's time from where its ranks sit, the weight
sync across nodes, the hybrid engine's reshard with its gathers, expert parallelism's shards and all-to-all, Qwen3's
model types, the datasheet profiles and the named assumptions a user overrides."""

import json

import pytest

from rlm_lab.cost import collective_time, load_profile, model_spec
from rlm_lab.cost.assumed import apply_assumptions
from rlm_lab.cost.comm import RankSpan, Topology, layer_comm_time
from rlm_lab.cost.placement import ep_shard, predict_placement
from rlm_lab.cost.placement_spec import Cluster, PlacementError, ResourceSet, get_placement
from rlm_lab.cost.spec import spec_from_config, spec_from_dict
from rlm_lab.errors import RlmLabError

H100 = load_profile("h100-sxm")
NVLINK_BETA = 1 / (0.8 * 450e9)      # the profile's collective beta
NIC = 0.9 * 50e9                      # one ConnectX-7 400 Gb/s card at eta_N = 0.9


def test_topology_counts_nodes():
    t = Topology(8)
    assert t.nodes(0, 8) == 1 and t.nodes(4, 8) == 2 and t.nodes(0, 16) == 2
    assert t.nodes(0, 4, 8) == 4 and t.nodes(2, 8, 2) == 3       # devices 2, 4, ..., 16: nodes 0, 1 and 2
    assert Topology(None).nodes(0, 1000) == 1


def test_collective_across_nodes_by_hand():
    """An all-gather of 1.6 GB over 16 ranks: inside no node (one per node) each rank has one card; with 8 ranks per
    node the 8 cards match NVLink (8 x 45 = 360 GB/s); latency = 15 ring steps x 5 us."""
    S = 1.6e9
    per_rank = 15 / 16 * S
    one_per_node = collective_time("all_gather", S, 16, H100, nodes=16)
    assert one_per_node == pytest.approx(15 * 5e-6 + per_rank / NIC, rel=1e-12)
    full_nodes = collective_time("all_gather", S, 16, H100, nodes=2)
    assert full_nodes == pytest.approx(15 * 5e-6 + per_rank * max(NVLINK_BETA, 1 / (8 * NIC)), rel=1e-12)
    inside = collective_time("all_gather", S, 8, H100)
    assert inside == pytest.approx(1e-5 + 7 / 8 * S * NVLINK_BETA, rel=1e-12)
    assert one_per_node > 7 * full_nodes


def test_weight_sync_crosses_nodes_on_one_card():
    """Disaggregated on 16 GPUs, rollout 8 | train 8: the broadcast leaves the trainer's node on one card; rollout 4 |
    train 4 on an 8-GPU node stays on NVLink (the profile's link). bytes / B + buckets x latency."""
    wl = dict(prompts=16, group_size=2, prompt_len=16, response=16, precision="bf16-mixed")
    spec = model_spec("small")
    nbytes = spec.params * 2
    across = predict_placement(get_placement("disaggregated", Cluster(16, "gpu"), "grpo", rollout_devices=8), "small",
                               "grpo", wl, "h100-sxm", Cluster(16, "gpu"))
    assert across.sync_bytes == nbytes
    assert across.phases["sync"][0] == pytest.approx(nbytes / NIC + (1e-5 + 5e-6), rel=1e-12)
    inside = predict_placement(get_placement("disaggregated", Cluster(8, "gpu"), "grpo", rollout_devices=4), "small",
                               "grpo", wl, "h100-sxm", Cluster(8, "gpu"))
    assert inside.phases["sync"][0] == pytest.approx(nbytes / 450e9 + 1e-5, rel=1e-12)
    # the cluster's own network card (network_gbps) replaces the profile's
    slow = predict_placement(get_placement("disaggregated", Cluster(16, "gpu"), "grpo", rollout_devices=8), "small",
                             "grpo", wl, "h100-sxm", Cluster(16, "gpu", network_gbps=10))
    assert slow.phases["sync"][0] == pytest.approx(nbytes / 10e9 + 1e-5 + 5e-6, rel=1e-12)


def test_hybrid_reshard_gathers_across_nodes_by_hand():
    """Hybrid engine on 16 GPUs, t_g = 2: groups of 8 ranks strided by 2 span 2 nodes with 4 ranks each
    (beta = 1 / (4 x 45 GB/s)); each device receives M/2 x 7/8 in one coalesced gather (TRL's ZeRO-3). A continuous
    engine gathers tensor by tensor and adds its device copy of M/2 and its level-1 sleep round trip of M/2 over the
    host link."""
    c = Cluster(16, "gpu", 80)
    spec = model_spec("small")
    M = spec.params * 2
    alpha = 7 * 5e-6
    gather = alpha + 7 / 8 * M / 2 / (4 * NIC)
    wl = dict(prompts=16, group_size=2, prompt_len=16, response=16, precision="bf16-mixed")
    pl = get_placement("hybrid", c, "grpo", gen_tp=2)
    static = predict_placement(pl, "small", "grpo", wl, "h100-sxm", c)
    assert static.phases["reshard"][0] == pytest.approx(gather, rel=1e-12)
    assert static.reshard_bytes == pytest.approx(16 * M * 14 / 32, rel=1e-12)
    cont = predict_placement(pl, "small", "grpo", wl | {"engine": "continuous"}, "h100-sxm", c)
    extra = (spec.param_tensors - 1) * alpha + 2 * (M / 2) / (0.7 * 3.35e12) + 2 * (M / 2) / (0.8 * 64e9)
    assert cont.phases["reshard"][0] == pytest.approx(gather + extra, rel=1e-12)


def test_expert_parallelism_shards_and_all_to_all():
    """micro-moe (8 experts, top-2): ep = 4 keeps 2 experts per rank, so the experts' weights per rank are a quarter;
    a forward pass over T tokens adds per MoE layer a dispatch and a combine all-to-all of T x top_k x h bytes."""
    spec = model_spec("micro-moe")
    sh = ep_shard(spec, 4)
    assert sh.experts == 2 and sh.top_k == spec.top_k
    expert_w = spec.moe_layers * 3 * spec.hidden * spec.expert_intermediate
    assert spec.params - sh.params == pytest.approx(6 * expert_w + spec.moe_layers * spec.hidden * 6)
    assert sh.matmul_params_per_token() == spec.matmul_params_per_token() - spec.moe_layers * spec.hidden * 6
    lay = RankSpan(ep=4)
    T = 1024
    msg = T * spec.top_k * spec.hidden * 2
    want = 2 * spec.moe_layers * collective_time("all_to_all", msg, 4, H100)
    assert layer_comm_time(spec, T, H100, lay) == pytest.approx(want, rel=1e-12)
    assert layer_comm_time(model_spec("micro"), T, H100, lay) == 0.0        # a dense model has no all-to-all
    with pytest.raises(RlmLabError, match="dense model"):
        ep_shard(model_spec("micro"), 2)
    with pytest.raises(RlmLabError, match="does not divide"):
        ep_shard(spec, 3)
    with pytest.raises(PlacementError, match="ep=4 must be an integer >= 1 dividing its data-parallel size 2"):
        ResourceSet("s", 2, "gpu", dp=2, ep=4)


def test_expert_parallel_placement_holds_less_per_device():
    wl = dict(prompts=8, group_size=2, prompt_len=16, response=16, precision="bf16-mixed")
    c = Cluster(4, "gpu", 80)
    plain = get_placement("colocated", c, "grpo")
    ep = plain.__class__(plain.name, (ResourceSet("all", 4, "gpu", dp=4, ep=4),), plain.roles)
    a = predict_placement(plain, "micro-moe", "grpo", wl, "h100-sxm", c)
    b = predict_placement(ep, "micro-moe", "grpo", wl, "h100-sxm", c)
    assert b.sets[0].memory.total < a.sets[0].memory.total
    assert b.sync_step_s != a.sync_step_s and "expert parallelism" in " ".join(b.assumptions)


QWEN3_30B_A3B = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
                 "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
                 "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 1,
                 "mlp_only_layers": [], "vocab_size": 151936, "tie_word_embeddings": False}


def test_qwen3_moe_is_understood():
    """Qwen3-30B-A3B's config (https://huggingface.co/Qwen/Qwen3-30B-A3B): 30.5B parameters, 3.3B active (the model
    card), KV 2 x 48 x 4 x 128 x 2 = 96 KiB per token."""
    spec = spec_from_dict(QWEN3_30B_A3B)
    assert spec.arch == "qwen3_moe" and spec.moe_layers == 48 and spec.shared_intermediate == 0 and spec.qk_norm
    assert spec.params == pytest.approx(30.5e9, rel=0.01)
    # the card's 3.3B active count includes the embedding (a gather, no FLOPs here) and the head
    assert spec.matmul_params_per_token() + 151936 * 2048 == pytest.approx(3.3e9, rel=0.03)
    assert spec.kv_bytes_per_token(2) == 2 * 48 * 4 * 128 * 2


@pytest.mark.parametrize("family", ["qwen3", "qwen3_moe"])
def test_qwen3_params_exact(family):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

    common = dict(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=48, head_dim=8)
    config = (Qwen3Config(**common) if family == "qwen3" else
              Qwen3MoeConfig(**common, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                             decoder_sparse_step=1, mlp_only_layers=[1]))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    spec = spec_from_config(config)
    assert spec_from_dict(json.loads(config.to_json_string())) == spec    # transformers 5 writes num_local_experts
    assert spec.params == sum(p.numel() for p in model.parameters())
    assert spec.param_tensors == len(list(model.parameters()))


@pytest.mark.parametrize("name, bf16, mem, bw", [
    ("a100-80gb", 312e12, 80e9, 2.039e12), ("h100-sxm", 989.4e12, 80e9, 3.35e12), ("h200", 989.4e12, 141e9, 4.8e12),
    ("h20", 148e12, 96e9, 4.0e12), ("h800", 989.4e12, 80e9, 3.35e12), ("b200", 2.25e15, 180e9, 8.0e12),
])
def test_datasheet_profiles(name, bf16, mem, bw):
    p = load_profile(name)
    assert p.kind == "datasheet" and "ASSUMED" in p.notes
    assert (p.peak_flops("bf16"), p.memory_bytes, p.memory_bandwidth) == (bf16, mem, bw)
    assert p.devices_per_node == 8 and p.network_bandwidth() > 0 and p.host_bandwidth() > 0


def test_named_assumptions_override():
    p = apply_assumptions("h100-sxm", {"eta_F": 0.5, "engine_step_s": 1e-3, "eta_N": 0.5})
    assert p.efficiency["matmul"] == 0.5 and p.overhead["engine_step_s"] == 1e-3
    assert p.network_bandwidth() == pytest.approx(0.5 * 50e9)
    assert p.provenance["assumed_by_user"] == {"eta_F": 0.5, "engine_step_s": 1e-3, "eta_N": 0.5}
    assert load_profile("h100-sxm").efficiency["matmul"] == 0.4        # the file is untouched
    for bad, msg in (({"eta_X": 1}, "unknown assumption"), ({"eta_B": 0}, r"\(0, 1\]"), ({"eta_F": True}, "number")):
        with pytest.raises(RlmLabError, match=msg):
            apply_assumptions("h100-sxm", bad)


def test_colocated_engine_refreshes_its_copy_through_ipc():
    """A continuous engine colocated with the trainer (no hybrid reshard) holds its own copy: the sync reads and
    writes the tp shard once at memory bandwidth (CUDA IPC); the static engine generates with the actor's weights."""
    c = Cluster(2, "gpu", 80)
    wl = dict(prompts=8, group_size=2, prompt_len=16, response=16, precision="bf16-mixed")
    pl = get_placement("colocated", c, "grpo", tp=2)
    nbytes = model_spec("small").params * 2
    cont = predict_placement(pl, "small", "grpo", wl | {"engine": "continuous"}, "h100-sxm", c)
    assert cont.phases["sync"][0] == pytest.approx(2 * nbytes / 2 / (0.7 * 3.35e12), rel=1e-12)
    assert predict_placement(pl, "small", "grpo", wl, "h100-sxm", c).phases["sync"][0] == 0.0
