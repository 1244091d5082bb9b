"""The chain task: hand cases for the verifier, determinism, the long tail it generates, and a property test
that its reward never raises (TRL's reward contract)."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm_lab.errors import RlmLabError
from rlm_lab.models.tokenizer import ALPHABET
from rlm_lab.tasks import correctness_reward, format_reward, get_task, parse_task
from rlm_lab.tasks.chain import Chain, answer_length, predicted_length

ROW = {"prompt": "3+4*2-5=", "answer": "3+4=7,7*2=14,14-5=9"}


@pytest.mark.parametrize("completion, correct, formed", [
    ("3+4=7,7*2=14,14-5=9", True, True),
    (" 3+4=7,7*2=14,14-5=9 ", True, True),   # surrounding space is tolerated
    ("3+4=7,7*2=14,14-5=8", False, False),   # wrong last step: not a valid chain
    ("3+4=7,7*2=15,15-5=10", False, False),  # an arithmetic slip in the middle
    ("3+4=7,8*2=16,16-5=11", False, False),  # a step that does not start from the previous result
    ("3+4=7,7*2=14", False, True),           # valid chain, one step short
    ("3+4=7,7+2=9,9-5=4", False, True),      # valid chain, wrong operator
    ("3+4=7,7*3=21,21-5=16", False, True),   # valid chain, wrong operand
    ("4+3=7,7*2=14,14-5=9", False, True),    # right value, operands in the wrong order
    ("9", False, False), ("", False, False), ("3+4=7,", False, False), ("3+4=7,,7*2=14", False, False),
])
def test_hand_cases(completion, correct, formed):
    task = Chain()
    assert task.is_correct(completion, ROW) is correct
    assert task.is_well_formed(completion) is formed


def test_negative_intermediate_and_reward_functions():
    task = Chain()
    row = {"prompt": "2-7*3=", "answer": "2-7=-5,-5*3=-15"}
    assert task.is_correct(row["answer"], row)
    got = correctness_reward(task)(["2-7=-5,-5*3=-15", "2-7=5,5*3=15", "x"], prompt=[row["prompt"]] * 3)
    assert got == [1.0, 0.0, 0.0]
    # as TRL calls it: ``prompts`` and the dataset's other columns (``answer``), no ``prompt``
    got = correctness_reward(task)(["2-7=-5,-5*3=-15", "2-7=-5"], prompts=["x", "y"], answer=[row["answer"]] * 2)
    assert got == [1.0, 0.0]
    assert format_reward(task, 0.1)(["2-7=-5,-5*3=-15", "2-7=5"]) == [0.1, 0.0]


def test_generation_is_deterministic_in_alphabet_and_long_tailed():
    task = parse_task("chain:steps=8")
    a, _ = task.split(400, 10, seed=3)
    b, _ = task.split(400, 10, seed=3)
    assert a == b
    assert set("".join(r["prompt"] + r["answer"] for r in a)) <= set(ALPHABET)
    assert all(task.is_correct(r["answer"], r) for r in a)
    assert max(len(r["prompt"]) for r in a) <= task.max_prompt_len()
    lengths = sorted(answer_length(r) for r in a)
    # a long tail: the longest answer is several times the median, and lengths follow the problem
    assert lengths[-1] >= 3 * lengths[len(lengths) // 2]
    assert all(predicted_length(r["prompt"]) == answer_length(r) for r in a)
    # the number of operations is geometric-ish: about half the problems have one step
    one = sum(r["prompt"].count("=") == 1 and len(r["answer"].split(",")) == 1 for r in a) / len(a)
    assert 0.4 < one < 0.62


def test_knob_errors():
    with pytest.raises(RlmLabError, match="chain steps must be 1..16, got 0"):
        get_task("chain", steps=0)
    with pytest.raises(RlmLabError, match="chain max_number must be 2..99"):
        get_task("chain", max_number=100)
    with pytest.raises(RlmLabError, match="is not of the form"):
        predicted_length("3+=")


_chars = st.text(alphabet=ALPHABET + "\n\x00é", max_size=60)


@settings(max_examples=300, deadline=None)
@given(completion=_chars, prompt=st.one_of(_chars, st.none(), st.integers()), answer=st.one_of(_chars, st.none()))
def test_reward_never_raises(completion, prompt, answer):
    task = Chain()
    rewards = correctness_reward(task)([completion, ROW["answer"]], prompt=[prompt, ROW["prompt"]],
                                       answer=[answer, ROW["answer"]])
    assert rewards[0] in (0.0, 1.0) and rewards[1] == 1.0
    assert isinstance(task.is_well_formed(completion), bool)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_reference_answer_is_correct_and_perturbation_is_not(seed):
    task = Chain(steps=6, max_number=20)
    row = task.sample(random.Random(seed))
    assert task.is_correct(row["answer"], row)
    last = row["answer"].rsplit("=", 1)
    wrong = f"{last[0]}={int(last[1]) + 1}"
    assert not task.is_correct(wrong, row)
