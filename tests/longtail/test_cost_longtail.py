"""The long-tail formulas against hand-derived cases and independent computations (brute force, Monte Carlo)."""

import itertools
import math

import pytest

from rlm_lab.cost import longtail as lt
from rlm_lab.errors import RlmLabError


def test_bubble_hand_case():
    assert lt.bubble([1, 1, 1, 5]) == pytest.approx(1 - 8 / 20)
    assert lt.bubble([3, 3]) == 0.0


def _brute_order_statistic(dist, k, n):
    """Enumerate every outcome of n draws: an independent computation of E[X_(k:n)]."""
    out = 0.0
    for draw in itertools.product(dist, repeat=n):
        prob = math.prod(dist[v] for v in draw)
        out += prob * sorted(draw)[k - 1]
    return out


@pytest.mark.parametrize("k, n", [(1, 1), (1, 3), (2, 3), (3, 3), (2, 4), (4, 4)])
def test_order_statistic_exact_vs_enumeration(k, n):
    dist = {1: 0.5, 4: 0.3, 10: 0.2}
    assert lt.expected_order_statistic(dist, k, n) == pytest.approx(_brute_order_statistic(dist, k, n), rel=1e-12)


def test_order_statistic_hand_case_and_monte_carlo():
    # two draws of a fair coin on {1, 3}: the max is 3 unless both are 1 (prob 1/4): E = 1/4 + 3 * 3/4 = 2.5
    assert lt.expected_order_statistic({1: 0.5, 3: 0.5}, 2, 2) == pytest.approx(2.5)
    dist = lt.pmf([2, 2, 3, 5, 8, 13, 30, 2, 3, 4])
    exact = lt.expected_order_statistic(dist, 6, 9)
    assert lt.monte_carlo_order_statistic(dist, 6, 9, trials=20_000, seed=1) == pytest.approx(exact, rel=0.03)


def test_overprovision_speedup_and_short_bias():
    lengths = [1] * 6 + [4] * 3 + [20]
    out = lt.overprovision(lengths, n=2, n_prime=4)
    dist = {1: 0.6, 4: 0.3, 20: 0.1}
    assert out["t_full"] == pytest.approx(_brute_order_statistic(dist, 2, 2))
    assert out["t_early"] == pytest.approx(_brute_order_statistic(dist, 2, 4))
    assert out["t_early"] < out["t_full"] and out["speedup"] > 1
    kept = (_brute_order_statistic(dist, 1, 4) + _brute_order_statistic(dist, 2, 4)) / 2
    assert out["kept_mean"] == pytest.approx(kept)
    assert out["short_bias"] == pytest.approx(kept / 3.8 - 1) and out["short_bias"] < 0
    same = lt.overprovision(lengths, 3, 3)
    assert same["speedup"] == pytest.approx(1) and same["kept_mean"] == pytest.approx(3.8)


def test_tail_batching_hand_case():
    # arrival order [9,1,1,9 | 1,1,1,1]: rounds of 2 -> (9,1)(1,9)(1,1)(1,1) = 9+9+1+1 = 20 steps;
    # the two long ones in their own round -> (1,1)(1,1)(1,1)(9,9) = 1+1+1+9 = 12
    out = lt.tail_batching([9, 1, 1, 9, 1, 1, 1, 1], batch=2, tail_fraction=0.25)
    assert out["steps_mixed"] == 20 and out["steps_tail_batched"] == 12
    assert out["tail_batched"][-1] == [9, 9]
    # a wrong predictor (it thinks a short one is the longest) makes it worse: (9,1)(9) + (1) = 19 > 18
    bad = lt.tail_batching([9, 1, 1, 9], batch=2, predicted=[1, 9, 2, 1], tail_fraction=0.25)
    assert bad["steps_mixed"] == 18 and bad["steps_tail_batched"] == 19


