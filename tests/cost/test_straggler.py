"""The data-parallel straggler factor (rlm_lab.cost.straggler) against hand-computed expectations."""

import itertools

import pytest

from rlm_lab.cost.straggler import straggler_factor
from rlm_lab.cost.workload import ResponseLengths, assumed_lengths
from rlm_lab.errors import RlmLabError


def _exact(pool, dp, per_rank):   # brute force: every assignment of pool values to dp x per_rank slots, equally likely
    slots = dp * per_rank
    total = n = 0
    for combo in itertools.product(pool, repeat=slots):
        total += max(sum(combo[r * per_rank:(r + 1) * per_rank]) for r in range(dp))
        n += 1
    return total / n / (sum(pool) / len(pool) * per_rank)


@pytest.mark.parametrize("dp,per_rank", [(2, 1), (3, 1), (2, 2), (3, 2)])
def test_factor_matches_enumeration(dp, per_rank):
    pool = [0, 2, 7]
    assert straggler_factor(pool, dp, per_rank, draws=100_000) == pytest.approx(_exact(pool, dp, per_rank), rel=0.01)


def test_two_ranks_of_a_coin():   # loads 0 or 2: the max is 2 unless both are 0 -> E[max] 1.5, mean 1
    assert straggler_factor([0, 2], 2, 1, draws=200_000) == pytest.approx(1.5, rel=0.01)


def test_one_rank_or_balanced_is_the_mean_and_bad_input_is_one_line():
    assert straggler_factor([1, 100], 1, 4) == 1.0 and straggler_factor([1, 100], 8, 4, balanced=True) == 1.0
    with pytest.raises(RlmLabError, match="dp"):
        straggler_factor([1], 0, 1)
    with pytest.raises(RlmLabError, match="lengths"):
        straggler_factor([], 2, 1)


def test_fewer_fuller_ranks_straggle_less():
    lengths = ResponseLengths(**assumed_lengths(28672, 1000))
    wide = straggler_factor(lengths, 32, 16, prompt_len=256)    # a mini-batch of 512 over 32 ranks
    half = straggler_factor(lengths, 16, 32, prompt_len=256)    # the same mini-batch over 16 ranks
    assert wide > half > 1.0
    assert straggler_factor(lengths, 32, 16) > wide             # the prompt dilutes the tail
