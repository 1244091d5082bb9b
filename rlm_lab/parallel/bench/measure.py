"""Run N training steps of a layout on one fixed batch and measure it; compare with one process.

:func:`run_layout` runs inside a process group (torchrun, or ``launch.spawn``) and returns, on every rank:

* ``losses``: the global loss of each step;
* ``step_s``: wall time of each step (barrier before and after, so it is the slowest rank's time);
* ``comm``: the collectives of one step (the last), counted by :class:`CommCounter`:
  ``{kind: {"calls", "bytes", "wire_bytes", "groups"}}`` and ``comm_by_phase`` (forward/backward/optimizer);
* ``memory``: model-state bytes on this rank (parameters, gradients, optimizer state; local shards of
  DTensors) and the process's peak RSS (CPU) or ``max_memory_allocated`` (CUDA);
* ``check`` (if ``reference=True``): the same steps on an unsharded copy in this process on the whole
  batch — max absolute/relative difference of the losses, of every gradient after step 0, and of every
  parameter after the last step.

:func:`spawn_layouts` runs several layouts of the same world size in ONE set of processes (spawning
costs ~4 s per process group on 2 cores) and returns rank 0's results with every rank's memory and comm.

``TOLERANCE`` (tests and the chapter use it): loss |d| <= 1e-5, gradient relative error <= 1e-5, parameters
after the steps |d| <= 2e-5 (1/50 of one AdamW step at lr 1e-3), for a run of 3 steps. Observed on CPU: ~5e-7,
~6e-7, ~5e-6. The loss and parameter bars widen with the length of the run (:func:`drift`); the first step's
gradients keep theirs.

Why the relative error is ``max|a-b| / max|b|`` per tensor: fp32 all-reduces sum in a different order
than one process does, so differences are ~1e-7 of the tensor's scale, not of each element.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time

from ...errors import RlmLabError
from ...host import load_average
from ...models import build_model
from ...record import RunRecord
from ..launch import spawn
from ..mesh import Layout, backend_for, build_mesh, device_type, full_tensor, local_tensor, validate
from ..parallelize import parallelize
from ..predict import comm_mismatches, layout_of, predicted_comm

TOLERANCE = {"loss_abs": 1e-5, "grad_rel": 1e-5, "param_abs": 2e-5}
BASE_STEPS = 3   # the run length the bars of TOLERANCE are set for (the default --steps)


def drift(steps: int) -> float:
    """How much the loss and parameter bars widen after ``steps`` steps: linearly, from 1 at :data:`BASE_STEPS`.

    Two runs that differ only in fp32 summation order (an all-reduce against one process) differ by ~1e-7 per step,
    and every later AdamW update carries the difference on, so a correct layout drifts away from one process with
    the length of the run: 1.1e-4 in the loss and 9.9e-5 in the parameters after 400 DDP steps, 7.9e-4 in the loss
    after 3,000 (issue 42), while the first step's gradients still agree to 5e-7. Fixed bars called such runs wrong.
    Widened linearly they hold those runs (1.3e-3 and 2.7e-3 at 400 steps, 1e-2 at 3,000), and a wrong layout is
    still caught where nothing has drifted: the first step's loss and gradients keep the fixed bars."""
    return max(1.0, steps / BASE_STEPS)


def tolerance_problem(check: dict, tol: dict = TOLERANCE) -> str | None:
    """What of a ``run_layout`` check is outside its bar (None: it matches the single-process run). The loss of step
    ``i`` is judged against ``tol['loss_abs'] * drift(i + 1)`` (its own step, when the check records every step's
    difference), the gradients of the first step against the fixed bar, the final parameters against
    ``tol['param_abs'] * drift(steps)``."""
    steps = max(1, len(check.get("ref_losses") or ()))
    per_step = check.get("loss_abs_steps") or [check["loss_abs"]]
    at = (lambda i: i + 1) if check.get("loss_abs_steps") else (lambda i: steps)
    worst = max(range(len(per_step)), key=lambda i: per_step[i] / drift(at(i)))
    loss_bar, param_bar = tol["loss_abs"] * drift(at(worst)), tol["param_abs"] * drift(steps)
    grad, param = check["grad_abs_rel"][1], check["param_abs_rel"][0]
    if per_step[worst] <= loss_bar and grad <= tol["grad_rel"] and param <= param_bar:
        return None
    return (f"loss |d| {per_step[worst]:.1e} at step {at(worst) - 1} (tolerance {loss_bar:.1e} after "
            f"{at(worst)} step(s)), gradient rel {grad:.1e} ({tol['grad_rel']:.0e}, step 0), parameters |d| "
            f"{param:.1e} ({param_bar:.1e} after {steps} step(s))")


