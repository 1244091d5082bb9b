"""Pipeline parallelism: a zoo Llama cut into p stages, run by ``torch.distributed.pipelining``.

Each rank holds a contiguous block of decoder layers; stage 0 also embeds the tokens and the last
stage also applies the final norm, the LM head and the loss. A batch of B sequences is cut into m
micro-batches; ``ScheduleGPipe`` runs all forwards then all backwards, ``Schedule1F1B`` alternates
them once the pipeline is full (same bubble, fewer activations in flight).

Prediction (GPipe, Huang et al. 1811.06965; Narayanan et al. 2104.04473):

* bubble: with equal stages and free communication every rank idles for (p-1) of the (m+p-1)
  micro-batch slots of a step, an idle fraction (p-1)/(m+p-1) (= (p-1)/m relative to ideal time);
* traffic: each stage boundary carries one activation tensor per micro-batch forward,
  (B/m)·s·h·bytes, and its gradient (same size) backward: 2·B·s·h·bytes per boundary per step.

Ignores: unequal stages (stage 0 embeds, the last stage runs the LM head and the loss), P2P
latency and the scheduler's own overhead, which dominate at toy sizes — the measured bubble shows
how far that takes a real run from the formula.

This module is the mechanism (split, schedule, step) and its closed-form predictions; timing,
activation accounting and the comparison with one process are the benchmark harness's
(``rlm_lab.parallel.bench.pp``).

Why the split is by hand: tracing the HF model with ``pipeline()`` makes the causal mask a stage
input, an ``expand``-ed (non-contiguous) tensor gloo cannot ``irecv`` into (seen on this torch
version). Each stage therefore recomputes positions, rotary embeddings and the mask itself, so the
only tensor crossing a boundary is the hidden state.
"""

from __future__ import annotations

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
    """Layers ``lo:hi`` of ``model`` as one ``LlamaStage`` module; a class built here because its base,
    ``torch.nn.Module``, is not imported at this module's top (light parallel.predict imports it)."""
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


def in_flight(schedule: str, pp: int, microbatches: int, stage: int) -> int:
    """Micro-batches whose activations a stage holds at once: m for GPipe, min(m, p - stage) for 1F1B."""
    return microbatches if schedule == "gpipe" else min(microbatches, pp - stage)


def apply_pp(model, rank: int, world: int, group=None, stage_cls=None):
    """Wrap this rank's share of ``model`` (a HF Llama-style causal LM) as a pipeline stage.

    Returns ``(stage, module)``: a ``PipelineStage`` (or ``stage_cls``, a subclass of it: the benchmark
    harness passes one that times its compute and counts the bytes it sends) and the stage's
    ``nn.Module`` (its parameters are the model's own objects).
    """
    import torch
    from torch.distributed.pipelining import PipelineStage

    layers = model.config.num_hidden_layers
    span = stage_layers(layers, world, rank)
    module = _stage_module(model, span.start, span.stop, first=rank == 0, last=rank == world - 1)
    stage = (stage_cls or PipelineStage)(module, rank, world, torch.device("cpu"), group=group)
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
