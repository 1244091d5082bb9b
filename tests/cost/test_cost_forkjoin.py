"""Work, depth and latency of one trace (rlm_lab.cost.forkjoin), by hand and against the cost model's own
calls; the bubble of a batch against a simulation."""

import random

import pytest

from rlm_lab.cost import generate_time, load_profile, model_spec
from rlm_lab.cost.forkjoin import batch_bubble, fork_join_dag, latency, sequential_dag, sequential_latency
from rlm_lab.errors import RlmLabError


def test_dag_by_hand():
    d = fork_join_dag(5, [7, 7, 9], 12)
    assert d.work == 5 + 23 + 12 and d.depth == 5 + 9 + 12
    assert d.brent(3) == (max(40 / 3, 26), 40 / 3 + 26)
    assert d.critical_path()[1] == ["outline", "branch_3", "join"]
    s = sequential_dag(34)
    assert s.work == s.depth == 34 and s.brent(4) == (34, 34 / 4 + 34)


def test_latency_is_three_generate_calls():
    spec, prof = model_spec("micro"), load_profile("cpu-2core-epyc")
    got = latency(spec, prof, 12, 5, [7, 7], 12)
    kw = dict(dtype="fp32", dtype_bytes=4)
    want = (generate_time(spec, prof, 12, [5], **kw) + generate_time(spec, prof, 12 + 5 + 2, [7, 7], **kw)
            + generate_time(spec, prof, 12 + 5 + 18, [12], **kw))
    assert got["total_s"] == pytest.approx(want)
    assert sequential_latency(spec, prof, 12, 34) == pytest.approx(generate_time(spec, prof, 12, [34], **kw))


def test_batch_bubble_against_a_simulation():
    lengths = [3] * 50 + [6] * 30 + [30] * 20
    rng = random.Random(0)
    sims = [rng.choices(lengths, k=8) for _ in range(20000)]
    mean_len = sum(lengths) / len(lengths)
    want = 1 - mean_len / (sum(max(s) for s in sims) / len(sims))
    assert batch_bubble(lengths, 8) == pytest.approx(want, abs=0.01)
    assert batch_bubble([5, 5, 5], 4) == pytest.approx(0.0)


@pytest.mark.parametrize("call, message", [
    (lambda: fork_join_dag(5, [], 3), "at least one branch"),
    (lambda: fork_join_dag(0, [2], 3), "the outline must be an integer >= 1"),
    (lambda: sequential_dag(2.5), "length must be an integer >= 1"),
    (lambda: batch_bubble([3, 4], 0), "a batch needs n >= 1"),
])
def test_bad_counts(call, message):
    with pytest.raises(RlmLabError, match=message):
        call()
