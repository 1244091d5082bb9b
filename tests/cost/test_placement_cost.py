"""Placement prediction: HybridFlow's composition rule (add within a set, max across concurrent sets, alternate
for synchronous disaggregation), weight-sync and reshard bytes against hand formulas, LoRA, "does not fit"."""

import math
from pathlib import Path

import pytest

from rlm_lab.cost import flops as F
from rlm_lab.cost import load_profile, model_spec, predict
from rlm_lab.cost.lora import Lora, lora_params
from rlm_lab.cost.placement import BUCKET_BYTES, predict_placement
from rlm_lab.cost.workload import Workload
from rlm_lab.errors import RlmLabError
from rlm_lab.cost.placement_spec import Cluster, get_placement
from rlm_lab.stages import Stage as S

REPO = Path(__file__).resolve().parents[2]
QWEN_7B = str(REPO / "configs/models/qwen2.5-7b.config.json")
WL = dict(prompts=4, group_size=4, prompt_len=8, response=8, precision="bf16-mixed")


@pytest.fixture(scope="module")
def h100():
    return load_profile("h100-sxm")


def _secs(pred, stages):
    return sum(r.seconds for r in pred.rows if r.stage in stages)


def test_colocated_is_the_plain_prediction(h100):
    """One set: every stage adds up, so the step equals predict()'s iteration on the same devices."""
    c = Cluster(4, "gpu", 80)
    pp = predict_placement(get_placement("colocated", c, "grpo"), "small", "grpo", WL, h100, c)
    plain = predict("small", "grpo", Workload(**WL, devices=4), h100)
    assert pp.step_s == pytest.approx(plain.total_time, rel=1e-12)
    assert pp.sync_bytes == 0 and pp.reshard_bytes == 0


def test_disaggregated_sets_alternate_and_sync_is_exposed(h100):
    """Synchronous disaggregated GRPO: rollout set generates, then the training set works: the step is the
    sum of both sets' stages plus the sync (bytes / link + one latency per bucket)."""
    c = Cluster(4, "gpu", 80, link_gbps=25)
    p = get_placement("disaggregated", c, "grpo", rollout_devices=1)
    pp = predict_placement(p, "small", "grpo", WL, h100, c)
    gen = predict("small", "grpo", Workload(**WL, devices=1), h100)      # rollout set: 1 replica
    train = predict("small", "grpo", Workload(**WL, devices=3), h100)    # training set: 3 DDP ranks
    n_bytes = 2 * model_spec("small").params                             # bf16 weights
    sync = n_bytes / 25e9 + math.ceil(n_bytes / BUCKET_BYTES) * h100.collectives["ops"]["send_recv"]["alpha_s"]
    expected = _secs(gen, (S.PREFILL, S.DECODE)) + train.total_time - _secs(train, (S.PREFILL, S.DECODE)) + sync
    assert pp.sync_bytes == n_bytes
    assert pp.step_s == pytest.approx(expected, rel=1e-9)
    assert pp.phases["generation"][1] == "rollout" and pp.phases["training"][1] == "train"


def test_split_ppo_takes_the_max_of_concurrent_sets(h100):
    c = Cluster(4, "gpu", 80)
    pp = predict_placement(get_placement("split", c, "ppo", value_devices=2), "small", "ppo", WL, h100, c)
    base = predict("small", "ppo", Workload(**WL, devices=2), h100)     # both sets have 2 devices
    prep = max(_secs(base, (S.OLD_LOGPROB, S.REF_LOGPROB)), _secs(base, (S.VALUES, S.REWARD)))
    # TRL's per-step bookkeeping (an assumed figure on a datasheet profile) runs with the actor's trainer
    actor = _secs(base, (S.ACTOR_FORWARD, S.ACTOR_BACKWARD, S.OPTIMIZER)) + base.bookkeeping_s
    train = max(actor, _secs(base, (S.CRITIC_UPDATE,)))
    expected = _secs(base, (S.PREFILL, S.DECODE)) + prep + _secs(base, (S.ADVANTAGE,)) + train
    assert pp.step_s == pytest.approx(expected, rel=1e-9)
    assert pp.step_s < base.total_time      # the overlap is the point of splitting


@pytest.mark.parametrize("s, gen_tp, per_device", [(8, 1, 7 / 8), (8, 2, 6 / 16), (8, 4, 4 / 32), (4, 4, 0.0)])
def test_hybrid_reshard_bytes_are_hybridflow_formula(h100, s, gen_tp, per_device):
    """HybridFlow Sec. 5.4: each of s devices receives M (s - t_g) / (t_g s)."""
    c = Cluster(s, "gpu", 141)
    pp = predict_placement(get_placement("hybrid", c, "grpo", gen_tp=gen_tp), QWEN_7B, "grpo", WL, h100, c)
    m = 2 * model_spec(QWEN_7B).params
    assert pp.reshard_bytes == pytest.approx(s * per_device * m, rel=1e-12)
    assert (pp.phases["reshard"][0] > 0) == (gen_tp < s)


