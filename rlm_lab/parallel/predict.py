"""The collectives of one training step of a layout, from the formulas of each parallelism's module,
and their comparison with what :class:`~rlm_lab.parallel.comm_counter.CommCounter` counted.

DP: ``data_parallel.predicted_bytes``; ZeRO-1/2/3: ``fsdp.predicted_bytes`` (FSDP2 groups padded to d);
TP/SP: ``tensor_parallel.predicted_events``; PP (p = 2): the first stage's sends and receives;
CP: the ring's K,V blocks and the gradient all-reduce. EP's bytes depend on the router's choices and are
predicted from the routing counts (``expert_parallel.predicted_a2a_bytes``), not here.
"""

from __future__ import annotations

from ..errors import RlmLabError
from ..models import build_model
from . import context_parallel, data_parallel, fsdp, pipeline_parallel, tensor_parallel
from .mesh import Layout


def predicted_comm(layout: Layout, model: str = "nano", batch: int = 8, seq: int = 16) -> dict:
    """Collectives of one training step of ``layout`` from the formulas, per rank:
    ``{kind: {"calls": int or None, "bytes": message bytes}}`` (``calls`` None where the count depends
    on an implementation detail such as DDP's bucket sizes). Comparable with ``CommCounter.summary()``.

    Parameter sizes come from an unsharded copy of the model (shapes only matter).
    """
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
    """Rank 0's point-to-point traffic (PP: first stage; CP: one ring member), from the pipeline and context-parallel modules' formulas."""
    if layout.pp > 1:
        if layout.pp != 2:
            raise RlmLabError("rank-0 PP prediction here covers pp=2 (first stage sends and receives once per micro-batch)")
        b = pipeline_parallel.predicted_p2p_bytes(batch, seq, spec.hidden_size, layout.pp)["per_boundary_fwd"]
        m = layout.n_microbatches
        return {"send": {"calls": m, "bytes": b}, "recv": {"calls": m, "bytes": b}}
    head_dim = spec.hidden_size // spec.num_attention_heads
    kv = context_parallel.predicted_kv_bytes(batch, seq, spec.num_key_value_heads, head_dim, layout.cp, spec.num_hidden_layers)
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
