"""Tensor parallelism (Megatron-style) with optional sequence parallelism, through DTensor's
``parallelize_module`` on the Hugging Face Llama/Qwen2 modules of the zoo.

Plan per decoder layer: q/k/v and gate/up are column-parallel (each rank computes 1/t of the heads and
of the FFN width), o and down are row-parallel (each rank holds 1/t of the input features and produces a
partial sum). HF attention reshapes with ``view(..., -1, head_dim)``, so a rank sees heads/t heads
without any change to the model code.

Plain TP: the layer input is replicated. Communication per layer (derived from the plan, not the
textbook's "2 forward + 2 backward"; Megatron, Shoeybi et al. 1909.08053 fuse q/k/v and gate/up):
  forward:  one all-reduce per row-parallel module (o, down)                         -> 2
  backward: one all-reduce per column-parallel module, on its input gradient, because each
            ColwiseParallel turns its own replicated input into a DTensor (q, k, v, gate, up)  -> 5
each on a message of b·s·h elements (b local batch, s sequence, h hidden).

Sequence parallelism (Korthikanti et al. 2205.05198): norms run on a sequence shard (``Shard(1)``); the
embedding output is reduce-scattered to ``Shard(1)``; before attention and before the MLP the shard is
all-gathered once (``PrepareModuleInput``), so q/k/v (gate/up) share one DTensor input and their
gradients are summed locally and reduce-scattered once; o/down reduce-scatter their output instead of
all-reducing it; the LM head all-gathers its input and its vocabulary-sharded logits. The per-layer
all-reduces become all-gather + reduce-scatter pairs, the same ring bytes. Norm weights are replicated
DTensors fed sequence shards, so their gradients are all-reduced once each in backward.
The exact list is :func:`predicted_events`; tests check it equals what :class:`CommCounter` sees.

Memory: layer weights, their gradients and AdamW state /t; embedding, norms, LM head replicated in
plain TP (sharded over the vocabulary in the SP plan). Activations inside attention/MLP /t; with SP
also the norm/residual activations /t.
Ignores: overlap of communication with compute (none on gloo), the loss's own reduction.
"""

from __future__ import annotations


def tp_plan(sp: bool = False) -> tuple[dict, dict]:
    """``(root_plan, layer_plan)``: styles for top-level modules and for each decoder layer."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel)

    if not sp:
        return {}, {
            "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(),
        }
    root = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
    # use_local_output=False on the embedding and o/down: the residual stream stays a Shard(1) DTensor
    # (global shape, so HF computes rotary positions and the causal mask for the whole sequence)
    layer = {
        "input_layernorm": SequenceParallel(),
        "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                        desired_input_kwarg_layouts={"hidden_states": Replicate()}),
        "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        "post_attention_layernorm": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
    }
    return root, layer


def apply_tp(model, tp_mesh, sp: bool = False):
    """Parallelize ``model`` in place over the 1-D ``tp_mesh``; returns it."""
    from torch.distributed.tensor.parallel import parallelize_module

    root, layer = tp_plan(sp)
    if root:
        parallelize_module(model, tp_mesh, root)
    for block in model.model.layers:
        parallelize_module(block, tp_mesh, layer)
    return model


_COLWISE = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
_ROWWISE = ("o_proj", "down_proj")


def local_shape(name: str, shape: tuple, tp: int, sp: bool = False) -> tuple:
    """The shape of parameter ``name`` on one rank after :func:`apply_tp` (the plan of :func:`tp_plan`):
    column-parallel weights and biases split dim 0, row-parallel weights dim 1 (their bias is
    replicated); with SP the embedding and the LM head split the vocabulary (dim 0)."""
    shape = tuple(shape)
    if tp <= 1:
        return shape
    module = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else ""
    if module in _COLWISE or (sp and module in ("embed_tokens", "lm_head")):
        return (shape[0] // tp,) + shape[1:]
    if module in _ROWWISE and name.endswith("weight"):
        return (shape[0], shape[1] // tp)
    return shape


def sync_grads(model) -> int:
    """Bring every DTensor gradient to its parameter's placement; returns how many needed it.

    Why by hand: under SP the norm weights are ``Replicate`` but their gradients come out ``Partial``
    (each rank saw only its sequence shard), and the embedding's gradient comes out ``Replicate`` for a
    ``Shard(0)`` weight. AdamW would silently step on the partial sums (Adam's scale invariance even
    hides it in a parameter check). One all-reduce per norm weight fixes it; the embedding only slices.
    """
    n = 0
    for p in model.parameters():
        g = p.grad
        if g is not None and hasattr(g, "placements") and tuple(g.placements) != tuple(p.placements):
            p.grad = g.redistribute(p.device_mesh, p.placements)
            n += 1
    return n


def predicted_events(layers: int, batch: int, seq: int, hidden: int, vocab: int, tp: int, sp: bool = False,
                     colwise_per_layer: int = 5, rowwise_per_layer: int = 2, norms_per_layer: int = 2,
                     bytes_per: int = 4) -> dict:
    """Collectives of one forward+backward, ``{phase: {kind: {"calls", "bytes"}}}`` (message bytes).

    ``batch`` is the batch this TP group processes (the per-DP-rank batch). Derived from the plan in
    :func:`tp_plan` (see the module docstring for why each collective is there).
    """
    if tp <= 1:
        return {}
    act = batch * seq * hidden * bytes_per  # one full activation b·s·h
    L = layers
    if not sp:
        return {"forward": {"all_reduce": {"calls": rowwise_per_layer * L, "bytes": rowwise_per_layer * L * act}},
                "backward": {"all_reduce": {"calls": colwise_per_layer * L, "bytes": colwise_per_layer * L * act}}}
    logits = batch * seq * vocab * bytes_per
    blocks = 2 * L  # attention + MLP per layer
    fwd = {
        # all-gather before each block, + the LM head's input; + the LM head's sharded logits
        "all_gather": {"calls": blocks + 2, "bytes": (blocks + 1) * act + logits},
        # o/down outputs -> Shard(1), + the embedding's partial output -> Shard(1)
        "reduce_scatter": {"calls": blocks + 1, "bytes": (blocks + 1) * act},
    }
    norm_grads = (norms_per_layer * L + 1) * hidden * bytes_per
    bwd = {
        # gradients of the gathers are reduce-scatters and vice versa
        "reduce_scatter": {"calls": blocks + 1, "bytes": (blocks + 1) * act},
        "all_gather": {"calls": blocks + 1, "bytes": (blocks + 1) * act},
        # replicated norm weights on sequence shards: one all-reduce of each weight gradient
        "all_reduce": {"calls": norms_per_layer * L + 1, "bytes": norm_grads},
    }
    return {"forward": fwd, "backward": bwd}
