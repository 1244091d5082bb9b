"""Memory of the models an RL iteration holds: weights, gradients, optimizer state, KV cache,
activations; and ZeRO sharding of the training state.

* Weights: N * bytes. Gradients: N * grad bytes. AdamW state: exp_avg and exp_avg_sq in fp32
  (8 bytes/param) plus, in torch, one fp32 ``step`` scalar per parameter tensor.
* Mixed-precision Adam: 2 + 2 + 12 = 16 bytes/param (bf16 weights and grads; fp32 master copy,
  m, v): ZeRO, Rajbhandari et al., arXiv 1910.02054, Sec. 3.1 ("(2 + 2 + K) Psi, K = 12").
* ZeRO per device with d data-parallel ranks (same paper, Fig. 1): stage 1 4N + 12N/d,
  stage 2 2N + 14N/d, stage 3 16N/d.
* KV cache: kappa * tokens with kappa = 2 L n_kv d_h bytes (K and V of every layer).
* Activations per layer per micro-batch: s b h (34 + 5 a s / h) bytes at 2 bytes/element,
  Korthikanti et al., arXiv 2205.05198, Sec. 4.1 (a GPT block with a 4h MLP); scaled here by
  bytes/2 for fp32. An estimate: a SwiGLU MLP and fused kernels change the constant. On one rank of
  tensor parallelism t without sequence parallelism, s b h (10 + 24 / t + 5 a s / (h t)) (Sec. 4.2.1):
  the layer norms' and dropouts' 10 s b h stay whole on every rank.

* Logits and log-probs: :func:`logprob_bytes` (whole in fp32, or chunked as the frameworks compute them).
* What leaves the device for the host (parameter, optimizer and frozen-model offload, sleep): offload.py.

Ignores: allocator fragmentation and caching, temporary buffers of kernels, CUDA context.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import RlmLabError
from .spec import ModelSpec

PRECISIONS = {
    # name: (weight bytes, grad bytes, optimizer bytes per param)
    "fp32": (4, 4, 8),            # torch AdamW on fp32 params: exp_avg + exp_avg_sq
    "bf16-mixed": (2, 2, 12),     # ZeRO's 2 + 2 + 12
    "bf16": (2, 2, 4),            # pure bf16 AdamW (m, v in bf16)
}


def check_precision(precision: str) -> tuple[int, int, int]:
    if precision not in PRECISIONS:
        raise RlmLabError(f"unknown precision {precision!r}; choose one of: {', '.join(PRECISIONS)}")
    return PRECISIONS[precision]


def weight_bytes(spec: ModelSpec, dtype_bytes: int = 2) -> int:
    return spec.params * dtype_bytes


def grad_bytes(spec: ModelSpec, precision: str = "bf16-mixed") -> int:
    return spec.params * check_precision(precision)[1]


def optimizer_bytes(spec: ModelSpec, precision: str = "bf16-mixed", step_scalars: bool = True) -> int:
    """AdamW state bytes; ``step_scalars`` adds torch's 4-byte ``step`` tensor per parameter tensor."""
    n = spec.params * check_precision(precision)[2]
    return n + (4 * spec.param_tensors if step_scalars else 0)


def train_state_bytes(spec: ModelSpec, precision: str = "bf16-mixed", zero_stage: int = 0, dp: int = 1) -> int:
    """Weights + gradients + optimizer state of a trainable model, per device under ZeRO-``zero_stage``.

    bf16-mixed: 16N unsharded; ZeRO-1 4N + 12N/d; ZeRO-2 2N + 14N/d; ZeRO-3 16N/d (1910.02054).
    """
    w, g, o = check_precision(precision)
    if zero_stage not in (0, 1, 2, 3):
        raise RlmLabError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage}")
    if dp < 1:
        raise RlmLabError(f"dp must be >= 1, got {dp}")
    n = spec.params
    shard = [(w, g, o), (w, g, o / dp), (w, g / dp, o / dp), (w / dp, g / dp, o / dp)][zero_stage]
    return int(n * sum(shard) + 4 * spec.param_tensors)


def kv_cache_bytes(spec: ModelSpec, tokens: int, dtype_bytes: int = 2) -> int:
    """kappa * tokens: K and V of every layer for ``tokens`` cached positions (summed over sequences)."""
    return spec.kv_bytes_per_token(dtype_bytes) * tokens


def generate_kv_tokens(prompt_len: int, response_len: int) -> int:
    """Positions a KV cache holds after ``generate`` of R tokens: P + R - 1 (the last sampled token
    is never fed back through the model)."""
    return prompt_len + max(response_len - 1, 0)


