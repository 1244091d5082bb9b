"""Greedy held-out evaluation of a fork-join policy, with the keys of :func:`rlm_lab.train.evaluate.evaluate`
(so :func:`rlm_lab.train.run.run` records it as its before/after accuracy) plus the mean work and depth."""

from __future__ import annotations

import time

from ..errors import RlmLabError
from .generate import Limits, fork_join_generate, sequential_generate, text

MODES = ("seq", "par")


def decode(model, tokenizer, prompts: list[str], mode: str, limits: Limits, max_new_tokens: int,
           batch_size: int = 256) -> list:
    """Greedy traces of ``prompts`` (:class:`~rlm_lab.forkjoin.generate.Decoded`): ``mode`` "par" decodes
    fork-join within ``limits``, "seq" one call to EOS within ``max_new_tokens``."""
    if mode not in MODES:
        raise RlmLabError(f"decoding mode must be seq or par, got {mode!r}")
    out = []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i:i + batch_size]
        got = (fork_join_generate(model, tokenizer, chunk, limits) if mode == "par"
               else sequential_generate(model, tokenizer, chunk, max_new_tokens))
        out += got.traces
    return out


def evaluate(model, tokenizer, task, rows: list[dict], mode: str, limits: Limits, max_new_tokens: int,
             batch_size: int = 256) -> dict:
    t0 = time.perf_counter()
    traces = decode(model, tokenizer, [r["prompt"] for r in rows], mode, limits, max_new_tokens, batch_size)
    seconds = time.perf_counter() - t0
    texts = [text(tokenizer, d.trace) for d in traces]
    n = len(rows)
    work = sum(d.work for d in traces)
    return {
        "accuracy": sum(task.is_correct(t, r) for t, r in zip(texts, rows)) / n,
        "format_rate": sum(task.is_well_formed(t) for t in texts) / n,
        "n": n, "seconds": round(seconds, 4),
        "gen_tokens_per_s": round(work / seconds, 1) if seconds > 0 else None,
        "mean_work": work / n, "mean_depth": sum(d.depth for d in traces) / n,
        "examples": [{"prompt": r["prompt"], "completion": t, "answer": r["answer"]} for r, t in list(zip(rows, texts))[:5]],
    }
