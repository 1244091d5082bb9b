"""Predict one RL step of a placement in an execution mode: time per resource set, exposed weight sync and reshard,
memory per set with "does not fit" and its numbers.

    predict_placement(get_placement("disaggregated", Cluster(8, "gpu")), model, "grpo", workload, "h100-sxm",
                      mode="async", eta=None)

The synchronous step's phases are built below; the other modes (one-step-off, bounded staleness eta, fully
asynchronous with partial rollouts) overlap its generation with its training (modes.py).

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
comm.layer_comm_time); with expert parallelism ``ep > 1`` (MoE) each rank holds E / ep experts (:func:`ep_shard`)
and every MoE layer adds a dispatch and a combine all-to-all per pass (GShard, arXiv 2006.16668). A continuous
engine prices these collectives inside its decode steps (engine.py).

**Topology** (comm.py): the sets take consecutive devices in their order, nodes of ``devices_per_node`` (the
cluster's, else the profile's); each collective runs at the bandwidth of the tier its ranks span (a tensor-parallel
group inside a node on NVLink; a data-parallel group strided across nodes on the network cards).

**Weight sync** (rollout on another set): bytes = parameter bytes of the synced tensors (the adapters' with LoRA).
"collective" (a bucketed NCCL broadcast from the trainer's first rank to the rollout ranks, as verl's and
OpenRLHF's weight-sync groups do): under ZeRO-3 the trainer first all-gathers the full weights (not overlapped
with the broadcast: an assumption), then t = bytes / B + buckets x latency, B the cluster's ``link_gbps`` when given,
else NVLink when every rollout rank shares the sender's node and one network card when not; "object_store":
Ray's object store, put then get, so the bytes cross twice (an assumption). A continuous engine on the trainer's own
devices without the hybrid engine (TRL's colocated vLLM, OpenRLHF's ``colocate_all``) refreshes its copy through
CUDA IPC handles: 2 x bytes / tp at memory bandwidth per device.
**Reshard** (hybrid engine, HybridFlow Sec. 5.4, Table 2): the actor trained under FSDP/ZeRO-3 over the set's
s devices is all-gathered into the generation layout of tensor-parallel size t_g inside groups of s / t_g ranks
(strided by t_g, so across nodes on a large set): each device receives M (s - t_g) / (t_g s) bytes (HybridFlow's
(tp - t_g p_g) / (t_g p_g tp) M with the training shards s = devices): one coalesced collective for the static engine
(TRL's ZeRO-3 gather for generation), one per parameter tensor for a continuous engine (FSDP's full-tensor
gathers into vLLM, as verl's sharding manager does: tensors x latency). A continuous engine then loads its shard
M / t_g by a copy on the device (CUDA IPC handles between the trainer's and the engine's processes: 2 M / t_g bytes at memory bandwidth),
and sleeps between steps at vLLM's level 1 (its weights to host memory and back, 2 M / t_g over the host link;
https://docs.vllm.ai/en/latest/features/sleep_mode.html); going back to training frees the gathered copy.

**Memory per set and device**: the largest, over the set's stages, of the persistent state of the roles placed
there that is on the device during that stage (trained models' weights and optimizer state under the set's ZeRO,
frozen models' weights, sharded too under ZeRO-3; a rollout on the actor's set shares its weights; what the workload
offloads to host memory is away outside the stages that need it, offload.py) plus that stage's transient (KV cache,
activations, logits, gradients, gathered weights; a continuous engine's whole memory pool: its own weights, reserve
and KV cache, engine.py). A colocated engine's automatic pool is 0.9 of the device less what the other models keep
on it while it generates (so a sleeping trainer leaves it the device). Offload's host-link transfers are added to
the stages that pay them (offload.py).

Ignores: pipeline parallelism, the reshard's peak over the gathered weights beyond M / t_g, the engine's KV cache
re-allocation at wake-up, host-side Ray scheduling latency, a network card shared by two groups at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..errors import RlmLabError
from .placement_spec import Cluster, Placement, PlacementError
from ..stages import Stage
from . import memory as M
from .comm import RankSpan, Topology, collective_time, layer_comm_time
from .hardware import load_profile
from .modes import ModeStep, check_mode, mode_step
from .offload import note as offload_note
from .offload import resident, transfer_seconds
from .lora import lora_from, lora_params, lora_tensors
from .predict import predict
from .spec import model_spec, scalar_head
from .straggler import straggler_factor
from .workload import Algorithm, Workload, algorithm, with_critic, workload_from_dict

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
ASSUMED_BUCKET = (f"weight sync: an NCCL broadcast in buckets of {BUCKET_BYTES // 2 ** 20} MiB, one latency per "
                  f"bucket, after the trainer's ZeRO-3 all-gather (not overlapped)")
ASSUMED_OBJECT_STORE = "object-store sync moves the bytes twice (put, then get)"
ASSUMED_PP = ("pipeline parallelism: 1F1B with equal stages (the heaviest, with embedding and head, priced), bubble "
              "(m + p - 1) / m, min(p, m) micro-batches of activations held; the stages' point-to-point sends ignored")
ASSUMED_SP = ("Ulysses: each rank runs 1/sp of every sequence's tokens (the group's compute evenly split), two "
              "all-to-alls per layer and pass; the sp times more, smaller calls' launch overheads not counted")
ASSUMED_HSDP = "hybrid sharding: ZeRO-3 inside each shard group, one gradient all-reduce across the groups per step"
ASSUMED_DRAWN = ("sequences dealt to the data groups as drawn: each step waits for the group with the most tokens "
                 "(a seeded Monte-Carlo over the length distribution, cost/straggler.py)")
ASSUMED_PER_TENSOR = ("weight sync per tensor: one gather and one broadcast latency per parameter tensor; the "
                      "framework's own per-tensor work (casts, the engine's load call) not counted")
ASSUMED_EP = ("expert parallelism: experts balanced over the ep ranks (no routing imbalance), a dispatch and a combine "
              "all-to-all per MoE layer per pass")
ASSUMED_ENGINE = ("continuous engine: vLLM's defaults for max_num_seqs and max_num_batched_tokens on this device "
                  "unless the workload sets gen_batch; memory share 0.9 of the device less the other models' state "
                  "unless engine_memory_fraction is set; activation reserve = fp32 logits of max_num_seqs rows + one "
                  "layer's activations of a prefill chunk; prefill added to decode (no mixed steps)")
ASSUMED_SLEEP = ("hybrid engine: vLLM sleeps at level 1 between steps (its weights to host memory and back over the "
                 "host link each step), loads the resharded weights by a device copy (CUDA IPC)")


def _mem_sub(a: M.MemoryBreakdown, b: M.MemoryBreakdown) -> M.MemoryBreakdown:
    return M.MemoryBreakdown(*(max(0, getattr(a, f) - getattr(b, f)) for f in M._FIELDS))


@dataclass
class SetCost:
    """One resource set: its stages' seconds, busy time and peak memory per device; the engine generating on it
    (engine.EngineInfo, a continuous engine only) and whether that engine can hold one sequence."""

    name: str
    devices: int
    roles: tuple
    stages: dict                 # Stage -> seconds on this set
    memory: M.MemoryBreakdown    # peak per device
    capacity: float
    engine: object = None

    @property
    def busy_s(self) -> float:
        return sum(self.stages.values())

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.capacity and (self.engine is None or self.engine.fits)


@dataclass
class PlacementPrediction:
    placement: Placement
    algo: Algorithm
    workload: Workload
    profile_name: str
    sets: list
    phases: dict                 # phase -> (seconds, name of the set that sets it): the synchronous step
    sync_bytes: float            # total over the step
    reshard_bytes: float         # total over the devices
    lora: object = None
    cluster: Cluster | None = None
    assumptions: tuple = ()      # the placement model's assumed constants this prediction uses
    mode: str = "sync"           # execution mode (modes.py) and its staleness bound
    eta: int | None = 0
    _modes: dict = field(default_factory=dict, repr=False, compare=False)   # (mode, eta) -> ModeStep
    host_update_s: float = 0.0   # the rollout set's weights loaded from host memory (host_update_time), no phase


    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.sets)

    @property
    def sync_step_s(self) -> float:
        """Predicted seconds of one synchronous step: the sum of the phases (raises RlmLabError if a set does not
        fit)."""
        if not self.fits:
            raise RlmLabError(self.memory_error())
        return sum(t for t, _ in self.phases.values())

    def in_mode(self, mode: str, eta=None) -> ModeStep:
        """The step of this placement in ``mode`` with staleness bound ``eta`` (modes.py)."""
        if not self.fits:
            raise RlmLabError(self.memory_error())
        key = check_mode(mode, eta)
        if key not in self._modes:
            self._modes[key] = self._in_mode(*key)
        return self._modes[key]

    def _in_mode(self, mode: str, eta) -> ModeStep:
        gen_set = self.placement.roles.get("rollout", "-")
        by_name = {s.name: s for s in self.sets}
        sides = {"gen": ("-", "-", 0.0), "train": ("-", "-", 0.0)}
        for s in self.sets:
            for st, t in s.stages.items():
                side = "gen" if PHASE_OF[st] == "generation" else "train"
                if t > sides[side][2]:
                    sides[side] = (str(st), s.name, t)
        return mode_step(mode, eta, {p: t for p, (t, _) in self.phases.items()},
                         {s.name: s.busy_s for s in self.sets}, self.placement.rollout_separate,
                         by_name[gen_set].engine if gen_set in by_name else None, gen_set,
                         sides["train"], sides["gen"], self._sync_critical())

    @property
    def mode_result(self) -> ModeStep:
        return self.in_mode(self.mode, self.eta)

    @property
    def step_s(self) -> float:
        """Predicted seconds of one step in this prediction's mode (the synchronous step in mode sync; raises
        RlmLabError if a set does not fit)."""
        if self.mode == "sync":
            return self.sync_step_s
        return self.mode_result.step_s

    @property
    def sync_s(self) -> float:
        """Exposed weight sync and reshard of the step in its mode (modes.py: the step less the step without them)."""
        if self.mode == "sync":
            return self.phases["sync"][0] + self.phases["reshard"][0]
        return self.mode_result.exposed_sync_s

    def memory_error(self) -> str:
        bad = [s for s in self.sets if not s.fits]
        parts = []
        for s in bad:
            if s.engine is not None and not s.engine.fits:
                parts.append(f"set {s.name!r}: {s.engine.why}")
                continue
            parts.append(f"set {s.name!r} needs {s.memory.total / GIB:.2f} GiB per device (weights "
                         f"{s.memory.weights / GIB:.2f}, gradients {s.memory.gradients / GIB:.2f}, optimizer "
                         f"{s.memory.optimizer / GIB:.2f}, KV cache {s.memory.kv_cache / GIB:.2f}, activations "
                         f"{s.memory.activations / GIB:.2f}) of {s.capacity / GIB:.2f}")
        return f"does not fit: placement {self.placement.name!r}: " + "; ".join(parts)

    def _sync_critical(self) -> tuple[str, str, float]:
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

    def critical(self) -> tuple[str, str, float]:
        """(stage, set, seconds) of the longest stage on the critical path: in the synchronous step, in the set that
        sets each phase; in an overlapping mode, on the side (generation or training) that bounds the step."""
        if self.mode == "sync":
            return self._sync_critical()
        return self.mode_result.critical

    def idle(self) -> dict:
        """Set name -> idle share of the step (1 - busy / step) in this prediction's mode."""
        if self.mode == "sync":
            step = self.step_s
            return {s.name: min(1.0, max(0.0, 1 - s.busy_s / step)) if step else 0.0 for s in self.sets}
        return self.mode_result.idle

    def memory_per_device(self) -> float:
        """The largest peak bytes per device over the sets."""
        return max(s.memory.total for s in self.sets)

    def reason(self) -> str:
        stage, set_name, t = self.critical()
        step = self.step_s
        where = f" on {set_name}" if set_name != "-" else ""
        return (f"critical stage {stage}{where} {100 * t / step:.0f} %, sync+reshard {100 * self.sync_s / step:.0f} %, "
                f"idle time of the busiest set {100 * min(self.idle().values()):.0f} %")

    def to_dict(self) -> dict:
        d = {"placement": self.placement.to_dict(), "describe": self.placement.describe(),
             "algorithm": self.algo.name, "profile": self.profile_name, "fits": self.fits,
             "mode": self.mode, "eta": self.eta,
             "sync_bytes": self.sync_bytes, "reshard_bytes": self.reshard_bytes,
             "phases": {p: {"seconds": t, "set": s} for p, (t, s) in self.phases.items()},
             "sets": [{"name": s.name, "devices": s.devices, "roles": list(s.roles), "busy_s": s.busy_s,
                       "stages": {str(k): v for k, v in s.stages.items()}, "memory": s.memory.to_dict(),
                       "capacity_bytes": s.capacity, "fits": s.fits} for s in self.sets],
             "assumptions": list(self.assumptions)}
        if self.fits:
            d["step_s"] = self.step_s
            d["sync_step_s"] = self.sync_step_s
            d["exposed_sync_s"] = self.sync_s
            d["critical"] = dict(zip(("stage", "set", "seconds"), self.critical()))
            d["idle"] = self.idle()
            if self.mode != "sync":
                d["mode_step"] = self.mode_result.to_dict()
        return d