def test_tensor_parallel_rank_is_a_shard_and_tp_must_divide_heads(h100):
    """tp = 2: a rank holds half the heads, MLP and vocabulary; a tp that does not divide the heads is refused."""
    from rlm_lab.cost.placement import tp_shard

    spec = model_spec(QWEN_7B)
    half = tp_shard(spec, 2)
    body = spec.params - spec.vocab * spec.hidden * 2 - spec.hidden * (2 * spec.layers + 1)   # minus embed, head, norms
    assert half.params == pytest.approx(body / 2 + spec.vocab * spec.hidden + spec.hidden * (2 * spec.layers + 1),
                                        rel=1e-3)
    c = Cluster(8, "gpu", 141)
    with pytest.raises(RlmLabError, match="tp=8 does not divide .*attention heads 28"):
        predict_placement(get_placement("colocated", c, "grpo", tp=8), QWEN_7B, "grpo", WL, h100, c)


def test_lora_sync_memory_and_flops(h100):
    spec = model_spec("small")
    lora = Lora(rank=4, targets=("q_proj", "v_proj"))
    a = 4 * spec.layers * ((spec.hidden + spec.d_attn) + (spec.hidden + spec.kv_dim))   # r (d_in + d_out) each
    assert lora_params(spec, lora) == a
    c = Cluster(2, "gpu", 80, link_gbps=25)
    full = predict_placement(get_placement("disaggregated", c, "grpo"), spec, "grpo", WL, h100, c)
    lo = predict_placement(get_placement("disaggregated", c, "grpo", lora=True), spec, "grpo", WL, h100, c,
                           lora=lora)
    assert lo.sync_bytes == 2 * a and full.sync_bytes == 2 * spec.params
    train_full, train_lo = (next(s for s in pp.sets if s.name == "train") for pp in (full, lo))
    # bf16-mixed: full = actor 2N + 12N (+ steps) and reference 2N; LoRA = base 2N + adapters 2A, Adam 12A, no reference
    assert predict(spec, "grpo", Workload(**WL), h100, lora=lora).persistent.optimizer == 12 * a + 4 * 2 * 2 * spec.layers
    assert train_lo.memory.optimizer == 12 * a + 4 * (2 * 2 * spec.layers)   # + torch's step scalar per A, B tensor
    assert train_lo.memory.weights == 2 * spec.params + 2 * a
    assert train_full.memory.weights == 4 * spec.params
    wl = Workload(**WL)
    seq = 8 + 8
    lt = 8 + 1
    p = predict(spec, "grpo", wl, h100, lora=lora)
    bwd = next(r for r in p.rows if r.stage == S.ACTOR_BACKWARD)
    per_seq = F.matmul_flops(spec, seq, lt) + 2 * F.attention_flops(spec, seq, seq) + 2 * 2 * a * seq
    assert bwd.flops == pytest.approx(16 * per_seq, rel=1e-12)
    opt = next(r for r in p.rows if r.stage == S.OPTIMIZER)
    assert opt.flops == 12 * a


def test_does_not_fit_names_the_set_and_the_numbers(h100):
    c = Cluster(2, "gpu", 24, link_gbps=25)
    pp = predict_placement(get_placement("disaggregated", c, "grpo"), QWEN_7B, "grpo", WL, h100, c)
    assert not pp.fits
    msg = pp.memory_error()
    assert "set 'train' needs" in msg and "of 24.00" in msg
    with pytest.raises(RlmLabError, match="does not fit"):
        pp.step_s


def test_predict_cli_placement_and_assumed_lines(tmp_path, capsys):
    from rlm_lab.cli import main

    cfg = tmp_path / "p.yaml"
    cfg.write_text("model: small\nalgorithm: grpo\nhardware: h100-sxm\n"
                   "placement: {name: disaggregated, rollout_devices: 1}\n"
                   "cluster: {devices: 2, memory_per_device_gib: 80, link_gbps: 25}\n"
                   "workload: {prompts: 4, group_size: 4, prompt_len: 8, response: 8, precision: bf16-mixed}\n")
    assert main(["predict", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "set rollout (1 dev, rollout)" in out and "step time:" in out
    # the datasheet's assumed efficiencies are named, with the step recomputed at eta = 1
    line = next(x for x in out.splitlines() if x.startswith("assumed: efficiencies eta_F=0.4, eta_A=0.4 (attention), eta_B=0.7"))
    h = load_profile("h100-sxm").to_dict() | {"efficiency": {"matmul": 1.0, "attention": 1.0, "memory": 1.0}, "name": "ideal"}
    c = Cluster(2, "gpu", 80, 25)
    ideal = predict_placement(get_placement("disaggregated", c, "grpo", rollout_devices=1), "small", "grpo", WL,
                              load_profile(h), c).step_s
    shown = float(line.split("without it the step is ")[1].split(" ms")[0]) / 1e3
    assert shown == pytest.approx(ideal, rel=5e-3)     # printed with 3 significant digits
    assert main(["predict", "--placement", "split", "--prompts", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlm-lab: error: ")
