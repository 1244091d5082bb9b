"""LoRA in the cost model: the adapters' parameters, and what they change in memory, FLOPs and weight sync.

LoRA (Hu et al., arXiv 2106.09685) freezes W (d_in x d_out) and trains B A with A (r x d_in), B (d_out x r):
r (d_in + d_out) parameters per adapted matrix. PEFT's ``LoraConfig(r, target_modules)``
(https://huggingface.co/docs/peft/package_reference/lora); PEFT's default targets for Llama/Qwen2 are
``q_proj`` and ``v_proj``; ``"all-linear"`` adapts every linear layer of the blocks (not the lm_head).

What changes (used by predict.py when ``predict(..., lora=Lora(...))``):

* memory: the base weights stay (frozen, no gradient, no optimizer state); gradients and AdamW state exist
  for the adapters only; no separate reference model: TRL computes the reference log-probs with the
  adapter disabled on the same model (``use_peft`` path of GRPOTrainer);
* FLOPs: forward adds 2 r (d_in + d_out) per token per adapted matrix; the backward still propagates the
  input gradient through every frozen product (1x the forward's products instead of 2x: no weight
  gradient) and through attention (2x), plus the adapters' full backward (2x their forward);
* weight sync to a separate rollout engine: the adapters' bytes, not the model's.

Ignores: MoE expert matrices (only attention and dense-MLP targets are counted), the input gradient below the
lowest adapter (it is skipped by autograd in reality: a small over-count), dropout on the adapter input.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import RlmLabError
from .spec import ModelSpec

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
DEFAULT_TARGETS = ("q_proj", "v_proj")


@dataclass(frozen=True)
class Lora:
    """``rank`` r and the adapted modules (names as in transformers' Llama/Qwen2; "all-linear" = all 7)."""

    rank: int = 8
    targets: tuple = DEFAULT_TARGETS

    def __post_init__(self):
        if not isinstance(self.rank, int) or isinstance(self.rank, bool) or self.rank < 1:
            raise RlmLabError(f"lora.rank must be an integer >= 1, got {self.rank!r}")
        targets = self.targets
        if targets == "all-linear" or targets == ("all-linear",):
            targets = MODULES
        if isinstance(targets, str):
            targets = (targets,)
        bad = [t for t in targets if t not in MODULES]
        if bad or not targets:
            raise RlmLabError(f"lora.targets: unknown module(s) {', '.join(map(str, bad)) or '(none)'}; "
                              f"choose from {', '.join(MODULES)} or all-linear")
        object.__setattr__(self, "targets", tuple(targets))


def lora_from(value) -> Lora | None:
    """A Lora from None/False (no LoRA), True (PEFT's defaults, r = 8), an int rank, a mapping
    {rank | r, targets | target_modules} (a PEFT LoraConfig's kwargs) or a Lora."""
    if value is None or value is False:
        return None
    if isinstance(value, Lora):
        return value
    if value is True:
        return Lora()
    if isinstance(value, int):
        return Lora(rank=value)
    if isinstance(value, dict):
        known = {"rank", "r", "targets", "target_modules"}
        extra = sorted(set(value) - known - {"lora_alpha", "lora_dropout", "bias", "task_type"})
        if extra:
            raise RlmLabError(f"unknown lora field(s) {', '.join(extra)}; known: {', '.join(sorted(known))}")
        rank = value.get("rank", value.get("r", 8))
        targets = value.get("targets", value.get("target_modules", DEFAULT_TARGETS))
        return Lora(rank=rank, targets=tuple(targets) if isinstance(targets, list) else targets)
    raise RlmLabError(f"lora must be true, a rank or a mapping {{rank, targets}}, got {value!r}")


def _shapes(spec: ModelSpec) -> dict[str, tuple[int, int, int]]:
    """(d_in, d_out, layers holding it) of each adaptable module."""
    h, dense = spec.hidden, spec.layers - spec.moe_layers
    return {"q_proj": (h, spec.d_attn, spec.layers), "k_proj": (h, spec.kv_dim, spec.layers),
            "v_proj": (h, spec.kv_dim, spec.layers), "o_proj": (spec.d_attn, h, spec.layers),
            "gate_proj": (h, spec.intermediate, dense), "up_proj": (h, spec.intermediate, dense),
            "down_proj": (spec.intermediate, h, dense)}


def lora_params(spec: ModelSpec, lora: Lora) -> int:
    """Trainable parameters: sum over adapted matrices of r (d_in + d_out)."""
    shapes = _shapes(spec)
    return sum(lora.rank * (shapes[t][0] + shapes[t][1]) * shapes[t][2] for t in lora.targets)


def lora_tensors(spec: ModelSpec, lora: Lora) -> int:
    """Parameter tensors of the adapters (A and B per adapted matrix)."""
    shapes = _shapes(spec)
    return sum(2 * shapes[t][2] for t in lora.targets)


def lora_forward_flops(spec: ModelSpec, lora: Lora, tokens: int) -> int:
    """The adapters' forward products: x A then (x A) B, 2 r (d_in + d_out) per token per matrix."""
    return 2 * lora_params(spec, lora) * tokens
