"""Predicted seconds of one pass on one device: roofline per matrix product, the attention kernel,
the layers' elementwise work, the log-prob head, plus per-call overhead.

    t_pass = sum over products g of max(FLOPs_g / F(FLOPs_g), bytes_g / BW)
             + L * FLOPs_att / F_att(FLOPs_att)          (measured SDPA rate, calibrate.bench_attention)
             + L * e(T) * s_el                           (elementwise, calibrate.bench_elementwise)
             + head(rows, V)                             (log-prob head, calibrate.bench_logprob_head)
             + overhead(L)

* Roofline per operator (Williams, Waterman & Patterson, CACM 2009: t = max(FLOPs/(eta_F F), bytes/(eta_B BW))), after
  Williams, Waterman & Patterson, "Roofline", CACM 52(4) 2009. F depends on the size of the
  product when the profile has a measured curve (small products run far below peak on CPU).
* Decode step: t_step(b, c) = sum_g max(...) with b tokens, reading the weights once and the KV
  cache b * c * kappa, plus a per-step overhead (max((2N + b c kappa)/BW,
  b f(N, c)/F) + per-call latency). With tiny models on CPU the overhead (Python dispatch of every
  op of every layer, sampling) dominates: t_step ~ decode_step_base_s + L * decode_step_layer_s.
* transformers' DynamicCache appends by ``torch.cat``: each step copies the KV cache (read + write)
  at the measured bandwidth (:func:`kv_append_bytes`).
* Overheads add to compute when execution is synchronous (CPU) and overlap it when launches are
  asynchronous (GPU, ``overlap_overhead``): t = max(compute, overhead).
* Elementwise: e(T) = T (4h + d_q + d_kv + I_act) elements per layer (2 RMSNorms and 2 residual adds
  on h, rotary on q and k, SiLU(gate) * up on I_act), times the measured seconds per element (forward,
  forward with autograd, backward each measured); its per-op dispatch is in the per-layer overhead.
* Log-prob head (old/ref log-probs, actor forward and backward): TRL's fused head beyond its matrix
  product, on the rows it scores (without Triton TRL scores every position and masks afterwards).
* Weights beyond the cache: the matmul curve is measured cache-hot; a model larger than the
  last-level cache reads each product's weights at the measured streaming rate (a floor per product).
* Backward = 2x the forward products (same shapes: dX and dW), the attention backward at its own
  measured rate, the elementwise backward, plus its own per-layer overhead.
* AdamW step: reads p, g, m, v and writes p, m, v (7 state-sized tensors) at memory bandwidth,
  plus a per-parameter-tensor overhead (torch's for-loop implementation on CPU).

Ignores: the embedding lookup, softmax of the router (MoE), cache effects beyond what the measured
curves capture (they are measured warm, one kernel at a time), thread contention, MoE routing
imbalance (perfect balance assumed).
"""

from __future__ import annotations

from ..errors import RlmLabError
from .flops import gemm_shapes
from .hardware import load_profile
from .spec import ModelSpec, model_spec


def _gemm_time(profile, m: int, k: int, n: int, dtype: str, dtype_bytes: int, count: int = 1) -> float:
    flops = 2.0 * m * k * n
    nbytes = (m * k + k * n + m * n) * dtype_bytes
    return count * profile.roofline_time(flops, nbytes, gemm_flops=flops, dtype=dtype)


def _autocast_overhead(spec: ModelSpec, profile, kind: str, dtype: str) -> float:
    """Per-call work bf16 autocast adds to a ``kind`` (forward | backward | decode) call on a CPU profile that
    measured it (autocast_benchmarks.bench_autocast_overhead: base + L x layer, on hidden-16 models whose weights
    cost nothing to cast) plus the weights' casts: autocast casts every weight to bf16 in each call it enters (its
    cast cache lives only inside one autocast region; accelerate enters one per forward) and the backward casts
    their gradients back, so P x ``autocast_cast_<kind>_param_s`` per call (fitted in situ, issue 35; 0 in profiles
    without it); 0 otherwise (fp32, GPU)."""
    if dtype != "bf16":
        return 0.0
    return (profile.call_overhead(f"autocast_{kind}_base_s") + spec.layers * profile.call_overhead(f"autocast_{kind}_layer_s")
            + spec.params * profile.call_overhead(f"autocast_cast_{kind}_param_s"))


