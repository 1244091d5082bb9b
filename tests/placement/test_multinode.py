"""Ray over several nodes (issue 25) on a local cluster of 3 nodes: a head holding no CPUs (the driver's node)
and 2 worker nodes of 1 CPU each, every one a ``ray start`` of its own on loopback (rlm_lab.placement.session).

- chapter 5's disaggregated GRPO and chapter 6's one-step-off from one seed, with each resource set on its
  own node (STRICT_SPREAD), end with exactly the rewards and the weights (bit for bit, and the same SHA-256)
  of the same runs on one node (tests/conftest.py ``one_node_run``). Exactly, not within a tolerance: every
  actor runs the same operations on the same number of threads (one per set) wherever it is placed, the
  generation seeds are fixed per chunk, and the sync copies bytes; a difference would mean that placement
  changed what is computed. The weights did move (the equality is not that of untouched weights);
- the weight sync crossed nodes: trainer and rollout worker on different nodes, and the bytes counted on the
  collective group (CommCounter, every step) are the model's parameter bytes;
- nothing of the cluster listens beyond loopback: GCS, the 3 raylets, their agents, the workers, and a sync
  group's store and gloo pairs served by an actor on one worker node to one on the other;
- a worker node killed mid-run (every process of it SIGKILLed, as a machine that loses power) fails the run
  within its timeout with one error line naming the node, the record says failed and why, and once the
  session closes no process of the cluster is left.
"""

import os
import threading
import time

import pytest

pytestmark = pytest.mark.slow

NODES = 2  # worker nodes; with the head, a cluster of 3


@pytest.fixture(scope="module")
def cluster(ray_session, one_node_run):
    """The multi-node session, started once the one-node reference runs exist (a driver holds one Ray at a time,
    so the shared one-node session is closed; the next module that needs it starts a fresh one)."""
    from rlm_lab.placement.session import RaySession

    for kind in ("disaggregated", "one_step_off"):
        one_node_run(kind)
    ray_session.close()
    session = RaySession(num_cpus=2, nodes=NODES)
    yield session
    session.close()
    assert session.leftover(wait_s=30) == []


@pytest.fixture(scope="module")
def spread_run(cluster, place_cfg, tmp_path_factory):
    """``get(kind)``: the run of ``one_node_run(kind)`` on the cluster, each set on its own node (made once, by
    the first test that needs it)."""
    from rlm_lab.asynchrony.modes import mode_placement, run_mode
    from rlm_lab.placement.runtime import run_placement

    cache = {}

    def get(kind: str) -> dict:
        if kind not in cache:
            folder = tmp_path_factory.mktemp(f"spread_{kind}")
            cache[kind] = run_placement(mode_placement(place_cfg, sync="collective"), place_cfg, folder, session=cluster,
                                        return_weights=True, timeout_s=60) if kind == "disaggregated" else \
                run_mode(kind, place_cfg, folder, session=cluster, return_weights=True, timeout_s=60,
                         importance=True)  # as one_node_run's
        return cache[kind]

    return get


def test_the_cluster_has_its_nodes(cluster):
    from rlm_lab.placement.session import HEAD_NAME

    nodes = {n["NodeName"]: n for n in cluster.ray.nodes() if n["Alive"]}
    assert set(nodes) == {HEAD_NAME, "rlm-node-1", "rlm-node-2"}
    assert cluster.node_devices("cpu") == {"rlm-node-1": 1, "rlm-node-2": 1}  # the head holds none
    assert len({n["NodeID"] for n in nodes.values()}) == 3 and all(n["NodeManagerAddress"] == "127.0.0.1"
                                                                    for n in nodes.values())


@pytest.mark.parametrize("kind", ["disaggregated", "one_step_off"])
def test_same_seed_on_two_nodes_as_on_one(kind, spread_run, one_node_run, place_cfg):
    import torch

    from rlm_lab.models import load
    from rlm_lab.placement.runtime import _sft_checkpoint

    one, two = one_node_run(kind), spread_run(kind)
    assert one["nodes"]["strategy"] == "PACK" and two["nodes"]["strategy"] == "STRICT_SPREAD"
    assert len(set(two["nodes"]["sets"].values())) == 2  # each set on its own node
    assert len(two["rewards"]) == place_cfg.rl_steps and two["rewards"] == one["rewards"]
    start = dict(load(str(_sft_checkpoint(place_cfg)))[0].named_parameters())
    assert max((one["weights"][k] - start[k]).abs().max().item() for k in start) > 1e-5, "weights did not move"
    assert set(two["weights"]) == set(one["weights"]) == set(start)
    unequal = [k for k in start if not torch.equal(one["weights"][k], two["weights"][k])]
    assert unequal == [], f"{len(unequal)} tensors differ, e.g. {unequal[:3]}"
    assert two["weights_sha256"] == one["weights_sha256"]
    if kind == "one_step_off":  # the same pipeline: staleness 1 from the second batch on, on both
        assert two["glue"]["buffer"]["staleness_hist"] == one["glue"]["buffer"]["staleness_hist"]


