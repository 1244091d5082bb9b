"""The continuous-batching engine (rlm_lab/cost/engine.py) against hand-derived schedules: admission under
max_num_seqs, the KV budget with a recompute preemption, prefix sharing, the steady state, the arrival order, the
KV capacity, and its step time against the decode roofline it is built from."""

import pytest

from rlm_lab.cost import load_profile, model_spec, predict
from rlm_lab.cost.engine import Engine, arrival_order, kv_capacity, vllm_defaults
from rlm_lab.cost.timing import decode_step_time
from rlm_lab.errors import RlmLabError


class LinearEngine(Engine):
    """The engine's scheduler with a step cost a hand can add up: t(b, T) = 1 + 0.1 b + 0.01 T, prefill 0.5 s per
    token."""

    def __init__(self, **kw):
        super().__init__(model_spec("nano"), load_profile("h100-sxm"), **kw)

    def step_time(self, b, tokens):
        return 1 + 0.1 * b + 0.01 * tokens

    def prefill_time(self, tokens):
        return 0.5 * tokens


def t(b, tokens):
    return 1 + 0.1 * b + 0.01 * tokens


def test_all_admitted_then_the_tail():
    """P = 4, lengths 3, 1, 2: the R = 1 request ends with its prefill token; step 1 runs 2 rows at contexts 5 + 5,
    step 2 the last row at context 6 (P + 2 tokens)."""
    e = LinearEngine(prompt_len=4, kv_tokens=1e9, max_num_seqs=10, chunk_tokens=8192)
    run = e.drain([3, 1, 2])
    assert run.steps == 2 and run.peak_batch == 2
    assert run.decode_s == pytest.approx(t(2, 10) + t(1, 6), rel=1e-12)
    assert run.prefill_s == pytest.approx(0.5 * 12, rel=1e-12)       # three prompts of 4 tokens
    assert run.seconds == pytest.approx(run.decode_s + run.prefill_s, rel=1e-12)
    assert run.concurrency == pytest.approx(3 / 2)                  # rows x steps / steps


def test_max_num_seqs_queues_the_third():
    """max_num_seqs = 2, P = 1, three requests of 2 tokens: two run one step (contexts 2 + 2), then the third
    (context 2)."""
    e = LinearEngine(prompt_len=1, kv_tokens=1e9, max_num_seqs=2, chunk_tokens=8192)
    run = e.drain([2, 2, 2])
    assert run.steps == 2 and run.peak_batch == 2
    assert run.decode_s == pytest.approx(t(2, 4) + t(1, 2), rel=1e-12)


def test_kv_budget_preempts_the_newest_and_recomputes_it():
    """K = 6 tokens, P = 1, two requests of 4 tokens (3 decode steps each). Both admitted (1 + 1 tokens); 2 steps
    fill the cache (2 + 2 x 2 = 6); the newest (B, 2 tokens generated) is preempted and frees 3; A's last step at
    context 4; then B is readmitted with a recompute prefill of 1 + 2 = 3 tokens and runs its last step at context 4.
    Steps: t(2, 4) + t(2, 6) + t(1, 4) + t(1, 4); prefill 1 + 1 + 3 tokens."""
    e = LinearEngine(prompt_len=1, kv_tokens=6, max_num_seqs=2, chunk_tokens=8192)
    run = e.drain([4, 4])
    assert run.preemptions == 1 and run.recomputed_tokens == 3
    assert run.steps == 4 and run.peak_kv_tokens == 6
    assert run.decode_s == pytest.approx(t(2, 4) + t(2, 6) + 2 * t(1, 4), rel=1e-12)
    assert run.prefill_s == pytest.approx(0.5 * 5, rel=1e-12)
    # the same requests with room for both: no preemption, 3 steps at 2 rows
    roomy = LinearEngine(prompt_len=1, kv_tokens=100, max_num_seqs=2, chunk_tokens=8192).drain([4, 4])
    assert roomy.preemptions == 0 and roomy.decode_s == pytest.approx(t(2, 4) + t(2, 6) + t(2, 8), rel=1e-12)


def test_prefix_sharing_prefills_and_stores_the_prompt_once_per_group():
    """One group of 2 samples, P = 10, lengths 2 and 3: the prompt is prefilled once (10 tokens) and held once;
    peak cache 10 + 2 after step 1 (without sharing 2 x 10 + 2); both rows attend to the whole prompt."""
    shared = LinearEngine(prompt_len=10, kv_tokens=1e9, max_num_seqs=8, chunk_tokens=8192, group_size=2,
                          prefix_sharing=True).drain([2, 3])
    plain = LinearEngine(prompt_len=10, kv_tokens=1e9, max_num_seqs=8, chunk_tokens=8192, group_size=2).drain([2, 3])
    assert shared.prefill_s == pytest.approx(0.5 * 10) and plain.prefill_s == pytest.approx(0.5 * 20)
    assert shared.peak_kv_tokens == 12 and plain.peak_kv_tokens == 22
    assert shared.decode_s == plain.decode_s == pytest.approx(t(2, 22) + t(1, 12), rel=1e-12)


