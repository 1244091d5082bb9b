"""The gpu size without a GPU: what a placement would ask of Ray (bundles, per-actor num_gpus/num_cpus) and of
torch.distributed (NCCL between GPUs, gloo between cores), checked against hand-written expectations, and the
one-line refusal on a machine with fewer GPUs than the placement needs."""

import pytest


def _grpo(size="gpu"):
    from rlm_lab.chapters.ch05_placement.cases import run_config

    return run_config(size)


def test_gpu_sets_ask_ray_for_gpus_and_sync_over_nccl():
    from rlm_lab.placement.resources import actor_options, bundle, set_device, sync_backend, threads
    from rlm_lab.placement.runtime import algo_roles
    from rlm_lab.cost.placement_spec import Cluster, get_placement

    algo = algo_roles(_grpo())
    p = get_placement("disaggregated", Cluster(4, "gpu"), algo, rollout_devices=1, sync="collective")
    train, gen = p.set_of("actor"), p.set_of("rollout")
    assert {s.name: bundle(s) for s in p.sets} == {train.name: {"GPU": 3, "CPU": 3}, gen.name: {"GPU": 1, "CPU": 1}}
    assert actor_options(train, 3) == {"num_gpus": 3, "num_cpus": 3}
    assert actor_options(gen, 1) == {"num_gpus": 1, "num_cpus": 1}
    assert (set_device(train), threads(train, 3), sync_backend(p)) == ("cuda", 1, "nccl")
    cpu = get_placement("disaggregated", Cluster(2), algo, rollout_devices=1, sync="collective")
    assert [bundle(s) for s in cpu.sets] and all("GPU" not in bundle(s) for s in cpu.sets)
    assert actor_options(cpu.set_of("actor"), 1) == {"num_cpus": 1}
    assert (set_device(cpu.set_of("actor")), threads(cpu.set_of("actor"), 1), sync_backend(cpu)) == ("cpu", 1, "gloo")


def test_gpu_size_places_on_gpus_and_is_refused_without_them(monkeypatch):
    from rlm_lab.errors import RlmLabError
    from rlm_lab.placement import resources, runtime
    from rlm_lab.chapters.ch05_placement.cases import placements

    cfg = _grpo()
    monkeypatch.setattr(resources, "local_gpus", lambda: 0)
    chosen = placements(cfg)
    assert {s.kind for p in chosen.values() for s in p.sets} == {"gpu"}
    with pytest.raises(RlmLabError, match=r"asks for 2 GPU\(s\), this machine has none"):
        runtime.check_placement(chosen["colocated"], cfg, cpus=16)
    monkeypatch.setattr(resources, "local_gpus", lambda: 2)
    assert runtime.check_placement(chosen["disaggregated"], cfg, cpus=16) is chosen["disaggregated"]
    with pytest.raises(RlmLabError, match=r"asks for 2 CPUs, there are 1"):  # a core to drive each GPU
        runtime.check_placement(chosen["disaggregated"], cfg, cpus=1)
    with pytest.raises(RlmLabError, match=r"size gpu places its roles on GPU sets"):
        runtime.check_placement(placements(_grpo("smoke"))["colocated"], cfg)


def test_actor_share_outside_its_set_is_refused():
    from rlm_lab.errors import RlmLabError
    from rlm_lab.placement.resources import actor_options
    from rlm_lab.cost.placement_spec import ResourceSet

    with pytest.raises(RlmLabError, match=r"share must be in 1..2, got 3"):
        actor_options(ResourceSet("g", 2, "gpu", dp=2), 3)


def test_startup_waits_scale_with_the_load_per_core_and_are_capped():
    from rlm_lab.placement.runtime import STARTUP_BASE_S, STARTUP_CAP_S, startup_timeout

    assert STARTUP_BASE_S == 300 and STARTUP_CAP_S == 1800
    assert startup_timeout(load={"per_core": 0.2}) == 300      # idle: the base
    assert startup_timeout(load={"per_core": 3.0}) == 900      # 6 runnable on 2 cores: three times as long
    assert startup_timeout(load={"per_core": 40.0}) == 1800    # capped: a wait that expires still ends in one line
    assert startup_timeout(base_s=10, load={"per_core": 2.5}) == 25