def within_tolerance(check: dict, tol: dict = TOLERANCE) -> bool:
    """Whether a ``run_layout`` check matches the single-process run (:func:`tolerance_problem`)."""
    return tolerance_problem(check, tol) is None


def fixed_batch(batch: int, seq: int, vocab: int, seed: int = 0):
    """One deterministic batch of token ids (labels = inputs, HF shifts them); no padding."""
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randint(2, vocab, (batch, seq), generator=g)
    return x, x.clone()


def state_bytes(par) -> dict:
    """Bytes of parameters, gradients and optimizer state this rank holds (local shards)."""
    import torch

    owned = par.owned
    params = grads = 0
    for name, p in par.reference.named_parameters():
        if owned is not None and name not in owned:
            continue
        lp = local_tensor(p)
        params += lp.numel() * lp.element_size()
        if p.grad is not None:
            lg = local_tensor(p.grad)
            grads += lg.numel() * lg.element_size()
    opt = par.optimizer
    inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer keeps the local AdamW in .optim
    optim = 0
    for st in inner.state.values():
        for v in st.values():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                lv = local_tensor(v)
                optim += lv.numel() * lv.element_size()
    return {"params": params, "grads": grads, "optimizer": optim, "total": params + grads + optim}


def peak_memory_bytes() -> int:
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def reference_run(model_name: str, batch, steps: int, lr: float, seed: int, device: str = "cpu") -> dict:
    """The single-process run the layouts must reproduce: losses, grads after step 0, final params (on CPU).

    It runs on the layout's device: CPU and GPU kernels round differently (a loss 2.4e-6 apart on an H200), and
    ten AdamW steps turn that into parameters 2.3e-4 apart, ten times the tolerance, with no layout involved."""
    import torch

    model, _ = build_model(model_name, seed=seed)
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    x, y = (t.to(device) for t in batch)
    losses, grads = [], {}
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=x, labels=y).loss
        loss.backward()
        if i == 0:
            grads = {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "grads": grads,
            "params": {n: p.detach().cpu().clone() for n, p in model.named_parameters()}}


def _max_diff(got: dict, ref: dict) -> tuple[float, float]:
    abs_err = rel_err = 0.0
    for name, g in got.items():
        r = ref[name]
        d = (g.float().cpu() - r.float()).abs().max().item()
        abs_err = max(abs_err, d)
        rel_err = max(rel_err, d / max(r.abs().max().item(), 1e-30))
    return abs_err, rel_err


def _gather(par, which: str) -> dict:
    """Full tensors of this rank's owned params (or their grads); DTensors are gathered (collective)."""
    out = {}
    full = par.extra.get("full_tensor", lambda name, t: full_tensor(t))
    for name, p in par.reference.named_parameters():
        t = p if which == "params" else p.grad
        if t is None or (par.owned is not None and name not in par.owned):
            continue
        if which == "grads" and hasattr(t, "placements") and tuple(t.placements) != tuple(p.placements):
            # the optimizer would step on this gradient as it is (e.g. a Partial sum): a wrong update
            raise RuntimeError(f"gradient of {name} is {t.placements}, its parameter {p.placements}")
        t = full(name, t.detach())
        if t is not None:
            out[name] = t.detach().clone()
    return out


