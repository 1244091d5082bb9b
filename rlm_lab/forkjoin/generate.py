"""Fork-join decoding with transformers ``generate``: the outline, then every branch of every trace in ONE
batched call, then the join.

Three ``model.generate`` calls per batch of prompts (the engine TRL's GRPOTrainer uses on CPU; no hand-written
decode loop). ``generate`` stops a row at any id in ``eos_token_id`` (a list is allowed:
https://huggingface.co/docs/transformers/main/en/main_classes/text_generation#transformers.GenerationConfig),
which is how a stage ends at its tag:

1. **fork**: each prompt decodes its outline ``<ab...>``, stopping at ``>``;
2. **branches**: one row per branch of every trace, ``prompt + outline + header`` (the header ``x:`` is written
   by this decoder), all rows in one call, each stopping at ``;``. A branch does not see its siblings;
3. **join**: ``prompt + outline + every header and body`` as one plain sequence, decoded to EOS.

A trace whose outline is not ``<`` + labels + ``>``, or with a branch that does not end at ``;`` within its
limit, is malformed: it stops there (:attr:`Decoded.segments` is None), and its reward is None.

The same helper decodes a sequential trace (one call, to EOS): :func:`sequential_generate`. Each result carries
the decode steps of each call, the stage's wall time, and the work and depth of the trace in decoded tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..errors import RlmLabError
from .layout import Segments, Tags


@dataclass(frozen=True)
class Limits:
    """The most tokens each stage may decode: the outline (with its tags), one branch, the join (with EOS)."""

    outline: int = 10
    branch: int = 12
    join: int = 24

    def __post_init__(self):
        for name in ("outline", "branch", "join"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise RlmLabError(f"fork-join limit {name} must be an integer >= 1, got {v!r}")


@dataclass
class Decoded:
    """One decoded trace: its prompt ids, its segments (None: malformed, stopped at ``stage``), the ids of the
    trace as the join saw it (or as far as it got), the tokens it decoded and the tokens on its critical path."""

    prompt: list
    segments: Segments | None
    trace: list
    work: int
    depth: int
    stage: str = "done"
    mask: list = field(default_factory=list)  # 1 on decoded tokens of ``trace``, 0 on inserted headers


@dataclass
class Batch:
    """The traces of one batch and the calls that decoded them: ``seconds`` and ``steps`` per stage."""

    traces: list
    seconds: dict
    steps: dict


def _call(model, tokenizer, rows: list[list[int]], max_new_tokens: int, stops: list[int], sample: bool,
          seed: int, temperature: float = 1.0) -> tuple[list[list[int]], float, int]:
    """One ``generate`` call over token-id ``rows`` (left-padded): each row's new ids up to and including its
    first stop id; the call's seconds and decode steps."""
    import torch

    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=model.device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=model.device)
    kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if sample else dict(do_sample=False)
    torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    t0 = time.perf_counter()
    try:
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, eos_token_id=stops,
                                 pad_token_id=pad, **kw)
    finally:
        model.train(was_training)
    seconds = time.perf_counter() - t0
    new = out[:, width:].tolist()
    cut = []
    for r in new:
        end = next((i for i, t in enumerate(r) if t in stops), None)
        cut.append(r[:end + 1] if end is not None else [t for t in r if t != pad])
    return cut, seconds, len(new[0]) if new else 0


def fork_join_generate(model, tokenizer, prompts: list[str], limits: Limits = Limits(), sample: bool = False,
                       seed: int = 0, temperature: float = 1.0) -> Batch:
    """Decode a fork-join trace for every prompt (see the module docstring)."""
    if not prompts:
        raise RlmLabError("fork-join decoding needs at least one prompt")
    tags = Tags.of(tokenizer)
    enc = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    seconds, steps = {}, {}
    outl, seconds["outline"], steps["outline"] = _call(model, tokenizer, enc, limits.outline, [tags.close, tags.eos],
                                                       sample, seed, temperature)
    done: list = [None] * len(enc)
    branch_rows, owner = [], []
    headers = {}
    for i, (p, o) in enumerate(zip(enc, outl)):
        labels = o[1:-1]
        ok = (len(o) >= 3 and o[0] == tags.open and o[-1] == tags.close
              and not {tags.open, tags.colon, tags.semi, tags.eos} & set(labels))
        if not ok:
            done[i] = Decoded(p, None, o, len(o), len(o), "outline", [1] * len(o))
            continue
        headers[i] = [(lab, tags.colon) for lab in labels]
        for h in headers[i]:
            branch_rows.append(p + o + list(h))
            owner.append(i)
    bodies: dict = {i: [] for i in headers}
    if branch_rows:
        got, seconds["branches"], steps["branches"] = _call(model, tokenizer, branch_rows, limits.branch,
                                                            [tags.semi, tags.eos], sample, seed + 1, temperature)
        for i, b in zip(owner, got):
            bodies[i].append(b)
    join_rows, joiners = [], []
    for i in headers:
        o, hs, bs = outl[i], headers[i], bodies[i]
        trace = o + [t for h, b in zip(hs, bs) for t in (*h, *b)]
        mask = [1] * len(o) + [m for h, b in zip(hs, bs) for m in ([0] * len(h) + [1] * len(b))]
        if any(not b or b[-1] != tags.semi for b in bs):
            work = len(o) + sum(map(len, bs))
            done[i] = Decoded(enc[i], None, trace, work, len(o) + max(map(len, bs)), "branches", mask)
            continue
        join_rows.append(enc[i] + trace)
        joiners.append((i, trace, mask))
    if join_rows:
        got, seconds["join"], steps["join"] = _call(model, tokenizer, join_rows, limits.join, [tags.eos], sample,
                                                    seed + 2, temperature)
        for (i, trace, mask), j in zip(joiners, got):
            seg = Segments(tuple(outl[i]), tuple(headers[i]), tuple(tuple(b) for b in bodies[i]), tuple(j))
            done[i] = Decoded(enc[i], seg, trace + j, seg.work, seg.depth, "done" if j and j[-1] == tags.eos
                              else "join", mask + [1] * len(j))
    return Batch(done, seconds, steps)


def sequential_generate(model, tokenizer, prompts: list[str], max_new_tokens: int, sample: bool = False,
                        seed: int = 0, temperature: float = 1.0) -> Batch:
    """Decode one sequential trace per prompt: one ``generate`` call to EOS."""
    if not prompts:
        raise RlmLabError("decoding needs at least one prompt")
    enc = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    got, s, n = _call(model, tokenizer, enc, max_new_tokens, [tokenizer.eos_token_id], sample, seed, temperature)
    traces = [Decoded(p, None, g, len(g), len(g), "done" if g and g[-1] == tokenizer.eos_token_id else "join",
                      [1] * len(g)) for p, g in zip(enc, got)]
    return Batch(traces, {"sequential": s}, {"sequential": n})


def text(tokenizer, ids) -> str:
    """A trace's text, special tokens (EOS) dropped."""
    return tokenizer.decode(ids, skip_special_tokens=True)
