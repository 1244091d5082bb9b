"""Expert parallelism: a Mixtral zoo model's experts sharded over e ranks, tokens moved by all-to-all.

Each of the e ranks keeps E/e of the E experts of every MoE layer and its own slice of the batch
(for the dense layers the EP ranks are data-parallel ranks). Per MoE layer and step:

1. route locally (the router is replicated): every token picks its top-k experts;
2. **dispatch**: sort the T·k (token, expert) assignments by expert, exchange per-rank counts with a
   small all-to-all, then send each token copy to the rank holding its expert (``all_to_all_single``
   with uneven splits; gloo supports them, checked on this torch version);
3. run the local experts on what arrived;
4. **combine**: a second all-to-all returns the outputs to their tokens' ranks, which weight them by
   the router scores and sum over the k choices.

Prediction (GShard, arXiv 2006.16668; dispatch/combine structure: Megatron-Core token dispatcher):
bytes a rank sends per MoE layer forward = (assignments it sends off-rank + outputs it returns
off-rank)·h·bytes; exact given the routing counts. Uniform routing expects T·k·h·bytes·(e-1)/e
for each of dispatch and combine. Backward repeats both all-to-alls in reverse: same bytes. Load
imbalance λ = max/mean expert load multiplies the expert compute time. Ignores the count and
expert-id exchanges (metadata: e and T·k int64s, reported separately) and any capacity factor
(no tokens are dropped here).
"""

from __future__ import annotations

import functools

from ..errors import RlmLabError


def check_ep(experts: int, ep: int) -> None:
    """Raise a clear error if ``ep`` ranks cannot share ``experts`` equally. Pure; starts nothing."""
    if ep < 1:
        raise RlmLabError(f"expert-parallel degree must be >= 1, got ep={ep}")
    if experts == 0:
        raise RlmLabError("expert parallelism needs a mixture-of-experts model (e.g. nano-moe, micro-moe)")
    if experts % ep:
        raise RlmLabError(f"ep={ep} does not divide the model's {experts} experts; "
                          f"choose ep from {[d for d in range(1, experts + 1) if experts % d == 0]}")


def predicted_a2a_bytes(send_counts, recv_counts, rank: int, hidden: int, bytes_per_elem: int = 4) -> dict:
    """Exact off-rank bytes of one MoE layer on ``rank`` from its routing counts (lists of length e)."""
    dispatch = sum(c for j, c in enumerate(send_counts) if j != rank) * hidden * bytes_per_elem
    combine = sum(c for j, c in enumerate(recv_counts) if j != rank) * hidden * bytes_per_elem
    return {"dispatch": dispatch, "combine": combine, "fwd": dispatch + combine, "bwd": dispatch + combine}


@functools.cache  # one class per process (defined lazily: no torch import at module import)
def _all_to_all_fn():
    import torch

    class _AllToAll(torch.autograd.Function):
        """``all_to_all_single`` whose backward is the reverse all-to-all (splits swapped).

        Hand-written rather than funcol's ``all_to_all_single_autograd`` so that both directions
        pass through :meth:`EPExperts._a2a`, where their off-rank bytes are counted.
        """

        @staticmethod
        def forward(ctx, x, out_splits, in_splits, owner, key):
            ctx.args = (in_splits, out_splits, owner, key)
            return owner._a2a(x, out_splits, in_splits, key)

        @staticmethod
        def backward(ctx, grad):
            in_splits, out_splits, owner, key = ctx.args
            return owner._a2a(grad.contiguous(), in_splits, out_splits, "bwd_" + key), None, None, None, None

    return _AllToAll


