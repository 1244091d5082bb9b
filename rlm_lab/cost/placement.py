"""Predict one synchronous RL step of a placement: time per resource set, exposed weight sync and reshard,
memory per set with "does not fit" and its numbers.

    predict_placement(get_placement("disaggregated", Cluster(8, "gpu")), model, "grpo", workload, "h100-sxm")

**Time rule** (HybridFlow, arXiv 2409.19256, Sec. 4 and 5: stages on one set run one after another, sets run
concurrently). The step is a chain of phases in data-dependency order:

    reshard -> generation -> preparation (old/ref log-probs, reward, values) -> advantage -> training -> weight sync

Inside a phase each set **adds** the times of its own stages, and the phase takes the **max across sets**
(the sets work concurrently on independent stages of that phase); the step is the **sum of the phases**.
Hence, precisely:

* ``colocated`` / ``hybrid`` (one set): everything adds up (one set, time-shared);
* synchronous ``disaggregated`` GRPO: generation runs only on the rollout set and everything else only on the
  training set, so every phase has one busy set and the sets **alternate**: step = generation + preparation +
  advantage + training + sync (the max never helps; the idle set is the price of the split);
* ``split`` PPO: reference/old log-probs (policy set) run beside values/reward (value set), and the actor update
  beside the critic update: those two phases take the max of the two sets.

**Stage costs on a set** come from :func:`rlm_lab.cost.predict.predict` with the set's layout: ``dp`` replicas
splitting the batch (``workload.devices = dp``) under ZeRO-``zero``; with a tensor-parallel size ``tp > 1`` each
rank is priced as its shard of the model (:func:`tp_shard`: heads, MLP width and vocabulary / tp, per-call
overheads whole) plus Megatron's 2 all-reduces of the activations per layer per pass (arXiv 1909.08053 Sec. 3;
comm.tp_message_bytes); printed as an assumption.

**Weight sync** (rollout on another set): bytes = parameter bytes of the synced tensors (the adapters' with LoRA),
sent in buckets: t = bytes / link bandwidth + buckets x latency ("collective": a torch.distributed broadcast
between the sets; "object_store": Ray's object store, put then get, so the bytes cross twice - an assumption).
**Reshard** (hybrid engine, HybridFlow Sec. 5.4, Table 2): the actor trained under FSDP/ZeRO-3 over the set's
s devices is all-gathered into the generation layout of tensor-parallel size t_g inside groups of s / t_g ranks:
each device receives M (s - t_g) / (t_g s) bytes (HybridFlow's (tp - t_g p_g) / (t_g p_g tp) M with the
training shards s = devices); going back to training frees the gathered copy (no transfer: zero redundancy).

**Memory per set and device**: the persistent state of the roles placed there (trained models' weights and
optimizer state under the set's ZeRO, frozen models' weights; a rollout on the actor's set shares its weights)
plus the largest transient of the set's stages (KV cache, activations, logits, gradients, gathered weights).

Ignores: overlap of sync with generation (synchronous algorithm), pipeline parallelism, the reshard's peak
over the gathered weights beyond M / t_g, host-side Ray scheduling latency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..errors import RlmLabError
from .placement_spec import Cluster, Placement, PlacementError
from ..stages import Stage
from . import memory as M
from .comm import collective_time, tp_message_bytes
from .hardware import load_profile
from .lora import lora_from, lora_params, lora_tensors
from .predict import predict
from .spec import model_spec, scalar_head
from .workload import Algorithm, Workload, algorithm, workload_from_dict

S = Stage
GIB = 2 ** 30
BUCKET_BYTES = 256 * 2 ** 20   # assumed sync bucket; verl/OpenRLHF default to a few hundred MB

PHASES = ("reshard", "generation", "preparation", "advantage", "training", "sync")
PHASE_OF = {S.PREFILL: "generation", S.DECODE: "generation", S.OLD_LOGPROB: "preparation",
            S.REF_LOGPROB: "preparation", S.REWARD: "preparation", S.VALUES: "preparation",
            S.ADVANTAGE: "advantage", S.ACTOR_FORWARD: "training", S.ACTOR_BACKWARD: "training",
            S.OPTIMIZER: "training", S.CRITIC_UPDATE: "training"}
ROLE_OF = {S.PREFILL: "rollout", S.DECODE: "rollout", S.OLD_LOGPROB: "actor", S.REF_LOGPROB: "reference",
           S.VALUES: "critic", S.CRITIC_UPDATE: "critic", S.ADVANTAGE: "actor", S.ACTOR_FORWARD: "actor",
           S.ACTOR_BACKWARD: "actor", S.OPTIMIZER: "actor"}
ASSUMED_TP = ("tensor parallelism: a rank runs its shard of heads, MLP and vocabulary with whole per-call overheads, "
              "plus 2 activation all-reduces per layer per pass; activations not sequence-parallel")
ASSUMED_BUCKET = f"weight sync in buckets of {BUCKET_BYTES // 2 ** 20} MiB, one link latency (send_recv alpha) per bucket"
ASSUMED_OBJECT_STORE = "object-store sync moves the bytes twice (put, then get)"


def _mem_sub(a: M.MemoryBreakdown, b: M.MemoryBreakdown) -> M.MemoryBreakdown:
    return M.MemoryBreakdown(*(max(0, getattr(a, f) - getattr(b, f)) for f in M._FIELDS))


@dataclass
class SetCost:
    """One resource set: its stages' seconds, busy time and peak memory per device."""

    name: str
    devices: int
    roles: tuple
    stages: dict                 # Stage -> seconds on this set
    memory: M.MemoryBreakdown    # peak per device
    capacity: float

    @property
    def busy_s(self) -> float:
        return sum(self.stages.values())

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.capacity


