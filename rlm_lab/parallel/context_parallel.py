"""Context parallelism: causal ring attention over P2P send/recv, zig-zag load balanced.

The sequence is cut into 2c chunks; rank i keeps chunks i and 2c-1-i ("zig-zag"), so every rank
holds one early and one late chunk and does the same causal work. Every other layer (embedding,
MLP, norms, LM head) is per-token and runs on the local tokens unchanged; only attention needs the
other ranks' keys and values. Ring attention passes the K,V blocks around the ring of c ranks:
at step j, rank r holds the block of rank (r-j) mod c, attends to it and merges the partial result
with the online-softmax (log-sum-exp) rule

    lse = logaddexp(lse_a, lse_b);  out = out_a·exp(lse_a-lse) + out_b·exp(lse_b-lse)

(Milakov & Gimelshein 1805.02867; ring attention: Liu et al. 2310.01889; zig-zag: each rank holds chunks i and 2c-1-i).
With zig-zag chunks a block from an earlier rank (src < r) is seen in full by both local chunks
against its first chunk only, and a block from a later rank (src > r) only by the local late chunk:
half of each off-diagonal block is skipped, equally on every rank.

Why not PyTorch's ``context_parallel``: it has no CPU path (no sharding rule for the CPU flash
attention op; the math path fails on mixed Tensor/DTensor; seen on this torch version).

Why autograd through a differentiable ring pass (``_RingPass``) instead of a hand-written backward:
the block attention and the merge are plain differentiable tensor ops, so autograd derives their
backward; only the transfer needs a rule (the gradient of "receive from the left" is "send the
gradient back to the left"). That is the simplest correct choice. Costs, stated: every received
K,V block stays alive for backward (the K,V of the whole sequence per layer, instead of 2 blocks for
flash-style recomputation), and the backward traffic is dK,dV only — exactly the forward volume —
where a recomputing ring attention resends K,V too (≈2x). Transfers do not
overlap the block compute here (real implementations overlap them).

Prediction: per layer and rank, forward sends (c-1) blocks of K and V,
(c-1)/c · 2·b·s·n_kv·d_h·bytes; backward sends the same volume of dK, dV.
"""

from __future__ import annotations

import functools
import time

from ..compat.transformers import set_attn_implementation
from ..cost.comm import cp_ring_bytes
from ..errors import RlmLabError

IMPL = "rlm_ring"  # name registered with transformers' AttentionInterface


def check_cp(seq: int, cp: int) -> None:
    """Zig-zag needs 2·cp equal chunks. Pure; call before any process starts."""
    if cp < 1:
        raise RlmLabError(f"context-parallel degree must be >= 1, got cp={cp}")
    if seq % (2 * cp):
        raise RlmLabError(f"sequence length {seq} must be a multiple of 2 x cp = {2 * cp} "
                          f"(zig-zag load balancing cuts it into 2·cp chunks); change the sequence length or cp")


def zigzag_positions(seq: int, cp: int, rank: int):
    """Global token positions rank ``rank`` holds: chunks rank and 2·cp-1-rank of 2·cp."""
    import torch

    check_cp(seq, cp)
    n = seq // (2 * cp)
    return torch.cat([torch.arange(rank * n, (rank + 1) * n),
                      torch.arange((2 * cp - 1 - rank) * n, (2 * cp - rank) * n)])


def predicted_kv_bytes(batch: int, seq: int, kv_heads: int, head_dim: int, cp: int, layers: int = 1,
                       bytes_per_elem: int = 4) -> dict:
    """Bytes one rank sends per step: ``cost.comm.cp_ring_bytes`` (the formula's one home, (c-1)/c·2·b·s·n_kv·d_h
    bytes per layer forward) times the layers, same backward; an integer (the ring needs s divisible by 2c)."""
    fwd = round(layers * cp_ring_bytes(seq, kv_heads, head_dim, cp, batch, bytes_per_elem))
    return {"fwd": fwd, "bwd": fwd, "total": 2 * fwd}


class RingContext:
    """Where a layer's ring runs (process group, this rank's place in it) and what it sent."""

    def __init__(self, group=None):
        import torch.distributed as dist

        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.reset()

    def reset(self):
        self.stats = {"fwd_sent_bytes": 0, "bwd_sent_bytes": 0, "sends": 0, "ring_s": 0.0}

    def pass_right(self, x, key):
        """Send ``x`` to the next rank, receive the previous rank's tensor of the same shape.

        Every P2P byte of context parallelism goes through here, so it is counted here
        (send bytes; receives are the peer's sends).
        """
        import torch
        import torch.distributed as dist

        t = time.perf_counter()
        x = x.contiguous()
        out = torch.empty_like(x)
        nxt = dist.get_global_rank(self.group, (self.rank + 1) % self.world) if self.group else (self.rank + 1) % self.world
        prv = dist.get_global_rank(self.group, (self.rank - 1) % self.world) if self.group else (self.rank - 1) % self.world
        if key == "bwd_sent_bytes":  # gradients travel the ring the other way
            nxt, prv = prv, nxt
        reqs = [dist.isend(x, nxt, group=self.group), dist.irecv(out, prv, group=self.group)]
        for r in reqs:
            r.wait()
        self.stats[key] += x.numel() * x.element_size()
        self.stats["sends"] += 1
        self.stats["ring_s"] += time.perf_counter() - t
        return out