def test_weight_sync_crosses_nodes_over_the_collective_group(spread_run, place_cfg):
    from rlm_lab.models import load
    from rlm_lab.placement.runtime import _sft_checkpoint

    run = spread_run("disaggregated")
    sets = run["nodes"]["sets"]
    assert sets["train"] != sets["rollout"] and {sets["train"], sets["rollout"]} == {"rlm-node-1", "rlm-node-2"}
    expected = sum(p.numel() * p.element_size() for p in load(str(_sft_checkpoint(place_cfg)))[0].parameters())
    sync = run["sync"]
    assert sync["mode"] == "collective" and sync["syncs"] == place_cfg.rl_steps
    assert sync["counted_bytes_per_sync"] == sync["bytes_per_sync"] == expected


class Probe:
    """An actor that serves (rank 0) or joins a sync group exactly as the trainer and rollout worker do."""

    def pid(self):
        return os.getpid()

    def node(self):
        import ray

        return ray.get_runtime_context().get_node_id()

    def free_port(self, host):
        from rlm_lab.host import free_port

        return free_port(host)

    def join(self, host, port, rank):
        import torch

        from rlm_lab.placement.weights import make_group

        self.group = make_group(host, port, rank, 2, 30)
        t = torch.full((4,), float(rank))
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self.group.broadcast([t], opts).wait()
        return t.tolist()


def test_nothing_listens_beyond_loopback_on_any_node(cluster, sockets):
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from rlm_lab.placement.runtime import bundle_nodes
    from rlm_lab.placement.session import descendants

    ray = cluster.ray
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    ray.get(pg.ready(), timeout=120)
    probes = [ray.remote(Probe).options(num_cpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=i)).remote() for i in range(2)]
    try:
        host = bundle_nodes(ray, pg)[0]["address"]
        port = ray.get(probes[0].free_port.remote(host), timeout=120)
        got = ray.get([p.join.remote(host, port, i) for i, p in enumerate(probes)], timeout=120)
        assert got == [[0.0] * 4, [0.0] * 4]  # rank 1 received rank 0's tensor
        pids = ray.get([p.pid.remote() for p in probes], timeout=60)
        assert len(set(ray.get([p.node.remote() for p in probes], timeout=60))) == 2  # on two nodes
        everything = {os.getpid(), *descendants(os.getpid())}
        bound = sockets.bound(everything)
        names = [name for _, name, _, _ in bound]
        assert names.count("raylet") >= 3 and "gcs_server" in names, bound  # the scan sees all 3 nodes
        assert {pid for pid, *_ in bound} >= set(pids), bound  # and both probes' store / gloo sockets
        exposed = [b for b in bound if not sockets.loopback(b[2])]
        assert exposed == [], f"listening beyond loopback: {exposed}"
    finally:
        for p in probes:
            ray.kill(p)
        remove_placement_group(pg)


def test_zz_killed_worker_node_fails_the_run_naming_it(cluster, place_cfg, tmp_path):
    """Last in the module: it leaves the cluster one node short."""
    from rlm_lab.asynchrony.modes import mode_placement
    from rlm_lab.errors import RlmLabError
    from rlm_lab.placement.runtime import run_placement
    from rlm_lab.record import RunRecord, read_jsonl

    metrics, killed = tmp_path / "run" / "metrics.jsonl", {}

    def kill_rollout_node_after_first_step():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            if metrics.exists() and any("reward" in r for r in read_jsonl(metrics, torn_tail="drop")):
                rec = RunRecord.load(tmp_path / "run", strict=False).data["results"]
                killed["node"] = rec["nodes"]["sets"]["rollout"]
                killed["at"] = time.monotonic()
                killed["pids"] = cluster.kill_node(killed["node"])
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_rollout_node_after_first_step, daemon=True)
    killer.start()
    with pytest.raises(RlmLabError) as err:
        run_placement(mode_placement(place_cfg.replace(rl_steps=50), sync="collective"), place_cfg.replace(rl_steps=50),
                      tmp_path / "run", session=cluster, timeout_s=20)
    took = time.monotonic() - killed["at"]
    killer.join(5)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"node {killed['node']} (set 'rollout') died during the run"), msg
    assert took < 20 + 15, took  # the call timeout, plus the GCS's health checks that mark the node dead
    rec = RunRecord.load(tmp_path / "run", strict=False)
    assert rec.data["status"].startswith("failed") and killed["node"] in rec.data["status"]
    rows = read_jsonl(metrics)
    assert 1 <= sum(1 for r in rows if "reward" in r) < 50
    from rlm_lab.placement.session import _alive

    time.sleep(1.0)
    assert [p for p in killed["pids"] if _alive(p)] == []  # every process of the killed node is gone