def tp_shard(spec, tp: int):
    """One tensor-parallel rank's share of a model (Megatron-LM, arXiv 1909.08053 Sec. 3): attention heads,
    KV heads (replicated when fewer than tp), MLP widths and the vocabulary (vocab-parallel embedding and head)
    split tp ways; hidden size and norms whole. Its per-call overheads stay whole: each rank runs every layer. The
    share records ``tp``, so its activations are the rank's (memory.activation_bytes)."""
    if tp == 1:
        return spec
    widths = {"attention heads": spec.heads, "MLP width": spec.intermediate or tp,
              "expert MLP width": spec.expert_intermediate or tp, "shared-expert width": spec.shared_intermediate or tp}
    bad = [f"{k} {v}" for k, v in widths.items() if v % tp]
    if bad:
        raise RlmLabError(f"tp={tp} does not divide {spec.name}'s {', '.join(bad)}")
    return replace(spec, name=f"{spec.name}/tp{tp}", tp=spec.tp * tp, heads=spec.heads // tp,
                   kv_heads=max(1, spec.kv_heads // tp),
                   intermediate=spec.intermediate // tp, expert_intermediate=spec.expert_intermediate // tp,
                   shared_intermediate=spec.shared_intermediate // tp, vocab=-(-spec.vocab // tp))


def ep_shard(spec, ep: int):
    """One expert-parallel rank's share of a MoE model: E / ep experts (their weights, gradients and optimizer
    state), each expert still processing top_k / E of all tokens of the ep group, so a rank's expert FLOPs per token
    of its own are unchanged under balanced routing (Megatron-Core MoE guide; GShard arXiv 2006.16668). The router
    is counted over the local experts (h x E / ep: a few thousandths of the layer, ignored)."""
    if ep == 1:
        return spec
    if not spec.moe_layers:
        raise RlmLabError(f"ep={ep}: {spec.name} is a dense model; expert parallelism needs a MoE model")
    if spec.experts % ep:
        raise RlmLabError(f"ep={ep} does not divide {spec.name}'s {spec.experts} experts")
    return replace(spec, name=f"{spec.name}/ep{ep}", experts=spec.experts // ep)


def pp_shard(spec, pp: int):
    """One pipeline stage's share of a model (Megatron-LM's pipeline parallelism, arXiv 2104.04473 Sec. 2.2):
    ceil(L / pp) layers (and of them MoE layers); the embedding and the head are kept on the share, so it prices the
    heaviest stage (the first holds the embedding, the last the head and the logits: counting both over-states a
    70B Llama stage by about 6 %)."""
    if pp == 1:
        return spec
    if spec.layers < pp:
        raise RlmLabError(f"pp={pp} exceeds {spec.name}'s {spec.layers} layers")
    return replace(spec, name=f"{spec.name}/pp{pp}", layers=-(-spec.layers // pp),
                   moe_layers=-(-spec.moe_layers // pp) if spec.moe_layers else 0)


def pipeline_bubble(micro_batches: int, pp: int) -> float:
    """The 1F1B schedule's time over its work: (m + p - 1) / m for m micro-batches through p stages (the bubble
    fraction of the step is (p - 1) / (m + p - 1); Megatron-LM arXiv 2104.04473 Sec. 2.2.1, GPipe arXiv 1811.06965)."""
    if micro_batches < 1 or pp < 1:
        raise RlmLabError(f"pipeline_bubble needs m >= 1 and p >= 1, got m={micro_batches}, p={pp}")
    return (micro_batches + pp - 1) / micro_batches


def pipeline_in_flight(micro_batches: int, pp: int) -> int:
    """Micro-batches whose activations the first stage holds at once under 1F1B: min(p, m) (arXiv 2104.04473
    Sec. 2.2.1): a stage of L / p layers then holds about one whole micro-batch's activations of all L layers."""
    return max(1, min(pp, micro_batches))


# stages a pipeline-parallel set runs through its stages (forward passes and updates; not generation)
PIPELINED = (S.OLD_LOGPROB, S.REF_LOGPROB, S.VALUES, S.ACTOR_FORWARD, S.ACTOR_BACKWARD, S.CRITIC_UPDATE, S.REWARD)
TRAIN_STAGES = (S.ACTOR_FORWARD, S.ACTOR_BACKWARD, S.CRITIC_UPDATE)


def _straggler(pr, rset, stage) -> float:
    """The straggler factor (straggler.py) of one stage on a set whose sequences are dealt as drawn: dp / sp data
    groups (each pipeline and Ulysses group shares its sequences), each with its share of a mini-batch (an update's
    stages) or of the whole batch (forward-only stages)."""
    wl = pr.wl
    groups = max(1, rset.dp // rset.sp)
    per = wl.n // (wl.minibatches if stage in TRAIN_STAGES else 1)
    key = ("straggler", groups, per)
    if key not in pr._cache:
        pr._cache[key] = straggler_factor(wl.response, groups, max(1, per // groups), prompt_len=wl.prompt_len)
    return pr._cache[key]


def pipeline_micro_batches(wl, dp: int, stage) -> int:
    """Micro-batches per pipeline per pass: of a mini-batch for the update's stages, of the whole batch for the
    forward-only ones (each of ``wl.micro`` sequences, the batch split over ``dp`` pipelines)."""
    per = wl.n // (wl.minibatches if stage in TRAIN_STAGES else 1)
    return max(1, -(-per // (dp * wl.micro)))


class _Predictor:
    """Caches one :func:`predict` per (dp, zero, LoRA, tp, ep, layout) so that the advisor can price thousands of
    placements of the same model and workload."""

    def __init__(self, model, algo, workload, profile, critic=None, reward_model=None, beta=None):
        self.spec = model_spec(model)
        self.alg = algo if isinstance(algo, Algorithm) else algorithm(algo, beta)
        self.alg, critic = with_critic(self.alg, critic)     # "shared": a value head on the actor (predict.py)
        self.wl = workload if isinstance(workload, Workload) else workload_from_dict(workload or {})
        self.prof = load_profile(profile)
        self.critic_base = model_spec(critic) if critic is not None else self.spec
        self.rm_base = model_spec(reward_model) if reward_model is not None else self.spec
        self.critic_spec, self.rm_spec = scalar_head(self.critic_base), scalar_head(self.rm_base)
        self._cache: dict = {}

    def specs(self, tp: int, ep: int = 1, pp: int = 1):
        """(actor, critic, reward model) specs of one tensor-, expert- and pipeline-parallel rank."""
        return tuple(s if i == 0 else scalar_head(s) for i, s in enumerate(
            pp_shard(ep_shard(tp_shard(m, tp), ep), pp) for m in (self.spec, self.critic_base, self.rm_base)))

    def base(self, dp: int, zero: int, lora, tp: int = 1, ep: int = 1, layout: RankSpan | None = None, pp: int = 1):
        layout = layout or RankSpan(tp=tp, ep=ep)
        key = (dp, zero, lora, tp, ep, layout, pp)
        if key not in self._cache:
            wl = replace(self.wl, devices=dp, zero_stage=zero, weight_sync="none")
            actor, critic, rm = (pp_shard(ep_shard(tp_shard(m, tp), ep), pp)
                                 for m in (self.spec, self.critic_base, self.rm_base))
            self._cache[key] = predict(actor, self.alg, wl, self.prof, critic=critic, reward_model=rm, lora=lora,
                                       layout=layout)
        return self._cache[key]


def _layout_comm(stage, row, shape, spec, wl, layout: RankSpan, prof) -> float:
    """Tensor- and expert-parallel collectives of one stage row (comm.layer_comm_time per pass: one pass per
    forward or backward call, two for the critic's update); a continuous engine's decode and prefill price theirs
    inside the engine."""
    if (layout.tp <= 1 and layout.ep <= 1 and layout.sp <= 1) or stage in (S.OPTIMIZER, S.ADVANTAGE) \
            or row.model == "verifier":
        return 0.0
    if stage in (S.PREFILL, S.DECODE) and wl.engine == "continuous":
        return 0.0
    if stage == S.DECODE:
        tokens = shape["g"]
    elif stage == S.PREFILL:
        tokens = shape["g"] * wl.prompt_len
    else:
        tokens = shape["m"] * shape["seq"]
    passes = 2 if stage == S.CRITIC_UPDATE else 1
    t = row.calls * passes * layer_comm_time(spec, tokens, prof, layout, wl.dtype_bytes)
    if layout.sp > 1 and stage not in (S.PREFILL, S.DECODE):
        t += row.calls * passes * ulysses_comm_time(spec, tokens, prof, layout, wl.dtype_bytes)
    return t


def ulysses_comm_time(spec, tokens: float, prof, layout: RankSpan, dtype_bytes: int = 2) -> float:
    """DeepSpeed-Ulysses' all-to-alls of one forward pass (arXiv 2309.14509 Sec. 3): per layer, the rank's queries,
    keys and values (tokens / sp x (d_attn + 2 kv_dim)) scattered over heads before attention and its output
    (tokens / sp x d_attn) gathered back after; ``tokens`` the sequence-parallel group's tokens of the call, which
    the group's sp ranks run as sp calls of tokens / sp each (so the call's all-to-alls are sp times one rank's)."""
    sp = layout.sp
    local = tokens / sp
    qkv = local * (spec.d_attn + 2 * spec.kv_dim) * dtype_bytes
    out = local * spec.d_attn * dtype_bytes
    per_layer = (collective_time("all_to_all", qkv, sp, prof, layout.sp_nodes)
                 + collective_time("all_to_all", out, sp, prof, layout.sp_nodes))
    return sp * spec.layers * per_layer


def _role_state(role: str, pr: _Predictor, rset, separate: bool, lora) -> M.MemoryBreakdown:
    """Persistent bytes per device of one role on its set (gradients are counted while training)."""
    wl, db, zero, dp = pr.wl, pr.wl.dtype_bytes, rset.zero, rset.shard_size   # ZeRO's group (HSDP: the shard)
    prec = wl.precision
    actor, critic, rm = pr.specs(rset.tp, rset.ep, rset.pp)
    if role in ("actor", "critic"):
        spec = actor if role == "actor" else critic
        if role == "actor" and lora:
            return _lora_actor(pr, actor, dp, zero, lora)
        train = M.train_state_bytes(spec, prec, zero, dp)
        w = spec.params * db / (dp if zero == 3 else 1)
        g = spec.params * M.PRECISIONS[prec][1] / (dp if zero >= 2 else 1)
        return M.MemoryBreakdown(weights=int(w), optimizer=int(train - w - g))
    if role == "rollout":
        if not separate or wl.engine == "continuous":
            return M.MemoryBreakdown()   # the actor's own weights (TRL without vLLM), or in the engine's pool
        return M.MemoryBreakdown(weights=int(actor.params * db))
    frozen = dp if zero == 3 else 1      # ZeRO-3 / FSDP shards the frozen models too (predict.py, frozen_shards)
    if role == "reference":
        return M.MemoryBreakdown() if lora else M.MemoryBreakdown(weights=int(actor.params * db / frozen))
    if role == "reward":
        return M.MemoryBreakdown(weights=int(rm.params * db / frozen))
    raise PlacementError(f"unknown role {role!r}")


def _lora_actor(pr: _Predictor, spec, dp: int, zero: int, lora) -> M.MemoryBreakdown:
    w, g, o = M.PRECISIONS[pr.wl.precision]
    a = lora_params(spec, lora)
    base = spec.params * pr.wl.dtype_bytes / (dp if zero == 3 else 1)
    return M.MemoryBreakdown(weights=int(base + a * w),
                             optimizer=int(a * o / (dp if zero >= 1 else 1) + 4 * lora_tensors(spec, lora)))


def _grads(role: str, pr: _Predictor, rset, lora) -> int:
    actor, critic, _ = pr.specs(rset.tp, rset.ep, rset.pp)
    spec = actor if role == "actor" else critic
    n = lora_params(actor, lora) if (role == "actor" and lora) else spec.params
    return int(n * M.PRECISIONS[pr.wl.precision][1] / (rset.shard_size if rset.zero >= 2 else 1))


def set_layout(rset, topo: Topology, start: int, capacity: float, held: float | None, tp: int | None = None,
               ep: int | None = None) -> RankSpan:
    """The RankSpan of a set that starts at device ``start``: its tensor-parallel groups (consecutive devices), its
    data- and expert-parallel groups (strided by tp), the nodes each spans; ``tp``/``ep`` override the set's (the
    hybrid engine's generation layout)."""
    pp = rset.pp if tp is None else 1      # an override is a generation layout: no pipeline
    tp = tp or rset.tp
    ep = ep or rset.ep
    dp = rset.devices // (tp * pp)
    shard = rset.shard if pp == rset.pp and tp == rset.tp and 0 < rset.shard < dp else 0   # training layout only
    sp = rset.sp if pp == rset.pp and tp == rset.tp else 1
    return RankSpan(tp=tp, ep=ep, tp_nodes=topo.nodes(start, tp), ep_nodes=topo.nodes(start, ep, tp),
                  dp_nodes=topo.nodes(start, dp, tp), capacity=capacity, held=held, shard=shard,
                  shard_nodes=topo.nodes(start, shard, tp) if shard else 1, sp=sp,
                  sp_nodes=topo.nodes(start, sp, tp))


def reshard_time(pr: _Predictor, rset, topo: Topology, start: int) -> tuple[float, float]:
    """(seconds, bytes over the set) of the hybrid engine's transition into its generation layout (module
    docstring): the all-gather of M / t_g inside groups of s / t_g ranks strided by t_g; with a continuous engine one
    collective per tensor, its device copy of M / t_g (CUDA IPC) and its level-1 wake-up (M / t_g from host memory)
    and sleep (back)."""
    prof, db = pr.prof, pr.wl.dtype_bytes
    tg, s_dev = rset.generation_tp, rset.devices
    m_bytes = pr.spec.params * db
    holders = rset.shard if 0 < rset.shard < rset.dp and rset.shard % tg == 0 else s_dev   # HSDP: its shard group
    group = holders // tg
    gathered = m_bytes * (holders - tg) / (tg * holders)      # HybridFlow Sec. 5.4, per device
    engine = pr.wl.engine == "continuous"
    t = 0.0
    if group > 1:
        nodes = topo.nodes(start, group, tg)
        t = collective_time("all_gather", m_bytes / tg, group, prof, nodes)
        if engine:   # FSDP's full-tensor gather, parameter by parameter, into the engine (verl's sharding manager)
            t += (pr.spec.param_tensors - 1) * collective_time("all_gather", 0.0, group, prof, nodes)
    if engine:
        shard = m_bytes / tg
        t += 2 * shard / prof.bandwidth() + 2 * shard / prof.host_bandwidth()
    return t, s_dev * gathered


def host_update_time(pr: _Predictor, rset, topo: Topology, start: int) -> float:
    """Seconds to load the whole model from host memory into the engine on ``rset`` as checkpoint-engine's broadcast
    update does (https://github.com/MoonshotAI/checkpoint-engine, README "Benchmark": the checkpoint in pinned host
    memory, each of the n workers copying its 1/n of a bucket to its device, a broadcast among the n so that every
    device holds the bucket, each engine worker then loading its tensor-parallel shard through CUDA IPC):
    M / n over each device's host link, the all-gather of M over the n ranks (each receives M (n - 1) / n), and a
    device copy of M / tp (read and write); the three summed, not pipelined (an assumption: the tool overlaps
    buckets, so this is an upper bound). Hand check: M = 470 GB on 8 devices with 51.2 GB/s achieved host links,
    160 GB/s links and tp 8: 58.75 / 51.2 + 411 / 160 + 2 x 58.75 / 2345 = 1.15 + 2.57 + 0.05 = 3.77 s."""
    prof, m_bytes, n = pr.prof, pr.spec.params * pr.wl.dtype_bytes, rset.devices
    gather = collective_time("all_gather", m_bytes, n, prof, topo.nodes(start, n))
    return m_bytes / n / prof.host_bandwidth() + gather + 2 * m_bytes / rset.tp / prof.bandwidth()


def set_cost(pr: _Predictor, rset, roles: tuple, reshard: bool, lora, capacity: float,
             topo: Topology | None = None, start: int = 0):
    """(SetCost, reshard seconds, reshard bytes) of the roles ``roles`` on the resource set ``rset`` starting at
    device ``start`` of a cluster with topology ``topo``; depends on nothing else, so the advisor prices each
    (roles, set, start) once."""
    spec, wl, prof, db = pr.spec, pr.wl, pr.prof, pr.wl.dtype_bytes
    topo = topo or Topology()
    separate = "rollout" in roles and "actor" not in roles
    if "swap" in wl.offload and "reference" in roles and "actor" not in roles:
        raise RlmLabError(f"set {rset.name!r}: offload 'swap' swaps the reference's weights with the policy's, so the "
                          f"reference must share the actor's set")
    stages: dict = {}
    transients: list = []                 # (stage, transient bytes per device)
    calls: dict = {r: {} for r in roles}  # role -> {stage: calls}
    reshard_s = reshard_bytes = gathered = 0.0
    engine = None
    state = {r: _role_state(r, pr, rset, separate, lora) for r in roles}

    def resident_at(stage, skip=()) -> M.MemoryBreakdown:
        """The roles' persistent bytes on the device during ``stage`` (offload.py takes away what is on the host)."""
        out = M.MemoryBreakdown()
        for r, st in state.items():
            if r not in skip:
                out += resident(st, r, stage, wl.offload, spec.layers)
        return out

    held = float(resident_at(S.DECODE, skip=("rollout",)).total)   # what the other models hold while it generates
    for role in roles:
        hybrid_gen = role == "rollout" and reshard
        if hybrid_gen:
            # hybrid engine: generation replicas of t_g devices each, weights already gathered by the reshard
            tg = rset.generation_tp
            ep = rset.ep if (rset.devices // tg) % rset.ep == 0 else 1
            lay = set_layout(rset, topo, start, capacity, held, tp=tg, ep=ep)
            base, tp = pr.base(rset.devices // tg, 0, lora, tg, ep, lay), tg
            reshard_s, reshard_bytes = reshard_time(pr, rset, topo, start)
            gathered = reshard_bytes / rset.devices
        else:
            tp = rset.tp
            lay = set_layout(rset, topo, start, capacity, held if role == "rollout" else None)
            base = pr.base(rset.dp, rset.zero, lora, tp, rset.ep, lay, rset.pp)
        pp = 1 if hybrid_gen else rset.pp
        shard = pr.specs(tp, lay.ep)[0]
        if lay.sp > 1 and shard.heads % lay.sp:
            raise RlmLabError(f"set {rset.name!r}: sp={lay.sp} does not divide {shard.name}'s {shard.heads} attention "
                              f"heads per rank (Ulysses splits the heads across the group)")
        for row in base.rows:
            owner = ROLE_OF.get(row.stage)
            if row.stage == S.REWARD:
                owner = "reward" if row.model == "reward" else "actor"   # a verifier runs in the trainer
            if row.stage == S.VALUES and row.model == "actor":
                owner = "actor"    # shared actor-critic: the value head on the actor's backbone
            if owner != role:
                continue
            t = row.seconds + _layout_comm(row.stage, row, base.shape, pp_shard(shard, pp), wl, lay, prof)
            tr = _mem_sub(row.breakdown, base.persistent)
            if rset.balance == "drawn" and row.stage in PIPELINED and not hybrid_gen:
                t *= _straggler(pr, rset, row.stage)      # each step waits for the data group with the most tokens
            if lay.sp > 1 and row.stage in PIPELINED:   # Ulysses: a rank keeps its 1/sp of each sequence's tokens
                tr = replace(tr, activations=int(tr.activations / lay.sp))
            if pp > 1 and row.stage in PIPELINED:   # 1F1B: the bubble in time, p micro-batches' activations held
                m = pipeline_micro_batches(wl, rset.dp, row.stage)
                t *= pipeline_bubble(m, pp)
                tr = replace(tr, activations=int(tr.activations * pipeline_in_flight(m, pp)))
            stages[row.stage] = stages.get(row.stage, 0.0) + t
            calls[role][row.stage] = row.calls
            if row.stage in (S.ACTOR_FORWARD, S.ACTOR_BACKWARD, S.OPTIMIZER, S.CRITIC_UPDATE):
                tr = replace(tr, gradients=_grads("critic" if row.stage == S.CRITIC_UPDATE else "actor",
                                                  pr, rset, lora))
            if role == "rollout" and wl.engine == "continuous":
                pass                              # the engine's whole pool (its own weights, reserve, KV cache)
            elif separate and role == "rollout":
                tr = replace(tr, weights=0)   # the rollout copy is whole (its own set), nothing to gather
            elif hybrid_gen:
                tr = replace(tr, weights=int(gathered))   # the generation layout's weights beyond the training shard
            transients.append((row.stage, tr))
        if role == "rollout":
            engine = base.engine
        if role == "actor":  # TRL's per-step bookkeeping (predict.py, bookkeeping_s) runs in the trainer's process
            stages[S.OPTIMIZER] = stages.get(S.OPTIMIZER, 0.0) + base.bookkeeping_s
    generates = "rollout" in roles and not separate
    steps = wl.epochs * wl.minibatches
    for role in roles:     # host-link transfers of what is offloaded (offload.py)
        grads = _grads(role, pr, rset, lora) if role in ("actor", "critic") else 0
        for st, t in transfer_seconds(role, state[role], grads, calls[role], wl.offload, prof.host_bandwidth(),
                                      steps, generates).items():
            stages[st] = stages.get(st, 0.0) + t
    peak = max((resident_at(st) + tr for st, tr in transients), key=lambda m: m.total,
               default=resident_at(S.DECODE))
    return (SetCost(rset.name, rset.devices, tuple(roles), stages, peak, capacity, engine),
            reshard_s, reshard_bytes)


def cluster_profile(prof, cluster: Cluster | None):
    """The profile with the cluster's own network card (``network_gbps``, taken as achieved: efficiency 1)."""
    if cluster is None or not cluster.network_gbps:
        return prof
    return replace(prof, network=dict(prof.network, bandwidth=cluster.network_gbps * 1e9),
                   efficiency=dict(prof.efficiency, network=1.0))


def cluster_topology(prof, cluster: Cluster | None) -> Topology:
    """The nodes of the cluster: its ``devices_per_node``, else the profile's (None: one node)."""
    per = cluster.devices_per_node if cluster is not None and cluster.devices_per_node else prof.devices_per_node
    return Topology(per)


def sync_time(pr: _Predictor, placement: Placement, cluster: Cluster | None, topo: Topology, nbytes: float) -> float:
    """Seconds of the weight sync from the trainer's set to the rollout set (module docstring)."""
    prof = pr.prof
    actor_set, roll_set = placement.set_of("actor"), placement.set_of("rollout")
    a0, r0 = placement.start(actor_set.name), placement.start(roll_set.name)
    cross = topo.devices_per_node and any((r0 + i) // topo.devices_per_node != a0 // topo.devices_per_node
                                          for i in range(roll_set.devices))
    if cluster is not None and cluster.link_gbps:
        bw = cluster.link_gbps * 1e9
    elif cross:
        bw = prof.network_bandwidth()
    elif prof.link_bandwidth:
        bw = float(prof.link_bandwidth)
    else:
        raise RlmLabError(f"profile {prof.name!r} has no link_bandwidth and the cluster gives none: "
                          f"a placement with a separate rollout set needs one (cluster link_gbps)")
    per_tensor = placement.sync_path == "per_tensor" and placement.sync == "collective"
    tensors = pr.spec.param_tensors
    buckets = tensors if per_tensor else max(1, math.ceil(nbytes / BUCKET_BYTES))
    alpha = prof.collective("send_recv")["alpha_s"] + (prof.network_alpha() if cross else 0.0)
    crossings = 2 if placement.sync == "object_store" else 1
    t = crossings * nbytes / bw + buckets * alpha
    if actor_set.zero == 3 and actor_set.dp > 1 and placement.sync == "collective":
        group, nodes = actor_set.shard_size, topo.nodes(a0, actor_set.shard_size, actor_set.tp)
        t += collective_time("all_gather", nbytes, group, prof, nodes)
        if per_tensor:   # one gather per tensor (FSDP's full_tensor, parameter by parameter): its latency each
            t += (tensors - 1) * collective_time("all_gather", 0.0, group, prof, nodes)
    return t


def check_offline_mode(alg: Algorithm, mode: str) -> None:
    """An offline algorithm (DPO) has no generation to overlap with its training: only the synchronous mode."""
    if alg.offline and mode != "sync":
        raise RlmLabError(f"mode {mode}: {alg.name} generates nothing, so there is no generation to overlap with "
                          f"training; only mode sync prices it")


def predict_placement(placement: Placement, model, algo="grpo", workload=None, profile="cpu-2core-epyc",
                      cluster: Cluster | None = None, critic=None, reward_model=None, beta=None, lora=None,
                      _predictor: _Predictor | None = None, _cache: dict | None = None, mode: str = "sync",
                      eta=None) -> PlacementPrediction:
    """Predict one step of ``placement`` (validated here) for ``algo`` on ``model`` in execution ``mode`` with
    staleness bound ``eta`` (modes.py; default: synchronous).

    ``lora``: LoRA settings (cost/lora.py); default ``placement.lora`` with PEFT's defaults (r = 8, q/v).
    ``cluster``: device memory, link bandwidth and topology override the profile's.
    """
    mode, eta = check_mode(mode, eta)
    pr = _predictor or _Predictor(model, algo, workload, cluster_profile(load_profile(profile), cluster), critic,
                                  reward_model, beta)
    lora = lora_from(lora) if lora is not None else lora_from(placement.lora)
    if lora is not None and not placement.lora:
        placement = replace(placement, lora=True)   # validated as a LoRA placement (reference on the actor's set)
    placement.validate(pr.alg, cluster)
    check_offline_mode(pr.alg, mode)
    prof, wl, spec = pr.prof, pr.wl, pr.spec
    capacity = (cluster.memory_per_device_gib * GIB if cluster is not None and cluster.memory_per_device_gib
                else float(prof.memory_bytes))
    topo = cluster_topology(prof, cluster)
    db = wl.dtype_bytes
    sets: list[SetCost] = []
    reshard_s = reshard_bytes = 0.0
    for rset in placement.sets:
        start = placement.start(rset.name)
        # a set's cost depends on its first device only through the node boundaries it crosses: start mod node size
        offset = start % topo.devices_per_node if topo.devices_per_node else 0
        key = (rset, placement.roles_on(rset.name), placement.reshard, lora, capacity, topo, offset)
        if _cache is not None and key in _cache:
            sc, r_s, r_b = _cache[key]
        else:
            sc, r_s, r_b = set_cost(pr, rset, key[1], placement.reshard, lora, capacity, topo, offset)
            if _cache is not None:
                _cache[key] = (sc, r_s, r_b)
        sets.append(sc)
        reshard_s, reshard_bytes = reshard_s + r_s, reshard_bytes + r_b

    sync_bytes = sync_s = 0.0
    trained = lora_params(spec, lora) if lora else spec.params
    if placement.rollout_separate:
        sync_bytes = trained * db
        sync_s = sync_time(pr, placement, cluster, topo, sync_bytes)
    elif wl.engine == "continuous" and not placement.reshard:
        # a colocated engine holds its own copy of the weights, refreshed on each device through CUDA IPC handles
        # (the trainer's and the engine's processes share the device): read and write its tp shard once
        sync_bytes = trained * db
        sync_s = 2 * sync_bytes / placement.set_of("rollout").tp / prof.bandwidth()

    phases = {p: (0.0, "-") for p in PHASES}
    for phase in PHASES[1:-1]:
        per_set = [(sum(t for st, t in s.stages.items() if PHASE_OF[st] == phase), s.name) for s in sets]
        phases[phase] = max(per_set) if per_set else (0.0, "-")
    phases["reshard"] = (reshard_s, "-")
    phases["sync"] = (sync_s, "-")
    assumed = tuple(a for a, used in (
        (ASSUMED_TP, any(s.tp > 1 or (placement.reshard and s.generation_tp > 1) for s in placement.sets)),
        (ASSUMED_EP, any(s.ep > 1 for s in placement.sets)),
        (ASSUMED_ENGINE, wl.engine == "continuous"),
        (ASSUMED_SLEEP, wl.engine == "continuous" and placement.reshard),
        (ASSUMED_BUCKET, sync_bytes > 0 and placement.sync_path == "bucketed"),
        (ASSUMED_PER_TENSOR, sync_bytes > 0 and placement.sync_path == "per_tensor"),
        (ASSUMED_OBJECT_STORE, sync_bytes > 0 and placement.sync == "object_store"),
        (ASSUMED_PP, any(s.pp > 1 for s in placement.sets)),
        (ASSUMED_SP, any(s.sp > 1 for s in placement.sets)),
        (ASSUMED_HSDP, any(0 < s.shard < s.dp for s in placement.sets)),
        (ASSUMED_DRAWN, any(s.balance == "drawn" for s in placement.sets)),
        (offload_note(wl.offload), bool(wl.offload)))
        if used)
    roll = placement.set_of("rollout") if "rollout" in placement.roles else None   # DPO: nothing generates
    host_s = host_update_time(pr, roll, topo, placement.start(roll.name)) if roll else 0.0
    return PlacementPrediction(placement, pr.alg, wl, prof.name, sets, phases, sync_bytes, reshard_bytes, lora,
                               cluster, assumed, mode, eta, host_update_s=host_s)
