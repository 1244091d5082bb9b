"""Pipeline parallelism measured: per-stage compute time, bytes sent, activations held, the bubble, and
GPipe/1F1B against one process (the mechanism is ``rlm_lab.parallel.pipeline_parallel``).

Prediction side: ``cost.comm.pp_bubble`` (the one home of the formula), ``predicted_p2p_bytes`` and ``in_flight`` of the mechanism module
(GPipe, Huang et al. arXiv 1811.06965; 1F1B, Narayanan et al. arXiv 2104.04473) and
:func:`~rlm_lab.parallel.bench.common.predict_step_time`.
"""

from __future__ import annotations

import time

from ...cost.comm import pp_bubble
from ...errors import RlmLabError
from ...models import make_config
from ..launch import spawn
from ..pipeline_parallel import SCHEDULES, apply_pp, build_schedule, check_pp, in_flight, pp_step, predicted_p2p_bytes
from .common import baseline_step_s, cores, max_rel, peak_rss_mib, predict_step_time, random_batch, zoo_model


class SavedActivations:
    """Bytes of activations autograd holds for backward, now and at peak (``saved_tensors_hooks``).

    Counts each storage once (views and re-saves share it) and skips parameters (they are model
    state, not activations). So micro-batches cut as views of one input tensor share its storage:
    stage 0 counts the whole batch's token ids once (~1% of its peak at toy sizes). On CPU there is no allocator counter to ask; this measures exactly the
    term pipeline schedules differ in: GPipe keeps all m micro-batches' activations until the
    backwards start, 1F1B at most p - stage of them (Narayanan 2104.04473 §2.2).
    """

    def __init__(self, params):
        self.skip = {p.untyped_storage().data_ptr() for p in params}
        self.live: dict[int, list] = {}  # storage ptr -> [references, bytes]
        self.now = self.peak = 0

    def pack(self, t):
        ptr = t.untyped_storage().data_ptr()
        if ptr in self.skip or t.device.type == "meta":
            return t
        entry = self.live.setdefault(ptr, [0, t.untyped_storage().nbytes()])
        if entry[0] == 0:
            self.now += entry[1]
            self.peak = max(self.peak, self.now)
        entry[0] += 1
        return _Held(t, ptr, self)

    @staticmethod
    def unpack(h):
        return h.t if isinstance(h, _Held) else h

    def release(self, ptr):
        entry = self.live[ptr]
        entry[0] -= 1
        if entry[0] == 0:
            self.now -= entry[1]
            del self.live[ptr]


class _Held:
    """A saved tensor; autograd drops it when the graph node that saved it is freed."""

    __slots__ = ("t", "ptr", "owner")

    def __init__(self, t, ptr, owner):
        self.t, self.ptr, self.owner = t, ptr, owner

    def __del__(self):
        self.owner.release(self.ptr)


def _timed_stage_class():
    """A PipelineStage that times its own compute, counts the bytes it sends and tracks the
    activations it holds.

    Why a subclass: the stage is the one place that sees each micro-batch's compute and every
    tensor it sends (``get_*_send_ops``), so time, bytes and memory come from one place.
    (``CommCounter`` sees the same sends as c10d ``send`` ops: a cross-check.)
    A class built here because its base, torch's ``PipelineStage``, is not imported at this module's top.
    """
    import torch
    from torch.distributed.pipelining import PipelineStage

    class TimedStage(PipelineStage):
        def reset_stats(self):
            self.saved = SavedActivations(self.submod.parameters())
            self.stats = {"fwd_s": 0.0, "bwd_s": 0.0, "fwd_sent_bytes": 0, "bwd_sent_bytes": 0,
                          "sends": 0, "saved_bytes_one_mb": 0, "saved_bytes_peak": 0}

        def forward_one_chunk(self, *args, **kwargs):
            t = time.perf_counter()
            before = self.saved.now
            try:
                with torch.autograd.graph.saved_tensors_hooks(self.saved.pack, self.saved.unpack):
                    return super().forward_one_chunk(*args, **kwargs)
            finally:
                self.stats["fwd_s"] += time.perf_counter() - t
                self.stats["saved_bytes_one_mb"] = self.stats["saved_bytes_one_mb"] or self.saved.now - before
                self.stats["saved_bytes_peak"] = self.saved.peak

        def backward_one_chunk(self, *args, **kwargs):
            t = time.perf_counter()
            try:
                return super().backward_one_chunk(*args, **kwargs)
            finally:
                self.stats["bwd_s"] += time.perf_counter() - t

        def _count(self, ops, key):
            for op in ops:
                self.stats[key] += op.tensor.numel() * op.tensor.element_size()
                self.stats["sends"] += 1
            return ops

        def get_fwd_send_ops(self, fwd_chunk_id):
            return self._count(super().get_fwd_send_ops(fwd_chunk_id), "fwd_sent_bytes")

        def get_bwd_send_ops(self, bwd_chunk_id):
            return self._count(super().get_bwd_send_ops(bwd_chunk_id), "bwd_sent_bytes")

    return TimedStage


