"""Reward functions: TRL signature, never raise on any completion (property-tested), and
user reward functions that crash give one clear error instead of a silent zero."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm_lab.errors import RlmLabError
from rlm_lab.tasks import Arithmetic, Countdown, checked, reward_funcs

TASKS = [Arithmetic(), Countdown()]
ROWS = {"arithmetic": {"answer": "82"}, "countdown": {"answer": "3*5+7", "numbers": "3,5,7", "target": "22"}}
completion = st.one_of(
    st.text(max_size=80),
    st.text(alphabet="0123456789+-*() ", max_size=80),
    st.lists(st.fixed_dictionaries({"role": st.just("assistant"), "content": st.text(max_size=40)}), max_size=2),
    st.none(),
    st.integers(),
)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
@settings(max_examples=300, deadline=None)
@given(completions=st.lists(completion, min_size=1, max_size=4))
def test_rewards_never_raise_and_stay_in_range(task, completions):
    cols = {k: [v] * len(completions) for k, v in ROWS[task.name].items()}
    for fn in reward_funcs(task):
        out = fn(completions, **cols)
        assert len(out) == len(completions)
        assert all(isinstance(x, float) and 0.0 <= x <= 1.0 for x in out)


def test_rewards_score_right_and_wrong_answers():
    correct, fmt = reward_funcs(Arithmetic())
    comps = ["82", "81", "eighty", [{"role": "assistant", "content": "82"}]]
    assert correct(comps, answer=["82"] * 4) == [1.0, 0.0, 0.0, 1.0]
    assert fmt(comps, answer=["82"] * 4) == [0.1, 0.1, 0.0, 0.1]


def test_crashing_user_reward_is_a_clear_error():
    def my_reward(completions, **kw):
        return [float(c) for c in completions]  # crashes on non-numbers

    wrapped = checked(my_reward)
    assert wrapped(["1", "2"]) == [1.0, 2.0]
    with pytest.raises(RlmLabError, match=r"reward function 'my_reward' raised ValueError.*return a float"):
        wrapped(["1", "abc"])


@pytest.mark.parametrize("ret,msg", [
    (lambda c: None, "returned a NoneType, not a list"),
    (lambda c: 1.0, "returned a float, not a list"),
    (lambda c: (float(len(x)) for x in c), "returned a generator, not a list"),
    (lambda c: [1.0], "returned 1 values for 2"),
    (lambda c: [1.0, float("inf")], "returned inf for completion 1; rewards must be finite"),
    (lambda c: [1.0, "x"], "returned 'x' for completion 1; rewards must be real numbers"),
])
def test_malformed_reward_return_is_a_clear_error(ret, msg):
    def bad(completions, **kw):
        return ret(completions)

    with pytest.raises(RlmLabError, match=msg):
        checked(bad)(["1", "2"])


@pytest.mark.parametrize("out", [
    [None, None],                                     # no function scores these (TRL: NaN, then nansum)
    [np.float32(0.5), np.float64(1.0)],               # numpy scalars are real numbers
    (1, 0.25),                                        # a tuple of ints and floats
    np.array([0.0, 1.0], dtype=np.float32),           # a numpy array
    [float("nan"), 2.0],                              # TRL's own "no reward"
    [True, False],
])
def test_valid_reward_returns_match_trls_conversion(out):
    # what TRL 1.16's GRPOTrainer._calculate_rewards makes of the same output, computed here independently
    import torch

    trl_view = torch.tensor([r if r is not None else torch.nan for r in out], dtype=torch.float32)
    got = checked(lambda completions, **kw: out)(["1", "2"])
    mine = torch.tensor([torch.nan if v is None else v for v in got], dtype=torch.float32)
    assert torch.equal(torch.isnan(mine), torch.isnan(trl_view))
    assert torch.equal(torch.nan_to_num(mine), torch.nan_to_num(trl_view))


def test_async_reward_stays_async_and_is_checked():
    import asyncio
    import inspect

    async def judge(completions, **kw):
        return [0.5] * (len(completions) - 1)

    wrapped = checked(judge)
    assert inspect.iscoroutinefunction(wrapped) and wrapped.__name__ == "judge"
    with pytest.raises(RlmLabError, match="'judge' returned 1 values for 2"):
        asyncio.run(wrapped(["1", "2"]))
    assert checked(wrapped) is wrapped  # wrapping twice changes nothing
