"""Generation on chapter 7's task: one transformers ``generate`` call (the engine TRL's GRPOTrainer uses on
CPU) over chain prompts, with each row's length forced, each row's finish time recorded, an early stop after
k rows are done, and a callback per finished row.

Lengths: at ``smoke`` size the model is untrained, so each row is forced (chapter 3's ``ForceLengths``,
imported, not copied) to its problem's reference answer length (:func:`rlm_lab.tasks.chain.answer_length`):
the length a model that has learnt the task generates. The tokens are the model's own samples. With
``lengths=None`` nothing is forced: the model stops at its own EOS (for a trained model).

Hand-written: the per-row finish clock and early stop (:class:`Watch`) are a transformers
``StoppingCriteria``, its documented hook into the decode loop
(https://huggingface.co/docs/transformers/main/en/internal/generation_utils#stopping-criteria); nothing in
transformers reports when each row finished or stops after k of n rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..models.generation import force_lengths_class

EOS, PAD = 1, 0  # the zoo's character tokenizer: <pad>=0, <eos>=1 (rlm_lab.models.tokenizer.SPECIALS)


def encode(tokenizer, prompts: list[str]) -> list[list[int]]:
    """Token ids of each prompt (one per character), no padding."""
    return [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]


def left_pad(rows: list[list[int]]):
    """(input_ids, attention_mask) with rows padded on the left, as generation needs."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(r)
            mask[i, width - len(r):] = 1
    return ids, mask


def _watch_class():
    """The ``Watch`` stopping criterion; a class built here because its base, transformers' ``StoppingCriteria``,
    is not imported at this module's top."""
    import torch
    from transformers import StoppingCriteria

    class Watch(StoppingCriteria):
        """Records the wall time and step at which each row emits EOS; stops the whole call once
        ``stop_after`` rows are done; calls ``on_finish(row, token_ids)`` for each row as it finishes."""

        def __init__(self, n: int, width: int, stop_after=None, on_finish=None):
            self.n, self.width, self.stop_after, self.on_finish = n, width, stop_after, on_finish
            self.t0 = time.perf_counter()
            self.finish_s: list[float | None] = [None] * n
            self.finish_step: list[int | None] = [None] * n

        def __call__(self, input_ids, scores, **kwargs):
            now = time.perf_counter() - self.t0
            step = input_ids.shape[1] - self.width
            last = input_ids[:, -1]
            for i in (last == EOS).nonzero().flatten().tolist():
                if self.finish_s[i] is None:
                    self.finish_s[i], self.finish_step[i] = now, step
                    if self.on_finish is not None:
                        self.on_finish(i, input_ids[i].clone())
            done = sum(s is not None for s in self.finish_s)
            stop = self.stop_after is not None and done >= self.stop_after
            return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

    return Watch


@dataclass
class Generation:
    seconds: float
    finish_s: list          # seconds from the start of the call to each row's EOS (None: not finished)
    finish_step: list       # decode step of each row's EOS (None: not finished)
    new_tokens: list = field(default_factory=list)  # each row's generated ids (EOS included, padding removed)

    @property
    def finished(self) -> list[int]:
        return [i for i, s in enumerate(self.finish_step) if s is not None]


def generate(model, rows: list[list[int]], lengths=None, stop_after=None, on_finish=None, seed: int = 0,
             max_new_tokens: int = 256) -> Generation:
    """One ``generate`` call over prompt ``rows`` (token ids). ``lengths``: tokens each row must generate
    (the last one EOS), or None for the model's own lengths."""
    import torch
    from transformers import LogitsProcessorList, StoppingCriteriaList

    ids, mask = left_pad(rows)
    width = ids.shape[1]
    procs = LogitsProcessorList()
    if lengths is not None:
        procs.append(force_lengths_class()(list(lengths), width, EOS))
        max_new_tokens = max(lengths)
    watch = _watch_class()(len(rows), width, stop_after, on_finish)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    watch.t0 = t0
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=True, top_k=0,
                             top_p=1.0, temperature=1.0, logits_processor=procs,
                             stopping_criteria=StoppingCriteriaList([watch]), pad_token_id=PAD, eos_token_id=EOS)
    seconds = time.perf_counter() - t0
    new = []
    for i, row in enumerate(out[:, width:].tolist()):
        k = watch.finish_step[i]
        new.append(row[:k] if k is not None else row)
    return Generation(seconds, watch.finish_s, watch.finish_step, new)
