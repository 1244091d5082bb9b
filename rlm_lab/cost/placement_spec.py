"""What a placement is: the one registry of how the models of an RL step sit on devices.

Pure Python (no ray, no torch): the cost model (``rlm_lab.cost.placement``), the advisor and the Ray
runtime all read placements from here and from nowhere else.

A placement is a tuple of disjoint resource sets (each a number of CPU cores or GPUs with a parallel
layout inside it) and a map role -> set. Roles:

- ``actor``     the trainer (TRL ``GRPOTrainer`` or our PPO subclass): forward, backward, optimizer;
- ``rollout``   the generation engine: the actor's weights, synced every step;
- ``reference`` the frozen reference policy (absent with beta = 0 or with LoRA: the adapter is disabled);
- ``critic``    PPO's value model (trained);
- ``reward``    PPO's reward model (frozen forward); a rule-based verifier is no role.

Named placements (the survey's inter-model taxonomy, arXiv 2608.27046; HybridFlow arXiv 2409.19256 Sec. 2.3,
5.4; OpenRLHF arXiv 2405.11143; NeMo-Aligner arXiv 2405.01481):
``colocated`` (every role on one set, generate then train: TRL's default), ``disaggregated`` (rollout on
one set, trainer on the other, synchronous, so the weight sync is exposed), ``split`` (PPO: actor +
reference (+ rollout) on one set, critic + reward on the other) and ``hybrid`` (one actor copy resharded
between an FSDP/ZeRO-3 training layout and a tensor-parallel generation layout on the same set).
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from ..errors import RlmLabError
from ..stages import MODELS_HELD, OFFLINE

ROLES = ("actor", "rollout", "reference", "critic", "reward")
KINDS = ("cpu", "gpu")
SYNCS = ("none", "collective", "object_store")
SYNC_PATHS = ("bucketed", "per_tensor")
BALANCES = ("tokens", "drawn")


class PlacementError(RlmLabError, ValueError):
    """A placement that cannot run; the message is one line that says what to change (the CLI prints it as
    ``rlm-lab: error: ...`` and exits 2, as for every RlmLabError)."""


# ---- the cluster ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cluster:
    """What there is to place on: ``devices`` CPU cores or GPUs of one kind.

    ``memory_per_device_gib``: memory one device holds (a GPU's HBM; on CPU the machine's RAM divided by
    the cores); ``link_gbps``: bandwidth between two sets, in GB/s (bytes, not bits); None = from the topology.
    ``devices_per_node``: devices of one node (None: the hardware profile's, e.g. 8 for an HGX/DGX node);
    ``network_gbps``: GB/s of the network card each device has (None: the profile's), the tier a collective
    whose ranks span nodes runs on (comm.py: topology).
    """

    devices: int
    kind: str = "cpu"
    memory_per_device_gib: float | None = None
    link_gbps: float | None = None
    devices_per_node: int | None = None
    network_gbps: float | None = None

    def __post_init__(self):
        if not isinstance(self.devices, int) or isinstance(self.devices, bool) or self.devices <= 0:
            raise PlacementError(f"cluster devices must be an integer > 0, got {self.devices!r}")
        if self.kind not in KINDS:
            raise PlacementError(f"cluster kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        d = self.devices_per_node
        if d is not None and (not isinstance(d, int) or isinstance(d, bool) or d <= 0):
            raise PlacementError(f"cluster devices_per_node must be an integer > 0, got {d!r}")
        for name in ("memory_per_device_gib", "link_gbps", "network_gbps"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                  or v <= 0):
                raise PlacementError(f"cluster {name} must be a finite number > 0, got {v!r}")


# ---- a resource set -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResourceSet:
    """``devices`` of ``kind`` with the layout of the model(s) trained on them.

    Training layout: ``dp`` data-parallel ranks x ``tp`` tensor-parallel ranks = ``devices``; ``zero`` the
    ZeRO stage of the data-parallel group (3 = FSDP). On a rollout-only set ``dp`` is the number of rollout
    replicas and ``tp`` the tensor-parallel size of each. ``gen_tp`` (hybrid engine only): the tensor-parallel
    size of the generation layout the actor is resharded into (HybridFlow's t_g; 0 = same as ``tp``).
    ``ep`` (MoE models): expert parallelism, the experts split over ``ep`` of the data-parallel ranks (each rank
    holds E / ep experts; tokens travel to their experts by all-to-all: Megatron-Core's expert parallel group
    inside the data-parallel group, https://docs.nvidia.com/megatron-core/developer-guide/latest/api-guide/
    moe.html); it must divide ``dp``. ``pp``: pipeline-parallel stages (Megatron-LM's 1F1B schedule, arXiv
    2104.04473 Sec. 2.2): each device holds L / pp layers; dp x tp x pp = devices. A set that generates with pp > 1
    must reshard into a generation layout (``gen_tp``; pipeline-parallel generation is not priced). ``shard``
    (hybrid sharding: PyTorch FSDP's HYBRID_SHARD, verl's ``fsdp_config.fsdp_size``): ZeRO shards the training
    state over groups of ``shard`` data-parallel ranks, replicated across the groups (0: over all ``dp``); it must
    divide ``dp``. ``sp``: Ulysses sequence parallelism (DeepSpeed-Ulysses, arXiv 2309.14509; verl's
    ``ulysses_sequence_parallel_size``): groups of ``sp`` of the data-parallel ranks split every sequence's tokens
    and exchange them by all-to-all around attention; ZeRO still shards over all ``dp`` ranks (verl's FSDP mesh);
    it must divide ``dp``. ``balance`` (:data:`BALANCES`): how the framework deals a mini-batch's sequences to the
    data-parallel groups: ``tokens`` (balanced by tokens per step: every rank's share equal, the mean) or
    ``drawn`` (as they come: each optimizer step waits for the group with the most tokens;
    :mod:`rlm_lab.cost.straggler`; verl's ``balance_batch`` balances the whole batch, not each mini-batch).
    """

    name: str
    devices: int
    kind: str = "cpu"
    dp: int = 1
    tp: int = 1
    zero: int = 0
    gen_tp: int = 0
    ep: int = 1
    pp: int = 1
    shard: int = 0
    sp: int = 1
    balance: str = "tokens"

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise PlacementError(f"a resource set needs a non-empty name, got {self.name!r}")
        for f in ("devices", "dp", "tp", "pp"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise PlacementError(f"set {self.name!r}: {f} must be an integer > 0, got {v!r}")
        if self.kind not in KINDS:
            raise PlacementError(f"set {self.name!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.zero not in (0, 1, 2, 3):
            raise PlacementError(f"set {self.name!r}: zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.dp * self.tp * self.pp != self.devices:
            pp = f" x pp={self.pp}" if self.pp > 1 else ""
            raise PlacementError(f"set {self.name!r}: layout dp={self.dp} x tp={self.tp}{pp} = "
                                 f"{self.dp * self.tp * self.pp} does not match its {self.devices} devices")
        if not isinstance(self.gen_tp, int) or self.gen_tp < 0 or (self.gen_tp and self.devices % self.gen_tp):
            raise PlacementError(f"set {self.name!r}: gen_tp={self.gen_tp!r} must divide its {self.devices} devices")
        if self.balance not in BALANCES:
            raise PlacementError(f"set {self.name!r}: balance must be one of {', '.join(BALANCES)}, "
                                 f"got {self.balance!r}")
        if not isinstance(self.sp, int) or isinstance(self.sp, bool) or self.sp < 1 or self.dp % self.sp:
            raise PlacementError(f"set {self.name!r}: sp={self.sp!r} must be an integer >= 1 dividing its "
                                 f"data-parallel size {self.dp}")
        if (not isinstance(self.shard, int) or isinstance(self.shard, bool) or self.shard < 0
                or (self.shard and self.dp % self.shard)):
            raise PlacementError(f"set {self.name!r}: shard={self.shard!r} must be 0 (all data-parallel ranks) or an "
                                 f"integer dividing its data-parallel size {self.dp}")
        if not isinstance(self.ep, int) or isinstance(self.ep, bool) or self.ep < 1 or self.dp % self.ep:
            raise PlacementError(f"set {self.name!r}: ep={self.ep!r} must be an integer >= 1 dividing its "
                                 f"data-parallel size {self.dp}")

    @property
    def generation_tp(self) -> int:
        return self.gen_tp or self.tp

    @property
    def shard_size(self) -> int:
        """The data-parallel ranks ZeRO shards over: ``shard``, or all ``dp``."""
        return self.shard or self.dp


def layout(name: str, devices: int, kind: str = "cpu", tp: int = 1, zero: int = 0, gen_tp: int = 0,
           pp: int = 1) -> ResourceSet:
    """A set of ``devices`` with tensor-parallel size ``tp``, ``pp`` pipeline stages and the rest data-parallel."""
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (devices, tp, pp))
    if ok and devices % (tp * pp):
        raise PlacementError(f"set {name!r}: tp={tp} x pp={pp} does not divide its {devices} devices")
    return ResourceSet(name, devices, kind, dp=devices // (tp * pp) if ok else 1, tp=tp, zero=zero, gen_tp=gen_tp,
                       pp=pp)


# ---- roles per algorithm ------------------------------------------------------------------------
def roles_for(algo) -> tuple[str, ...]:
    """The roles an algorithm places, in ROLES order.

    ``algo``: a name (``"grpo"``, ``"ppo"``, ``"dapo"``...) or an object with ``models`` (the cost model's
    ``Algorithm``, e.g. with beta = 0 and so no reference). A rule-based verifier is not a role.
    """
    if isinstance(algo, str):
        key = algo.lower().replace("-", "_").replace("++", "_pp")
        if key not in MODELS_HELD:
            raise PlacementError(f"unknown algorithm {algo!r}; choose one of: {', '.join(sorted(MODELS_HELD))}")
        models = MODELS_HELD[key]
    else:
        models = getattr(algo, "models", None)
        if models is None:
            raise PlacementError(f"cannot read the models of algorithm {algo!r}")
    held = set(models) | {"actor", "rollout"}
    if _offline(algo):
        held.discard("rollout")      # DPO: stored preference pairs, nothing generates (stages.OFFLINE)
    return tuple(r for r in ROLES if r in held)


def _offline(algo) -> bool:
    name = algo if isinstance(algo, str) else getattr(algo, "name", "")
    return str(name).lower().replace("-", "_") in OFFLINE


# ---- the placement --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Placement:
    """Resource sets plus role -> set name. ``sync``: how the actor's weights reach the rollout role
    ("none": same weights in the same process; "collective": a torch.distributed broadcast between the sets;
    "object_store": through Ray's object store). ``reshard``: hybrid engine (one actor copy, resharded
    between training and generation layout). ``lora``: the actor trains LoRA adapters only. ``sync_path``
    (:data:`SYNC_PATHS`): how a collective sync moves the weights: ``bucketed`` (tensors packed into fixed-size
    buckets, one broadcast per bucket: OpenRLHF, NeMo-RL, slime) or ``per_tensor`` (each parameter gathered from
    the trainer's shards and broadcast on its own: verl's NCCL weight sender), so a per-tensor sync pays one
    gather and one broadcast latency per tensor."""

    name: str
    sets: tuple[ResourceSet, ...]
    roles: Mapping[str, str]
    sync: str = "none"
    reshard: bool = False
    lora: bool = False
    meta: Mapping[str, object] = field(default_factory=dict, compare=False)
    sync_path: str = "bucketed"

    def __post_init__(self):
        object.__setattr__(self, "sets", tuple(self.sets))
        object.__setattr__(self, "roles", types.MappingProxyType(dict(self.roles)))
        object.__setattr__(self, "meta", types.MappingProxyType(dict(self.meta)))

    # ---- lookups
    def set(self, name: str) -> ResourceSet:
        for s in self.sets:
            if s.name == name:
                return s
        raise PlacementError(f"placement {self.name!r} has no set {name!r}; sets: "
                             f"{', '.join(s.name for s in self.sets)}")

    def set_of(self, role: str) -> ResourceSet:
        if role not in self.roles:
            raise PlacementError(f"placement {self.name!r} does not place role {role!r}")
        return self.set(self.roles[role])

    def roles_on(self, set_name: str) -> tuple[str, ...]:
        return tuple(r for r in ROLES if self.roles.get(r) == set_name)

    @property
    def devices(self) -> int:
        return sum(s.devices for s in self.sets)

    def start(self, set_name: str) -> int:
        """The first device of a set: sets take consecutive devices in their order (the topology's numbering)."""
        first = 0
        for s in self.sets:
            if s.name == set_name:
                return first
            first += s.devices
        raise PlacementError(f"placement {self.name!r} has no set {set_name!r}")

    @property
    def rollout_separate(self) -> bool:
        """True when generation runs on another set than training (weights must be shipped)."""
        return "rollout" in self.roles and self.roles.get("rollout") != self.roles.get("actor")

    # ---- validation
    def validate(self, algo="grpo", cluster: Cluster | None = None) -> "Placement":
        """Raise PlacementError (one line) if this placement cannot run ``algo`` on ``cluster``; return self."""
        where = f"placement {self.name!r}"
        if not self.sets:
            raise PlacementError(f"{where} has no resource sets")
        names = [s.name for s in self.sets]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise PlacementError(f"{where}: set name(s) {', '.join(dup)} used twice")
        needed = roles_for(algo)
        algo_name = algo if isinstance(algo, str) else getattr(algo, "name", "?")
        unknown_roles = sorted(set(self.roles) - set(ROLES))
        if unknown_roles:
            raise PlacementError(f"{where}: unknown role(s) {', '.join(unknown_roles)}; roles are {', '.join(ROLES)}")
        extra = [r for r in ROLES if r in self.roles and r not in needed]
        if extra:
            raise PlacementError(f"{where}: {algo_name} has no {', '.join(extra)} model; drop it from the roles")
        missing = [r for r in needed if r not in self.roles]
        if missing:
            raise PlacementError(f"{where}: {algo_name} needs role(s) {', '.join(missing)} placed on a set")
        bad_sets = sorted({s for s in self.roles.values() if s not in names})
        if bad_sets:
            raise PlacementError(f"{where}: role(s) placed on unknown set(s) {', '.join(map(repr, bad_sets))}; "
                                 f"sets: {', '.join(names)}")
        empty = [n for n in names if not self.roles_on(n)]
        if empty:
            raise PlacementError(f"{where}: set(s) {', '.join(empty)} hold no role")
        kinds = {s.kind for s in self.sets}
        if len(kinds) > 1:
            raise PlacementError(f"{where}: sets mix device kinds {', '.join(sorted(kinds))}")
        if self.sync not in SYNCS:
            raise PlacementError(f"{where}: sync must be one of {', '.join(SYNCS)}, got {self.sync!r}")
        if self.sync_path not in SYNC_PATHS:
            raise PlacementError(f"{where}: sync_path must be one of {', '.join(SYNC_PATHS)}, got {self.sync_path!r}")
        if self.rollout_separate and self.sync == "none":
            raise PlacementError(f"{where}: rollout is on another set than the actor, so sync must be "
                                 f"'collective' or 'object_store', not 'none'")
        if self.reshard:
            if self.rollout_separate:
                raise PlacementError(f"{where}: reshard (hybrid engine) needs actor and rollout on the same set")
            if self.set_of("actor").zero != 3 and self.set_of("actor").pp == 1:
                raise PlacementError(f"{where}: reshard needs the actor's set trained with zero=3 (FSDP) or "
                                     f"pipeline-parallel (Megatron, pp > 1)")
        for st in self.sets:
            if st.pp > 1 and "rollout" in self.roles_on(st.name) and not self.reshard:
                raise PlacementError(f"{where}: set {st.name!r} generates with pp={st.pp}: pipeline-parallel "
                                     f"generation is not priced; reshard into a generation layout (gen_tp) as "
                                     f"NeMo-RL and verl do")
        if self.lora and "reference" in self.roles and self.roles["reference"] != self.roles["actor"]:
            raise PlacementError(f"{where}: with LoRA the reference is the actor with its adapter disabled; "
                                 f"place it on the actor's set")
        if cluster is not None:
            if cluster.kind not in kinds:
                raise PlacementError(f"{where} asks for {kinds.pop()} devices but the cluster has {cluster.kind}")
            if self.devices > cluster.devices:
                raise PlacementError(f"{where} asks for {self.devices} {cluster.kind} devices "
                                     f"({' + '.join(str(s.devices) for s in self.sets)}) but the cluster has "
                                     f"{cluster.devices}")
        return self

    # ---- serialisation
    def to_dict(self) -> dict:
        return {"name": self.name, "sync": self.sync, "reshard": self.reshard, "lora": self.lora,
                **({"sync_path": self.sync_path} if self.sync_path != "bucketed" else {}),
                "sets": [dict(name=s.name, devices=s.devices, kind=s.kind, dp=s.dp, tp=s.tp, zero=s.zero,
                              gen_tp=s.gen_tp, ep=s.ep, pp=s.pp, shard=s.shard, sp=s.sp,
                              **({"balance": s.balance} if s.balance != "tokens" else {})) for s in self.sets],
                "roles": dict(self.roles)}

    def describe(self) -> str:
        """One line: ``rollout[4 gpu tp2] | actor+reference[4 gpu zero3] sync=collective``."""
        parts = []
        for s in self.sets:
            lay = f"{s.devices} {s.kind}" + (f" tp{s.tp}" if s.tp > 1 else "") + (f" pp{s.pp}" if s.pp > 1 else "") \
                + (f" ep{s.ep}" if s.ep > 1 else "")
            lay += f" zero{s.zero}" if s.zero else ""
            lay += f" shard{s.shard}" if s.shard and s.shard < s.dp else ""
            lay += f" sp{s.sp}" if s.sp > 1 else ""
            lay += " drawn" if s.balance == "drawn" else ""
            lay += f" gen_tp{s.gen_tp}" if s.gen_tp else ""
            parts.append(f"{'+'.join(self.roles_on(s.name))}[{lay}]")
        extra = "".join([f" sync={self.sync}" if self.sync != "none" else "",
                         f" {self.sync_path}" if self.sync_path != "bucketed" else "",
                         " reshard" if self.reshard else "", " lora" if self.lora else ""])
        return " | ".join(parts) + extra


def placement_from_dict(d: Mapping) -> Placement:
    """A Placement from a config mapping (as written by ``to_dict``); malformed fields are named."""
    if not isinstance(d, Mapping):
        raise PlacementError("placement must be a mapping with sets and roles")
    known = {"name", "sets", "roles", "sync", "reshard", "lora", "sync_path"}
    extra = sorted(set(d) - known)
    if extra:
        raise PlacementError(f"unknown placement field(s) {', '.join(extra)}; known: {', '.join(sorted(known))}")
    sets = d.get("sets")
    if not isinstance(sets, (list, tuple)) or not sets:
        raise PlacementError("placement.sets must be a non-empty list of {name, devices, ...}")
    set_fields = {"name", "devices", "kind", "dp", "tp", "zero", "gen_tp", "ep", "pp", "shard", "sp", "balance"}
    built = []
    for s in sets:
        if not isinstance(s, Mapping):
            raise PlacementError("each placement set must be a mapping {name, devices, ...}")
        bad = sorted(set(s) - set_fields)
        if bad:
            raise PlacementError(f"unknown set field(s) {', '.join(bad)}; known: {', '.join(sorted(set_fields))}")
        if "name" not in s or "devices" not in s:
            raise PlacementError("each placement set needs a name and devices")
        s = dict(s)
        tp, pp = s.get("tp", 1), s.get("pp", 1)
        if "dp" not in s and isinstance(s["devices"], int) and all(isinstance(v, int) and v > 0 for v in (tp, pp)):
            s["dp"] = max(1, s["devices"] // (tp * pp))
        built.append(ResourceSet(**s))
    roles = d.get("roles")
    if not isinstance(roles, Mapping) or not all(isinstance(v, str) for v in roles.values()):
        raise PlacementError("placement.roles must map role names to set names")
    return Placement(name=str(d.get("name", "custom")), sets=tuple(built), roles=dict(roles),
                     sync=d.get("sync", "none"), reshard=bool(d.get("reshard", False)), lora=bool(d.get("lora", False)),
                     sync_path=d.get("sync_path", "bucketed"))


# ---- named placements --------------------------------------------------------------------------
def _cluster(cluster) -> Cluster:
    if isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, int) and not isinstance(cluster, bool):
        return Cluster(cluster)
    raise PlacementError(f"a cluster or a device count is needed, got {cluster!r}")


def colocated(cluster, algo="grpo", tp: int = 1, zero: int = 0, lora: bool = False, pp: int = 1,
              gen_tp: int = 0) -> Placement:
    """Every role on one set of all devices; generate, then train (TRL's default). With ``pp`` > 1 the training
    layout is resharded into the generation layout ``gen_tp`` (default ``tp``) each step (NeMo-RL's and verl's
    Megatron path)."""
    c = _cluster(cluster)
    s = layout("all", c.devices, c.kind, tp=tp, zero=zero, pp=pp, gen_tp=gen_tp if pp > 1 else 0)
    return Placement("colocated", (s,), {r: "all" for r in roles_for(algo)}, lora=lora,
                     reshard=pp > 1).validate(algo, c)


def disaggregated(cluster, algo="grpo", rollout_devices: int | None = None, rollout_tp: int = 1, tp: int = 1,
                  zero: int = 0, sync: str = "collective", lora: bool = False, pp: int = 1,
                  sync_path: str = "bucketed") -> Placement:
    """Rollout workers on one set, the trainer (and every other model) on the other; synchronous:
    generation waits for the new weights, so the weight sync is exposed."""
    c = _cluster(cluster)
    if c.devices < 2:
        raise PlacementError(f"disaggregated needs at least 2 devices, the cluster has {c.devices}")
    g = rollout_devices if rollout_devices is not None else c.devices // 2
    if not isinstance(g, int) or not 0 < g < c.devices:
        raise PlacementError(f"rollout_devices must be in 1..{c.devices - 1}, got {g!r}")
    sets = (layout("rollout", g, c.kind, tp=rollout_tp),
            layout("train", c.devices - g, c.kind, tp=tp, zero=zero, pp=pp))
    roles = {r: ("rollout" if r == "rollout" else "train") for r in roles_for(algo)}
    return Placement("disaggregated", sets, roles, sync=sync, lora=lora, sync_path=sync_path).validate(algo, c)


def split(cluster, algo="ppo", value_devices: int | None = None, tp: int = 1, zero: int = 0,
          lora: bool = False) -> Placement:
    """PPO, NeMo-Aligner style: actor + reference (+ rollout) on one set, critic + reward on the other."""
    c = _cluster(cluster)
    roles = roles_for(algo)
    if "critic" not in roles:
        raise PlacementError(f"split places a critic and a reward model; {algo if isinstance(algo, str) else algo.name} "
                             f"has neither (use ppo)")
    if c.devices < 2:
        raise PlacementError(f"split needs at least 2 devices, the cluster has {c.devices}")
    v = value_devices if value_devices is not None else c.devices // 2
    if not isinstance(v, int) or not 0 < v < c.devices:
        raise PlacementError(f"value_devices must be in 1..{c.devices - 1}, got {v!r}")
    sets = (layout("policy", c.devices - v, c.kind, tp=tp, zero=zero), layout("value", v, c.kind, tp=tp, zero=zero))
    mapping = {r: ("value" if r in ("critic", "reward") else "policy") for r in roles}
    return Placement("split", sets, mapping, lora=lora).validate(algo, c)


def hybrid(cluster, algo="grpo", gen_tp: int = 1, lora: bool = False) -> Placement:
    """One actor copy on all devices: trained under FSDP (ZeRO-3, dp = devices), resharded into a
    tensor-parallel generation layout of size ``gen_tp`` (HybridFlow's 3D-HybridEngine, arXiv 2409.19256 Sec. 5.4)."""
    c = _cluster(cluster)
    s = ResourceSet("all", c.devices, c.kind, dp=c.devices, tp=1, zero=3, gen_tp=gen_tp)
    return Placement("hybrid", (s,), {r: "all" for r in roles_for(algo)}, reshard=True, lora=lora).validate(algo, c)


PLACEMENTS: dict[str, Callable[..., Placement]] = {
    "colocated": colocated, "disaggregated": disaggregated, "split": split, "hybrid": hybrid,
}


def get_placement(name: str, cluster, algo="grpo", **kw) -> Placement:
    """A named placement for ``cluster`` (a Cluster or a device count), validated for ``algo``."""
    if name not in PLACEMENTS:
        raise PlacementError(f"unknown placement {name!r}; choose one of: {', '.join(PLACEMENTS)}")
    try:
        return PLACEMENTS[name](cluster, algo, **kw)
    except TypeError as e:  # an option the factory does not take
        raise PlacementError(f"placement {name!r}: {e}") from None


def with_sets(p: Placement, *sets: ResourceSet) -> Placement:
    """A copy of ``p`` with some sets replaced (matched by name)."""
    by = {s.name: s for s in sets}
    return replace(p, sets=tuple(by.get(s.name, s) for s in p.sets))


# ---- groupings for the advisor ---------------------------------------------------------------------
def enumerate_groupings(roles) -> list[tuple[tuple[str, ...], ...]]:
    """Every partition of ``roles`` into non-empty groups (one group per resource set).

    Their number is the Bell number B(n): 1, 2, 5, 15, 52 for 1..5 roles. Deterministic order; roles keep
    their given order inside a group and groups are ordered by their first role.
    """
    roles = tuple(roles)
    if len(set(roles)) != len(roles):
        raise PlacementError(f"roles must be distinct, got {roles!r}")
    out: list[tuple[tuple[str, ...], ...]] = []

    def rec(i: int, groups: list[list[str]]):
        if i == len(roles):
            out.append(tuple(tuple(g) for g in groups))
            return
        for g in groups:          # put role i into an existing group ...
            g.append(roles[i])
            rec(i + 1, groups)
            g.pop()
        groups.append([roles[i]])  # ... or open a new one
        rec(i + 1, groups)
        groups.pop()

    if roles:
        rec(0, [])
    return out
