"""The collective counter: message bytes per collective kind, group sizes, phases, and agreement with
PyTorch's CommDebugMode on a tensor-parallel step."""

import pytest

from rlm_lab.parallel.comm_counter import wire_bytes


def test_ring_wire_bytes():
    assert wire_bytes("all_reduce", 1000, 4) == 1500
    assert wire_bytes("all_gather", 1000, 4) == 750
    assert wire_bytes("reduce_scatter", 1000, 2) == 500
    assert wire_bytes("send", 1000, 2) == 1000
    assert wire_bytes("all_reduce", 1000, 1) == 0


def _collectives(rank, world):
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh

    from rlm_lab.parallel.comm_counter import CommCounter

    mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("a", "b"))
    t = torch.ones(10)  # 40 bytes
    c = CommCounter()
    with c:
        with c.phase("p1"):
            dist.all_reduce(t)
            dist.all_gather_into_tensor(torch.empty(20), t)
            dist.reduce_scatter_tensor(torch.empty(10), torch.ones(20))
        with c.phase("p2"):
            out = torch.empty(10)
            dist.all_to_all_single(out, t)
            dist.broadcast(t, src=0)
            if rank == 0:
                dist.send(t, 1)
            else:
                dist.recv(t, 0)
            funcol.all_reduce(t, "sum", mesh["b"]).wait()
            dist.all_reduce(t, group=mesh["a"].get_group())  # a group of one rank: no traffic
    return c.summary(), c.by_phase()


def _tp_cross_check(rank, world):
    from rlm_lab.models import build_model
    from rlm_lab.parallel.comm_counter import CommCounter
    from rlm_lab.parallel.bench.measure import fixed_batch
    from rlm_lab.parallel.mesh import Layout, build_mesh
    from rlm_lab.parallel.parallelize import parallelize

    layout = Layout(tp=2, sp=True)
    par = parallelize(build_model("nano")[0], layout, build_mesh(layout))
    x, y = fixed_batch(8, 16, 52)
    c = CommCounter(cross_check=True)
    with c:
        par.forward_backward(x, y)
    return {k: v["calls"] for k, v in c.summary().items()}, c.debug_mode_counts()


def _both(rank, world):
    return _collectives(rank, world), _tp_cross_check(rank, world)


@pytest.fixture(scope="module")
def results():
    from rlm_lab.parallel.launch import spawn

    return spawn(_both, 2)


@pytest.mark.dist
@pytest.mark.slow
def test_every_kind_is_counted_with_its_message_bytes(results):
    (s0, phases0), _ = results[0]
    (s1, _), _ = results[1]
    assert s0["all_reduce"] == {"calls": 3, "bytes": 120, "wire_bytes": 80.0, "groups": [1, 2]}
    assert s0["all_gather"]["bytes"] == 80 and s0["reduce_scatter"]["bytes"] == 80  # the full buffer
    assert s0["all_to_all"]["bytes"] == 40 and s0["broadcast"]["bytes"] == 40
    assert s0["send"] == {"calls": 1, "bytes": 40, "wire_bytes": 40.0, "groups": [2]} and "recv" not in s0
    assert s1["recv"]["bytes"] == 40 and "send" not in s1
    assert set(phases0) == {"p1", "p2"} and set(phases0["p1"]) == {"all_reduce", "all_gather", "reduce_scatter"}


@pytest.mark.dist
@pytest.mark.slow
def test_counts_agree_with_comm_debug_mode(results):
    _, (ours, theirs) = results[0]
    assert ours["all_gather"] == theirs["all_gather_into_tensor"]
    assert ours["reduce_scatter"] == theirs["reduce_scatter_tensor"]
    assert ours["all_reduce"] == theirs["all_reduce"]
