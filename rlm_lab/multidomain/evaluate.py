"""Held-out accuracy of one model on every task of a mixture, task by task (greedy ``generate``, the book's
evaluation: :func:`rlm_lab.train.evaluate.generate`), and the lengths it generated."""

from __future__ import annotations

from ..train.evaluate import generate


def per_task(model, tokenizer, task, rows: list[dict], max_new_tokens: int, batch_size: int = 256) -> dict:
    """``{task name: {"n", "accuracy", "mean_length"}}`` over ``rows`` of a :class:`rlm_lab.tasks.Mix`
    (each row's ``task`` column names its task); the length counts the EOS unless the row ran to the limit."""
    outs = generate(model, tokenizer, [r["prompt"] for r in rows], max_new_tokens, batch_size)
    by: dict = {}
    for c, r in zip(outs, rows):
        n = min(len(tokenizer(c, add_special_tokens=False)["input_ids"]) + 1, max_new_tokens)
        by.setdefault(r["task"], []).append((task.is_correct(c, r), n))
    return {name: {"n": len(v), "accuracy": sum(ok for ok, _ in v) / len(v),
                   "mean_length": sum(n for _, n in v) / len(v)} for name, v in sorted(by.items())}


def balanced_rows(rows: list[dict], per_task_n: int) -> list[dict]:
    """The first ``per_task_n`` rows of each task, in their order (the held-out set every model is scored on)."""
    seen: dict = {}
    out = []
    for r in rows:
        if seen.get(r["task"], 0) < per_task_n:
            seen[r["task"]] = seen.get(r["task"], 0) + 1
            out.append(r)
    return out
