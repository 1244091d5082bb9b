"""The mixture of the book's tasks (chapter 10): tagged prompts, one set of columns, the verifier that routes,
and the same problems in every mixture that holds a task."""

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.tasks import correctness_reward, parse_task
from rlm_lab.tasks.mix import COMPONENTS, COLUMNS


def test_rows_are_tagged_routed_and_uniform():
    mix = parse_task("mix")
    train, test = mix.split(40, 8, 0)
    assert len(train) == 40 and len(test) == 8
    for r in train + test:
        assert set(r) == set(COLUMNS)
        tag, task = COMPONENTS[r["task"]]
        assert r["prompt"].startswith(tag)
        assert mix.is_correct(r["answer"], r) and task.is_correct(r["answer"], r)
    assert [r["task"] for r in train[:4]] == list(COMPONENTS)  # round-robin


def test_a_one_task_mixture_holds_the_same_problems():
    full_train, full_test = parse_task("mix").split(40, 8, 0)
    for name in COMPONENTS:
        tr, te = parse_task(f"mix:tasks={name}").split(40, 8, 0)
        assert tr == [r for r in full_train if r["task"] == name]
        assert te == [r for r in full_test if r["task"] == name]


def test_routing_scores_the_right_task():
    mix = parse_task("mix")
    train, _ = mix.split(8, 4, 0)
    rows = {r["task"]: r for r in train}
    reward = correctness_reward(mix)
    # the psum answer is right for the psum row and wrong for the arithmetic row
    ps, ar = rows["psum"], rows["arithmetic"]
    got = reward([ps["answer"], ps["answer"]], **{k: [ps[k], ar[k]] for k in COLUMNS if k != "prompt"})
    assert got == [1.0, 0.0]


@pytest.mark.parametrize("spec, message", [
    ("mix:tasks=arithmetic+sudoku", "mix tasks 'arithmetic\\+sudoku': use arithmetic, countdown, chain, psum"),
    ("mix:tasks=chain+chain", "names a task twice"),
])
def test_bad_mixtures(spec, message):
    with pytest.raises(RlmLabError, match=message):
        parse_task(spec)
