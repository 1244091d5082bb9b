"""The fork-join decoder's orchestration, against a scripted model that writes the reference trace: the
outline call, ONE call for every branch of every trace (each row sees only the prompt, the outline and its own
header), the join with the whole trace as context, work and depth equal to the task's own count, and a
malformed trace stopped where it broke."""

import pytest

from rlm_lab.forkjoin import Limits, fork_join_generate, sequential_generate, text
from rlm_lab.tasks.psum import parallel_trace, parse_prompt, parse_trace
from scripted import TOK, Scripted

def test_branches_are_one_batch_and_see_no_sibling():
    prompts = ["3*1+2*2=", "1*1+3*3+2*1+1*2="]
    m = Scripted()
    got = fork_join_generate(m, TOK, prompts, Limits(8, 8, 14))
    assert len(m.calls) == 3  # outline, branches, join
    branch_rows = m.calls[1]
    assert len(branch_rows) == 2 + 4  # every branch of both traces in one call
    assert branch_rows[0] == "3*1+2*2=<ab>a:" and branch_rows[1] == "3*1+2*2=<ab>b:"
    assert all(";" not in r for r in branch_rows)  # no row sees a sibling's body
    assert m.calls[2][0] == "3*1+2*2=<ab>a:3*1=3;b:2*2=4;"
    for p, d in zip(prompts, got.traces):
        ref = parse_trace(parallel_trace(parse_prompt(p)))
        assert text(TOK, d.trace) == parallel_trace(parse_prompt(p))
        assert (d.work, d.depth, d.stage) == (ref.work, ref.depth, "done")
        assert sum(d.mask) == d.work and d.mask.count(0) == ref.inserted


def test_a_broken_branch_stops_the_trace():
    got = fork_join_generate(Scripted(break_branch="b"), TOK, ["3*1+2*2="], Limits(8, 8, 14))
    d = got.traces[0]
    assert d.segments is None and d.stage == "branches"
    assert text(TOK, d.trace) == "<ab>a:3*1=3;b:9*9="


def test_sequential_is_one_call():
    class Seq(Scripted):
        def _next(self, row):
            return "1*1=1,1*1=1,1+1=2<eos>"

    m = Seq()
    got = sequential_generate(m, TOK, ["1*1+1*1="], 30)
    assert len(m.calls) == 1 and got.traces[0].work == got.traces[0].depth == len("1*1=1,1*1=1,1+1=2") + 1


def test_limits_are_checked():
    from rlm_lab.errors import RlmLabError

    with pytest.raises(RlmLabError, match="limit branch must be an integer >= 1, got 0"):
        Limits(8, 0, 14)
    with pytest.raises(RlmLabError, match="at least one prompt"):
        fork_join_generate(Scripted(), TOK, [])