def activation_bytes(spec: ModelSpec, batch: int, seq_len: int, dtype_bytes: int = 2,
                     recompute: str = "none", flash: bool = True) -> int:
    """Activations kept for backward, all layers (Korthikanti et al. 2205.05198, Sec. 4.1, 5.1).

    ``recompute``: "none" s b h (34 + 5 a s / h); "selective" 34 s b h; "full" 2 s b h per layer.
    ``flash``: a fused attention kernel (SDPA, FlashAttention) keeps no a*s*s score matrix, so the
    5 a s / h term drops out -- the same saving as selective recompute of attention.
    A tensor-parallel rank's share (``spec.tp`` = t > 1, its ``heads`` already a / t) keeps
    s b h (10 + 24 / t + 5 a s / (h t)) (Sec. 4.2.1 of the paper; no sequence parallelism); "full" keeps each
    layer's input whole.
    """
    s, b, h, a, t = seq_len, batch, spec.hidden, spec.heads, max(1, spec.tp)
    scores = 0 if flash else 5 * a * s / h
    block = 10 + 24 / t
    per_layer = {"none": s * b * h * (block + scores), "selective": block * s * b * h, "full": 2 * s * b * h}
    if recompute not in per_layer:
        raise RlmLabError(f"unknown recompute {recompute!r}; choose none, selective or full")
    return int(spec.layers * per_layer[recompute] * dtype_bytes / 2)


def logits_bytes(spec: ModelSpec, tokens: int, dtype_bytes: int = 4) -> int:
    """The logits tensor (tokens x the head's width: V for a language model, 1 for a value head), fp32 by default."""
    return tokens * spec.head_width * dtype_bytes


def logprob_bytes(spec: ModelSpec, tokens: int, compute_bytes: int, chunk: int | None = None,
                  grad: bool = False) -> int:
    """Bytes alive while log-probs are taken from the logits of ``tokens`` positions.

    ``chunk`` None (the naive ``log_softmax(logits.float())``): fp32 logits and, with autograd, their fp32
    log-softmax kept for backward: tokens x V x 4 x (2 if grad else 1).
    ``chunk`` C (what the frameworks run): the logits stay in the compute dtype (``compute_bytes``; with autograd their
    gradient of the same size exists in backward) and only C positions' fp32 log-softmax exist at once:
    tokens x V x compute_bytes x (2 if grad else 1) + min(tokens, C) x V x 4. TRL's ``selective_log_softmax``
    loops over rows (C = one sequence's completion; trl/trainer/utils.py); verl's ``logprobs_from_logits`` (flash-attn's
    Triton cross-entropy, verl/utils/torch_functional.py) and its ``entropy_from_logits_with_chunking`` (2048 rows)
    and OpenRLHF's ``log_probs_from_logits`` (row chunks) likewise never hold the whole fp32 softmax.
    Hand check: 1000 positions, V = 1000, bf16, C = 100, grad: 1000 x 1000 x 2 x 2 + 100 x 1000 x 4 = 4.4 MB
    (the naive one: 8 MB)."""
    if chunk is None:
        return logits_bytes(spec, tokens) * (2 if grad else 1)
    return tokens * spec.head_width * compute_bytes * (2 if grad else 1) + min(tokens, chunk) * spec.head_width * 4


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per device, by kind."""

    weights: int = 0
    gradients: int = 0
    optimizer: int = 0
    kv_cache: int = 0
    activations: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.kv_cache + self.activations

    def __add__(self, other: "MemoryBreakdown") -> "MemoryBreakdown":
        return MemoryBreakdown(*(getattr(self, f) + getattr(other, f) for f in _FIELDS))

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in _FIELDS} | {"total": self.total}


_FIELDS = ("weights", "gradients", "optimizer", "kv_cache", "activations")


def model_memory(spec: ModelSpec, trainable: bool, precision: str = "bf16-mixed") -> MemoryBreakdown:
    """Persistent bytes of one held model: 2N for a frozen bf16 model, 16N for a trainable one
    (ZeRO's 16N per trained and 2N per frozen model, arXiv 1910.02054: PPO = 16N + 16N_c + 2N + 2N_r; GRPO = 16N + 2N)."""
    w, g, o = check_precision(precision)
    n = spec.params
    if not trainable:
        return MemoryBreakdown(weights=n * w)
    return MemoryBreakdown(weights=n * w, gradients=n * g, optimizer=n * o + 4 * spec.param_tensors)
