"""Work-depth helpers: DAG depth, Brent bounds, tail bubble, dynamic-sampling inflation."""

import pytest

from rlm_lab.cost.workdepth import WorkDepth, dynamic_sampling_inflation, tail_bubble
from rlm_lab.cost.workload import ResponseLengths, expected_max
from rlm_lab.errors import RlmLabError


def test_dag_depth_and_brent():
    wd = WorkDepth({"a": 4, "b": 2, "c": 6, "d": 1}, {"a": 1, "b": 2, "c": 3, "d": 1},
                   (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")))
    assert wd.work == 13 and wd.depth == 5
    assert wd.critical_path()[1] == ["a", "c", "d"]
    assert wd.brent(1) == (13, 18) and wd.brent(13) == (5, 6)
    assert wd.parallelism() == pytest.approx(2.6)
    with pytest.raises(RlmLabError):
        wd.brent(0)
    with pytest.raises(RlmLabError, match="cycle"):
        WorkDepth({"a": 1, "b": 1}, {"a": 1, "b": 1}, (("a", "b"), ("b", "a"))).depth


def test_tail_bubble():
    assert tail_bubble([5, 5, 5]) == 0
    assert tail_bubble([1, 1, 1, 9]) == pytest.approx(1 - 12 / 36)


def test_dynamic_sampling_golden():
    """By hand, 1 / (1 - p^G - (1-p)^G): p=0.1, G=8 -> 1.76x; G=16 -> 1.23x; p=0.5, G=8 -> 1.008x."""
    assert dynamic_sampling_inflation(0.1, 8) == pytest.approx(1.76, abs=0.01)
    assert dynamic_sampling_inflation(0.1, 16) == pytest.approx(1.23, abs=0.01)
    assert dynamic_sampling_inflation(0.5, 8) == pytest.approx(1.008, abs=0.001)
    assert dynamic_sampling_inflation(1.0, 4) == float("inf")


def test_response_lengths_and_expected_max():
    assert ResponseLengths("uniform", low=1, high=4).sample(8) == [1, 1, 2, 2, 3, 3, 4, 4]
    ln = ResponseLengths("lognormal", median=690, sigma=0.794, max=4096).sample(256)
    assert ln == sorted(ln) and max(ln) <= 4096 and ln[128] == pytest.approx(690, rel=0.02)
    assert ResponseLengths("list", values=(3, 1, 2)).sample(3) == [1, 2, 3]
    assert expected_max([1, 2, 3, 4], 4) == 4 and expected_max([1, 2, 3, 4], 1) == 2.5
    assert expected_max([1, 2, 3], 2) == pytest.approx((2 + 3 + 3) / 3)
    with pytest.raises(RlmLabError, match="low"):
        ResponseLengths("uniform", low=5, high=2)


def test_expected_max_equals_the_binomial_sum_and_brute_force():
    """The incremental binomial update gives exactly the closed form sum_j r_(j) C(j-1, k-1) / C(n, k), and on a
    small case the mean of the max over every k-subset (enumerated)."""
    import itertools
    import math
    import random

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 300)
        lengths, k = [rng.randint(1, 4000) for _ in range(n)], rng.randint(1, n)
        r = sorted(lengths)
        closed = sum(r[j - 1] * math.comb(j - 1, k - 1) for j in range(k, n + 1)) / math.comb(n, k)
        assert expected_max(lengths, k) == closed
    small = [5, 1, 9, 3, 7, 7]
    for k in range(1, 7):
        subsets = list(itertools.combinations(small, k))
        assert expected_max(small, k) == pytest.approx(sum(map(max, subsets)) / len(subsets), rel=1e-12)
