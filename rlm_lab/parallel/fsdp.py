"""ZeRO stages 1-3 with PyTorch's own implementations.

* **ZeRO-1** — ``ZeroRedundancyOptimizer`` over DDP: each rank keeps the AdamW state of ~1/d of the
  parameters, updates only those, then broadcasts them from their owner.
* **ZeRO-2** — FSDP2 ``fully_shard(reshard_after_forward=False)``: parameters, gradients and optimizer
  state live sharded (``Shard(0)`` DTensors); each group's parameters are all-gathered once per step and
  kept through the backward pass; gradients are reduce-scattered.
* **ZeRO-3** — FSDP2 ``fully_shard(reshard_after_forward=True)``: the same, but parameters are freed
  after the forward pass and all-gathered again in the backward pass.

Groups: one per decoder layer plus the root (embedding, final norm, LM head), as torchtitan does. With
``reshard_after_forward=True`` every group, the root included, is re-gathered in the backward pass
(counted on torch 2.13: 2·(L+1) all-gathers per step).

Prediction, per rank per step, message bytes M and ring wire bytes (ZeRO, Rajbhandari
et al. 1910.02054; FSDP, Zhao et al. 2304.11277). Ψ_g = padded bytes of group g (FSDP2 pads dim 0 of
every parameter to a multiple of d):

* ZeRO-3: all-gather Σ_g Ψ_g (forward) + Σ_g Ψ_g (backward re-gather), reduce-scatter Σ_g Ψ_g:
  wire 3(d-1)/d·Ψ, 1.5x DDP;
* ZeRO-2: all-gather Σ_g Ψ_g + reduce-scatter Σ_g Ψ_g: wire 2(d-1)/d·Ψ, same as DDP;
* ZeRO-1 (PyTorch's implementation): all-reduce Ψ (DDP) + broadcast Ψ (updated shards), not the
  paper's reduce-scatter + all-gather: message volume 2Ψ.
On gloo every reduce-scatter runs as an all-reduce (the torch profiler shows gloo:all_reduce for c10d reduce_scatter), so its real wire volume is
2(d-1)/d, not (d-1)/d; the counter records what FSDP2 issues.

Memory per rank (AdamW, fp32, 4 bytes/element, N parameters): ZeRO-1 4N + 4N + 8N/d;
ZeRO-2/3 between steps 4N/d + 4N/d + 8N/d (ZeRO-2 holds full params only inside the step).
Ignores: FSDP2's prefetch overlap, the all-gather copy-in/out buffers, fragmentation.
"""

from __future__ import annotations

from math import ceil

from .data_parallel import apply_ddp
from .tensor_parallel import local_shape


def fsdp_groups(model) -> list:
    """The modules that become FSDP2 groups, innermost first: each decoder layer, then the root."""
    return list(model.model.layers) + [model]


def apply_fsdp(model, dp_mesh, zero: int):
    """Shard ``model`` in place with FSDP2 over ``dp_mesh``: ``zero=2`` keeps params gathered through
    backward, ``zero=3`` reshards after forward. Returns the model (now an ``FSDPModule``)."""
    from torch.distributed.fsdp import fully_shard

    if zero not in (2, 3):
        raise ValueError(f"apply_fsdp handles ZeRO-2/3, got {zero}")
    for module in fsdp_groups(model):
        fully_shard(module, mesh=dp_mesh, reshard_after_forward=(zero == 3))
    return model


def apply_zero1(model, dp_mesh, lr: float, weight_decay: float = 0.0):
    """DDP + ``ZeroRedundancyOptimizer(AdamW)``: returns ``(ddp_model, optimizer)``."""
    import torch
    from torch.distributed.optim import ZeroRedundancyOptimizer

    ddp = apply_ddp(model, dp_mesh)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                  process_group=dp_mesh.get_group(), lr=lr, weight_decay=weight_decay)
    return ddp, opt


def _padded_numel(shape, d: int) -> int:
    rest = 1
    for s in shape[1:]:
        rest *= s
    return ceil(shape[0] / d) * d * rest if shape else d


def group_bytes(model, d: int, bytes_per: int = 4, tp: int = 1, sp: bool = False) -> list[int]:
    """Padded parameter bytes Ψ_g of each FSDP2 group (layers first, root last), from the *unsharded*
    model; with ``tp > 1`` from the shapes each rank holds after tensor parallelism (FSDP2 then
    shards those local shards over the ``dp`` dimension)."""
    names = {id(p): n for n, p in model.named_parameters()}
    seen, out = set(), []
    for module in fsdp_groups(model):
        n = 0
        for p in module.parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            n += _padded_numel(local_shape(names[id(p)], tuple(p.shape), tp, sp), d)
        out.append(n * bytes_per)
    return out


def predicted_bytes(groups: list[int], d: int, zero: int, param_bytes: int | None = None) -> dict:
    """Collectives of one step: ``{kind: {"calls", "bytes", "wire_bytes"}}`` (message and ring bytes).

    ``groups``: :func:`group_bytes` (for ZeRO-2/3); ``param_bytes``: Ψ unpadded (for ZeRO-1).
    """
    f = (d - 1) / d
    if d <= 1:
        return {}
    if zero == 1:
        psi = param_bytes if param_bytes is not None else sum(groups)
        return {"all_reduce": {"bytes": psi, "wire_bytes": 2 * f * psi},
                "broadcast": {"bytes": psi, "wire_bytes": f * psi}}
    total = sum(groups)
    k = 2 if zero == 3 else 1  # ZeRO-3 gathers every group again in backward
    return {"all_gather": {"calls": k * len(groups), "bytes": k * total, "wire_bytes": f * k * total},
            "reduce_scatter": {"calls": len(groups), "bytes": total, "wire_bytes": f * total}}


def predicted_memory(n_params: int, d: int, zero: int, bytes_per: int = 4) -> dict:
    """Model-state bytes per rank between steps (ZeRO, arXiv 1910.02054, Fig. 1), AdamW."""
    shard = bytes_per * n_params / d
    if zero == 1:
        return {"params": bytes_per * n_params, "grads": bytes_per * n_params, "optimizer": 2 * shard}
    return {"params": shard, "grads": shard, "optimizer": 2 * shard}