@dataclass
class PlacementPrediction:
    placement: Placement
    algo: Algorithm
    workload: Workload
    profile_name: str
    sets: list
    phases: dict                 # phase -> (seconds, name of the set that sets it)
    sync_bytes: float            # total over the step
    reshard_bytes: float         # total over the devices
    lora: object = None
    cluster: Cluster | None = None
    assumptions: tuple = ()      # the placement model's assumed constants this prediction uses

    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.sets)

    @property
    def step_s(self) -> float:
        """Predicted seconds of one synchronous step (raises RlmLabError if a set does not fit)."""
        if not self.fits:
            raise RlmLabError(self.memory_error())
        return sum(t for t, _ in self.phases.values())

    @property
    def sync_s(self) -> float:
        return self.phases["sync"][0] + self.phases["reshard"][0]

    def memory_error(self) -> str:
        bad = [s for s in self.sets if not s.fits]
        parts = [f"set {s.name!r} needs {s.memory.total / GIB:.2f} GiB per device (weights "
                 f"{s.memory.weights / GIB:.2f}, gradients {s.memory.gradients / GIB:.2f}, optimizer "
                 f"{s.memory.optimizer / GIB:.2f}, KV cache {s.memory.kv_cache / GIB:.2f}, activations "
                 f"{s.memory.activations / GIB:.2f}) of {s.capacity / GIB:.2f}" for s in bad]
        return f"does not fit: placement {self.placement.name!r}: " + "; ".join(parts)

    def critical(self) -> tuple[str, str, float]:
        """(stage, set, seconds) of the longest stage on the critical path (in the set that sets each phase)."""
        best = ("weight_sync", "-", self.phases["sync"][0])
        if self.phases["reshard"][0] > best[2]:
            best = ("reshard", "-", self.phases["reshard"][0])
        by_name = {s.name: s for s in self.sets}
        for phase, (_, set_name) in self.phases.items():
            if set_name in by_name:
                for st, t in by_name[set_name].stages.items():
                    if PHASE_OF[st] == phase and t > best[2]:
                        best = (str(st), set_name, t)
        return best

    def reason(self) -> str:
        stage, set_name, t = self.critical()
        step = self.step_s
        where = f" on {set_name}" if set_name != "-" else ""
        return (f"critical stage {stage}{where} {100 * t / step:.0f} %, sync+reshard {100 * self.sync_s / step:.0f} %, "
                f"idle time of the busiest set {max(0.0, 100 * (1 - max(s.busy_s for s in self.sets) / step)):.0f} %")

    def to_dict(self) -> dict:
        d = {"placement": self.placement.to_dict(), "describe": self.placement.describe(),
             "algorithm": self.algo.name, "profile": self.profile_name, "fits": self.fits,
             "sync_bytes": self.sync_bytes, "reshard_bytes": self.reshard_bytes,
             "phases": {p: {"seconds": t, "set": s} for p, (t, s) in self.phases.items()},
             "sets": [{"name": s.name, "devices": s.devices, "roles": list(s.roles), "busy_s": s.busy_s,
                       "stages": {str(k): v for k, v in s.stages.items()}, "memory": s.memory.to_dict(),
                       "capacity_bytes": s.capacity, "fits": s.fits} for s in self.sets],
             "assumptions": list(self.assumptions)}
        if self.fits:
            d["step_s"] = self.step_s
            d["critical"] = dict(zip(("stage", "set", "seconds"), self.critical()))
        return d