def expert_overhead(spec: ModelSpec, profile, kind: str, tokens: int) -> float:
    """Per-call work of the MoE blocks' loop over experts (kind: forward | backward | decode): transformers 5's
    ``MixtralExperts.forward`` visits, in Python, every expert that received a token (``expert_hit``), ~10 ops
    each (index, two products, activation, weighting, ``index_add_``), so a call costs MoE layers x experts hit x
    ``moe_expert_<kind>_s``. Experts hit: min(E, tokens x top_k) (every expert once the batch is large enough;
    https://github.com/huggingface/transformers, src/transformers/models/mixtral/modeling_mixtral.py).
    Fitted in situ (rlm_lab.insitu); 0 in profiles without the term and for dense models."""
    if not spec.experts or not spec.moe_layers:
        return 0.0
    hit = min(spec.experts, max(1, tokens) * max(1, spec.top_k))
    return spec.moe_layers * hit * profile.call_overhead(f"moe_expert_{kind}_s")


def _combine(profile, compute: float, overhead: float) -> float:
    return max(compute, overhead) if profile.overlap_overhead else compute + overhead


def matmul_time(spec: ModelSpec, profile, tokens: int, logits_tokens: int | None, dtype: str, dtype_bytes: int) -> float:
    """Compute time of the weight products of one forward over ``tokens`` tokens (no overhead).

    A model larger than the last-level cache streams each product's weights from memory at the
    measured streaming rate (``profile.weight_stream_bandwidth``): t_g = max(roofline_g, W_g / BW_stream).
    """
    stream = profile.weight_stream_bandwidth(spec.params * dtype_bytes, dtype)
    t = 0.0
    for m, k, n, c in gemm_shapes(spec, tokens, logits_tokens):
        if m and n:
            t_g = _gemm_time(profile, m, k, n, dtype, dtype_bytes, c)
            t += max(t_g, c * k * n * dtype_bytes / stream) if stream else t_g
    return t


def attention_time(spec: ModelSpec, profile, batch: int, q_len: int, k_len: int, dtype: str, dtype_bytes: int,
                   backward: bool = False) -> float:
    """QK^T and AV of all layers: batch*heads products of (q x d_h)(d_h x k), reading K and V, at the
    attention kernel's measured rate (``profile.attention_rate``; the matmul curve when not measured)."""
    flops = 4.0 * batch * spec.heads * q_len * k_len * spec.head_dim
    kv_read = 2 * batch * k_len * spec.kv_dim * dtype_bytes
    t = max(flops / profile.attention_rate(flops, dtype, backward), kv_read / profile.bandwidth(dtype))
    return spec.layers * t


def elementwise_elements(spec: ModelSpec, tokens: int) -> float:
    """Elements the elementwise ops of all layers touch for ``tokens`` tokens (one count per op's output):
    per token and layer 4h (2 RMSNorms, 2 residual adds) + d_q + d_kv (rotary) + I_act (SiLU(gate) * up),
    I_act = I for dense layers, top_k * I_e + I_s for MoE layers."""
    per = 4 * spec.hidden + spec.d_attn + spec.kv_dim
    moe = spec.moe_layers if spec.experts else 0
    dense = spec.layers - moe
    act = dense * spec.intermediate + moe * (spec.top_k * spec.expert_intermediate + spec.shared_intermediate)
    return float(tokens) * (spec.layers * per + act)


def elementwise_time(spec: ModelSpec, profile, tokens: int, kind: str = "forward", dtype_bytes: int = 4,
                     dtype: str | None = None) -> float:
    return elementwise_elements(spec, tokens) * profile.elementwise_s_per_element(kind, dtype_bytes, dtype)


def forward_time(spec: ModelSpec, profile, batch: int, seq_len: int, logits_tokens: int | None = None,
                 dtype: str = "bf16", dtype_bytes: int = 2, overhead: bool = True, grad: bool = False,
                 logprob_rows: int = 0) -> float:
    """One forward call over ``batch`` sequences of ``seq_len`` tokens, no KV cache.

    ``logits_tokens``: total positions that go through the head (default: all). ``grad``: autograd
    records the graph (training forward; its own measured overhead when the profile has one).
    ``logprob_rows``: positions TRL's log-prob head scores (0: the logits are not turned into log-probs).
    """
    tokens = batch * seq_len
    kind = "forward_grad" if grad else "forward"
    compute = matmul_time(spec, profile, tokens, logits_tokens, dtype, dtype_bytes)
    compute += attention_time(spec, profile, batch, seq_len, seq_len, dtype, dtype_bytes)
    compute += elementwise_time(spec, profile, tokens, kind, dtype_bytes, dtype)
    compute += profile.logprob_head_time(logprob_rows, spec.head_width, kind, dtype_bytes, dtype)
    if not overhead:
        return compute
    kind = "forward_grad" if grad and "forward_grad_base_s" in profile.overhead else "forward"
    over = profile.call_overhead(f"{kind}_base_s") + spec.layers * profile.call_overhead(f"{kind}_layer_s")
    over += _autocast_overhead(spec, profile, "forward", dtype)
    over += expert_overhead(spec, profile, "forward", tokens)
    return _combine(profile, compute, over)


