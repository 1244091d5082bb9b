"""Pipeline parallelism: a zoo Llama cut into p stages, run by ``torch.distributed.pipelining``.

Each rank holds a contiguous block of decoder layers; stage 0 also embeds the tokens and the last
stage also applies the final norm, the LM head and the loss. A batch of B sequences is cut into m
micro-batches; ``ScheduleGPipe`` runs all forwards then all backwards, ``Schedule1F1B`` alternates
them once the pipeline is full (same bubble, fewer activations in flight).

Prediction (paper-notes §3.4; GPipe, Huang et al. 1811.06965; Narayanan et al. 2104.04473):

* bubble: with equal stages and free communication every rank idles for (p-1) of the (m+p-1)
  micro-batch slots of a step, an idle fraction (p-1)/(m+p-1) (= (p-1)/m relative to ideal time);
* traffic: each stage boundary carries one activation tensor per micro-batch forward,
  (B/m)·s·h·bytes, and its gradient (same size) backward: 2·B·s·h·bytes per boundary per step.

Ignores: unequal stages (stage 0 embeds, the last stage runs the LM head and the loss), P2P
latency and the scheduler's own overhead, which dominate at toy sizes — the measured bubble shows
how far that takes a real run from the formula.

Why the split is by hand: tracing the HF model with ``pipeline()`` makes the causal mask a stage
input, an ``expand``-ed (non-contiguous) tensor gloo cannot ``irecv`` into (torch-dist-cpu.md
note 5). Each stage therefore recomputes positions, rotary embeddings and the mask itself, so the
only tensor crossing a boundary is the hidden state.
"""

from __future__ import annotations

import time

from ..errors import RlmLabError

SCHEDULES = ("gpipe", "1f1b")


def check_pp(layers: int, pp: int, batch: int | None = None, microbatches: int | None = None) -> None:
    """Raise a clear error for a layout the pipeline cannot run (call before any process starts)."""
    if pp < 1:
        raise RlmLabError(f"pipeline degree must be >= 1, got pp={pp}")
    if layers % pp:
        raise RlmLabError(f"pp={pp} does not divide the model's {layers} layers; "
                          f"choose pp from {[d for d in range(1, layers + 1) if layers % d == 0]}")
    if microbatches is not None:
        if microbatches < pp:  # torch's single-stage schedules require it (else stages would sit empty)
            raise RlmLabError(f"{microbatches} micro-batches < {pp} pipeline stages; use at least {pp}")
        if batch is not None and batch % microbatches:
            raise RlmLabError(f"{microbatches} micro-batches do not divide the batch of {batch}; "
                              f"use a divisor of {batch}")


def bubble_fraction(pp: int, microbatches: int) -> float:
    """Idle fraction of a GPipe/1F1B step with equal stages: (p-1)/(m+p-1)."""
    return (pp - 1) / (microbatches + pp - 1)


def predicted_p2p_bytes(batch: int, seq: int, hidden: int, pp: int, bytes_per_elem: int = 4) -> dict:
    """Bytes sent per step: activations forward and their gradients backward, per boundary.

    Each of the p-1 boundaries carries B·s·h elements each way per step (m micro-batches of B/m).
    Per rank: a middle stage sends both directions, the first only forward, the last only backward.
    """
    per_direction = batch * seq * hidden * bytes_per_elem
    per_rank = [(per_direction if r < pp - 1 else 0) + (per_direction if r > 0 else 0) for r in range(pp)]
    return {"per_boundary_fwd": per_direction, "per_boundary_bwd": per_direction,
            "total": 2 * per_direction * (pp - 1), "per_rank": per_rank}


def stage_layers(layers: int, pp: int, stage: int) -> range:
    check_pp(layers, pp)
    n = layers // pp
    return range(stage * n, (stage + 1) * n)


