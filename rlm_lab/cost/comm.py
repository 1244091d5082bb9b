"""Collective communication: bytes each rank sends (ring algorithms) and alpha-beta time.

Bytes sent per rank for a tensor of S bytes (the full, unsharded size) over d ranks, ring
algorithms (Thakur, Rabenseifner & Gropp 2005, doi 10.1177/1094342005051521: the "2(N-1)/N" factor):

    all_reduce       2 (d-1)/d * S      (reduce-scatter + all-gather)
    all_gather       (d-1)/d * S        (S = gathered output size)
    reduce_scatter   (d-1)/d * S        (S = input size)
    all_to_all       (d-1)/d * S        (S = this rank's send buffer)
    broadcast        (d-1)/d * S        (pipelined ring / scatter + all-gather; latency log d)
    send_recv        S                  (one point-to-point message)

Time of one collective (Hockney's alpha-beta model): t = alpha(d) + beta * bytes_per_rank(op, S, d),
with alpha and beta per op fitted by ``rlm-lab calibrate`` (or assumed in datasheet profiles).
A profile measured at world d0 is scaled to d by the ring step count: alpha(d) = alpha(d0) * (d-1)/(d0-1).

**Topology** (where the ranks sit): a group inside one node runs at the profile's fitted (NVLink) beta. A group
spanning ``nodes`` nodes with k = ceil(d / nodes) ranks in each runs NCCL's rings through the nodes' network
cards, one card per GPU (rail-optimized nodes: NVIDIA DGX SuperPOD reference architecture,
https://docs.nvidia.com/dgx-superpod/reference-architecture/ ; NCCL builds one ring per card,
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html), so the k ranks of a node share k cards:
the per-rank bandwidth is min(intra-node, k x the card's), i.e. beta = max(beta_intra, 1 / (k B_net)), and each
of the ring's d - 1 steps waits for the network's latency: alpha = (d - 1) alpha_net. A group with one rank per
node (a data-parallel group strided by tensor parallelism) gets one card's bandwidth; a group with all 8 GPUs of
each node gets 8 cards'. :class:`Topology` says how many nodes a group of ranks spans.

gloo specifics (seen in torch.profiler traces on this torch version): FSDP2's reduce-scatter runs as a
``gloo:all_reduce`` on CPU, so its bytes are all-reduce-sized; :func:`bytes_per_rank` applies that
with ``backend="gloo"``. gloo's all-to-all (equal and uneven splits) works (probe 7).

Ignores: contention between concurrent collectives, in-network reduction (SHARP, NVLS), tree algorithms at
small sizes (NCCL switches algorithm by size), compute of reductions, a card shared by two groups at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import RlmLabError

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")


def ring_factor(op: str, world: int, backend: str = "nccl") -> float:
    """Bytes sent per rank as a fraction of the full tensor size S (table in the module docstring)."""
    if op not in OPS:
        raise RlmLabError(f"unknown collective {op!r}; choose one of: {', '.join(OPS)}")
    if world < 1:
        raise RlmLabError(f"world size must be >= 1, got {world}")
    if op == "send_recv":
        return 1.0
    d = world
    if op == "reduce_scatter" and backend == "gloo":
        op = "all_reduce"  # gloo: reduce-scatter is implemented as an all-reduce (the torch profiler shows gloo:all_reduce for c10d reduce_scatter)
    return (2.0 if op == "all_reduce" else 1.0) * (d - 1) / d


def bytes_per_rank(op: str, nbytes: float, world: int, backend: str = "nccl") -> float:
    """Bytes one rank sends for a collective on a tensor of ``nbytes`` (full size), ring algorithm."""
    return ring_factor(op, world, backend) * nbytes


def collective_time(op: str, nbytes: float, world: int, profile, nodes: int = 1) -> float:
    """Seconds for one collective on a tensor of ``nbytes`` over ``world`` ranks: alpha + beta * bytes.

    ``profile`` is a :class:`~rlm_lab.cost.hardware.HardwareProfile`; its fitted (alpha, beta) at
    its calibration world size d0 is rescaled to ``world`` (module docstring). world == 1 costs 0.
    ``nodes``: how many nodes the ranks span (module docstring: topology); 1 = inside one node.
    """
    if world <= 1 and op != "send_recv":
        return 0.0
    fit = profile.collective(op)
    d0 = max(fit.get("world", 2), 2)
    alpha = fit["alpha_s"] * (max(world - 1, 1) / (d0 - 1))
    beta = fit["beta_s_per_byte"]
    if nodes > 1:
        per_node = math.ceil(world / nodes)
        beta = max(beta, 1.0 / (per_node * profile.network_bandwidth()))
        alpha = max(alpha, max(world - 1, 1) * profile.network_alpha())
    return alpha + beta * bytes_per_rank(op, nbytes, world, profile.backend)


@dataclass(frozen=True)
class Topology:
    """Nodes of ``devices_per_node`` devices (None: one node holds everything); devices are numbered in order,
    node j holding devices [j p, (j + 1) p)."""

    devices_per_node: int | None = None

    def nodes(self, start: int, count: int, stride: int = 1) -> int:
        """Nodes spanned by the ``count`` devices start, start + stride, ...: 1 when they share one node."""
        p = self.devices_per_node
        if not p or count <= 1:
            return 1
        return len({(start + i * stride) // p for i in range(count)})


@dataclass(frozen=True)
class RankSpan:
    """Where one prediction's ranks sit and what memory its devices have (placement.py builds one per set):
    tensor- and expert-parallel sizes, the nodes the tensor-, expert- and data-parallel groups span, the device
    capacity (None: the profile's) and the bytes other models hold on a device while the engine generates
    (None: the prediction's own persistent state). ``shard`` (hybrid sharding, PyTorch FSDP's HYBRID_SHARD and
    verl's ``fsdp_size``, arXiv 2304.11277 Sec. 3.2): the training state is sharded inside groups of ``shard``
    data-parallel ranks and replicated across the groups, so the gathers stay inside a group (inside a node when it
    fits one) and the gradients are all-reduced across the replicas once per optimizer step."""

    tp: int = 1
    ep: int = 1
    tp_nodes: int = 1
    ep_nodes: int = 1
    dp_nodes: int = 1
    capacity: float | None = None
    held: float | None = None
    shard: int = 0           # HSDP: ZeRO shards over groups of this many data-parallel ranks (0: all of them)
    shard_nodes: int = 1     # the nodes one shard group spans
    sp: int = 1              # Ulysses sequence parallelism: ranks that split each sequence's tokens
    sp_nodes: int = 1        # the nodes one sequence-parallel group spans


def layer_comm_time(spec, tokens: float, profile, layout: RankSpan, dtype_bytes: int = 2) -> float:
    """Collectives of one forward pass over ``tokens`` tokens on one rank: tensor parallelism's 2 all-reduces
    of tokens x h per layer (Megatron-LM, arXiv 1909.08053 Sec. 3) and expert parallelism's dispatch and combine
    all-to-alls of tokens x top_k x h per MoE layer (GShard, arXiv 2006.16668 Sec. 2; :func:`ep_all_to_all_bytes`).
    A backward pass moves the same again (callers count passes)."""
    t = 0.0
    if layout.tp > 1:
        msg = tp_message_bytes(tokens, 1, spec.hidden, dtype_bytes)
        t += 2 * spec.layers * collective_time("all_reduce", msg, layout.tp, profile, layout.tp_nodes)
    if layout.ep > 1 and spec.moe_layers:
        msg = tokens * spec.top_k * spec.hidden * dtype_bytes
        t += 2 * spec.moe_layers * collective_time("all_to_all", msg, layout.ep, profile, layout.ep_nodes)
    return t


# ---- volumes of the intra-model parallelisms (Megatron-LM arXiv 1909.08053; ZeRO arXiv 1910.02054; sequence parallelism arXiv 2205.05198) ------------------------

def dp_allreduce_bytes(grad_bytes: float, dp: int) -> float:
    """Data parallel: ring all-reduce of the gradients, 2(d-1)/d * Psi per rank per step."""
    return bytes_per_rank("all_reduce", grad_bytes, dp)


def zero3_bytes(param_bytes: float, dp: int) -> float:
    """ZeRO-3 / FSDP: all-gather (forward) + all-gather (backward) + reduce-scatter = 3(d-1)/d * Psi
    per rank per step, 1.5x data parallel (Rajbhandari et al. 1910.02054, Sec. 7.2.2)."""
    return 3 * (dp - 1) / dp * param_bytes


def tp_message_bytes(batch: int, seq_len: int, hidden: int, dtype_bytes: int = 2) -> int:
    """Tensor parallel: one all-reduced activation b*s*h elements (Megatron 1909.08053, Sec. 3)."""
    return batch * seq_len * hidden * dtype_bytes


def tp_layer_allreduces(training: bool = True) -> int:
    """All-reduces per layer: 2 forward + 2 backward when training, 2 per decode/forward pass
    (Megatron 1909.08053: "two all-reduces in the forward path and two in the backward path")."""
    return 4 if training else 2


def pp_bubble(stages: int, microbatches: int) -> float:
    """Pipeline bubble as a fraction of wall time: (p-1)/(m+p-1) (GPipe, 1811.06965; Narayanan
    2104.04473 gives (p-1)/m relative to the ideal time)."""
    if stages < 1 or microbatches < 1:
        raise RlmLabError("pipeline stages and micro-batches must be >= 1")
    return (stages - 1) / (microbatches + stages - 1)


def cp_ring_bytes(seq_len: int, kv_heads: int, head_dim: int, cp: int, batch: int = 1, dtype_bytes: int = 2) -> float:
    """Ring context parallel, one layer forward: (c-1)/c * 2 b s n_kv d_h bytes of K and V blocks per rank."""
    return (cp - 1) / cp * 2 * batch * seq_len * kv_heads * head_dim * dtype_bytes


def ep_all_to_all_bytes(tokens: int, top_k: int, hidden: int, ep: int, dtype_bytes: int = 2) -> float:
    """Expert parallel dispatch of one MoE layer forward: T k h bytes * (e-1)/e per rank (the combine
    all-to-all moves the same again; backward doubles both)."""
    return (ep - 1) / ep * tokens * top_k * hidden * dtype_bytes


def weight_sync_time(param_bytes: float, link_bytes_per_s: float, latency_s: float = 0.0) -> float:
    """Disaggregated weight sync: Psi / BW_link + latency (HybridFlow, arXiv 2409.19256, Sec. 5.4)."""
    return param_bytes / link_bytes_per_s + latency_s