def tp_shard(spec, tp: int):
    """One tensor-parallel rank's share of a model (Megatron-LM, arXiv 1909.08053 Sec. 3): attention heads,
    KV heads (replicated when fewer than tp), MLP widths and the vocabulary (vocab-parallel embedding and head)
    split tp ways; hidden size and norms whole. Its per-call overheads stay whole: each rank runs every layer."""
    if tp == 1:
        return spec
    widths = {"attention heads": spec.heads, "MLP width": spec.intermediate or tp,
              "expert MLP width": spec.expert_intermediate or tp, "shared-expert width": spec.shared_intermediate or tp}
    bad = [f"{k} {v}" for k, v in widths.items() if v % tp]
    if bad:
        raise RlmLabError(f"tp={tp} does not divide {spec.name}'s {', '.join(bad)}")
    return replace(spec, name=f"{spec.name}/tp{tp}", heads=spec.heads // tp, kv_heads=max(1, spec.kv_heads // tp),
                   intermediate=spec.intermediate // tp, expert_intermediate=spec.expert_intermediate // tp,
                   shared_intermediate=spec.shared_intermediate // tp, vocab=-(-spec.vocab // tp))


class _Predictor:
    """Caches one :func:`predict` per (dp, zero, LoRA, tp) so that the advisor can price thousands of
    placements of the same model and workload."""

    def __init__(self, model, algo, workload, profile, critic=None, reward_model=None, beta=None):
        self.spec = model_spec(model)
        self.alg = algo if isinstance(algo, Algorithm) else algorithm(algo, beta)
        self.wl = workload if isinstance(workload, Workload) else workload_from_dict(workload or {})
        self.prof = load_profile(profile)
        self.critic_base = model_spec(critic) if critic is not None else self.spec
        self.rm_base = model_spec(reward_model) if reward_model is not None else self.spec
        self.critic_spec, self.rm_spec = scalar_head(self.critic_base), scalar_head(self.rm_base)
        self._cache: dict = {}

    def specs(self, tp: int):
        """(actor, critic, reward model) specs of one tensor-parallel rank."""
        return (tp_shard(self.spec, tp), scalar_head(tp_shard(self.critic_base, tp)),
                scalar_head(tp_shard(self.rm_base, tp)))

    def base(self, dp: int, zero: int, lora, tp: int = 1):
        key = (dp, zero, lora, tp)
        if key not in self._cache:
            wl = replace(self.wl, devices=dp, zero_stage=zero, weight_sync="none")
            self._cache[key] = predict(tp_shard(self.spec, tp), self.alg, wl, self.prof,
                                       critic=tp_shard(self.critic_base, tp),
                                       reward_model=tp_shard(self.rm_base, tp), lora=lora)
        return self._cache[key]


def _tp_comm(stage, row, shape, spec, wl, tp, prof) -> float:
    """Megatron TP: 2 all-reduces of the activations per layer per pass (4 for a training pass)."""
    if tp <= 1 or stage in (S.OPTIMIZER, S.ADVANTAGE) or row.model == "verifier":
        return 0.0
    db = wl.dtype_bytes
    if stage == S.DECODE:
        msg = tp_message_bytes(shape["g"], 1, spec.hidden, db)
    elif stage == S.PREFILL:
        msg = tp_message_bytes(shape["g"], wl.prompt_len, spec.hidden, db)
    else:
        msg = tp_message_bytes(shape["m"], shape["seq"], spec.hidden, db)
    per_call = (4 if stage == S.CRITIC_UPDATE else 2) * spec.layers
    return row.calls * per_call * collective_time("all_reduce", msg, tp, prof)


def _role_state(role: str, pr: _Predictor, rset, separate: bool, lora) -> M.MemoryBreakdown:
    """Persistent bytes per device of one role on its set (gradients are counted while training)."""
    wl, db, zero, dp = pr.wl, pr.wl.dtype_bytes, rset.zero, rset.dp
    prec = wl.precision
    actor, critic, rm = pr.specs(rset.tp)
    if role in ("actor", "critic"):
        spec = actor if role == "actor" else critic
        if role == "actor" and lora:
            return _lora_actor(pr, actor, dp, zero, lora)
        train = M.train_state_bytes(spec, prec, zero, dp)
        w = spec.params * db / (dp if zero == 3 else 1)
        g = spec.params * M.PRECISIONS[prec][1] / (dp if zero >= 2 else 1)
        return M.MemoryBreakdown(weights=int(w), optimizer=int(train - w - g))
    if role == "rollout":
        if not separate:
            return M.MemoryBreakdown()   # generates with the actor's own weights (TRL without vLLM)
        return M.MemoryBreakdown(weights=int(actor.params * db))
    if role == "reference":
        return M.MemoryBreakdown() if lora else M.MemoryBreakdown(weights=int(actor.params * db))
    if role == "reward":
        return M.MemoryBreakdown(weights=int(rm.params * db))
    raise PlacementError(f"unknown role {role!r}")


def _lora_actor(pr: _Predictor, spec, dp: int, zero: int, lora) -> M.MemoryBreakdown:
    w, g, o = M.PRECISIONS[pr.wl.precision]
    a = lora_params(spec, lora)
    base = spec.params * pr.wl.dtype_bytes / (dp if zero == 3 else 1)
    return M.MemoryBreakdown(weights=int(base + a * w),
                             optimizer=int(a * o / (dp if zero >= 1 else 1) + 4 * lora_tensors(spec, lora)))


def _grads(role: str, pr: _Predictor, rset, lora) -> int:
    actor, critic, _ = pr.specs(rset.tp)
    spec = actor if role == "actor" else critic
    n = lora_params(actor, lora) if (role == "actor" and lora) else spec.params
    return int(n * M.PRECISIONS[pr.wl.precision][1] / (rset.dp if rset.zero >= 2 else 1))


def set_cost(pr: _Predictor, rset, roles: tuple, reshard: bool, lora, capacity: float):
    """(SetCost, reshard seconds, reshard bytes) of the roles ``roles`` on the resource set ``rset``; depends on
    nothing else, so the advisor prices each (roles, set) once."""
    spec, wl, prof, db = pr.spec, pr.wl, pr.prof, pr.wl.dtype_bytes
    separate = "rollout" in roles and "actor" not in roles
    stages: dict = {}
    transients: list[M.MemoryBreakdown] = []
    persistent = M.MemoryBreakdown()
    reshard_s = reshard_bytes = gathered = 0.0
    for role in roles:
        persistent += _role_state(role, pr, rset, separate, lora)
    for role in roles:
        hybrid_gen = role == "rollout" and reshard
        if hybrid_gen:
            # hybrid engine: generation replicas of t_g devices each, weights already gathered by the reshard
            tg = rset.generation_tp
            base, tp = pr.base(rset.devices // tg, 0, lora, tg), tg
            s_dev, m_bytes = rset.devices, spec.params * db
            gathered = m_bytes * (s_dev - tg) / (tg * s_dev)      # HybridFlow Sec. 5.4, per device
            reshard_bytes = s_dev * gathered
            if s_dev // tg > 1:
                reshard_s = collective_time("all_gather", m_bytes / tg, s_dev // tg, prof)
        else:
            tp = rset.tp
            base = pr.base(rset.dp, rset.zero, lora, tp)
        for row in base.rows:
            owner = ROLE_OF.get(row.stage)
            if row.stage == S.REWARD:
                owner = "reward" if row.model == "reward" else "actor"   # a verifier runs in the trainer
            if owner != role:
                continue
            t = row.seconds + _tp_comm(row.stage, row, base.shape, spec, wl, tp, prof)   # row: one TP rank's share
            stages[row.stage] = stages.get(row.stage, 0.0) + t
            tr = _mem_sub(row.breakdown, base.persistent)
            if row.stage in (S.ACTOR_FORWARD, S.ACTOR_BACKWARD, S.OPTIMIZER, S.CRITIC_UPDATE):
                tr = replace(tr, gradients=_grads("critic" if row.stage == S.CRITIC_UPDATE else "actor",
                                                  pr, rset, lora))
            if separate and role == "rollout":
                tr = replace(tr, weights=0)   # the rollout copy is whole (its own set), nothing to gather
            if hybrid_gen:
                tr = replace(tr, weights=int(gathered))   # the generation layout's weights beyond the training shard
            transients.append(tr)
        if role == "actor":  # TRL's per-step bookkeeping (predict.py, bookkeeping_s) runs in the trainer's process
            stages[S.OPTIMIZER] = stages.get(S.OPTIMIZER, 0.0) + base.bookkeeping_s
    peak = max(transients, key=lambda m: m.total, default=M.MemoryBreakdown())
    return SetCost(rset.name, rset.devices, tuple(roles), stages, persistent + peak, capacity), reshard_s, reshard_bytes


def _link(prof, cluster: Cluster | None) -> float:
    if cluster is not None and cluster.link_gbps:
        return cluster.link_gbps * 1e9
    if prof.link_bandwidth:
        return float(prof.link_bandwidth)
    raise RlmLabError(f"profile {prof.name!r} has no link_bandwidth and the cluster gives none: "
                      f"a placement with a separate rollout set needs one (cluster link_gbps)")


def predict_placement(placement: Placement, model, algo="grpo", workload=None, profile="cpu-2core-epyc",
                      cluster: Cluster | None = None, critic=None, reward_model=None, beta=None, lora=None,
                      _predictor: _Predictor | None = None, _cache: dict | None = None) -> PlacementPrediction:
    """Predict one synchronous step of ``placement`` (validated here) for ``algo`` on ``model``.

    ``lora``: LoRA settings (cost/lora.py); default ``placement.lora`` with PEFT's defaults (r = 8, q/v).
    ``cluster``: device memory and link bandwidth override the profile's.
    """
    pr = _predictor or _Predictor(model, algo, workload, profile, critic, reward_model, beta)
    lora = lora_from(lora) if lora is not None else lora_from(placement.lora)
    if lora is not None and not placement.lora:
        placement = replace(placement, lora=True)   # validated as a LoRA placement (reference on the actor's set)
    placement.validate(pr.alg, cluster)
    prof, wl, spec = pr.prof, pr.wl, pr.spec
    capacity = (cluster.memory_per_device_gib * GIB if cluster is not None and cluster.memory_per_device_gib
                else float(prof.memory_bytes))
    db = wl.dtype_bytes
    sets: list[SetCost] = []
    reshard_s = reshard_bytes = 0.0
    for rset in placement.sets:
        key = (rset, placement.roles_on(rset.name), placement.reshard, lora, capacity)
        if _cache is not None and key in _cache:
            sc, r_s, r_b = _cache[key]
        else:
            sc, r_s, r_b = set_cost(pr, rset, key[1], placement.reshard, lora, capacity)
            if _cache is not None:
                _cache[key] = (sc, r_s, r_b)
        sets.append(sc)
        reshard_s, reshard_bytes = reshard_s + r_s, reshard_bytes + r_b

    sync_bytes = sync_s = 0.0
    if placement.rollout_separate:
        trained = lora_params(spec, lora) if lora else spec.params
        sync_bytes = trained * db
        bw = _link(prof, cluster)
        buckets = max(1, math.ceil(sync_bytes / BUCKET_BYTES))
        alpha = prof.collective("send_recv")["alpha_s"]
        crossings = 2 if placement.sync == "object_store" else 1
        sync_s = crossings * sync_bytes / bw + buckets * alpha

    phases = {p: (0.0, "-") for p in PHASES}
    for phase in PHASES[1:-1]:
        per_set = [(sum(t for st, t in s.stages.items() if PHASE_OF[st] == phase), s.name) for s in sets]
        phases[phase] = max(per_set) if per_set else (0.0, "-")
    phases["reshard"] = (reshard_s, "-")
    phases["sync"] = (sync_s, "-")
    assumed = tuple(a for a, used in (
        (ASSUMED_TP, any(s.tp > 1 or (placement.reshard and s.generation_tp > 1) for s in placement.sets)),
        (ASSUMED_BUCKET, sync_bytes > 0), (ASSUMED_OBJECT_STORE, sync_bytes > 0 and placement.sync == "object_store"))
        if used)
    return PlacementPrediction(placement, pr.alg, wl, prof.name, sets, phases, sync_bytes, reshard_bytes, lora,
                               cluster, assumed)