def _stage_module(model, lo: int, hi: int, first: bool, last: bool):
    import torch
    from torch import nn
    from transformers.masking_utils import create_causal_mask

    class LlamaStage(nn.Module):
        """Layers [lo, hi) of a HF causal LM; shares (not copies) the model's parameters."""

        def __init__(self):
            super().__init__()
            inner = model.model
            self.config = model.config
            self.embed_tokens = inner.embed_tokens if first else None
            self.layers = nn.ModuleList(inner.layers[i] for i in range(lo, hi))
            self.rotary_emb = inner.rotary_emb  # buffers only: every stage computes its own cos/sin
            self.norm = inner.norm if last else None
            self.lm_head = model.lm_head if last else None

        def forward(self, x):
            h = self.embed_tokens(x) if first else x
            pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
            rope = self.rotary_emb(h, pos)
            mask = create_causal_mask(config=self.config, inputs_embeds=h, attention_mask=None,
                                      cache=None, position_ids=pos)
            for layer in self.layers:
                h = layer(h, attention_mask=mask, position_embeddings=rope, position_ids=pos)
            return self.lm_head(self.norm(h)) if last else h

    return LlamaStage()


def lm_loss(logits, labels):
    """Next-token cross-entropy, mean over the micro-batch (as HF's ``labels=`` loss, no padding)."""
    import torch.nn.functional as F

    return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())


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


def in_flight(schedule: str, pp: int, microbatches: int, stage: int) -> int:
    """Micro-batches whose activations a stage holds at once: m for GPipe, min(m, p - stage) for 1F1B."""
    return microbatches if schedule == "gpipe" else min(microbatches, pp - stage)


