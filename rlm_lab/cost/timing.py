"""Predicted seconds of one pass on one device: roofline per matrix product plus per-call overhead.

    t_pass = sum over products g of max(FLOPs_g / F(FLOPs_g), bytes_g / BW)  +  overhead(L)

* Roofline per operator: paper-notes Sec. 2.6 (t = max(FLOPs/(eta_F F), bytes/(eta_B BW))), after
  Williams, Waterman & Patterson, "Roofline", CACM 52(4) 2009. F depends on the size of the
  product when the profile has a measured curve (small products run far below peak on CPU).
* Decode step: t_step(b, c) = sum_g max(...) with b tokens, reading the weights once and the KV
  cache b * c * kappa, plus a per-step overhead (paper-notes Sec. 2.6: max((2N + b c kappa)/BW,
  b f(N, c)/F) + per-call latency). With tiny models on CPU the overhead (Python dispatch of every
  op of every layer, sampling) dominates: t_step ~ decode_step_base_s + L * decode_step_layer_s.
* Overheads add to compute when execution is synchronous (CPU) and overlap it when launches are
  asynchronous (GPU, ``overlap_overhead``): t = max(compute, overhead).
* Backward = 2x the forward products (same shapes: dX and dW), plus its own per-layer overhead.
* AdamW step: reads p, g, m, v and writes p, m, v (7 state-sized tensors) at memory bandwidth,
  plus a per-parameter-tensor overhead (torch's for-loop implementation on CPU).

Ignores: elementwise kernels' bytes (norms, rotary, activations), cache effects beyond what the
measured curve captures, thread contention, MoE routing imbalance (perfect balance assumed).
"""

from __future__ import annotations

from .flops import gemm_shapes
from .spec import ModelSpec


def _gemm_time(profile, m: int, k: int, n: int, dtype: str, dtype_bytes: int, count: int = 1) -> float:
    flops = 2.0 * m * k * n
    nbytes = (m * k + k * n + m * n) * dtype_bytes
    return count * profile.roofline_time(flops, nbytes, gemm_flops=flops, dtype=dtype)


def _combine(profile, compute: float, overhead: float) -> float:
    return max(compute, overhead) if profile.overlap_overhead else compute + overhead


def matmul_time(spec: ModelSpec, profile, tokens: int, logits_tokens: int | None, dtype: str, dtype_bytes: int) -> float:
    """Compute time of the weight products of one forward over ``tokens`` tokens (no overhead)."""
    return sum(_gemm_time(profile, m, k, n, dtype, dtype_bytes, c)
               for m, k, n, c in gemm_shapes(spec, tokens, logits_tokens) if m and n)


def attention_time(spec: ModelSpec, profile, batch: int, q_len: int, k_len: int, dtype: str, dtype_bytes: int) -> float:
    """QK^T and AV of all layers: batch*heads products of (q x d_h)(d_h x k), reading K and V."""
    flops = 4.0 * batch * spec.heads * q_len * k_len * spec.head_dim
    kv_read = 2 * batch * k_len * spec.kv_dim * dtype_bytes
    rate_size = flops / 2  # the batched product is one kernel: rate by its total size
    return spec.layers * profile.roofline_time(flops, kv_read, gemm_flops=rate_size, dtype=dtype)


def forward_time(spec: ModelSpec, profile, batch: int, seq_len: int, logits_tokens: int | None = None,
                 dtype: str = "bf16", dtype_bytes: int = 2, overhead: bool = True, grad: bool = False) -> float:
    """One forward call over ``batch`` sequences of ``seq_len`` tokens, no KV cache.

    ``logits_tokens``: total positions that go through the head (default: all). ``grad``: autograd
    records the graph (training forward; its own measured overhead when the profile has one).
    """
    tokens = batch * seq_len
    compute = matmul_time(spec, profile, tokens, logits_tokens, dtype, dtype_bytes)
    compute += attention_time(spec, profile, batch, seq_len, seq_len, dtype, dtype_bytes)
    if not overhead:
        return compute
    kind = "forward_grad" if grad and "forward_grad_base_s" in profile.overhead else "forward"
    over = profile.call_overhead(f"{kind}_base_s") + spec.layers * profile.call_overhead(f"{kind}_layer_s")
    return _combine(profile, compute, over)


def backward_time(spec: ModelSpec, profile, batch: int, seq_len: int, logits_tokens: int | None = None,
                  dtype: str = "bf16", dtype_bytes: int = 2) -> float:
    """Backward of :func:`forward_time`: twice its products plus per-layer backward overhead."""
    compute = 2 * forward_time(spec, profile, batch, seq_len, logits_tokens, dtype, dtype_bytes, overhead=False)
    over = profile.call_overhead("backward_base_s") + spec.layers * profile.call_overhead("backward_layer_s")
    return _combine(profile, compute, over)


def decode_step_time(spec: ModelSpec, batch: int, context: int, profile, dtype: str = "bf16",
                     dtype_bytes: int | None = None) -> float:
    """t_step(b, c): one token for each of ``batch`` sequences whose KV cache holds ``context`` tokens.

    paper-notes Sec. 2.6. Flat in b while the weight read (or the per-step overhead) dominates;
    linear in b beyond the knee b* ~ F/BW.
    """
    from .hardware import load_profile
    from .spec import model_spec

    profile, spec = load_profile(profile), model_spec(spec)
    dtype_bytes = dtype_bytes or (4 if dtype == "fp32" else 2)
    compute = matmul_time(spec, profile, batch, batch, dtype, dtype_bytes)
    compute += attention_time(spec, profile, batch, 1, context, dtype, dtype_bytes)
    over = profile.call_overhead("decode_step_base_s") + spec.layers * profile.call_overhead("decode_step_layer_s")
    return _combine(profile, compute, over)


def optimizer_time(spec: ModelSpec, profile, state_bytes_per_param: int = 4) -> float:
    """One AdamW step: 7 state-sized tensors moved (read p, g, m, v; write p, m, v) + per-tensor overhead."""
    nbytes = 7 * spec.params * state_bytes_per_param
    over = profile.call_overhead("optimizer_base_s") + spec.param_tensors * profile.call_overhead("optimizer_tensor_s")
    return nbytes / profile.bandwidth() + over


def generate_time(spec: ModelSpec, profile, prompt_len: int, lengths, batch: int | None = None,
                  engine: str = "static", dtype: str = "bf16", dtype_bytes: int | None = None) -> float:
    """One ``generate`` call producing ``lengths`` tokens for its rows (paper-notes Sec. 2.6):

        T_gen = t_prefill(b, P) + generate setup + sum_{k=1}^{R_max - 1} t_step(b_k, P + k)

    ``static`` (transformers): b_k = b for every step, finished rows keep computing until the
    longest ends; ``continuous`` (vLLM-style): b_k = rows with R_i > k.
    """
    from .hardware import load_profile
    from .spec import model_spec

    profile, spec = load_profile(profile), model_spec(spec)
    lengths = list(lengths)
    if not lengths or min(lengths) < 1:
        from ..errors import RlmLabError

        raise RlmLabError("generate_time needs a non-empty list of response lengths >= 1")
    dtype_bytes = dtype_bytes or (4 if dtype == "fp32" else 2)
    b = batch or len(lengths)
    t = forward_time(spec, profile, b, prompt_len, b, dtype, dtype_bytes) + profile.call_overhead("generate_base_s")
    for k in range(1, max(lengths)):
        b_k = b if engine == "static" else sum(1 for r in lengths if r > k)
        t += decode_step_time(spec, b_k, prompt_len + k, profile, dtype, dtype_bytes)
    return t
