"""The process launcher: results come back per rank; a failing rank is one clear error."""

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.parallel.launch import spawn


def _sum_ranks(rank, world):
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return t.item()


def _rank1_raises(rank, world):
    import torch
    import torch.distributed as dist

    if rank == 1:
        raise ValueError("bad shard")
    dist.all_reduce(torch.ones(1))


@pytest.mark.dist
def test_spawn_returns_per_rank_results():
    assert spawn(_sum_ranks, 2) == [3.0, 3.0]


@pytest.mark.dist
def test_failing_rank_is_named():
    with pytest.raises(RlmLabError, match=r"rank 1: ValueError: bad shard"):
        spawn(_rank1_raises, 2, timeout_s=20)


def test_bad_world_size():
    with pytest.raises(RlmLabError, match="world size"):
        spawn(_sum_ranks, 0)
