"""Compose the parallelisms of a :class:`Layout` onto a zoo model: ``parallelize(model, layout, mesh)``.

Order (torchtitan's, and the only one that works with DTensor):

1. **PP** splits the model into stages first: every other parallelism then applies to a stage;
2. **TP/SP** rewrites the stage's linear layers into DTensor shards over ``mesh["tp"]``;
3. **EP** replaces each MoE layer's experts by the local ones with all-to-all dispatch over ``mesh["ep"]``;
4. **CP** replaces attention by ring attention over ``mesh["cp"]``;
5. **data parallelism** last, over ``mesh["dp"]``: DDP (zero 0), DDP + ZeroRedundancyOptimizer (zero 1)
   or FSDP2 (zero 2/3), which then shards whatever the steps above left (2-D DTensors for TP).

The result is a :class:`Parallelized`: the local module, its optimizer, and the two functions the
measurement harness (``measure.py``) needs — how one training step consumes the *global* batch on this
rank, and how the rank's loss turns into the global loss. PP, CP and EP (pipeline_parallel.py,
context_parallel.py, expert_parallel.py) each provide ``build(model, layout, mesh, lr) -> Parallelized``,
so every layout runs through the same harness. In this version PP, CP and EP run alone (their ``build``
says so for other combinations); DP/ZeRO compose with TP(+SP) on a 2-D mesh (FSDP2 over ``dp``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable

from .mesh import Layout


def _no_phase(name):
    return contextlib.nullcontext()


@dataclass
class Parallelized:
    """A model after parallelization, ready for ``step``.

    ``forward_backward(input_ids, labels, phase) -> loss``: takes the GLOBAL batch (identical on every
    rank), runs this rank's share of the forward and backward passes (``phase(name)`` labels the
    collectives of each pass), returns this rank's loss tensor (or None where a rank has no loss, e.g.
    a middle pipeline stage). ``global_loss(local) -> float`` turns it into the loss of the whole batch
    (may communicate; it runs outside the counted region). ``reference`` is the original, unwrapped
    module whose ``named_parameters()`` carry the single-process names; ``owned`` (None = all) the
    names whose gradients/updates this rank holds.
    """

    module: object
    optimizer: object
    forward_backward: Callable
    global_loss: Callable
    reference: object
    layout: Layout
    owned: set | None = None
    extra: dict = field(default_factory=dict)

    def step(self, input_ids, labels, phase=_no_phase):
        """One training step: zero grads, forward+backward, optimizer step. Returns the local loss."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward_backward(input_ids, labels, phase)
        with phase("optimizer"):
            self.optimizer.step()
        return loss


def data_slice(x, layout: Layout, mesh):
    """This rank's share of the batch along DP and EP (equal, contiguous slices)."""
    n = layout.data_ranks
    if n == 1:
        return x
    r = mesh["dp"].get_local_rank() * layout.ep + mesh["ep"].get_local_rank()
    b = x.shape[0] // n
    return x[r * b:(r + 1) * b]


def mean_over_world(local) -> float:
    """Global loss when every rank's loss is a mean over equally many tokens (DP, TP, EP, CP)."""
    import torch
    import torch.distributed as dist

    t = local.detach().clone().reshape(1).float()
    dist.all_reduce(t)
    return (t / dist.get_world_size()).item()


def _default_forward_backward(module, layout, mesh, layout_model=None):
    def fb(input_ids, labels, phase=_no_phase):
        x, y = data_slice(input_ids, layout, mesh), data_slice(labels, layout, mesh)
        with phase("forward"):
            loss = module(input_ids=x, labels=y).loss
        with phase("backward"):
            loss.backward()
            if layout.tp > 1:
                from .tensor_parallel import sync_grads

                sync_grads(layout_model)
        return loss

    return fb


def parallelize(model, layout: Layout, mesh, lr: float = 1e-3) -> Parallelized:
    """Apply ``layout`` to ``model`` (in place) over ``mesh``; see the module docstring for the order."""
    import torch

    if layout.pp > 1:
        from . import pipeline_parallel

        return pipeline_parallel.build(model, layout, mesh, lr)
    if layout.cp > 1:
        from . import context_parallel

        return context_parallel.build(model, layout, mesh, lr)
    if layout.ep > 1:
        from . import expert_parallel

        return expert_parallel.build(model, layout, mesh, lr)
    reference = model
    if layout.tp > 1:
        from .tensor_parallel import apply_tp

        apply_tp(model, mesh["tp"], sp=layout.sp)
    module, opt = model, None
    if layout.dp > 1:
        if layout.zero == 0:
            from .data_parallel import apply_ddp

            module = apply_ddp(model, mesh["dp"])
        elif layout.zero == 1:
            from .fsdp import apply_zero1

            module, opt = apply_zero1(model, mesh["dp"], lr)
        else:
            from .fsdp import apply_fsdp

            module = apply_fsdp(model, mesh["dp"], layout.zero)
    if opt is None:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    return Parallelized(module=module, optimizer=opt, forward_backward=_default_forward_backward(module, layout, mesh, model),
                        global_loss=mean_over_world, reference=reference, layout=layout)