def backward_time(spec: ModelSpec, profile, batch: int, seq_len: int, logits_tokens: int | None = None,
                  dtype: str = "bf16", dtype_bytes: int = 2, logprob_rows: int = 0, weight_grads: bool = True,
                  recompute: bool = False) -> float:
    """Backward of :func:`forward_time`: twice its products, the attention and elementwise backward at
    their measured rates, the log-prob head's backward, plus per-layer backward overhead.
    ``weight_grads=False`` (frozen weights, e.g. under LoRA): once its products (input gradient only).

    The products' backward runs at the profile's ``<dtype>_backward`` curve when it has one (bf16 autocast on
    CPU: its backward kernels have their own, measured rate, autocast_benchmarks.py), else at the forward's.
    ``recompute`` (gradient checkpointing of every decoder layer, as transformers does it): the layers'
    forward runs again inside the backward (products without the head, attention, elementwise with
    autograd; flops.train_flops(recompute=True)), plus the measured per-layer checkpoint overhead
    (``checkpoint_base_s + L * checkpoint_layer_s``)."""
    tokens = batch * seq_len
    bdt = f"{dtype}_backward" if f"{dtype}_backward" in profile.matmul_curve else dtype
    compute = (2 if weight_grads else 1) * matmul_time(spec, profile, tokens, logits_tokens, bdt, dtype_bytes)
    compute += attention_time(spec, profile, batch, seq_len, seq_len, dtype, dtype_bytes, backward=True)
    compute += elementwise_time(spec, profile, tokens, "backward", dtype_bytes, dtype)
    compute += profile.logprob_head_time(logprob_rows, spec.head_width, "backward", dtype_bytes, dtype)
    over = profile.call_overhead("backward_base_s") + spec.layers * profile.call_overhead("backward_layer_s")
    over += _autocast_overhead(spec, profile, "backward", dtype)
    over += expert_overhead(spec, profile, "backward", tokens)
    if recompute:
        compute += matmul_time(spec, profile, tokens, 0, dtype, dtype_bytes)  # logits_tokens 0: the head is not redone
        compute += attention_time(spec, profile, batch, seq_len, seq_len, dtype, dtype_bytes)
        compute += elementwise_time(spec, profile, tokens, "forward_grad", dtype_bytes, dtype)
        over += profile.call_overhead("checkpoint_base_s") + spec.layers * profile.call_overhead("checkpoint_layer_s")
        over += _autocast_overhead(spec, profile, "forward", dtype)  # the recomputed forward casts the weights again
        over += expert_overhead(spec, profile, "forward", tokens)    # and loops over the experts again
    return _combine(profile, compute, over)


def kv_append_bytes(spec: ModelSpec, batch: int, context: int, dtype_bytes: int) -> float:
    """Bytes moved to append one token to transformers' ``DynamicCache``: ``torch.cat`` of K and V
    copies the whole cache each step (read + write), 2 * 2 * b * c * d_kv * dtype_bytes per layer."""
    return 4.0 * spec.layers * batch * context * spec.kv_dim * dtype_bytes


def decode_step_parts(spec: ModelSpec, batch: int, profile, dtype: str = "bf16", dtype_bytes: int = 2,
                      kv_append: bool = True) -> tuple[float, float]:
    """(compute, overhead) seconds of one decode step of ``batch`` rows *beyond its attention* (and beyond the
    cache append): the weight products (weights read once, roofline per product), the elementwise work, and the
    per-call overheads. Its attention depends only on the total number T of cached tokens the rows read
    (``attention_time(spec, profile, 1, 1, T)`` equals ``attention_time(spec, profile, b, 1, T / b)``: FLOPs
    4 a T d_h and bytes 2 T d_kv are both linear in T), which is what a continuous engine with rows of different
    lengths needs (engine.py)."""
    compute = matmul_time(spec, profile, batch, batch, dtype, dtype_bytes)
    compute += elementwise_time(spec, profile, batch, "forward", dtype_bytes, dtype)
    over = profile.call_overhead("decode_step_base_s") + spec.layers * profile.call_overhead("decode_step_layer_s")
    over += _autocast_overhead(spec, profile, "decode", dtype)
    over += expert_overhead(spec, profile, "decode", batch)
    if kv_append:  # the HF generation loop as TRL drives it (loop_benchmarks.py); 0 in profiles without the terms
        over += profile.call_overhead("generate_loop_base_s") + batch * profile.call_overhead("generate_loop_row_s")
    return compute, over


