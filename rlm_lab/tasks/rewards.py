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
import inspect
import math
import numbers
import sys

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


def check_rewards(name: str, out, n: int) -> list:
    """TRL's reward-function contract (``GRPOTrainer._calculate_rewards`` in TRL 1.16, and the docs:
    https://huggingface.co/docs/trl/main/en/grpo_trainer#using-a-custom-reward-function): one reward per
    completion, as a list; ``None`` means "this function does not score this completion" (TRL turns it into
    NaN and sums rewards with nansum). Any real number counts, numpy scalars included. Refused, with one line
    naming the function: a bare number, a generator or other one-shot iterator, a string, the wrong length,
    a non-number, and +-inf (it makes every advantage of the group NaN). NaN is TRL's own "no reward" and is
    returned as None. Returns a plain list of floats and Nones."""
    kind = type(out).__name__
    if out is None or isinstance(out, (str, bytes, dict, numbers.Number)) or not hasattr(out, "__len__") \
            or not hasattr(out, "__getitem__"):
        raise RlmLabError(f"reward function {name!r} returned a {kind}, not a list; return a list with one float "
                          f"(or None to skip) per completion ({n} here)")
    try:
        values = list(out)
    except TypeError:  # e.g. a 0-d numpy array
        raise RlmLabError(f"reward function {name!r} returned a {kind} that is not a list of rewards") from None
    if len(values) != n:
        raise RlmLabError(f"reward function {name!r} returned {len(values)} values for {n} completions; "
                          "return one float (or None to skip) per completion")
    clean = []
    for i, v in enumerate(values):
        if v is None:
            clean.append(None)
            continue
        if isinstance(v, (str, bytes)) or not isinstance(v, numbers.Real) and not _is_bool(v):
            raise RlmLabError(f"reward function {name!r} returned {v!r} for completion {i}; rewards must be "
                              "real numbers (or None)")
        v = float(v)
        if math.isinf(v):
            raise RlmLabError(f"reward function {name!r} returned {v} for completion {i}; rewards must be finite "
                              "(None, or NaN, marks a completion it does not score)")
        clean.append(None if math.isnan(v) else v)
    return clean


def _is_bool(v) -> bool:
    # numpy's bool (numpy.bool_) is not registered as a numbers.Real; TRL's torch.tensor takes it as 0/1
    return type(v).__module__ == "numpy" and type(v).__name__ in ("bool", "bool_")


def checked(fn):
    """Wrap a reward function so a crash or a return value outside TRL's contract (:func:`check_rewards`)
    stops the run with one line naming the function. Async reward functions stay async (TRL awaits them);
    reward *models* (``torch.nn.Module``) and model ids (``str``) pass through: TRL scores those itself."""
    if isinstance(fn, str) or getattr(fn, "__rlm_checked__", False) or _is_module(fn):
        return fn
    if not callable(fn):
        raise RlmLabError(f"reward function {fn!r} is not callable; pass a function f(completions, **columns)")
    name = getattr(fn, "__name__", None) or type(fn).__name__

    def crashed(e, completions):
        sample = completion_text(completions[0])[:40] if completions else ""
        return RlmLabError(
            f"reward function {name!r} raised {type(e).__name__}: {e} (first completion {sample!r}); "
            "make it return a float for every completion, e.g. 0.0 for output it cannot parse")

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def async_wrapper(completions, **columns):
            try:
                out = await fn(completions, **columns)
            except Exception as e:  # noqa: BLE001 - re-raised as a one-line, actionable error
                raise crashed(e, completions) from None
            return check_rewards(name, out, len(completions))

        async_wrapper.__rlm_checked__ = True
        return async_wrapper

    @functools.wraps(fn)
    def wrapper(completions, **columns):
        try:
            out = fn(completions, **columns)
        except Exception as e:  # noqa: BLE001 - re-raised as a one-line, actionable error
            raise crashed(e, completions) from None
        return check_rewards(name, out, len(completions))

    wrapper.__rlm_checked__ = True
    return wrapper


def _is_module(fn) -> bool:
    torch = sys.modules.get("torch")  # no torch import just to ask: a Module exists only if torch is loaded
    return torch is not None and isinstance(fn, torch.nn.Module)
