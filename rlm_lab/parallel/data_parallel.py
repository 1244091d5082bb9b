"""Data parallelism (DDP): every rank holds the whole model, sees 1/d of the batch, and all-reduces
the gradients once per step (in buckets, overlapped with the backward pass).

Prediction (Li et al., "PyTorch Distributed", VLDB 2020, arXiv 2006.15704):

* communication per rank per step: one all-reduce over all gradient bytes Ψ = 4·N (fp32), i.e. a
  message of exactly Ψ bytes (spread over buckets), and 2(d-1)/d·Ψ bytes on the wire with a ring;
* memory per rank: the full model: parameters + gradients + AdamW state = 4N + 4N + 8N bytes (fp32);
* work per rank: 1/d of the forward+backward FLOPs; depth: + one all-reduce.

``broadcast_buffers=False``: the zoo's only buffers are rotary frequencies, identical on every rank,
so the default per-forward buffer broadcast would only add an extra collective to every step.
Ignores: bucketing latency (one α per bucket), overlap of the all-reduce with the backward pass.
"""

from __future__ import annotations

import warnings

from ..cost.comm import dp_allreduce_bytes
from .mesh import local_tensor


def apply_ddp(model, dp_mesh=None, bucket_cap_mb: float = 25.0):
    """Wrap ``model`` in ``DistributedDataParallel`` over ``dp_mesh`` (default: the whole world)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    group = dp_mesh.get_group() if dp_mesh is not None else None
    with warnings.catch_warnings():  # torch 2.13 deprecates the name; its replacement still syncs at init
        warnings.simplefilter("ignore", FutureWarning)
        return DDP(model, process_group=group, broadcast_buffers=False, bucket_cap_mb=bucket_cap_mb)


def grad_bytes(model) -> int:
    """Ψ: bytes of all trainable parameters (= their gradients), local shards for DTensors."""
    return sum(local_tensor(p).numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def predicted_bytes(param_bytes: int, d: int) -> dict:
    """Collectives of one DDP step: ``{kind: {"bytes": message bytes, "wire_bytes": per-rank ring bytes}}``."""
    if d <= 1:
        return {}

    return {"all_reduce": {"bytes": param_bytes, "wire_bytes": dp_allreduce_bytes(param_bytes, d)}}


def predicted_memory(n_params: int, d: int, bytes_per=4) -> dict:
    """Model-state bytes per rank with AdamW (ZeRO, arXiv 1910.02054, Fig. 1): nothing is sharded."""
    return {"params": bytes_per * n_params, "grads": bytes_per * n_params, "optimizer": 2 * bytes_per * n_params}