def test_dispatch_hand_case_and_bounds():
    lengths = [8, 1, 7, 1, 6, 1]
    assert lt.dispatch(lengths, 2, "round_robin") == [[8, 7, 6], [1, 1, 1]]
    assert lt.dispatch_makespan(lengths, 2, "round_robin") == 21
    # LPT: 8->a, 7->b, 6->b (13), then the three 1s to a (9, 10, 11): 13, the optimum (no subset sums to 12)
    assert lt.dispatch_makespan(lengths, 2, "lpt") == 13
    assert lt.lpt_bound(lengths, 2) == (12, 12 + 4)
    # Graham's example where LPT is not optimal: [3,3,2,2,2] on 2 -> LPT 7, optimum 6 (3+3 | 2+2+2)
    hard = [3, 3, 2, 2, 2]
    best = min(max(sum(x for x, s in zip(hard, mask) if s), sum(x for x, s in zip(hard, mask) if not s))
               for mask in itertools.product([0, 1], repeat=len(hard)))
    assert best == 6 and lt.dispatch_makespan(hard, 2, "lpt") == 7 <= (4 / 3 - 1 / 6) * best + 1e-9  # the bound is tight here
    lower, upper = lt.lpt_bound(hard, 2)
    assert lower <= best and 7 <= upper


def test_padding_and_token_budget():
    assert lt.padded_fraction([4, 1, 2, 2], 2) == pytest.approx(9 / (2 * 4 + 2 * 2))
    assert lt.padded_fraction([4, 1, 2, 2], 1) == 1.0
    bins = lt.token_budget_microbatches([5, 4, 3, 3, 1], 8)
    # FFD: 5 -> bin0 (3 left), 4 -> bin1 (4 left), 3 -> bin0 (0), 3 -> bin1 (1), 1 -> bin1 (0)
    assert bins == [[0, 2], [1, 3, 4]]
    assert all(sum([5, 4, 3, 3, 1][i] for i in b) <= 8 for b in bins)


def test_dynamic_sampling_inflation_distribution():
    from rlm_lab.cost import dynamic_sampling_inflation

    assert lt.dynamic_sampling_inflation_dist([0.5], 2) == pytest.approx(dynamic_sampling_inflation(0.5, 2)) == 2.0
    # half the prompts are always solved (useless), half have p=1/2, G=2 (useless 1/2): keep q = 1/4
    assert lt.dynamic_sampling_inflation_dist([1.0, 0.5], 2) == pytest.approx(4.0)
    # not the mean of the per-prompt inflations (inf here): the pool's keep rate is what counts
    assert lt.dynamic_sampling_inflation_dist([0.0, 1.0], 4) == math.inf


def test_fusion_hand_case():
    # finishes at 1, 2, 10; scoring 1 each: fused ends 11 (= T_gen + T_score(last)); after = 10 + 3 = 13
    out = lt.fusion_time([10, 1, 2], 1.0)
    assert out["fused"] == 11 and out["after"] == 13 and out["bound"] == 11
    # a slow scorer cannot keep up: fused = the scorer's queue, above the bound
    slow = lt.fusion_time([1, 1.5, 2], 2.0)
    assert slow["fused"] == 7 and slow["bound"] == 4 and slow["after"] == 8


@pytest.mark.parametrize("call, message", [
    (lambda: lt.bubble([]), "empty batch"),
    (lambda: lt.overprovision([3, 4], 4, 2), "n' >= n"),
    (lambda: lt.dynamic_sampling_inflation_dist([0.5], 1), "group size 1"),
    (lambda: lt.dispatch([], 2), "empty batch"),
    (lambda: lt.dispatch([3], 2, "random"), "round_robin or lpt"),
    (lambda: lt.token_budget_microbatches([9], 8), "does not fit"),
    (lambda: lt.fusion_time([], 1.0), "empty batch"),
    (lambda: lt.tail_batching([1, 2], 1, predicted=[1]), "1 values for 2 prompts"),
])
def test_bad_input(call, message):
    with pytest.raises(RlmLabError, match=message):
        call()
