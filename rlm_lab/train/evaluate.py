"""Greedy held-out accuracy: the number every chapter compares before and after RL.

Batched ``model.generate`` with left padding (the zoo tokenizer pads left), ``do_sample=False``
and a small ``max_new_tokens``: a completion counts as correct when ``task.is_correct`` says so,
and as well-formed when ``task.is_well_formed`` does (the format rate). Greedy decoding uses no
random numbers, so evaluating mid-run does not change a seeded training run.
"""

from __future__ import annotations

import time

from ..errors import RlmLabError
from ..tasks import ensure_data


def test_rows(task, n: int) -> list[dict]:
    """The first ``n`` problems of the task's fixed test split."""
    rows = ensure_data(task)["test"]
    if n > len(rows):
        raise RlmLabError(f"asked for {n} eval problems but {task.slug} has {len(rows)} test problems; "
                          "lower eval_problems")
    return rows[:n]


def generate(model, tokenizer, prompts: list[str], max_new_tokens: int = 8, batch_size: int = 256) -> list[str]:
    """Greedy completions of ``prompts`` (special tokens stripped), in order."""
    import torch

    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    out: list[str] = []
    try:
        with torch.inference_mode():
            for i in range(0, len(prompts), batch_size):
                batch = tokenizer(prompts[i:i + batch_size], return_tensors="pt", padding=True,
                                  add_special_tokens=False).to(model.device)
                ids = model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
                out += tokenizer.batch_decode(ids[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    finally:
        if was_training:
            model.train()
    return out


def evaluate(model, tokenizer, task, rows: list[dict], max_new_tokens: int = 8, batch_size: int = 256) -> dict:
    """``{"accuracy", "format_rate", "n", "seconds", "gen_tokens_per_s"}`` over ``rows`` (greedy)."""
    t0 = time.perf_counter()
    completions = generate(model, tokenizer, [r["prompt"] for r in rows], max_new_tokens, batch_size)
    seconds = time.perf_counter() - t0
    correct = sum(task.is_correct(c, r) for c, r in zip(completions, rows))
    formed = sum(task.is_well_formed(c) for c in completions)
    # +1 per row for the EOS that ended each completion (stripped by decode) unless it ran to the limit
    tokens = sum(min(len(tokenizer(c, add_special_tokens=False)["input_ids"]) + 1, max_new_tokens)
                 for c in completions)
    n = len(rows)
    return {
        "accuracy": correct / n,
        "format_rate": formed / n,
        "n": n,
        "seconds": round(seconds, 4),
        "gen_tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None,
        "examples": [{"prompt": r["prompt"], "completion": c, "answer": r["answer"]}
                     for r, c in list(zip(rows, completions))[:5]],
    }
