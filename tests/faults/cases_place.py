"""`rlm-lab place` (the Ray placement runtime): bad flags, sizes, addresses and placements the machine cannot
hold. Every row is refused before Ray starts or a model loads, so none of them costs a Ray start."""

from fault_matrix import Case

CASES = []


def add(id, what, argv, message, **kw):
    CASES.append(Case(id, what, argv=["place", *argv], message=message, **kw))


for id, argv, msg in [
    ("placement-unknown", ["--placement", "split-brain"], r"argument --placement: invalid choice: 'split-brain'"),
    ("placement-empty", ["--placement", ""], r"argument --placement: invalid choice: ''"),
    ("size-unknown", ["--size", "huge"], r"unknown size 'huge'; choose one of: cpu, gpu, smoke"),
    ("steps-zero", ["--steps", "0"], r"--steps must be >= 1, got 0"),
    ("steps-negative", ["--steps", "-3"], r"--steps must be >= 1, got -3"),
    ("steps-word", ["--steps", "few"], r"argument --steps: invalid int value: 'few'"),
    ("address-refused", ["--address", "127.0.0.1:1"], r"Ray could not start: no Ray cluster answers at 127.0.0.1:1"),
    ("address-port-word", ["--address", "localhost:ray"],
     r"Ray could not start: no Ray cluster answers at localhost:ray"),
    ("lora-and-reshard", ["--lora-accuracy", "--reshard"],
     r"--lora-accuracy and --reshard are separate experiments; give one of them"),
    ("reshard-with-steps", ["--reshard", "--steps", "3"], r"--reshard runs its own fixed experiment; it takes no --steps"),
    ("lora-accuracy-with-placement", ["--lora-accuracy", "--placement", "colocated"],
     r"--lora-accuracy runs its own fixed experiment; it takes no --placement"),
    ("lora-memory-with-address", ["--lora-memory", "--address", "127.0.0.1:1"],
     r"--lora-memory runs its own fixed experiment; it takes no --address"),
    ("out-is-a-file", ["--out", "{tmp}/record.json"], r"--out .*record.json is a file, not a folder for run records"),
    # several nodes (issue 25): refused before a Ray node starts
    ("nodes-zero", ["--nodes", "0"], r"--nodes must be >= 1, got 0"),
    ("nodes-negative", ["--nodes", "-1"], r"--nodes must be >= 1, got -1"),
    ("nodes-more-than-cpus", ["--nodes", "3"], r"--nodes 3: each node holds at least one CPU, and 2 CPU\(s\) were asked for"),
    ("nodes-word", ["--nodes", "two"], r"argument --nodes: invalid int value: 'two'"),
    ("nodes-one-set-placement", ["--nodes", "2", "--placement", "colocated"],
     r"placement 'colocated' puts 2 CPUs in set 'all', and no node of this 2-node cluster holds more than 1"),
    ("nodes-with-reshard", ["--reshard", "--nodes", "2"], r"--reshard runs its own fixed experiment; it takes no --nodes"),
    ("nodes-address-refused", ["--nodes", "2", "--address", "127.0.0.1:1"],
     r"Ray could not start: no Ray cluster answers at 127.0.0.1:1"),
]:
    add(id, "place " + " ".join(a if a else "''" for a in argv), argv, msg,
        setup=(lambda tmp: (tmp / "record.json").write_text("{}\n")) if id == "out-is-a-file" else None)

CASES.append(Case("ray-address-env-refused", "RAY_ADDRESS names a port where no Ray cluster listens",
                  argv=["place", "--placement", "colocated"], env={"RAY_ADDRESS": "127.0.0.1:1"},
                  message=r"Ray could not start: no Ray cluster answers at 127.0.0.1:1"))
CASES.append(Case("ray-address-env-not-an-address", "RAY_ADDRESS is not host:port, with --nodes 2",
                  argv=["place", "--nodes", "2"], env={"RAY_ADDRESS": "my-cluster"},
                  message=r"Ray could not start: no Ray cluster answers at my-cluster"))


def _cfg(algo="grpo", **kw):
    from rlm_lab.chapters.ch05_placement.cases import run_config

    return run_config("smoke", algo, **kw)


def too_many_cpus(tmp):
    """run_placement(colocated on 64 CPUs) on this machine"""
    from rlm_lab.chapters.ch05_placement.cases import run_config
    from rlm_lab.placement.runtime import algo_roles, run_placement
    from rlm_lab.cost.placement_spec import Cluster, get_placement

    cfg = run_config("smoke")
    p = get_placement("colocated", Cluster(64, "cpu"), algo_roles(cfg))
    run_placement(p, cfg, tmp / "run")  # must refuse before the record folder or Ray exist


def too_many_rollout_cpus(tmp):
    """check_placement(disaggregated, 63 rollout + 1 trainer CPUs) on this machine"""
    from rlm_lab.placement.runtime import algo_roles, check_placement
    from rlm_lab.cost.placement_spec import Cluster, get_placement

    cfg = _cfg()
    check_placement(get_placement("disaggregated", Cluster(64, "cpu"), algo_roles(cfg), rollout_devices=63,
                                  sync="collective"), cfg)


def gpu_set_on_cpu(tmp):
    """check_placement(colocated on 1 GPU) on this machine"""
    from rlm_lab.placement.runtime import algo_roles, check_placement
    from rlm_lab.cost.placement_spec import Cluster, get_placement

    cfg = _cfg()
    check_placement(get_placement("colocated", Cluster(1, "gpu"), algo_roles(cfg)), cfg)


def critic_for_grpo(tmp):
    """check_placement(split: a critic and a reward set) for a GRPO run"""
    from rlm_lab.placement.runtime import check_placement
    from rlm_lab.cost.placement_spec import Cluster, get_placement

    check_placement(get_placement("split", Cluster(2, "cpu"), "ppo"), _cfg())