def _timed_stage_class():
    """A PipelineStage that times its own compute, counts the bytes it sends and tracks the
    activations it holds.

    Why a subclass: the stage is the one place that sees each micro-batch's compute and every
    tensor it sends (``get_*_send_ops``), so time, bytes and memory come from one place.
    (``CommCounter`` sees the same sends as c10d ``send`` ops: a cross-check.)
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


def apply_pp(model, rank: int, world: int, group=None):
    """Wrap this rank's share of ``model`` (a HF Llama-style causal LM) as a pipeline stage.

    Returns ``(stage, module)``: a PipelineStage that times its compute and counts bytes it sends
    (``stage.stats``), and the stage's ``nn.Module`` (its parameters are the model's own objects).
    """
    import torch

    layers = model.config.num_hidden_layers
    span = stage_layers(layers, world, rank)
    module = _stage_module(model, span.start, span.stop, first=rank == 0, last=rank == world - 1)
    stage = _timed_stage_class()(module, rank, world, torch.device("cpu"), group=group)
    stage.reset_stats()
    return stage, module


def build_schedule(stage, microbatches: int, schedule: str = "1f1b"):
    """A ``ScheduleGPipe`` or ``Schedule1F1B`` over ``stage`` with the LM loss."""
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe

    kinds = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
    if schedule not in kinds:
        raise RlmLabError(f"unknown schedule {schedule!r}; choose one of: {', '.join(SCHEDULES)}")
    # scale_grads=True divides by m, so the summed micro-batch grads equal the full-batch mean loss grads
    return kinds[schedule](stage, n_microbatches=microbatches, loss_fn=lm_loss, scale_grads=True)


def pp_step(schedule, rank: int, world: int, input_ids, labels=None):
    """One forward+backward step on the global batch; returns the mean loss (a tensor) on the last
    rank, None elsewhere. ``labels`` default to ``input_ids`` (next-token loss on the inputs)."""
    import torch

    labels = input_ids if labels is None else labels
    if world == 1:
        losses = []
        schedule.step(input_ids, target=labels, losses=losses)
        return torch.stack(losses).mean()
    if rank == 0:
        schedule.step(input_ids)
        return None
    if rank == world - 1:
        losses = []
        schedule.step(target=labels, losses=losses)
        return torch.stack(losses).mean()
    schedule.step()
    return None


def build(model, layout, mesh, lr: float = 1e-3):
    """A :class:`~rlm_lab.parallel.parallelize.Parallelized` for a PP-only layout (E1's harness).

    Every rank receives the global batch; rank 0 feeds it, the last rank computes the loss.
    ``global_loss`` broadcasts the last rank's loss to all ranks (every rank must call it).
    """
    import torch
    import torch.distributed as dist

    from .parallelize import Parallelized, _no_phase

    others = {d: getattr(layout, d) for d in ("dp", "tp", "cp", "ep") if getattr(layout, d) > 1}
    if others:
        raise RlmLabError(f"pipeline parallelism does not compose with {others} here; run --pp alone")
    group = mesh["pp"].get_group()
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    stage, module = apply_pp(model, rank, world, group)
    schedule = build_schedule(stage, layout.n_microbatches, layout.schedule)
    last = dist.get_global_rank(group, world - 1)

    def forward_backward(input_ids, labels, phase=_no_phase):
        with phase("forward_backward"):  # the schedule interleaves both passes
            return pp_step(schedule, rank, world, input_ids, labels)

    def global_loss(local):
        t = local.detach().clone().reshape(1) if local is not None else torch.zeros(1)
        dist.broadcast(t, src=last, group=group)
        return t.item()

    ids = {id(p) for p in module.parameters()}
    owned = {n for n, p in model.named_parameters() if id(p) in ids}
    opt = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=0.0)
    return Parallelized(module=module, optimizer=opt, forward_backward=forward_backward, global_loss=global_loss,
                        reference=model, layout=layout, owned=owned, extra={"stage": stage, "schedule": schedule})


def _pp_worker(rank, world, model_name, batch, seq, microbatches, schedule_name, steps, seed, layers):
    import torch
    import torch.distributed as dist

    from .measure_pp_cp_ep import baseline_step_s, peak_rss_mib, random_batch, zoo_model

    model = zoo_model(model_name, seed, layers)
    gen = torch.Generator().manual_seed(seed + 1)
    vocab = model.config.vocab_size
    # the share one rank runs per slot, alone: one micro-batch through the whole model (divided by p later)
    base = baseline_step_s(model, random_batch(batch // microbatches, seq, vocab, seed + 7)) if rank == 0 else None
    dist.barrier()  # the other ranks wait while rank 0 times it
    stage, module = apply_pp(model, rank, world)
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
    Predicted step time: see :func:`~rlm_lab.parallel.measure_pp_cp_ep.predict_step_time`
    (``profile``: calibrated hardware profile; without one the comm term is None).
    """
    from ..models import make_config
    from .launch import spawn
    from .measure_pp_cp_ep import cores, predict_step_time

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
        "bubble_predicted": bubble_fraction(world, microbatches),
        "bubble_measured": sum(x["idle_fraction"] for x in per_rank) / world,
        "baseline_share_s": t1,
        # composition, not a fit: (m+p-1) slots of the slowest stage's measured per-micro-batch time
        "step_s_predicted_from_stage_time": (microbatches + world - 1) * slowest_mb,
        "sent_bytes": sum(x["sent_bytes"] for x in per_rank), "predicted_bytes": pred["total"],
        "bytes_match": all(x["sent_bytes"] == x["predicted_sent_bytes"] for x in per_rank),
    }
    return out | predict_step_time(out, profile)


def _verify_pp_worker(rank, world, model_name, batch, seq, microbatches, layers, seed):
    from .measure_pp_cp_ep import max_rel, random_batch, zoo_model

    out = {}
    for schedule in SCHEDULES:
        model, ref = zoo_model(model_name, seed, layers), zoo_model(model_name, seed, layers)
        x = random_batch(batch, seq, model.config.vocab_size, seed + 1)
        ref_loss = ref(input_ids=x, labels=x).loss
        ref_loss.backward()
        stage, module = apply_pp(model, rank, world)
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
    from ..models import make_config
    from .launch import spawn

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
