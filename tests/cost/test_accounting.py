"""Accounting bugs of issue 12 item 4, each against numbers derived by hand from the parameter count and
the profile's own constants (not from the code paths under test)."""

from pathlib import Path

import pytest

from rlm_lab.cost import flops as F
from rlm_lab.cost import load_profile, model_spec, predict, scalar_head
from rlm_lab.cost.workload import Workload
from rlm_lab.stages import Stage

REPO = Path(__file__).resolve().parents[2]
QWEN_7B = str(REPO / "configs/models/qwen2.5-7b.config.json")
GIB = 2 ** 30


def _row(pred, stage):
    (row,) = [r for r in pred.rows if r.stage == stage]
    return row


@pytest.fixture(scope="module")
def h100():
    return load_profile("h100-sxm")


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_zero_optimizer_step_is_one_dth_per_device(h100, zero):
    """ZeRO partitions Adam's state: each of d ranks steps N/d parameters (arXiv 1910.02054 Sec. 5.1)."""
    spec, d = model_spec("small"), 4
    wl = Workload(prompts=4, group_size=4, prompt_len=8, devices=d, zero_stage=zero, precision="bf16-mixed")
    opt = _row(predict(spec, "grpo", wl, h100), Stage.OPTIMIZER)
    n = spec.params
    assert opt.flops == pytest.approx(12 * n)          # total over the d ranks: one full step, not d of them
    assert opt.bytes == pytest.approx(7 * 4 * n)       # p, g, m, v read; p, m, v written; fp32
    bw = h100.memory_bandwidth * h100.efficiency["memory"]
    per_tensor = h100.overhead["optimizer_tensor_s"] * spec.param_tensors + h100.overhead.get("optimizer_base_s", 0)
    assert opt.seconds == pytest.approx(7 * 4 * n / d / bw + per_tensor, rel=1e-9)
    plain = _row(predict(spec, "grpo", Workload(**(wl.to_dict() | {"zero_stage": 0})), h100), Stage.OPTIMIZER)
    assert plain.flops == pytest.approx(d * 12 * n)   # DDP: every rank runs the whole step


def test_ppo_7b_on_8_h100_zero3_shards_the_critic(h100):
    """PPO (actor, critic, reference, reward model) of a 7B model on 8 x H100 with ZeRO-3, bf16-mixed Adam:
    trained models 16 B/param / 8 (2 weights + 12 optimizer persistent, 2 gradients while training),
    frozen models 2 B/param / 8 each (ZeRO-3 wraps them too: DeepSpeed's eval engine at the same stage, OpenRLHF's
    get_eval_ds_config, TRL's prepare_deepspeed). 18 B/param / 8 = ~31 GiB per device, not the ~130 GiB of an unsharded
    critic nor the ~55 GiB of whole frozen copies."""
    spec = model_spec(QWEN_7B)
    n, nc = spec.params, scalar_head(spec).params
    d = 8
    wl = Workload(prompts=8, group_size=1, prompt_len=256, response=256, micro_batch=1, gen_batch=8,
                  devices=d, zero_stage=3, precision="bf16-mixed")
    pred = predict(spec, "ppo", wl, h100)
    train = _row(pred, Stage.ACTOR_BACKWARD).breakdown
    assert train.weights == pytest.approx(2 * n / d + 2 * nc / d + 2 * n / d + 2 * nc / d, rel=1e-6)
    assert train.optimizer == pytest.approx(12 * (n + nc) / d, rel=1e-4)   # + torch's per-tensor step scalars
    assert train.gradients == pytest.approx(2 * (n + nc) / d, rel=1e-6)
    state = train.weights + train.optimizer + train.gradients
    assert 28 * GIB < state < 33 * GIB
    assert pred.fits and pred.memory.total < 70 * GIB


