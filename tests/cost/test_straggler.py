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


def test_a_set_dealing_sequences_as_drawn_pays_the_straggler():
    from pathlib import Path

    from rlm_lab.cost import load_profile
    from rlm_lab.cost.placement import predict_placement
    from rlm_lab.cost.placement_spec import Cluster, Placement, PlacementError, ResourceSet
    from rlm_lab.stages import Stage as S

    qwen = str(Path(__file__).resolve().parents[2] / "configs/models/qwen2.5-7b.config.json")
    wl = dict(prompts=32, group_size=8, prompt_len=64, minibatches=2, micro_batch=2, precision="bf16-mixed",
              response={"kind": "lognormal", "median": 300, "sigma": 0.8, "min": 1, "max": 4096})

    def train(balance, sp=1):
        sets = (ResourceSet("rollout", 8, "gpu", dp=8),
                ResourceSet("train", 8, "gpu", dp=8, zero=3, balance=balance, sp=sp))
        p = Placement("d", sets, {"actor": "train", "rollout": "rollout"}, sync="collective")
        pp = predict_placement(p, qwen, "dapo", wl, load_profile("h100-sxm"), Cluster(16, "gpu", 80))
        return next(s for s in pp.sets if s.name == "train")

    even, drawn = train("tokens"), train("drawn")
    lengths = ResponseLengths(**wl["response"])
    f = straggler_factor(lengths, 8, 128 // 8, prompt_len=64)          # a mini-batch of 128 over 8 groups
    assert drawn.stages[S.ACTOR_BACKWARD] == pytest.approx(f * even.stages[S.ACTOR_BACKWARD], rel=1e-9)
    assert drawn.stages[S.OPTIMIZER] == pytest.approx(even.stages[S.OPTIMIZER])
    # Ulysses groups of 4 leave 2 data groups, each with more sequences: a smaller factor
    assert train("drawn", sp=4).stages[S.ACTOR_BACKWARD] / train("tokens", sp=4).stages[S.ACTOR_BACKWARD] < f
    with pytest.raises(PlacementError, match="balance"):
        ResourceSet("t", 2, "gpu", dp=2, balance="fair")