def test_steady_state_stream():
    """lengths 2 and 4, P = 3, K = 28: a slot holds E[R^2] / (2 E[R]) = 20 / 12 response tokens on average, so
    C = 28 / (3 + 5/3) = 6 rows reading 6 (3 + 5/3) = 28 tokens; (1 + 3) / 6 steps; prefill 2 x 3 tokens; one
    interruption recomputes the 28 cached tokens."""
    e = LinearEngine(prompt_len=3, kv_tokens=28, max_num_seqs=10, chunk_tokens=8192)
    run = e.stream([2, 4])
    assert run.peak_batch == 6
    assert run.decode_s == pytest.approx(4 / 6 * t(6, 28), rel=1e-12)
    assert run.prefill_s == pytest.approx(0.5 * 6)
    assert e.interrupt_time([2, 4]) == pytest.approx(0.5 * 28, rel=1e-12)
    # a staleness cap of 1 batch (2 requests) in flight: C = 2
    capped = e.stream([2, 4], cap=2)
    assert capped.peak_batch == 2 and capped.decode_s == pytest.approx(4 / 2 * t(2, 2 * (3 + 5 / 3)), rel=1e-12)
    # the stream pays no tail: never slower than the drained batch of the same requests here
    assert run.decode_s < e.drain([2, 4]).decode_s


def test_arrival_order_and_refusals():
    assert arrival_order([5, 1, 4, 2, 3]) == [1, 4, 2, 5, 3]       # sorted, read with stride 3 (round(5 x 0.618))
    assert sorted(arrival_order(range(1, 101))) == list(range(1, 101))
    e = LinearEngine(prompt_len=8, kv_tokens=10, max_num_seqs=4, chunk_tokens=8192)
    with pytest.raises(RlmLabError, match="KV cache holds 10 tokens but one sequence needs 11"):
        e.drain([3])
    with pytest.raises(RlmLabError, match="one sequence needs 11"):
        e.stream([3])


def test_step_time_is_the_decode_roofline():
    """t(b, b c) is decode_step_time(b, c) of a paged cache: the attention depends on the total cached tokens only
    (a calibrated profile keeps its measured per-step overheads)."""
    prof, spec = load_profile("cpu-2core-epyc"), model_spec("micro")
    e = Engine(spec, prof, prompt_len=8, kv_tokens=1e6, max_num_seqs=64, chunk_tokens=512, dtype="fp32",
               dtype_bytes=4)
    for b, c in ((1, 9), (4, 40), (32, 300)):
        assert e.step_time(b, b * c) == pytest.approx(decode_step_time(spec, b, c, prof, "fp32", 4, kv_append=False),
                                                      rel=1e-12)


def test_kv_capacity_by_hand():
    """K = (pool - weights - reserve) / kappa with kappa = 2 L n_kv d_h bytes and the reserve = fp32 logits of
    max_num_seqs rows + a prefill chunk's widest activations (4h + 2I) per token."""
    spec = model_spec("micro")
    kappa = 2 * spec.layers * spec.kv_heads * spec.head_dim * 2
    reserve = 256 * spec.vocab * 4 + 8192 * (4 * spec.hidden + 2 * spec.intermediate) * 2
    k, w, r = kv_capacity(spec, 2, 1e9, 256, 8192)
    assert (w, r) == (spec.params * 2, reserve)
    assert k == pytest.approx((1e9 - spec.params * 2 - reserve) / kappa, rel=1e-12)
    assert vllm_defaults(load_profile("h100-sxm")) == (1024, 16384)
    assert vllm_defaults(load_profile("a100-80gb")) == (256, 8192)      # vLLM's A100 exception


def test_predict_continuous_engine_is_kv_limited():
    """predict() with a continuous engine: its KV capacity is the formula's on the memory share, and a smaller share
    lowers the peak batch and lengthens the drained decode."""
    wl = dict(prompts=64, group_size=4, prompt_len=256, response={"kind": "lognormal", "median": 600, "sigma": 0.8,
              "max": 4096}, precision="bf16-mixed", engine="continuous", micro_batch=4)
    big = predict("configs/models/qwen2.5-1.5b.config.json", "grpo", wl | {"engine_memory_fraction": 0.9}, "h100-sxm")
    small = predict("configs/models/qwen2.5-1.5b.config.json", "grpo", wl | {"engine_memory_fraction": 0.07},
                    "h100-sxm")
    spec = big.spec
    k, _, _ = kv_capacity(spec, 2, 0.07 * 80e9, 1024, 16384)
    assert small.engine.kv_tokens == pytest.approx(k, rel=1e-12)
    assert big.engine.drain.peak_batch == 256 and big.engine.drain.preemptions == 0
    assert small.engine.drain.peak_batch < 256                      # the cache admits fewer at once
    assert small.engine.drain.concurrency < big.engine.drain.concurrency
    assert small.seconds("decode") > big.seconds("decode")
    # memory of generation: the engine's pool holds its weights, reserve and KV cache
    gen = next(r for r in small.rows if str(r.stage) == "decode").breakdown
    assert gen.kv_cache == pytest.approx(k * spec.kv_bytes_per_token(2), rel=1e-9)
