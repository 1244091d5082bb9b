"""The placement registry: validation messages, named placements, and the Bell-number enumeration."""

import itertools
import re

import pytest

from rlm_lab.cost.placement_spec import (
    Cluster, Placement, PlacementError, ResourceSet, enumerate_groupings, get_placement, placement_from_dict,
    roles_for,
)


def test_roles_per_algorithm():
    assert roles_for("grpo") == ("actor", "rollout", "reference")
    assert roles_for("ppo") == ("actor", "rollout", "reference", "critic", "reward")
    assert roles_for("dapo") == ("actor", "rollout")   # beta = 0: no reference


def _bell(n):
    # independent count: the Bell triangle
    row = [1]
    for _ in range(n - 1):
        nxt = [row[-1]]
        for v in row:
            nxt.append(nxt[-1] + v)
        row = nxt
    return row[-1]


@pytest.mark.parametrize("n, expected", [(1, 1), (2, 2), (3, 5), (4, 15), (5, 52)])
def test_groupings_are_the_set_partitions(n, expected):
    roles = ("actor", "rollout", "reference", "critic", "reward")[:n]
    groups = enumerate_groupings(roles)
    assert len(groups) == expected == _bell(n)
    canon = {frozenset(frozenset(g) for g in p) for p in groups}
    assert len(canon) == expected                         # no partition twice
    for p in groups:                                      # each is a partition of the roles
        flat = list(itertools.chain.from_iterable(p))
        assert sorted(flat) == sorted(roles) and all(p)


def test_named_placements_validate():
    c = Cluster(8, "gpu", 80, 50)
    col = get_placement("colocated", c, "ppo")
    assert [s.devices for s in col.sets] == [8] and not col.rollout_separate
    dis = get_placement("disaggregated", c, "grpo", rollout_devices=2, rollout_tp=2)
    assert dis.set_of("rollout").devices == 2 and dis.set_of("rollout").dp == 1
    assert dis.set_of("reference").name == "train" and dis.set_of("actor").devices == 6 and dis.rollout_separate
    sp = get_placement("split", c, "ppo", value_devices=3)
    assert sp.roles_on("value") == ("critic", "reward") and sp.set("policy").devices == 5
    hy = get_placement("hybrid", c, "grpo", gen_tp=4)
    assert hy.reshard and hy.set("all").zero == 3 and hy.set("all").generation_tp == 4
    again = placement_from_dict(dis.to_dict())
    assert again == dis


@pytest.mark.parametrize("build, algo, message", [
    (lambda: Placement("p", (ResourceSet("a", 2, dp=2),), {"actor": "a", "rollout": "a"}), "grpo",
     "grpo needs role(s) reference"),
    (lambda: Placement("p", (ResourceSet("a", 2, dp=2),), {"actor": "a", "rollout": "a", "reference": "b"}), "grpo",
     "unknown set(s) 'b'"),
    (lambda: Placement("p", (ResourceSet("a", 2, dp=2),), {"actor": "a", "rollout": "a", "critic": "a"}), "dapo",
     "dapo has no critic"),
    (lambda: Placement("p", (ResourceSet("a", 2, dp=2),), {"actor": "a", "rollout": "a", "judge": "a"}), "dapo",
     "unknown role(s) judge"),
    (lambda: Placement("p", (ResourceSet("a", 1), ResourceSet("b", 1)), {"actor": "a", "rollout": "b"}), "dapo",
     "sync must be 'collective'"),
    (lambda: Placement("p", (ResourceSet("a", 1), ResourceSet("b", 1)), {"actor": "a", "rollout": "a"}), "dapo",
     "set(s) b hold no role"),
    (lambda: Placement("p", (ResourceSet("a", 1),), {"actor": "a", "rollout": "a"}, reshard=True), "dapo",
     "zero=3"),
])
def test_validation_errors(build, algo, message):
    with pytest.raises(PlacementError, match=re.escape(message)):
        build().validate(algo)


def test_set_and_cluster_errors():
    with pytest.raises(PlacementError, match="devices must be an integer > 0"):
        ResourceSet("a", 0)
    with pytest.raises(PlacementError, match=r"dp=2 x tp=2 = 4 does not match its 2 devices"):
        ResourceSet("a", 2, dp=2, tp=2)
    with pytest.raises(PlacementError, match="asks for 6 cpu devices .4 \\+ 2. but the cluster has 4"):
        Placement("p", (ResourceSet("a", 4, dp=4), ResourceSet("b", 2, dp=2)),
                  {"actor": "a", "rollout": "b"}, sync="collective").validate("dapo", Cluster(4))
    with pytest.raises(PlacementError, match="has neither"):
        get_placement("split", 4, "grpo")
    with pytest.raises(PlacementError, match="unknown placement 'ring'"):
        get_placement("ring", 4)
    with pytest.raises(PlacementError, match="rollout_devices must be in 1..3"):
        get_placement("disaggregated", 4, rollout_devices=4)