def _make_ep_experts(experts, group):
    """``experts`` wrapped as an ``EPExperts`` module over ``group``; a class built here because its base,
    ``torch.nn.Module``, is not imported at this module's top (light parallel.parallelize imports it)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn

    class EPExperts(nn.Module):
        """The local E/e experts of one MoE layer plus the dispatch/combine around them.

        Same call signature as transformers' ``MixtralExperts``:
        ``forward(hidden_states (T,h), top_k_index (T,k), top_k_weights (T,k)) -> (T,h)``.
        """

        def __init__(self):
            super().__init__()
            self.group = group
            self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
            self.num_experts = experts.num_experts
            check_ep(self.num_experts, self.world)
            self.n_local = self.num_experts // self.world
            lo = self.rank * self.n_local
            self.gate_up_proj = nn.Parameter(experts.gate_up_proj.detach()[lo:lo + self.n_local].clone())
            self.down_proj = nn.Parameter(experts.down_proj.detach()[lo:lo + self.n_local].clone())
            self.act_fn = experts.act_fn
            self.reset_stats()

        def reset_stats(self):
            self.stats = {"dispatch": 0, "combine": 0, "bwd_dispatch": 0, "bwd_combine": 0, "meta": 0,
                          "message_bytes": 0, "calls": 0, "send_counts": [], "recv_counts": [], "expert_load": []}

        def _a2a(self, x, out_splits, in_splits, key):
            """One uneven ``all_to_all_single``; counts the bytes that leave this rank."""
            out = x.new_empty((sum(out_splits), *x.shape[1:]))
            dist.all_to_all_single(out, x, out_splits, in_splits, group=self.group)
            row = x[0].numel() * x.element_size() if x.dim() > 1 else x.element_size()
            self.stats[key] += row * (sum(in_splits) - in_splits[self.rank])
            if key != "meta":  # the all-to-all's message (incl. the part kept on-rank), as CommCounter sees it
                self.stats["message_bytes"] += row * max(sum(in_splits), sum(out_splits))
                self.stats["calls"] += 1
            return out

        def forward(self, hidden_states, top_k_index, top_k_weights):
            k = top_k_index.shape[1]
            flat = top_k_index.flatten()
            order = torch.argsort(flat, stable=True)  # assignments grouped by expert, hence by rank
            token, expert = order // k, flat[order]
            dest = expert // self.n_local
            send = torch.bincount(dest, minlength=self.world)
            recv = torch.empty_like(send)
            dist.all_to_all_single(recv, send, group=self.group)  # counts first: splits must be known
            send_l, recv_l = send.tolist(), recv.tolist()
            local_expert = self._a2a(expert - dest * self.n_local, recv_l, send_l, "meta")
            self.stats["meta"] += (self.world - 1) * send.element_size()
            a2a = _all_to_all_fn().apply
            x = a2a(hidden_states[token], recv_l, send_l, self, "dispatch")
            y = torch.zeros_like(x)
            load = torch.bincount(local_expert, minlength=self.n_local)
            for e in range(self.n_local):
                idx = (local_expert == e).nonzero().squeeze(1)
                if idx.numel():
                    gate, up = F.linear(x[idx], self.gate_up_proj[e]).chunk(2, dim=-1)
                    y = y.index_add(0, idx, F.linear(self.act_fn(gate) * up, self.down_proj[e]))
            back = a2a(y, send_l, recv_l, self, "combine")
            back = back * top_k_weights.flatten()[order].unsqueeze(1).to(back.dtype)
            self.stats["send_counts"].append(send_l)
            self.stats["recv_counts"].append(recv_l)
            self.stats["expert_load"].append(load.tolist())
            return torch.zeros_like(hidden_states).index_add(0, token, back)

    return EPExperts()


def _group(mesh_or_group):
    """Accept a 1-D DeviceMesh (``mesh["ep"]``), a ProcessGroup, or None (the world)."""
    return mesh_or_group.get_group() if hasattr(mesh_or_group, "get_group") else mesh_or_group


def moe_blocks(model):
    """The sparse MoE blocks of a Mixtral-style model (modules with a router ``gate`` and ``experts``)."""
    return [m for m in model.modules() if hasattr(m, "gate") and hasattr(m, "experts")
            and hasattr(m.experts, "gate_up_proj")]


def apply_ep(model, mesh_or_group=None):
    """Replace every MoE layer's experts by this rank's E/e experts with all-to-all dispatch, in place.

    Returns the list of new ``EPExperts`` modules (``.stats`` hold counted bytes and routing counts).
    Dense parameters stay replicated: sum their gradients over the EP ranks (:func:`sync_grads`).
    """
    group = _group(mesh_or_group)
    blocks = moe_blocks(model)
    if not blocks:
        raise RlmLabError("expert parallelism needs a mixture-of-experts model (e.g. nano-moe, micro-moe)")
    for b in blocks:
        b.experts = _make_ep_experts(b.experts, group)
    return [b.experts for b in blocks]


def is_expert_param(name: str) -> bool:
    return ".experts." in name


def sync_grads(model, mesh_or_group=None):
    """Gradients of the mean loss over all EP ranks' tokens (each rank's loss: mean over its tokens).

    Dense parameters: average over ranks (one all-reduce of all dense grads flattened into one
    buffer, as DP). Expert parameters already hold the sum over all ranks' tokens (the backward
    all-to-all brought them home): divide by e.
    """
    import torch
    import torch.distributed as dist

    group = _group(mesh_or_group)
    e = dist.get_world_size(group)
    dense = [p.grad for n, p in model.named_parameters() if p.grad is not None and not is_expert_param(n)]
    flat = torch.cat([g.reshape(-1) for g in dense])
    dist.all_reduce(flat, group=group)
    for g, new in zip(dense, flat.split([g.numel() for g in dense])):
        g.copy_(new.view_as(g))
    for p in model.parameters():
        if p.grad is not None:
            p.grad.div_(e)


def imbalance(loads) -> float:
    """λ = max / mean of per-expert (or per-rank) loads."""
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean else 1.0
