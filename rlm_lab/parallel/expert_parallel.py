"""Expert parallelism: a Mixtral zoo model's experts sharded over e ranks, tokens moved by all-to-all.

Each of the e ranks keeps E/e of the E experts of every MoE layer and its own slice of the batch
(for the dense layers the EP ranks are data-parallel ranks). Per MoE layer and step:

1. route locally (the router is replicated): every token picks its top-k experts;
2. **dispatch**: sort the T·k (token, expert) assignments by expert, exchange per-rank counts with a
   small all-to-all, then send each token copy to the rank holding its expert (``all_to_all_single``
   with uneven splits; gloo supports them, torch-dist-cpu.md note 7);
3. run the local experts on what arrived;
4. **combine**: a second all-to-all returns the outputs to their tokens' ranks, which weight them by
   the router scores and sum over the k choices.

Prediction (paper-notes §3.4, §3.7; dispatch/combine structure: Megatron-Core token dispatcher):
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


def expected_a2a_bytes(tokens: int, top_k: int, hidden: int, ep: int, bytes_per_elem: int = 4) -> float:
    """Uniform-routing expectation for one rank and layer, dispatch or combine: T·k·h·bytes·(e-1)/e."""
    return tokens * top_k * hidden * bytes_per_elem * (ep - 1) / ep


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
            if key != "meta":  # the all-to-all's message (incl. the part kept on-rank), as E1's CommCounter sees it
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


def build(model, layout, mesh, lr: float = 1e-3):
    """A :class:`~rlm_lab.parallel.parallelize.Parallelized` for an EP-only layout (E1's harness).

    Rank i of the EP group trains on rows [i·B/e, (i+1)·B/e) of the global batch; dense gradients are
    averaged and expert gradients scaled by :func:`sync_grads`; ``extra["full_tensor"]`` gathers a
    sharded expert tensor (all-gather over the EP group) for comparison with one process.
    """
    import torch
    import torch.distributed as dist

    from .parallelize import Parallelized, _no_phase, mean_over_world

    others = {d: getattr(layout, d) for d in ("dp", "tp", "pp", "cp") if getattr(layout, d) > 1}
    if others:
        raise RlmLabError(f"expert parallelism does not compose with {others} here; run --ep alone")
    group = mesh["ep"].get_group()
    rank, e = dist.get_rank(group), dist.get_world_size(group)
    experts = apply_ep(model, group)

    def forward_backward(input_ids, labels, phase=_no_phase):
        b = input_ids.shape[0] // e
        x, y = input_ids[rank * b:(rank + 1) * b], labels[rank * b:(rank + 1) * b]
        with phase("forward"):
            loss = model(input_ids=x, labels=y).loss
        with phase("backward"):
            loss.backward()
        with phase("grad_sync"):
            sync_grads(model, group)
        return loss

    def full_tensor(name, t):
        if not is_expert_param(name):
            return t
        parts = [torch.empty_like(t) for _ in range(e)]
        dist.all_gather(parts, t.contiguous(), group=group)
        return torch.cat(parts)

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    return Parallelized(module=model, optimizer=opt, forward_backward=forward_backward, global_loss=mean_over_world,
                        reference=model, layout=layout, extra={"experts": experts, "full_tensor": full_tensor})


def _ep_worker(rank, world, model_name, batch, seq, steps, seed):
    import torch
    import torch.distributed as dist

    from .measure_pp_cp_ep import baseline_step_s, peak_rss_mib, random_batch, timed_step, zoo_model

    model = zoo_model(model_name, seed)
    vocab = model.config.vocab_size
    # one rank's share, alone: its rows through the whole model with all experts local
    base = baseline_step_s(model, random_batch(batch, seq, vocab, seed + 7)) if rank == 0 else None
    dist.barrier()
    experts = apply_ep(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rows = []
    for step in range(steps + 1):  # step 0 warms up and is not timed
        x = random_batch(batch * world, seq, vocab, seed + 1 + step)[rank * batch:(rank + 1) * batch]
        for m in experts:
            m.reset_stats()
        times = timed_step(lambda: model(input_ids=x, labels=x).loss, lambda: sync_grads(model), opt)
        if step:
            rows.append({**times, "layers": [dict(m.stats) for m in experts]})
    dense = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if not is_expert_param(n))
    return {"rank": rank, "steps": rows, "baseline_s": base, "peak_rss_mib": peak_rss_mib(), "dense_bytes": dense}


def measure_ep(model: str = "nano-moe", world: int = 2, steps: int = 2, batch: int = 4, seq: int = 32,
               seed: int = 0, profile=None, timeout_s: float = 120.0) -> dict:
    """Run ``steps`` timed expert-parallel steps (``batch`` sequences per rank); compare with predictions.

    Bytes: counted off-rank all-to-all bytes vs the exact formula from the routing counts, and the
    uniform-routing expectation; λ (max/mean load) per layer over experts and over ranks.
    Predicted step: :func:`~rlm_lab.parallel.measure_pp_cp_ep.predict_step_time`.
    """
    from ..models import ZOO, check_model, make_config
    from .launch import spawn
    from .measure_pp_cp_ep import cores, predict_step_time

    spec = ZOO[check_model(model)]
    check_ep(spec.experts, world)
    config = make_config(model)
    h, k = config.hidden_size, spec.top_k
    results = spawn(_ep_worker, world, args=(model, batch, seq, steps, seed), timeout_s=timeout_s)
    per_rank, lam_expert, lam_rank = [], [], []
    last = [r["steps"][-1] for r in results]
    for r, row in zip(results, last):
        counted = {key: sum(L[key] for L in row["layers"]) for key in ("dispatch", "combine", "bwd_dispatch",
                                                                     "bwd_combine", "meta", "message_bytes")}
        exact = [predicted_a2a_bytes(L["send_counts"][0], L["recv_counts"][0], r["rank"], h) for L in row["layers"]]
        avg = {key: sum(x[key] for x in r["steps"]) / len(r["steps"]) for key in ("fwd_s", "bwd_s", "grad_sync_s", "wall_s")}
        per_rank.append({"rank": r["rank"], **avg, "counted": counted, "peak_rss_mib": r["peak_rss_mib"],
                         "send_counts": [L["send_counts"][0] for L in row["layers"]],
                         "recv_counts": [L["recv_counts"][0] for L in row["layers"]],
                         "predicted_fwd": sum(x["fwd"] for x in exact), "predicted_bwd": sum(x["bwd"] for x in exact)})
    for i in range(len(last[0]["layers"])):
        loads = [n for row in last for n in row["layers"][i]["expert_load"][0]]  # rank-major = expert order
        lam_expert.append(imbalance(loads))
        lam_rank.append(imbalance([sum(row["layers"][i]["expert_load"][0]) for row in last]))
    t1 = results[0]["baseline_s"]
    counted_total = sum(sum(x["counted"][key] for key in ("dispatch", "combine", "bwd_dispatch", "bwd_combine"))
                        for x in per_rank)
    out = {
        "parallelism": "ep", "model": model, "world": world, "batch_per_rank": batch, "seq": seq, "steps": steps,
        "experts": spec.experts, "top_k": k, "oversubscribed": world > cores(),
        "loss": sum(x["loss"] for x in last) / world, "step_s": max(x["wall_s"] for x in per_rank),
        "per_rank": per_rank, "lambda_expert": lam_expert, "lambda_rank": lam_rank,
        "baseline_share_s": t1, "dense_bytes": results[0]["dense_bytes"],
        "sent_bytes": counted_total,
        "predicted_bytes": sum(x["predicted_fwd"] + x["predicted_bwd"] for x in per_rank),
        "expected_bytes_uniform": world * 4 * config.num_hidden_layers * expected_a2a_bytes(batch * seq, k, h, world),
        "bytes_match": all(x["counted"]["dispatch"] + x["counted"]["combine"] == x["predicted_fwd"]
                           and x["counted"]["bwd_dispatch"] + x["counted"]["bwd_combine"] == x["predicted_bwd"]
                           for x in per_rank),
    }
    return out | predict_step_time(out, profile)


def _verify_ep_worker(rank, world, model_name, batch, seq, seed):
    import torch.distributed as dist

    from .measure_pp_cp_ep import max_rel, random_batch, zoo_model

    model, ref = zoo_model(model_name, seed), zoo_model(model_name, seed)
    x = random_batch(batch * world, seq, model.config.vocab_size, seed + 1)
    seen = {}
    hooks = [m.model.layers[0].mlp.register_forward_hook(lambda mod, a, o, key=key: seen.__setitem__(key, o))
             for key, m in (("ref", ref), ("ep", model))]
    ref_loss = ref(input_ids=x, labels=x).loss
    ref_loss.backward()
    experts = apply_ep(model)
    rows = slice(rank * batch, (rank + 1) * batch)
    loss = model(input_ids=x[rows], labels=x[rows]).loss
    loss.backward()
    sync_grads(model)
    for h in hooks:
        h.remove()
    t = loss.detach().clone()
    dist.all_reduce(t)
    grads, refg = {}, {}
    for n, p in model.named_parameters():
        g = ref.get_parameter(n).grad
        grads[n], refg[n] = p.grad, (g[rank * p.shape[0]:(rank + 1) * p.shape[0]] if is_expert_param(n) else g)
    return {"loss_abs": abs(t.item() / world - ref_loss.item()),
            "moe_rel": max_rel({"a": seen["ep"]}, {"a": seen["ref"][rows]}), "grad_rel": max_rel(grads, refg),
            "layers": [{k: m.stats[k] for k in ("dispatch", "combine", "bwd_dispatch", "bwd_combine",
                                                 "send_counts", "recv_counts", "expert_load")} for m in experts]}


def verify_ep(model: str = "nano-moe", world: int = 2, batch: int = 2, seq: int = 16, seed: int = 0) -> dict:
    """EP on ``world`` ranks (``batch`` rows each) vs one process on all rows: loss difference, max
    relative error of layer 0's MoE output and of every gradient, counted vs exact-formula bytes."""
    from ..models import ZOO, check_model, make_config
    from .launch import spawn

    check_ep(ZOO[check_model(model)].experts, world)
    h = make_config(model).hidden_size
    res = spawn(_verify_ep_worker, world, args=(model, batch, seq, seed), timeout_s=120)
    counted, predicted = [], []
    for rank, r in enumerate(res):
        counted.append(sum(L[k] for L in r["layers"] for k in ("dispatch", "combine", "bwd_dispatch", "bwd_combine")))
        predicted.append(sum(predicted_a2a_bytes(L["send_counts"][0], L["recv_counts"][0], rank, h)["fwd"] * 2
                             for L in r["layers"]))
    loads = [[n for r in res for n in r["layers"][i]["expert_load"][0]] for i in range(len(res[0]["layers"]))]
    return {"loss_abs": res[0]["loss_abs"], "moe_rel": max(r["moe_rel"] for r in res),
            "grad_rel": max(r["grad_rel"] for r in res), "sent_bytes": counted, "predicted_bytes": predicted,
            "expert_loads": loads, "lambda_expert": [imbalance(x) for x in loads]}