def predicted_comm(layout: Layout, model: str = "nano", batch: int = 8, seq: int = 16) -> dict:
    """Collectives of one training step of ``layout`` from the formulas, per rank:
    ``{kind: {"calls": int or None, "bytes": message bytes}}`` (``calls`` None where the count depends
    on an implementation detail such as DDP's bucket sizes). Comparable with ``CommCounter.summary()``.

    Parameter sizes come from an unsharded copy of the model (shapes only matter).
    """
    from ..models import build_model
    from . import data_parallel, fsdp, tensor_parallel

    from ..errors import RlmLabError

    if layout.ep > 1:
        raise RlmLabError("EP bytes depend on the router's choices: expert_parallel.predicted_a2a_bytes "
                          "predicts them from the counts each rank sends")
    m, tok = build_model(model)
    spec = m.config
    out: dict = {}
    if layout.pp > 1 or layout.cp > 1:
        return _predicted_pp_cp(layout, spec, data_parallel.grad_bytes(m), batch, seq)

    def add(kind, calls, nbytes):
        a = out.setdefault(kind, {"calls": 0, "bytes": 0})
        a["calls"] = None if calls is None or a["calls"] is None else a["calls"] + calls
        a["bytes"] += nbytes

    local_batch = batch // layout.data_ranks
    if layout.tp > 1:
        ev = tensor_parallel.predicted_events(spec.num_hidden_layers, local_batch, seq, spec.hidden_size,
                                              len(tok), layout.tp, layout.sp)
        for phase in ev.values():
            for kind, v in phase.items():
                add(kind, v["calls"], v["bytes"])
    if layout.dp > 1:
        psi = data_parallel.grad_bytes(m)
        if layout.zero == 0:
            for kind, v in data_parallel.predicted_bytes(psi, layout.dp).items():
                add(kind, None, v["bytes"])
        elif layout.zero == 1:
            p = fsdp.predicted_bytes([], layout.dp, 1, param_bytes=psi)
            add("all_reduce", None, p["all_reduce"]["bytes"])
            add("broadcast", len(list(m.parameters())), p["broadcast"]["bytes"])
        else:  # FSDP2 shards what TP left on each rank
            groups = fsdp.group_bytes(m, layout.dp, tp=layout.tp, sp=layout.sp)
            for kind, v in fsdp.predicted_bytes(groups, layout.dp, layout.zero).items():
                add(kind, v["calls"], v["bytes"])
    return out


def _predicted_pp_cp(layout: Layout, spec, psi: int, batch: int, seq: int) -> dict:
    """Rank 0's point-to-point traffic (PP: first stage; CP: one ring member), from E2's formulas."""
    if layout.pp > 1:
        from .pipeline_parallel import predicted_p2p_bytes

        if layout.pp != 2:
            from ..errors import RlmLabError

            raise RlmLabError("rank-0 PP prediction here covers pp=2 (first stage sends and receives once per micro-batch)")
        b = predicted_p2p_bytes(batch, seq, spec.hidden_size, layout.pp)["per_boundary_fwd"]
        m = layout.n_microbatches
        return {"send": {"calls": m, "bytes": b}, "recv": {"calls": m, "bytes": b}}
    from .context_parallel import predicted_kv_bytes

    head_dim = spec.hidden_size // spec.num_attention_heads
    kv = predicted_kv_bytes(batch, seq, spec.num_key_value_heads, head_dim, layout.cp, spec.num_hidden_layers)
    steps = 2 * spec.num_hidden_layers * (layout.cp - 1)  # K,V blocks forward, dK,dV backward, per layer
    return {"send": {"calls": steps, "bytes": kv["total"]}, "recv": {"calls": steps, "bytes": kv["total"]},
            "all_reduce": {"calls": 1, "bytes": psi}}  # weight gradients summed over the CP ranks


def comm_mismatches(predicted: dict, counted: dict) -> list[str]:
    """Differences between :func:`predicted_comm` and ``CommCounter.summary()`` (empty = equal):
    the same collective kinds, the same message bytes, and the same calls where predicted."""
    out = []
    for kind in sorted(set(predicted) | set(counted)):
        p, c = predicted.get(kind), counted.get(kind)
        if p is None or c is None:
            out.append(f"{kind}: predicted {p}, counted {c}")
        elif p["bytes"] != c["bytes"] or (p.get("calls") is not None and p["calls"] != c["calls"]):
            out.append(f"{kind}: predicted {p['calls']} calls / {p['bytes']} B, counted {c['calls']} / {c['bytes']} B")
    return out


def layout_of(result: dict) -> Layout:
    """The :class:`Layout` a ``run_layout`` result (or run record config) describes."""
    return Layout(**{k: v for k, v in result["layout"].items() if k not in ("world", "name")})