def timed_stage(model, rank: int, world: int, group=None):
    """This rank's pipeline stage (``pipeline_parallel.apply_pp``) as a stage that times its compute,
    counts the bytes it sends and tracks the activations it holds (``stage.stats``)."""
    stage, module = apply_pp(model, rank, world, group, stage_cls=_timed_stage_class())
    stage.reset_stats()
    return stage, module


def _pp_worker(rank, world, model_name, batch, seq, microbatches, schedule_name, steps, seed, layers):
    import torch
    import torch.distributed as dist

    model = zoo_model(model_name, seed, layers)
    gen = torch.Generator().manual_seed(seed + 1)
    vocab = model.config.vocab_size
    # the share one rank runs per slot, alone: one micro-batch through the whole model (divided by p later)
    base = baseline_step_s(model, random_batch(batch // microbatches, seq, vocab, seed + 7)) if rank == 0 else None
    dist.barrier()  # the other ranks wait while rank 0 times it
    stage, module = timed_stage(model, rank, world)
    schedule = build_schedule(stage, microbatches, schedule_name)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
    rows = []
    for step in range(steps + 1):  # step 0 warms up (allocations, lazy P2P buffers) and is not timed
        input_ids = torch.randint(2, vocab, (batch, seq), generator=gen)
        stage.reset_stats()
        dist.barrier()
        t = time.perf_counter()
        loss = pp_step(schedule, rank, world, input_ids)
        wall = time.perf_counter() - t
        opt.step()
        opt.zero_grad()
        if step:
            rows.append({**stage.stats, "wall_s": wall, "loss": None if loss is None else loss.item()})
    return {"rank": rank, "steps": rows, "peak_rss_mib": peak_rss_mib(), "baseline_s": base,
            "params": sum(p.numel() for p in module.parameters())}


def measure_pp(model: str = "nano", world: int = 2, microbatches: int = 4, schedule: str = "1f1b",
               steps: int = 2, batch: int = 8, seq: int = 32, seed: int = 0, layers: int | None = None,
               profile=None, timeout_s: float = 120.0) -> dict:
    """Run ``steps`` timed pipeline steps on ``world`` processes and compare with the predictions.

    ``layers`` overrides the zoo model's layer count (e.g. 4 layers for pp=4 on ``nano``).
    Returns per-step wall time, per-rank busy (forward+backward compute) time, measured and
    predicted bubble, counted and predicted P2P bytes, saved-activation peaks (measured, and
    predicted as in-flight micro-batches x one micro-batch's), and peak RSS per rank.
    ``bubble_measured`` is the mean over ranks of 1 - busy/wall: it includes P2P waits and the
    scheduler's own overhead, which the formula (p-1)/(m+p-1) leaves out.
    Predicted step time: see :func:`~rlm_lab.parallel.bench.common.predict_step_time`
    (``profile``: calibrated hardware profile; without one the comm term is None).
    """
    config = make_config(model)
    n_layers = layers or config.num_hidden_layers
    check_pp(n_layers, world, batch, microbatches)
    if schedule not in SCHEDULES:
        raise RlmLabError(f"unknown schedule {schedule!r}; choose one of: {', '.join(SCHEDULES)}")
    results = spawn(_pp_worker, world, args=(model, batch, seq, microbatches, schedule, steps, seed, layers),
                    timeout_s=timeout_s)
    pred = predicted_p2p_bytes(batch, seq, config.hidden_size, world)
    per_rank = []
    for r in results:
        rows = r["steps"]
        wall = sum(x["wall_s"] for x in rows) / len(rows)
        busy = sum(x["fwd_s"] + x["bwd_s"] for x in rows) / len(rows)
        sent = rows[-1]["fwd_sent_bytes"] + rows[-1]["bwd_sent_bytes"]
        per_rank.append({"rank": r["rank"], "wall_s": wall, "busy_s": busy, "idle_fraction": 1 - busy / wall,
                         "fwd_s": sum(x["fwd_s"] for x in rows) / len(rows),
                         "bwd_s": sum(x["bwd_s"] for x in rows) / len(rows),
                         "sent_bytes": sent, "predicted_sent_bytes": pred["per_rank"][r["rank"]],
                         "saved_bytes_peak": rows[-1]["saved_bytes_peak"],
                         "saved_bytes_peak_predicted": in_flight(schedule, world, microbatches, r["rank"])
                         * rows[-1]["saved_bytes_one_mb"],
                         "peak_rss_mib": r["peak_rss_mib"], "params": r["params"]})
    step_s = max(x["wall_s"] for x in per_rank)
    slowest_mb = max(x["busy_s"] for x in per_rank) / microbatches
    t1 = results[0]["baseline_s"]
    out = {
        "parallelism": "pp", "model": model, "layers": n_layers, "world": world, "schedule": schedule,
        "microbatches": microbatches, "batch": batch, "seq": seq, "steps": steps,
        "oversubscribed": world > cores(),
        "loss": next(x["steps"][-1]["loss"] for x in results if x["rank"] == world - 1),
        "step_s": step_s, "per_rank": per_rank,
        "bubble_predicted": pp_bubble(world, microbatches),
        "bubble_measured": sum(x["idle_fraction"] for x in per_rank) / world,
        "baseline_share_s": t1,
        # composition, not a fit: (m+p-1) slots of the slowest stage's measured per-micro-batch time
        "step_s_predicted_from_stage_time": (microbatches + world - 1) * slowest_mb,
        "sent_bytes": sum(x["sent_bytes"] for x in per_rank), "predicted_bytes": pred["total"],
        "bytes_match": all(x["sent_bytes"] == x["predicted_sent_bytes"] for x in per_rank),
    }
    return out | predict_step_time(out, profile)


def _verify_pp_worker(rank, world, model_name, batch, seq, microbatches, layers, seed):
    out = {}
    for schedule in SCHEDULES:
        model, ref = zoo_model(model_name, seed, layers), zoo_model(model_name, seed, layers)
        x = random_batch(batch, seq, model.config.vocab_size, seed + 1)
        ref_loss = ref(input_ids=x, labels=x).loss
        ref_loss.backward()
        stage, module = timed_stage(model, rank, world)
        loss = pp_step(build_schedule(stage, microbatches, schedule), rank, world, x)
        names = {id(p): n for n, p in model.named_parameters()}
        refg = {n: p.grad for n, p in ref.named_parameters()}
        grads = {names[id(p)]: p.grad for p in module.parameters()}
        out[schedule] = {"loss": None if loss is None else loss.item(), "ref_loss": ref_loss.item(),
                         "grad_rel": max_rel(grads, refg), "n_grads": len(grads), **stage.stats}
    return out


def verify_pp(model: str = "nano", world: int = 2, batch: int = 8, seq: int = 16, microbatches: int = 4,
              layers: int | None = None, seed: int = 0) -> dict:
    """GPipe and 1F1B on ``world`` ranks vs one process on the same batch, per schedule:
    loss difference, max relative gradient error over all ranks' parameters, counted vs predicted bytes."""
    config = make_config(model)
    check_pp(layers or config.num_hidden_layers, world, batch, microbatches)
    res = spawn(_verify_pp_worker, world, args=(model, batch, seq, microbatches, layers, seed), timeout_s=120)
    pred = predicted_p2p_bytes(batch, seq, config.hidden_size, world)
    out = {}
    for schedule in SCHEDULES:
        rs = [r[schedule] for r in res]
        out[schedule] = {
            "loss_abs": abs(rs[-1]["loss"] - rs[-1]["ref_loss"]), "grad_rel": max(r["grad_rel"] for r in rs),
            "n_grads": sum(r["n_grads"] for r in rs),
            "sent_bytes": [r["fwd_sent_bytes"] + r["bwd_sent_bytes"] for r in rs], "predicted_bytes": pred["per_rank"],
            "saved_bytes_peak": [r["saved_bytes_peak"] for r in rs],
            "saved_bytes_peak_predicted": [in_flight(schedule, world, microbatches, i) * r["saved_bytes_one_mb"]
                                           for i, r in enumerate(rs)]}
    return out
