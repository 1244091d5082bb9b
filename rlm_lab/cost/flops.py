"""FLOPs of the passes an RL iteration runs: forward, backward, prefill, decode, optimizer.

Counting convention (the one ``torch.utils.flop_counter.FlopCounterMode`` uses, so the tests can
compare exactly): a matrix product (m x k)(k x n) costs 2mkn FLOPs; elementwise ops, softmax,
norms and gathers cost nothing. Then, for one sequence of S tokens:

    forward  = 2 * N_mm * S  +  4 * L * d_attn * S_q * S_k
    backward = 2 * forward

* 2 N_mm per token: Kaplan et al., arXiv 2001.08361, Sec. 2.1 ("C_forward ~ 2N + 2 n_layer n_ctx
  d_attn"); N_mm = :meth:`ModelSpec.matmul_params_per_token` (active experts only).
* 4 L d_attn S_q S_k: QK^T and AV, each 2 S_q S_k d_attn per layer: Megatron-LM, arXiv 2104.04473
  eq. 3 (the 4bs^2h term of 24bsh^2 + 4bs^2h). **Convention: the full score matrix.** In a pass over
  S tokens every token is charged the per-token term 4 L d_attn c with c = S (not its causal position),
  because that is what the kernels run here execute (eager attention and SDPA's math kernel on CPU
  compute the whole S x S matrix and mask it) and what FlopCounterMode counts, so the tests compare
  exactly. A causal kernel that skips masked blocks (FlashAttention) executes
  ``attention_flops(..., causal=True)`` = 2 L d_attn S (S + 1), about half. Decode is causal by
  construction: step k attends to its c = P + k cached keys (:func:`decode_flops`).
* backward = 2 x forward: one product for the input gradient, one for the weight gradient
  ("2 (forward) + 4 (backward) = 6 FLOPs per parameter per token", Kaplan et al., arXiv 2001.08361). Exact
  for matmuls when every weight and activation needs a gradient.
* Activation recomputation adds one forward: Narayanan et al. 2104.04473 eq. 3 (96 = 4 x 24).

Ignores: elementwise work (norms, rotary, SiLU, softmax, loss), which FlopCounterMode also ignores.
"""

from __future__ import annotations

from .spec import ModelSpec

ADAMW_FLOPS_PER_PARAM = 12  # m, v updates, bias corrections, sqrt, division, decay: elementwise, not matmul


def matmul_flops(spec: ModelSpec, tokens: int, logits_tokens: int | None = None) -> int:
    """2 * N_mm * tokens, with the lm_head applied to ``logits_tokens`` positions (default: all)."""
    logits_tokens = tokens if logits_tokens is None else logits_tokens
    body = spec.matmul_params_per_token(lm_head=False)
    return 2 * body * tokens + 2 * spec.head_width * spec.hidden * logits_tokens


def attention_flops(spec: ModelSpec, q_len: int, k_len: int, causal: bool = False) -> int:
    """4 * L * d_attn * q_len * k_len for one sequence (QK^T and AV, full score matrix: the cost model's
    convention, module docstring). ``causal=True``: only the unmasked entries, query i (of the last q_len
    positions of k_len keys) against its k_len - q_len + i keys: 4 L d_attn sum_i (k_len - q_len + i)."""
    if causal:
        keys = q_len * (k_len - q_len) + q_len * (q_len + 1) // 2
        return 4 * spec.layers * spec.d_attn * keys
    return 4 * spec.layers * spec.d_attn * q_len * k_len


def forward_flops(spec: ModelSpec, seq_len: int, logits_tokens: int | None = None) -> int:
    """One forward pass over one sequence of ``seq_len`` tokens, no KV cache."""
    return matmul_flops(spec, seq_len, logits_tokens) + attention_flops(spec, seq_len, seq_len)


def backward_flops(spec: ModelSpec, seq_len: int) -> int:
    """Backward of :func:`forward_flops` (logits at every position): 2 x forward."""
    return 2 * forward_flops(spec, seq_len)


def train_flops(spec: ModelSpec, seq_len: int, recompute: bool = False) -> int:
    """Forward + backward (+ one recomputed forward with full activation checkpointing)."""
    fwd = forward_flops(spec, seq_len)
    return (4 if recompute else 3) * fwd


def prefill_flops(spec: ModelSpec, prompt_len: int, logits_tokens: int = 1) -> int:
    """Generation's prompt pass. transformers' ``generate`` keeps logits of the last position only
    (``logits_to_keep=1``), hence ``logits_tokens=1``."""
    return forward_flops(spec, prompt_len, logits_tokens)


def decode_flops(spec: ModelSpec, prompt_len: int, response_len: int) -> int:
    """Token-by-token generation of ``response_len`` tokens after the prefill of ``prompt_len``.

    The prefill yields token 1; tokens 2..R each need one forward of the previous token with a KV
    cache of c = P + k entries (k = 1..R-1):

        sum_k [2 N_mm + 4 L d_attn (P + k)] = (R-1) 2 N_mm + 4 L d_attn ((R-1) P + (R-1) R / 2)

    (Kaplan et al., arXiv 2001.08361, with the exact step count of a KV-cached decoder).
    """
    steps = max(response_len - 1, 0)
    ctx_sum = steps * prompt_len + steps * (steps + 1) // 2
    return matmul_flops(spec, steps) + 4 * spec.layers * spec.d_attn * ctx_sum


def decode_step_flops(spec: ModelSpec, batch: int, context: int) -> int:
    """One decode step of ``batch`` sequences whose KV cache holds ``context`` tokens each:
    b * f(N, c) with f = 2 N_mm + 4 L d_attn c (Kaplan et al., arXiv 2001.08361)."""
    return batch * (matmul_flops(spec, 1) + attention_flops(spec, 1, context))


def optimizer_flops(params: int) -> int:
    """AdamW step: ~12 elementwise FLOPs per parameter (not counted by FlopCounterMode)."""
    return ADAMW_FLOPS_PER_PARAM * params


def gemm_shapes(spec: ModelSpec, tokens: int, logits_tokens: int | None = None) -> list[tuple[int, int, int, int]]:
    """The matrix products of one forward over ``tokens`` tokens as ``(m, k, n, count)``.

    Used by the time model, which needs the size of each product (small products run far below
    peak). MoE experts get ``tokens * top_k / E`` tokens each (perfect balance).
    """
    h, L = spec.hidden, spec.layers
    logits_tokens = tokens if logits_tokens is None else logits_tokens
    out = [(tokens, h, spec.d_attn, L), (tokens, h, spec.kv_dim, 2 * L), (tokens, spec.d_attn, h, L)]
    dense = L - spec.moe_layers
    if dense:
        out += [(tokens, h, spec.intermediate, 2 * dense), (tokens, spec.intermediate, h, dense)]
    if spec.moe_layers:
        m_e = max(1, round(tokens * spec.top_k / spec.experts))
        n_moe = spec.moe_layers
        out += [(tokens, h, spec.experts, n_moe),
                (m_e, h, spec.expert_intermediate, 2 * spec.experts * n_moe),
                (m_e, spec.expert_intermediate, h, spec.experts * n_moe)]
        if spec.shared_intermediate:
            out += [(tokens, h, spec.shared_intermediate, 2 * n_moe), (tokens, spec.shared_intermediate, h, n_moe),
                    (tokens, h, 1, n_moe)]
    if logits_tokens:
        out.append((logits_tokens, h, spec.head_width, 1))
    return out