def test_zero3_generation_gathers_the_weights(h100):
    """ZeRO-3 generation: the whole model is all-gathered once per generate call (TRL's
    unwrap_model_for_generation): full weights resident while generating, and the all-gather's time."""
    spec, d = model_spec(QWEN_7B), 8
    base = dict(prompts=16, group_size=4, prompt_len=128, response=64, gen_batch=16, devices=d,
                precision="bf16-mixed")
    z3 = predict(spec, "dapo", Workload(**base, zero_stage=3), h100)
    z2 = predict(spec, "dapo", Workload(**base, zero_stage=2), h100)
    w = 2 * spec.params
    dec3 = _row(z3, Stage.DECODE).breakdown
    assert dec3.weights == pytest.approx(w, rel=1e-9)       # w/d sharded + w (d-1)/d gathered = the whole model
    assert _row(z3, Stage.ACTOR_BACKWARD).breakdown.weights == pytest.approx(w / d, rel=1e-9)
    # ring all-gather: alpha (rescaled from the fit's world) + beta * (d-1)/d * bytes, one per generate call
    fit, world0 = h100.collectives["ops"]["all_gather"], h100.collectives["world"]
    gather = fit["alpha_s"] * (d - 1) / (world0 - 1) + fit["beta_s_per_byte"] * (d - 1) / d * w
    calls = 1   # 64 sequences / 8 devices = 8 per device, all in one generate call (gen_batch 16 >= 8)
    assert _row(z3, Stage.PREFILL).seconds - _row(z2, Stage.PREFILL).seconds == pytest.approx(calls * gather,
                                                                                                 rel=1e-6)
    # the old-log-prob pass (epochs = 2) of the ZeRO-3 actor gathers the parameters once per forward call
    o3 = _row(predict(spec, "dapo", Workload(**base, zero_stage=3, epochs=2), h100), Stage.OLD_LOGPROB)
    o2 = _row(predict(spec, "dapo", Workload(**base, zero_stage=2, epochs=2), h100), Stage.OLD_LOGPROB)
    assert o3.seconds - o2.seconds == pytest.approx(o3.calls * gather, rel=1e-6) and o3.calls == 1


def test_attention_convention_full_and_causal():
    """The cost model counts the full score matrix (what eager/SDPA-math kernels and FlopCounterMode do);
    causal=True counts the unmasked entries only, checked against an explicit mask."""
    spec = model_spec("nano")
    per_entry = 4 * spec.layers * spec.d_attn
    for q, k in ((7, 7), (1, 9), (3, 10)):
        mask = [[j <= (k - q) + i for j in range(k)] for i in range(q)]   # query i sits at key position k-q+i
        unmasked = sum(map(sum, mask))
        assert F.attention_flops(spec, q, k, causal=True) == per_entry * unmasked
        assert F.attention_flops(spec, q, k) == per_entry * q * k
    s = 64
    assert F.forward_flops(spec, s) - F.matmul_flops(spec, s) == per_entry * s * s   # full, as documented


@pytest.mark.parametrize("algo, over, expected", [
    ("grpo", {}, False),                                   # on-policy: TRL reuses the sampling log-probs
    ("grpo", {"epochs": 2}, True),                         # num_iterations > 1
    ("grpo", {"minibatches": 2}, True),                    # several optimizer steps per generation
    ("ppo", {}, True),                                     # our PPO: the KL reward needs log pi_old
    ("ppo", {"recompute_old": False}, False),              # explicit setting wins
])
def test_old_logprob_pass_counted_when_the_run_does_it(algo, over, expected):
    spec = model_spec("nano")
    wl = Workload(**(dict(prompts=4, group_size=4, prompt_len=8, response=6) | over))
    pred = predict(spec, algo, wl, "h100-sxm")
    rows = [r for r in pred.rows if r.stage == Stage.OLD_LOGPROB]
    assert bool(rows) is expected
    if rows:   # one no-grad forward per sequence over prompt + response, logits of the completion + 1
        assert rows[0].flops == pytest.approx(16 * F.forward_flops(spec, 8 + 6, 6 + 1), rel=1e-12)