def rollout_without_sync(tmp):
    """Placement(rollout on its own set, sync='none')"""
    from rlm_lab.placement.runtime import algo_roles
    from rlm_lab.cost.placement_spec import Cluster, Placement, ResourceSet

    Placement("x", (ResourceSet("train", 1), ResourceSet("gen", 1)),
              {"actor": "train", "rollout": "gen"}, sync="none").validate(algo_roles(_cfg()), Cluster(2, "cpu"))


def ppo_rollout_apart(tmp):
    """check_placement(PPO disaggregated: rollout on its own core)"""
    from rlm_lab.placement.runtime import algo_roles, check_placement
    from rlm_lab.cost.placement_spec import Cluster, get_placement

    cfg = _cfg(algo="ppo")
    check_placement(get_placement("disaggregated", Cluster(2, "cpu"), algo_roles(cfg), rollout_devices=1,
                                  sync="collective"), cfg)


def bad_layout(tmp):
    """ResourceSet('train', devices=2, dp=3)"""
    from rlm_lab.cost.placement_spec import ResourceSet

    ResourceSet("train", 2, dp=3)


def unknown_key(tmp):
    """experiment.measure(keys=['hybrid_gpu'])"""
    from rlm_lab.chapters.ch05_placement.run import measure

    measure("smoke", tmp / "runs", keys=["hybrid_gpu"])


CASES += [
    Case("too-many-cpus", "a placement asking for 64 CPU cores on this machine (before any record or Ray)",
         call=too_many_cpus, message=r"asks for 64 cpu devices"),
    Case("too-many-rollout-cpus", "63 rollout cores + 1 trainer core on this machine", call=too_many_rollout_cpus,
         message=r"asks for 64 cpu devices"),
    Case("gpu-set-on-cpu", "a GPU resource set on a machine with no GPU", call=gpu_set_on_cpu,
         message=r"asks for 1 GPU\(s\), this machine has none"),
    Case("size-gpu-no-gpu", "--size gpu on a machine with no GPU (its placements are GPU sets)",
         argv=["place", "--size", "gpu"], message=r"asks for 2 GPU\(s\), this machine has none"),
    Case("critic-for-grpo", "PPO's split placement (critic, reward) for a GRPO run", call=critic_for_grpo,
         message=r"grpo has no reference, critic, reward model; drop it"),
    Case("rollout-without-sync", "rollout on its own set with no weight sync", call=rollout_without_sync,
         message=r"rollout is on another set than the actor, so sync must be"),
    Case("ppo-rollout-apart", "PPO with its generation on another core (it generates with TRL's own generate)",
         call=ppo_rollout_apart, message=r"PPO generates with TRL's own generate on the actor's set"),
    Case("layout-mismatch", "a set of 2 devices laid out dp=3", call=bad_layout, message=r"layout dp=3 x tp=1 = 3"),
    Case("measure-unknown-key", "the experiment API with a placement key it does not know", call=unknown_key,
         message=r"unknown placement\(s\) hybrid_gpu; choose from colocated"),
]


def critic_dead(tmp):
    """RemoteCritic(handle of a dead critic actor).values(...)"""
    import types

    from rlm_lab.placement.critic_role import RemoteCritic

    class ActorDiedError(Exception):  # what ray.get raises for a killed actor (ray.exceptions.ActorDiedError)
        pass

    def get(ref, timeout=None):
        raise ActorDiedError("The actor died unexpectedly before finishing this task.")

    handle = types.SimpleNamespace(values=types.SimpleNamespace(remote=lambda *a: "ref"))
    RemoteCritic(handle, get, 20).values(None, None, 4, 8)


def hybrid_no_deepspeed(tmp):
    """check_hybrid(hybrid placement) where deepspeed cannot be imported"""
    import importlib.util
    from unittest import mock

    from rlm_lab.placement.hybrid import check_hybrid
    from rlm_lab.placement.runtime import algo_roles
    from rlm_lab.cost.placement_spec import Cluster, get_placement

    cfg = _cfg()
    p = get_placement("hybrid", Cluster(2, "cpu"), algo_roles(cfg))
    real = importlib.util.find_spec
    with mock.patch("importlib.util.find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a)):
        check_hybrid(p, cfg)


def hybrid_world_3(tmp):
    """check_hybrid(hybrid on 3 ranks) for a batch of 16 completions"""
    from rlm_lab.placement.hybrid import check_hybrid
    from rlm_lab.placement.runtime import algo_roles
    from rlm_lab.cost.placement_spec import Cluster, get_placement

    cfg = _cfg()
    check_hybrid(get_placement("hybrid", Cluster(3, "cpu"), algo_roles(cfg)), cfg)


CASES += [
    Case("critic-worker-dead", "PPO's critic actor (split placement) dead when the trainer asks it for values",
         call=critic_dead, message=r"^rlm-lab: error: critic worker failed during values: ActorDiedError$"),
    Case("hybrid-no-deepspeed", "the hybrid placement without DeepSpeed installed", call=hybrid_no_deepspeed,
         message=r"the hybrid placement trains with DeepSpeed ZeRO-3, which is not installed: .*pip install"),
    Case("hybrid-world-odd", "the hybrid placement on 3 ranks for a batch of 16 completions", call=hybrid_world_3,
         message=r"batch 16 does not split over 3 ranks"),
    Case("hybrid-with-placement", "place --hybrid --placement colocated (the hybrid run is its own experiment)",
         argv=["place", "--hybrid", "--placement", "colocated"],
         message=r"--hybrid runs its own fixed experiment; it takes no --placement"),
]
