"""Count every collective a rank issues: calls and bytes per collective, per phase.

:class:`CommCounter` is a ``TorchDispatchMode``: every ``torch.distributed`` collective, whether it comes
from plain ``dist.*`` calls, DDP's reducer, FSDP2, DTensor redistributions (``_c10d_functional`` ops) or
pipeline ``send``/``recv``, passes through the dispatcher as a ``c10d``/``_c10d_functional`` op, so one
mode sees them all. PyTorch's ``CommDebugMode`` counts the same ops but gives no sizes and misses
point-to-point ops; that is why this counter is hand-written (``cross_check=True`` runs both and keeps
CommDebugMode's counts for comparison).

What is counted, per call, is the **message**: the full (unsharded) buffer the collective is about,
``max(bytes of its input tensors, bytes of its output tensors)``:
all-reduce and broadcast -> the tensor; all-gather -> the gathered output; reduce-scatter -> the full
input; all-to-all and send/recv -> the tensor sent/received. This is the ``M`` of the textbook formulas.
The bytes a rank puts on the wire depend on the algorithm; :func:`wire_bytes` applies the ring factors
of ``rlm_lab.cost.comm`` (all-reduce 2(d-1)/d, all-gather / reduce-scatter / all-to-all (d-1)/d,
point-to-point 1), the
standard alpha-beta accounting (Thakur, Rabenseifner & Gropp 2005, doi 10.1177/1094342005051521). It ignores that
gloo picks its own algorithms and that **gloo runs reduce-scatter as an all-reduce**
(``c10d::_reduce_scatter_base_`` -> ``gloo:all_reduce`` in the profiler): the counter records what was
*issued* (a reduce-scatter), so on gloo the real wire volume of reduce-scatters is about twice
:func:`wire_bytes`.

Usage::

    counter = CommCounter()
    with counter:
        with counter.phase("forward"):
            loss = model(...).loss
        with counter.phase("backward"):
            loss.backward()
    counter.summary()   # {"all_reduce": {"calls": 14, "bytes": 458752, "group": 2, "wire_bytes": ...}, ...}
    counter.events      # [(phase, op, nbytes, group_size), ...] in issue order

Count a step after the first two: DDP rebuilds its buckets after step 0 and broadcasts the new bucket
layout (a few bytes) at the start of step 1.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import torch
import torch.distributed as dist
from torch.distributed.tensor.debug import CommDebugMode

from ..compat.torch import op_schema, resolve_process_group, torch_dispatch_mode, tree_flatten
from ..cost.comm import bytes_per_rank

NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd")

# op name (without namespace/overload) -> collective kind
_KINDS = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce", "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce", "all_reduce_coalesced": "all_reduce", "all_reduce_coalesced_": "all_reduce",
    "_allgather_base_": "all_gather", "allgather_": "all_gather", "allgather_coalesced_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_out": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall_base_": "all_to_all", "alltoall_": "all_to_all", "all_to_all_single": "all_to_all",
    "broadcast_": "broadcast", "broadcast": "broadcast",
    "send": "send", "recv_": "recv", "recv_any_source_": "recv",
    "reduce_": "reduce", "gather_": "gather", "scatter_": "scatter",
}

# collective kind -> the op name of rlm_lab.cost.comm (its ring factors are the single source)
_COST_OP = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "all_to_all": "all_to_all", "broadcast": "broadcast", "send": "send_recv",
            "reduce": "reduce_scatter", "gather": "all_gather", "scatter": "reduce_scatter"}


def wire_bytes(kind: str, nbytes: int, group_size: int) -> float:
    """Bytes one rank sends for a collective on a message of ``nbytes`` among ``group_size`` ranks
    (ring algorithms, ``rlm_lab.cost.comm.bytes_per_rank``); a receive costs the receiver nothing."""
    if group_size <= 1 or kind not in _COST_OP:
        return 0.0
    return bytes_per_rank(_COST_OP[kind], nbytes, group_size)


def _nbytes(obj) -> int:
    flat = tree_flatten(obj)
    return sum(t.numel() * t.element_size() for t in flat if isinstance(t, torch.Tensor))


def _group_size(args, kwargs) -> int:
    """The size of the process group a collective runs on (a ProcessGroup object or a group name)."""
    flat = tree_flatten((args, kwargs))
    for a in flat:
        if isinstance(a, torch.ScriptObject) or isinstance(a, dist.ProcessGroup):
            try:
                return dist.ProcessGroup.unbox(a).size() if isinstance(a, torch.ScriptObject) else a.size()
            except Exception:  # noqa: BLE001 - not a process group (e.g. a ReduceOp object)
                continue
    for a in flat:
        if isinstance(a, str):
            try:
                return resolve_process_group(a).size()
            except Exception:  # noqa: BLE001 - a string that is not a group name (e.g. "sum")
                continue
    return dist.get_world_size() if dist.is_initialized() else 1


class CommCounter(torch_dispatch_mode()):
    """Records ``(phase, kind, message_bytes, group_size)`` for every collective issued while active."""

    def __init__(self, cross_check: bool = False):
        super().__init__()
        self.events: list[tuple[str, str, int, int]] = []
        self._phase = "all"
        self._cross = None
        if cross_check:
            self._cross = CommDebugMode()

    def __enter__(self):
        if self._cross is not None:
            self._cross.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        if self._cross is not None:
            self._cross.__exit__(*exc)
        return out

    @contextlib.contextmanager
    def phase(self, name: str):
        """Label the collectives issued inside the block (e.g. forward / backward / optimizer)."""
        prev, self._phase = self._phase, name
        try:
            yield
        finally:
            self._phase = prev

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace in NAMESPACES:
            schema = op_schema(func)
            name = schema.name.split("::")[-1]
            kind = _KINDS.get(name)  # None: not a collective (wait_tensor, barrier, _wrap_tensor_autograd, ...)
            if kind is not None:
                ins = {a.name: v for a, v in zip(schema.arguments, args)} | kwargs
                out_args = {k: v for k, v in ins.items() if "output" in k}
                in_bytes = _nbytes([v for k, v in ins.items() if "output" not in k])
                out_bytes = _nbytes(list(out_args.values())) if out_args else _nbytes(out)
                self.events.append((self._phase, kind, max(in_bytes, out_bytes), _group_size(args, kwargs)))
        return out

    def reset(self) -> None:
        self.events.clear()

    def summary(self, phase: str | None = None) -> dict:
        """Per collective kind: calls, message bytes, group size(s) and ring wire bytes (see module doc)."""
        acc = defaultdict(lambda: {"calls": 0, "bytes": 0, "wire_bytes": 0.0, "groups": set()})
        for ph, kind, nbytes, group in self.events:
            if phase is not None and ph != phase:
                continue
            a = acc[kind]
            a["calls"] += 1
            a["bytes"] += nbytes
            a["wire_bytes"] += wire_bytes(kind, nbytes, group)
            a["groups"].add(group)
        return {k: v | {"groups": sorted(v["groups"])} for k, v in sorted(acc.items())}

    def by_phase(self) -> dict:
        return {ph: self.summary(ph) for ph in dict.fromkeys(e[0] for e in self.events)}

    def total_bytes(self) -> int:
        return sum(e[2] for e in self.events)

    def debug_mode_counts(self) -> dict:
        """CommDebugMode's call counts (``cross_check=True`` only), keyed by the op's short name."""
        if self._cross is None:
            return {}
        return {str(op).split(".")[-1]: n for op, n in self._cross.get_comm_counts().items()}
