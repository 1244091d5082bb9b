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
    """1.0 when the completion solves the problem, else 0.0; None (TRL: "not scored") when the task's
    verifier cannot score it at all (``task.is_scorable``: e.g. a malformed parallel trace)."""

    def correctness(completions, **columns):
        rows = _rows(len(completions), columns)
        out = []
        for c, r in zip(completions, rows):
            text = completion_text(c)
            out.append(float(task.is_correct(text, r)) if task.is_scorable(text) else None)
        return out

    return correctness


# Parason's released reward configuration (https://github.com/ZhengyangZhang06/Parason-release, run_rl.slurm and
# parason_rl/verl/trainer/config/reward_model/reward_model.yaml), the same as ThreadWeaver's (arXiv 2512.07843,
# https://github.com/facebookresearch/threadweaver, threadweaver_rl/deepscaler/rewards/math_rewardv2.py):
# correct_reward 1.0, incorrect_reward -1.0, acceleration_ratio_reward 1.0 x acceleration_ratio_reward_factor 0.5,
# acceleration_ratio_clip_max 0.2.
PARALLEL_REWARD = {"correct": 1.0, "incorrect": -1.0, "weight": 0.5, "clip": 0.2}


def parallelism_aware_reward(task, correct: float = PARALLEL_REWARD["correct"],
                             incorrect: float = PARALLEL_REWARD["incorrect"], weight: float = PARALLEL_REWARD["weight"],
                             clip: float = PARALLEL_REWARD["clip"]):
    """Parallelism-Aware GRPO's reward, as Parason's and ThreadWeaver's released code compute it
    (``calculate_reward`` and ``compute_ratio_reward`` in ``math_rewardv2.py``):

        r = correct + weight * min(eta, clip)   if the answer is right,   r = incorrect   otherwise,

    with the acceleration ratio eta = 1 - D / W of the trace (critical-path tokens over all tokens, the
    task's ``parse_trace(...).acceleration``; 0 for a sequential trace). The bonus is paid on correct answers
    only, so a fast wrong answer earns nothing. None (TRL: "not scored") when the task cannot score the
    completion. ``task`` must provide ``parse_trace`` results through ``acceleration_of(text)``."""
    for name, v in (("correct", correct), ("incorrect", incorrect), ("weight", weight), ("clip", clip)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise RlmLabError(f"parallelism-aware reward: {name} must be a finite number, got {v!r}")
    if weight < 0 or clip < 0:
        raise RlmLabError(f"parallelism-aware reward: weight and clip must be >= 0, got {weight} and {clip}")
    if not hasattr(task, "acceleration_of"):
        raise RlmLabError(f"parallelism-aware reward needs a task with parallel traces (psum), not {task.name!r}")

    def parallelism_aware(completions, **columns):
        rows = _rows(len(completions), columns)
        out = []
        for c, r in zip(completions, rows):
            text = completion_text(c)
            if not task.is_scorable(text):
                out.append(None)
            elif task.is_correct(text, r):
                out.append(correct + weight * min(task.acceleration_of(text), clip))
            else:
                out.append(incorrect)
        return out

    return parallelism_aware


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