def decode_step_time(spec: ModelSpec, batch: int, context: int, profile, dtype: str = "bf16",
                     dtype_bytes: int | None = None, kv_append: bool = True, parts: dict | None = None) -> float:
    """t_step(b, c): one token for each of ``batch`` sequences whose KV cache holds ``context`` tokens.

    A roofline per step. Flat in b while the weight read (or the per-step overhead) dominates;
    linear in b beyond the knee b* ~ F/BW. ``kv_append``: the cache grows by ``torch.cat``
    (transformers' DynamicCache, the static engine); False for a paged cache (vLLM-style engines).
    ``parts``: a dict the caller keeps across the steps of one generation (same spec, profile, dtype): the
    context-free part :func:`decode_step_parts` is computed once per batch size there (the same numbers;
    a sum over a long generation otherwise recomputes it for every step).
    """
    profile, spec = load_profile(profile), model_spec(spec)
    dtype_bytes = dtype_bytes or (4 if dtype == "fp32" else 2)
    if parts is None:
        compute, over = decode_step_parts(spec, batch, profile, dtype, dtype_bytes, kv_append)
    else:
        if batch not in parts:
            parts[batch] = decode_step_parts(spec, batch, profile, dtype, dtype_bytes, kv_append)
        compute, over = parts[batch]
    compute += attention_time(spec, profile, batch, 1, context, dtype, dtype_bytes)
    if kv_append:
        compute += kv_append_bytes(spec, batch, context, dtype_bytes) / profile.bandwidth(dtype)
    return _combine(profile, compute, over)


def optimizer_time(spec: ModelSpec, profile, state_bytes_per_param: int = 4, shards: int = 1,
                   params: int | None = None, tensors: int | None = None) -> float:
    """One AdamW step: 7 state-sized tensors moved (read p, g, m, v; write p, m, v) + per-tensor overhead.

    ``shards``: under ZeRO (any stage >= 1) the optimizer state is partitioned over the d data-parallel ranks
    and each rank steps only its 1/d (arXiv 1910.02054 Sec. 5.1), so the bytes are 1/d; the per-tensor loop
    still visits every (sharded) tensor, so the overhead is not divided. ``params``/``tensors``: only these are
    trained (LoRA adapters); default the whole model."""
    params = spec.params if params is None else params
    tensors = spec.param_tensors if tensors is None else tensors
    nbytes = 7 * params * state_bytes_per_param / max(1, shards)
    over = profile.call_overhead("optimizer_base_s") + tensors * profile.call_overhead("optimizer_tensor_s")
    return nbytes / profile.bandwidth() + over


def generate_time(spec: ModelSpec, profile, prompt_len: int, lengths, batch: int | None = None,
                  engine: str = "static", dtype: str = "bf16", dtype_bytes: int | None = None) -> float:
    """One ``generate`` call producing ``lengths`` tokens for its rows (a roofline per decode step):

        T_gen = t_prefill(b, P) + generate setup + sum_{k=1}^{R_max - 1} t_step(b_k, P + k)

    ``static`` (transformers): b_k = b for every step, finished rows keep computing until the
    longest ends; ``continuous`` (vLLM-style): b_k = rows with R_i > k.
    """
    profile, spec = load_profile(profile), model_spec(spec)
    lengths = list(lengths)
    if not lengths or min(lengths) < 1:
        raise RlmLabError("generate_time needs a non-empty list of response lengths >= 1")
    dtype_bytes = dtype_bytes or (4 if dtype == "fp32" else 2)
    b = batch or len(lengths)
    t = forward_time(spec, profile, b, prompt_len, b, dtype, dtype_bytes) + profile.call_overhead("generate_base_s")
    parts: dict = {}
    for k in range(1, max(lengths)):
        b_k = b if engine == "static" else sum(1 for r in lengths if r > k)
        t += decode_step_time(spec, b_k, prompt_len + k, profile, dtype, dtype_bytes, engine == "static", parts=parts)
    return t
