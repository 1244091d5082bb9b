"""Reward functions in TRL's signature: ``f(completions, **dataset_columns) -> list[float]``.

TRL passes every dataset column (``answer``, ``numbers``, ...) as a keyword list aligned with
``completions``. Completions arrive as strings (standard format) or as message lists
(conversational format); both are handled. The built-in rewards never raise: an unparsable
completion scores 0. A *user* reward function that raises is wrapped by :func:`checked` so the
run stops with one line naming the function, the input and the fix, instead of a traceback pile
or a silent zero.
"""

from __future__ import annotations

import functools
import math

from ..errors import RlmLabError


def completion_text(completion) -> str:
    """The text of a completion in either TRL format; never raises."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content", "")
        return content if isinstance(content, str) else str(content)
    return "" if completion is None else str(completion)


def _rows(n: int, columns: dict) -> list[dict]:
    cols = {k: v for k, v in columns.items() if isinstance(v, (list, tuple)) and len(v) == n}
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]


def correctness_reward(task):
    """1.0 when the completion solves the problem, else 0.0."""

    def correctness(completions, **columns):
        rows = _rows(len(completions), columns)
        return [float(task.is_correct(completion_text(c), r)) for c, r in zip(completions, rows)]

    return correctness


def format_reward(task, weight: float = 0.1):
    """``weight`` when the completion has the answer format (right or wrong), else 0."""

    def format_ok(completions, **columns):
        return [weight * float(task.is_well_formed(completion_text(c))) for c in completions]

    return format_ok


def checked(fn):
    """Wrap a reward function so a crash or a malformed return value stops the run with a clear error."""
    name = getattr(fn, "__name__", repr(fn))

    @functools.wraps(fn)
    def wrapper(completions, **columns):
        try:
            out = fn(completions, **columns)
        except Exception as e:  # noqa: BLE001 - re-raised as a one-line, actionable error
            sample = completion_text(completions[0])[:40] if completions else ""
            raise RlmLabError(
                f"reward function {name!r} raised {type(e).__name__}: {e} (first completion {sample!r}); "
                "make it return a float for every completion, e.g. 0.0 for output it cannot parse"
            ) from None
        if out is None or len(out) != len(completions):
            raise RlmLabError(
                f"reward function {name!r} returned {0 if out is None else len(out)} values for "
                f"{len(completions)} completions; return one float (or None to skip) per completion"
            )
        for v in out:
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v)):
                raise RlmLabError(f"reward function {name!r} returned {v!r}; rewards must be finite floats")
        return out

    return wrapper