class _NoCounter:
    """Stands in for :class:`CommCounter` when collectives are not counted (``run_layout(count=False)``):
    the framework-cost calibration times the step with and without the counter's dispatch mode."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def reset(self):
        pass

    def phase(self, name):
        return contextlib.nullcontext()

    def summary(self):
        return {}

    def by_phase(self):
        return {}


def run_layout(layout: Layout, model: str = "nano", steps: int = 3, batch: int = 8, seq: int = 16,
               lr: float = 1e-3, seed: int = 0, reference: bool = True, device: str | None = None,
               count: bool = True) -> dict:
    """Build, parallelize and train ``model`` under ``layout`` for ``steps`` steps; measure (see module doc).

    ``model``: a zoo name or a ``ZooSpec`` (the calibration's hidden-16 models); ``count=False``: no
    :class:`CommCounter` (its dispatch mode costs time per op; ``comm`` is then empty)."""
    import torch
    import torch.distributed as dist

    from ..comm_counter import CommCounter  # noqa: PLC0415  heavy: rlm_lab.parallel.comm_counter imports torch at its top

    device = device or device_type()
    if device == "cuda":
        torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    model_obj, tok = build_model(model, seed=seed)
    validate(layout, model, world_size=dist.get_world_size(), batch=batch, seq=seq, vocab=len(tok))
    mesh = build_mesh(layout, device)
    x, y = fixed_batch(batch, seq, len(tok), seed)
    par = parallelize(model_obj.to(device), layout, mesh, lr=lr)
    xd, yd = x.to(device), y.to(device)

    losses, times, grads0 = [], [], None
    counter = CommCounter() if count else _NoCounter()
    for i in range(steps):
        counter.reset()
        dist.barrier()
        t0 = time.perf_counter()
        with counter:
            par.optimizer.zero_grad(set_to_none=True)
            local = par.forward_backward(xd, yd, counter.phase)
            if i == 0 and reference:
                counter.__exit__(None, None, None)  # gathering grads for the check is not the step's traffic
                grads0 = _gather(par, "grads")
                counter.__enter__()
            with counter.phase("optimizer"):
                par.optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        times.append(time.perf_counter() - t0)
        losses.append(par.global_loss(local))
    out = {
        "layout": layout.to_dict(), "model": model, "steps": steps, "batch": batch, "seq": seq, "lr": lr,
        "rank": dist.get_rank(), "world": dist.get_world_size(), "device": device,
        "losses": losses, "step_s": times,
        "comm": counter.summary(), "comm_by_phase": counter.by_phase(),
        "memory": state_bytes(par) | {"peak_bytes": peak_memory_bytes()},
    }
    if reference:
        ref = reference_run(model, (x, y), steps, lr, seed, device)
        params = _gather(par, "params")
        out["check"] = {
            "loss_abs": max(abs(a - b) for a, b in zip(losses, ref["losses"])),
            "loss_abs_steps": [abs(a - b) for a, b in zip(losses, ref["losses"])],
            "ref_losses": ref["losses"],
            "grad_abs_rel": _max_diff(grads0, ref["grads"]),
            "param_abs_rel": _max_diff(params, ref["params"]),
            "n_grads": len(grads0), "n_params": len(params), "n_ref": len(ref["grads"]),
        }
    return out


def _worker(rank, world, jobs):
    return [run_layout(layout, **kw) for layout, kw in jobs]


def spawn_layouts(layouts: list, world: int | None = None, timeout_s: float = 60.0, **kwargs) -> list[dict]:
    """Run each layout (all of the same world size) in one set of ``world`` processes (gloo).

    ``layouts``: :class:`Layout` objects, or ``(layout, run_layout kwargs)`` pairs that override
    ``kwargs`` for that layout (e.g. another model). Returns one dict per layout: rank 0's result, plus
    ``per_rank`` memory and comm of every rank. Layouts are validated before any process starts.
    """
    if not layouts:
        return []
    jobs = [(lay, kwargs) if isinstance(lay, Layout) else (lay[0], kwargs | lay[1]) for lay in layouts]
    world = world or jobs[0][0].world
    for lay, kw in jobs:
        validate(lay, kw.get("model", "nano"), world_size=world, batch=kw.get("batch", 8), seq=kw.get("seq", 16))
    if world == 1:
        raise RlmLabError("spawn_layouts needs world >= 2; run_layout a 1-process layout directly")

    per_rank = spawn(_worker, world, args=(jobs,), timeout_s=timeout_s, backend=backend_for(device_type()))
    out = []
    for i in range(len(layouts)):
        r0 = dict(per_rank[0][i])
        r0["per_rank"] = [{"memory": pr[i]["memory"], "comm": pr[i]["comm"], "check": pr[i].get("check")}
                          for pr in per_rank]
        out.append(r0)
    return out


def write_record(run_dir, res: dict, config: dict | None = None, force: bool = False):
    """A completed run record of one ``run_layout`` result: config (layout, model, sizes), per-step metrics
    (loss, step time) and results (counted comm per rank, memory per rank, the check, predicted comm).

    ``run_dir``: a folder, or a :class:`~rlm_lab.record.RunRecord` opened before the run (the CLI opens it
    first, so that a refused folder costs no run); ``force`` replaces an existing record in a folder."""
    cfg = {k: res[k] for k in ("layout", "model", "steps", "batch", "seq", "lr", "world", "device")} | (config or {})
    if isinstance(run_dir, RunRecord):
        rec = run_dir
        rec.config.update(cfg)
    else:
        rec = RunRecord(run_dir, config=cfg, seed=0, force=force)
    for i, (loss, t) in enumerate(zip(res["losses"], res["step_s"])):
        rec.log({"step": i, "loss": loss, "step_s": t})
    try:
        pred = predicted_comm(layout_of(res), res["model"], res["batch"], res["seq"])
        mismatches, why_not = comm_mismatches(pred, res["comm"]), None
    except RlmLabError as e:  # no formula for this layout's bytes (EP: routing-dependent; PP beyond 2 stages)
        pred, mismatches, why_not = None, None, str(e)
    rec.complete(**res, predicted_comm=pred, comm_mismatches=mismatches, comm_not_predicted=why_not,
                 oversubscribed=res["world"] > len(os.sched_getaffinity(0)), load_average=load_average())
    return rec.dir
