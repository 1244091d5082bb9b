"""The psum task (chapter 10): its two trace formats, their work and depth by hand, the verifier, the
parallelism-aware reward and TRL's "not scored" for a malformed trace."""

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.tasks import parallelism_aware_reward, parse_task
from rlm_lab.tasks.psum import parallel_trace, parse_trace, sequential_trace, trace_error

SEQ = "3*4=12,5*6=30,7*2=14,12+30+14=56"
PAR = "<abc>a:3*4=12;b:5*6=30;c:7*2=14;12+30+14=56"
ROW = {"prompt": "3*4+5*6+7*2=", "answer": PAR}


def test_reference_traces_by_hand():
    assert sequential_trace([(3, 4), (5, 6), (7, 2)]) == SEQ
    assert parallel_trace([(3, 4), (5, 6), (7, 2)]) == PAR


def test_work_and_depth_by_hand():
    s, p = parse_trace(SEQ), parse_trace(PAR)
    assert (s.kind, s.work, s.depth) == ("seq", len(SEQ) + 1, len(SEQ) + 1) == ("seq", 33, 33)
    # outline "<abc>" 5, three bodies "3*4=12;" of 7, join "12+30+14=56" 11, plus the EOS
    assert (p.kind, p.work, p.depth, p.inserted) == ("par", 5 + 21 + 11 + 1, 5 + 7 + 11 + 1, 6)
    assert p.acceleration == pytest.approx(1 - 24 / 38)
    assert s.acceleration == 0.0


def test_seq_and_par_splits_hold_the_same_problems_and_verify():
    seq, par = parse_task("psum:terms=4,max_number=3"), parse_task("psum:terms=4,max_number=3,trace=par")
    (st, se), (pt, pe) = seq.split(200, 50, 0), par.split(200, 50, 0)
    assert [r["prompt"] for r in st + se] == [r["prompt"] for r in pt + pe]
    assert not {r["prompt"] for r in st} & {r["prompt"] for r in se}
    for a, b in zip(st + se, pt + pe):
        assert seq.is_correct(a["answer"], b) and par.is_correct(b["answer"], a)  # either trace solves either row
    assert {len(parse_trace(r["answer"]).bodies) for r in pt} == {2, 3, 4}


@pytest.mark.parametrize("text, correct", [
    (PAR, True), (SEQ, True),
    ("<abc>a:3*4=12;b:5*6=31;c:7*2=14;12+31+14=57", False),   # a wrong product, consistent sum
    ("<abc>a:3*4=12;b:5*6=30;c:7*2=14;12+30+14=55", False),   # a wrong total
    ("<ab>a:3*4=12;b:5*6=30;12+30=42", False),                # a product left out
    ("<abc>a:5*6=30;b:3*4=12;c:7*2=14;30+12+14=56", False),   # the products out of order
    ("3*4=12,5*6=30,7*2=14,12+30+15=57", False),              # the join adds a term that is no result
])
def test_verifier(text, correct):
    assert parse_task("psum:trace=par").is_correct(text, ROW) is correct


@pytest.mark.parametrize("text, why", [
    ("", "empty trace"), ("<abc", "outline <...> is not closed"), ("<ba>a:1*1=1;", "labels must be abc"),
    ("<ab>a:1*1=1;b:1*1=1", "branch b must be"), ("<ab>a:1*1=1;b:1*1=1;2", "the join must be a sum"), ("<ab>a:1*1=1;c:1*1=1;2=2", "branch b must be"),
    ("<ab>a:1+1=2;b:1*1=1;3=3", "branch a is not a product"), ("12", "must be a product"), (None, "is text"),
])
def test_malformed_traces_say_why_in_one_line(text, why):
    assert parse_trace(text) is None
    assert why in trace_error(text) and "\n" not in trace_error(text)


def test_parallelism_aware_reward_by_hand():
    task = parse_task("psum:trace=par")
    r = parallelism_aware_reward(task)
    eta = 1 - 24 / 38  # > 0.2: the clip binds
    out = r([PAR, SEQ, "<abc>a:3*4=13;b:5*6=30;c:7*2=14;13+30+14=57", "<ab>junk"], answer=[PAR] * 4)
    assert out == [pytest.approx(1 + 0.5 * 0.2), 1.0, -1.0, None]
    unclipped = parallelism_aware_reward(task, weight=0.5, clip=1.0)
    assert unclipped([PAR], answer=[PAR]) == [pytest.approx(1 + 0.5 * eta)]


def test_correctness_reward_is_none_when_unscorable():
    from rlm_lab.tasks import correctness_reward

    assert correctness_reward(parse_task("psum:trace=par"))(["<ab", PAR], answer=[PAR, PAR]) == [None, 1.0]


@pytest.mark.parametrize("spec, message", [
    ("psum:terms=1", "psum terms must be 2..8, got 1"), ("psum:max_number=10", "psum max_number must be 2..9"),
    ("psum:trace=tree", "psum trace must be seq or par, got 'tree'"), ("psum:branches=3", "has no knob 'branches'"),
])
def test_bad_knobs_are_one_clear_error(spec, message):
    with pytest.raises(RlmLabError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_task(spec)


def test_reward_options_are_checked():
    with pytest.raises(RlmLabError, match="needs a task with parallel traces"):
        parallelism_aware_reward(parse_task("chain"))
    with pytest.raises(RlmLabError, match="clip must be a finite number"):
        parallelism_aware_reward(parse_task("psum"), clip=float("nan"))
