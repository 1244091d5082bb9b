"""Compose the parallelisms of a :class:`Layout` onto a zoo model: ``parallelize(model, layout, mesh)``.

What it dispatches, plainly:

* **DP / ZeRO** (``data_parallel``, ``fsdp``) and **TP(+SP)** (``tensor_parallel``) compose, in
  torchtitan's order (https://github.com/pytorch/torchtitan, ``parallelize_llama``): TP/SP first rewrites
  the linear layers into DTensor shards over ``mesh["tp"]``, then data parallelism over ``mesh["dp"]``:
  DDP (zero 0, plain DP only), DDP + ZeroRedundancyOptimizer (zero 1, plain DP only) or FSDP2 (zero 2/3),
  which shards whatever TP left (2-D DTensors).
* **PP**, **CP** and **EP** (``pipeline_parallel``, ``context_parallel``, ``expert_parallel``) each run
  **alone** (every other degree 1). :func:`rlm_lab.parallel.mesh.validate` refuses any other combination
  with one clear error before a process starts, and :func:`parallelize` refuses it again (a layout built
  by hand). Composing them with DP/TP (a PP stage wrapped in FSDP2, ring attention on TP shards,
  EP x DP meshes) is what torchtitan does on GPUs and is not built here.

The result is a :class:`Parallelized`: the local module, its optimizer, and the two functions a training
loop needs — how one step consumes the *global* batch on this rank, and how the rank's loss turns into
the global loss — so every layout runs through the same harness (``rlm_lab.parallel.bench.measure``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable

from ..errors import RlmLabError
from . import context_parallel as cp
from . import expert_parallel as ep
from . import pipeline_parallel as pp
from .data_parallel import apply_ddp
from .fsdp import apply_fsdp, apply_zero1
from .mesh import Layout
from .tensor_parallel import apply_tp
from .tensor_parallel import sync_grads as tp_sync_grads


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
                tp_sync_grads(layout_model)
        return loss

    return fb


ALONE = ("pp", "cp", "ep")  # parallelisms that run only with every other degree 1 (see the module doc)


def check_composition(layout: Layout) -> None:
    """Refuse a layout that combines PP, CP or EP with any other parallelism (one clear error)."""
    for d in ALONE:
        if getattr(layout, d) > 1:
            others = [f"--{o} {getattr(layout, o)}" for o in ("dp", "tp", "pp", "cp", "ep")
                      if o != d and getattr(layout, o) > 1]
            if others:
                raise RlmLabError(f"--{d} runs alone here (every other degree 1); it does not compose with "
                                  f"{', '.join(others)}")


def parallelize(model, layout: Layout, mesh, lr: float = 1e-3) -> Parallelized:
    """Apply ``layout`` to ``model`` (in place) over ``mesh``; see the module docstring for what composes."""
    import torch

    check_composition(layout)
    if layout.pp > 1:
        return _pipeline(model, layout, mesh, lr)
    if layout.cp > 1:
        return _context(model, layout, mesh, lr)
    if layout.ep > 1:
        return _experts(model, layout, mesh, lr)
    reference = model
    if layout.tp > 1:
        apply_tp(model, mesh["tp"], sp=layout.sp)
    module, opt = model, None
    if layout.dp > 1:
        if layout.zero == 0:
            module = apply_ddp(model, mesh["dp"])
        elif layout.zero == 1:
            module, opt = apply_zero1(model, mesh["dp"], lr)
        else:
            module = apply_fsdp(model, mesh["dp"], layout.zero)
    if opt is None:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    return Parallelized(module=module, optimizer=opt, forward_backward=_default_forward_backward(module, layout, mesh, model),
                        global_loss=mean_over_world, reference=reference, layout=layout)


def _pipeline(model, layout, mesh, lr: float = 1e-3):
    """A :class:`~rlm_lab.parallel.parallelize.Parallelized` for a PP-only layout.

    Every rank receives the global batch; rank 0 feeds it, the last rank computes the loss.
    ``global_loss`` broadcasts the last rank's loss to all ranks (every rank must call it).
    """
    import torch
    import torch.distributed as dist

    group = mesh["pp"].get_group()
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    stage, module = pp.apply_pp(model, rank, world, group)
    schedule = pp.build_schedule(stage, layout.n_microbatches, layout.schedule)
    last = dist.get_global_rank(group, world - 1)

    def forward_backward(input_ids, labels, phase=_no_phase):
        with phase("forward_backward"):  # the schedule interleaves both passes
            return pp.pp_step(schedule, rank, world, input_ids, labels)

    def global_loss(local):
        t = local.detach().clone().reshape(1) if local is not None else torch.zeros(1)
        dist.broadcast(t, src=last, group=group)
        return t.item()

    ids = {id(p) for p in module.parameters()}
    owned = {n for n, p in model.named_parameters() if id(p) in ids}
    opt = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=0.0)
    return Parallelized(module=module, optimizer=opt, forward_backward=forward_backward, global_loss=global_loss,
                        reference=model, layout=layout, owned=owned, extra={"stage": stage, "schedule": schedule})


def _context(model, layout, mesh, lr: float = 1e-3):
    """A :class:`~rlm_lab.parallel.parallelize.Parallelized` for a CP-only layout."""
    import torch
    import torch.distributed as dist

    group = mesh["cp"].get_group()
    rank, c = dist.get_rank(group), dist.get_world_size(group)
    rings = cp.apply_cp(model, group)

    def forward_backward(input_ids, labels, phase=_no_phase):
        with phase("forward"):
            loss = cp.cp_loss(model, input_ids, labels, c, rank)
        with phase("backward"):
            loss.backward()
        with phase("grad_sync"):
            cp.sync_grads(model, group)
        return loss

    def global_loss(local):
        t = local.detach().clone().reshape(1)
        dist.all_reduce(t, group=group)
        return t.item()

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    return Parallelized(module=model, optimizer=opt, forward_backward=forward_backward, global_loss=global_loss,
                        reference=model, layout=layout, extra={"rings": rings})


def _experts(model, layout, mesh, lr: float = 1e-3):
    """A :class:`~rlm_lab.parallel.parallelize.Parallelized` for an EP-only layout.

    Rank i of the EP group trains on rows [i·B/e, (i+1)·B/e) of the global batch; dense gradients are
    averaged and expert gradients scaled by :func:`~rlm_lab.parallel.expert_parallel.sync_grads`; ``extra["full_tensor"]`` gathers a
    sharded expert tensor (all-gather over the EP group) for comparison with one process.
    """
    import torch
    import torch.distributed as dist

    group = mesh["ep"].get_group()
    rank, e = dist.get_rank(group), dist.get_world_size(group)
    experts = ep.apply_ep(model, group)

    def forward_backward(input_ids, labels, phase=_no_phase):
        b = input_ids.shape[0] // e
        x, y = input_ids[rank * b:(rank + 1) * b], labels[rank * b:(rank + 1) * b]
        with phase("forward"):
            loss = model(input_ids=x, labels=y).loss
        with phase("backward"):
            loss.backward()
        with phase("grad_sync"):
            ep.sync_grads(model, group)
        return loss

    def full_tensor(name, t):
        if not ep.is_expert_param(name):
            return t
        parts = [torch.empty_like(t) for _ in range(e)]
        dist.all_gather(parts, t.contiguous(), group=group)
        return torch.cat(parts)

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    return Parallelized(module=model, optimizer=opt, forward_backward=forward_backward, global_loss=mean_over_world,
                        reference=model, layout=layout, extra={"experts": experts, "full_tensor": full_tensor})
