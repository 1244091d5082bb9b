"""Reward functions against TRL's contract (GRPOTrainer._calculate_rewards, TRL 1.16): what `checked` accepts
(returned as TRL would see it) and what it refuses with one line naming the function."""

import asyncio
import math

import numpy as np
from fault_matrix import Case

from rlm_lab.tasks import checked

COMPLETIONS = ["12", "7", "abc"]
CASES = []


def _reward(name, fn):
    fn.__name__ = name
    return fn


def refuse(id, what, ret, message):
    def call(tmp):
        checked(_reward("my_reward", lambda completions, **kw: ret(completions)))(COMPLETIONS, answer=["12"] * 3)
    call.__doc__ = f"checked(my_reward)(3 completions), my_reward returns {what}"
    CASES.append(Case(id, f"a reward function returning {what}", call=call, message=message))


def accept(id, what, ret, expected):
    def call(tmp):
        got = checked(_reward("my_reward", lambda completions, **kw: ret(completions)))(COMPLETIONS, answer=["12"] * 3)
        print(got)
    call.__doc__ = f"checked(my_reward)(3 completions), my_reward returns {what}"

    def check(tmp, out):
        got = eval(out.strip(), {"nan": math.nan})  # the printed list of floats / None
        assert got == expected, (got, expected)

    CASES.append(Case(id, f"a reward function returning {what}", cls="correct-result", call=call, check=check))


refuse("bare-float", "a bare float", lambda c: 1.0, r"'my_reward' returned a float, not a list")
refuse("bare-int", "a bare int", lambda c: 0, r"'my_reward' returned a int, not a list")
refuse("numpy-scalar", "a numpy scalar", lambda c: np.float32(1), r"'my_reward' returned a float32, not a list")
refuse("generator", "a generator", lambda c: (1.0 for _ in c), r"'my_reward' returned a generator, not a list")
refuse("map", "a map object", lambda c: map(float, [1, 2, 3]), r"'my_reward' returned a map, not a list")
refuse("none", "None", lambda c: None, r"'my_reward' returned a NoneType, not a list")
refuse("string", "a string", lambda c: "1.0", r"'my_reward' returned a str, not a list")
refuse("dict", "a dict", lambda c: {"r": 1.0}, r"'my_reward' returned a dict, not a list")
refuse("set", "a set", lambda c: {1.0, 2.0, 3.0}, r"'my_reward' returned a set, not a list")
refuse("too-short", "one reward too few", lambda c: [1.0] * (len(c) - 1), r"'my_reward' returned 2 values for 3")
refuse("too-long", "one reward too many", lambda c: [1.0] * (len(c) + 1), r"'my_reward' returned 4 values for 3")
refuse("empty", "an empty list", lambda c: [], r"'my_reward' returned 0 values for 3")
refuse("inf", "+inf for one completion", lambda c: [1.0, math.inf, 0.0], r"returned inf for completion 1")
refuse("minus-inf", "-inf for one completion", lambda c: [-math.inf, 1.0, 0.0], r"returned -inf for completion 0")
refuse("string-value", "a string value", lambda c: [1.0, "0.5", 0.0], r"returned '0.5' for completion 1")
refuse("nested-list", "a list value", lambda c: [[1.0], 0.0, 0.0], r"returned \[1.0\] for completion 0")
refuse("complex", "a complex value", lambda c: [1j, 0.0, 0.0], r"returned 1j for completion 0")
refuse("array-2d", "a 2-D numpy array", lambda c: np.ones((3, 1)), r"returned array\(\[1.\]\) for completion 0")
refuse("array-0d", "a 0-d numpy array", lambda c: np.array(1.0), r"returned a ndarray that is not a list")


def _crash(completions, **kw):
    return [float(c) for c in completions]


def crash_call(tmp):
    """checked(parse_reward)(3 completions), one of which it cannot parse"""
    checked(_reward("parse_reward", _crash))(COMPLETIONS)


def not_callable_call(tmp):
    """checked(0.5)"""
    checked(0.5)


def async_bad_call(tmp):
    """an async reward function returning a float"""
    async def judge(completions, **kw):
        return 1.0
    asyncio.run(checked(judge)(COMPLETIONS))


def async_ok_call(tmp):
    """an async reward function returning a list with a None"""
    async def judge(completions, **kw):
        return [None, 1, np.float64(0.5)]
    print(asyncio.run(checked(judge)(COMPLETIONS)))


CASES += [
    Case("crash", "a reward function that raises on one completion", call=crash_call,
         message=r"reward function 'parse_reward' raised ValueError: .* \(first completion '12'\)"),
    Case("not-callable", "a number where a reward function should be", call=not_callable_call,
         message=r"reward function 0.5 is not callable"),
    Case("async-bare-float", "an async reward function returning a float", call=async_bad_call,
         message=r"'judge' returned a float, not a list"),
    Case("async-ok", "an async reward function (TRL awaits it)", cls="correct-result", call=async_ok_call,
         message=r"^\[None, 1.0, 0.5\]$"),
]

accept("all-none", "None for every completion (TRL: unscored)", lambda c: [None] * len(c), [None, None, None])
accept("some-none", "None for one completion", lambda c: [1.0, None, 0.0], [1.0, None, 0.0])
accept("numpy-float32", "numpy.float32 values", lambda c: [np.float32(0.5)] * 3, [0.5, 0.5, 0.5])
accept("numpy-int64", "numpy.int64 values", lambda c: [np.int64(1), np.int64(0), np.int64(2)], [1.0, 0.0, 2.0])
accept("numpy-array", "a numpy array", lambda c: np.array([0.0, 1.0, 0.25], dtype=np.float32), [0.0, 1.0, 0.25])
accept("tuple", "a tuple of ints", lambda c: (1, 0, 1), [1.0, 0.0, 1.0])
accept("nan", "NaN for one completion (TRL's own 'no reward')", lambda c: [math.nan, 1.0, 0.0], [None, 1.0, 0.0])
accept("bools", "booleans (True scores 1)", lambda c: [True, False, np.bool_(True)], [1.0, 0.0, 1.0])
accept("negative", "negative rewards", lambda c: [-1.0, -0.5, 0.0], [-1.0, -0.5, 0.0])