@functools.cache  # one class per process (defined lazily: no torch import at module import)
def _ring_pass_fn():
    import torch

    class _RingPass(torch.autograd.Function):
        """Forward: receive the left neighbour's block. Backward: return the gradient to it."""

        @staticmethod
        def forward(ctx, x, ring):
            ctx.ring = ring
            return ring.pass_right(x, "fwd_sent_bytes")

        @staticmethod
        def backward(ctx, grad):
            return ctx.ring.pass_right(grad, "bwd_sent_bytes"), None

    return _RingPass


def _attend(q, k, v, scale, mask=None):
    """Block attention with its log-sum-exp: (out (b,h,sq,d), lse (b,h,sq))."""
    import torch

    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.matmul(torch.exp(scores - lse.unsqueeze(-1)), v), lse


def _merge(out, lse, out_b, lse_b):
    import torch

    new = torch.logaddexp(lse, lse_b)
    return out * torch.exp(lse - new).unsqueeze(-1) + out_b * torch.exp(lse_b - new).unsqueeze(-1), new


def ring_attention(module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
    """transformers attention interface: local q (b,h,2n,d), k/v (b,kv,2n,d) in zig-zag order.

    Ignores ``attention_mask``: the causal structure comes from the zig-zag positions (no padding
    masks — context parallelism here is for packed, unpadded training batches).
    """
    import torch

    if dropout:
        raise RlmLabError("ring attention here has no attention dropout; set attention_dropout=0")
    ring = module._rlm_ring
    c, r = ring.world, ring.rank
    n = query.shape[2] // 2
    groups = query.shape[1] // key.shape[1]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    pos = zigzag_positions(2 * c * n, c, r)
    kv = torch.stack([key, value])  # one message per ring step: K and V of n_kv heads (GQA repeat after)
    out = lse = None
    for j in range(c):
        if j < c - 1:
            nxt = _ring_pass_fn().apply(kv, ring)
        k, v = (t.repeat_interleave(groups, dim=1) for t in kv)
        src = (r - j) % c
        if j == 0:  # own block: causal inside, by global position
            out, lse = _attend(query, k, v, scale, pos[:, None] >= pos[None, :])
        elif src < r:  # earlier rank: all local queries see its first (early) chunk in full
            out, lse = _merge(out, lse, *_attend(query, k[:, :, :n], v[:, :, :n], scale))
        else:  # later rank: only the local late chunk sees both of its chunks
            o2, l2 = _merge(out[:, :, n:], lse[:, :, n:], *_attend(query[:, :, n:], k, v, scale))
            out, lse = torch.cat([out[:, :, :n], o2], dim=2), torch.cat([lse[:, :, :n], l2], dim=2)
        if j < c - 1:
            kv = nxt
    return out.transpose(1, 2).contiguous(), None


def _register():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(IMPL, ring_attention)
    # no mask tensor: causality is applied inside ring_attention from the zig-zag positions
    AttentionMaskInterface.register(IMPL, lambda *args, **kwargs: None)


def apply_cp(model, group=None):
    """Switch ``model``'s attention to ring attention over ``group`` (default: the world), in place.

    Returns the list of per-layer :class:`RingContext` (their ``stats`` hold the counted bytes).
    The model must then be called on :func:`shard` -ed inputs with matching ``position_ids``.
    """
    _register()
    set_attn_implementation(model.config, IMPL)
    rings = []
    for layer in model.model.layers:
        layer.self_attn._rlm_ring = RingContext(group)
        rings.append(layer.self_attn._rlm_ring)
    return rings


def shard(input_ids, labels, cp: int, rank: int):
    """This rank's zig-zag share: (input_ids, position_ids, shifted labels) for the local tokens.

    Labels are shifted on the full sequence first (the target of token t is token t+1), because
    after sharding a token's successor may live on another rank.
    """
    import torch

    pos = zigzag_positions(input_ids.shape[1], cp, rank)
    shifted = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], dim=1)
    return input_ids[:, pos], pos.unsqueeze(0).expand(input_ids.shape[0], -1), shifted[:, pos]


def cp_loss(model, input_ids, labels, cp: int, rank: int):
    """This rank's share of the mean next-token loss: local summed CE / global token count.

    Summing it over the CP ranks gives the single-process loss; so does summing the gradients.
    """
    import torch.nn.functional as F

    x, pos, y = shard(input_ids, labels, cp, rank)
    logits = model(input_ids=x, position_ids=pos).logits
    n_global = (labels[:, 1:] != -100).sum()
    return F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100, reduction="sum") / n_global


def sync_grads(model, group=None):
    """Sum the weight gradients over the CP ranks (each saw only its tokens).

    One all-reduce of all gradients flattened into one buffer (DDP's bucketing, with one bucket),
    so the per-message latency is paid once.
    """
    import torch
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    for g, new in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(new.view_as(g))
