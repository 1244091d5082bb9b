"""Reward functions: TRL signature, never raise on any completion (property-tested), and
user reward functions that crash give one clear error instead of a silent zero."""

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
    (lambda c: None, "returned 0 values for 2"),
    (lambda c: [1.0], "returned 1 values for 2"),
    (lambda c: [1.0, float("nan")], "finite floats"),
    (lambda c: [1.0, "x"], "finite floats"),
])
def test_malformed_reward_return_is_a_clear_error(ret, msg):
    def bad(completions, **kw):
        return ret(completions)

    with pytest.raises(RlmLabError, match=msg):
        checked(bad)(["1", "2"])
