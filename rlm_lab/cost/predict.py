"""Predict one RL iteration: per-stage FLOPs, bytes, memory and seconds, the stage graph, W, D.

    predict("micro", "grpo", Workload(...), "cpu-2core-epyc") -> Prediction

Stage costs (FLOPs: Kaplan et al., arXiv 2001.08361; memory: ZeRO, arXiv 1910.02054; time: roofline, Williams et al., CACM 2009; work-depth: Brent, JACM 1974, and Blelloch, CACM 1996):

* prefill: a forward of P tokens per generated row (per prompt with prefix sharing), logits of the
  last position only.
* decode: static engine (transformers ``generate``) runs every row of a generation batch for
  R_max - 1 steps, t = sum_k t_step(g, P + k); continuous engine (vLLM/SGLang): continuous batching whose
  concurrency the KV cache limits, with its own copy of the weights in its share of the device's memory, drained
  to its longest sequence (engine.py; ``Prediction.engine`` keeps the engine for the asynchronous modes).
* old/ref log-probs, values, reward model: a forward over padded sequences, in micro-batches.
* actor forward/backward: E epochs over all sequences; optimizer: E*M AdamW steps; critic alike.
* weight sync: none (the policy generates itself), a copy (colocated) or link transfer (LoRA: the adapters).
* old log-probs: counted whenever the run computes them (``Workload.recompute_old``; by default as TRL and our
  PPO do: epochs > 1, minibatches > 1, or PPO with a reference).
* ZeRO over ``devices`` ranks (arXiv 1910.02054): the actor's and the critic's training state sharded alike;
  each rank steps 1/d of the optimizer (FLOPs, bytes, time); ZeRO-3 gathers the whole actor for generation
  (memory and all-gather time, once per generate call) and for each old-log-prob forward.
* bf16 autocast (``Workload.autocast``, TRL's default bf16=True on CPU): products and attention at the
  profile's measured bf16-autocast rates, their backward at its own (autocast_benchmarks.py); gradient
  checkpointing (``Workload.gradient_checkpointing``): the layers' forward again in the backward plus the
  measured per-layer checkpoint overhead (timing.backward_time), activations as Korthikanti et al.'s full recompute.
* LoRA (lora.py): frozen base, adapter gradients and optimizer state, input-gradient-only backward of the
  frozen products, the reference is the actor with the adapter disabled (no second copy).
* DPO (``algorithm("dpo")``, an offline algorithm: stages.OFFLINE): no generation, reward, advantage or sync; the
  reference scores both completions of every pair (``group_size`` 2, ``prompts`` = pairs), then the actor trains on
  them; ``workload.precompute_ref_log_probs`` drops the reference pass and weights (scored once before training).
* Shared actor-critic (``critic="shared"``): a value head (h + 1 parameters) on the actor's backbone; values ride on
  the old-log-prob pass (else one actor forward), the head adds 2h FLOPs per token to the actor's passes, and no
  critic model, state or update exists (the survey arXiv 2608.27046 App. B.4.3).

Seconds are per device (wall clock) with ``workload.devices`` data-parallel replicas; FLOPs and
bytes are totals over all devices. Work per stage = device-seconds; depth per stage = the part
no number of devices can split (one sequence's chain; E*M sequential optimizer steps).

* TRL's bookkeeping between the stages (the tracer's ``other``: padding, decoding, gathering, clipping,
  logging, dataloader): per optimizer step base + rows x per-row + parameter tensors x per-tensor, measured on
  a real GRPOTrainer by ``step_benchmarks.bench_trl_step`` (profile ``overhead`` keys ``trl_step_*``);
  datasheet profiles without them use the assumed figures ``assumed.ASSUMED_TRL_STEP``. It is
  ``Prediction.bookkeeping_s``, part of ``total_time`` but of no stage row.

Ignores: overlap between stages (synchronous iteration), host<->device copies.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from ..errors import RlmLabError
from ..stages import Stage
from . import flops as F
from . import memory as M
from .assumed import trl_step_terms
from .comm import RankSpan, Topology, collective_time, layer_comm_time
from .engine import AUTO_MEMORY_FRACTION, Engine, EngineInfo, EngineRun, arrival_order, kv_capacity, vllm_defaults
from .hardware import HardwareProfile, load_profile
from .lora import Lora, lora_forward_flops, lora_from, lora_params, lora_tensors
from .spec import ModelSpec, model_spec, scalar_head
from .timing import backward_time, decode_step_time, forward_time, optimizer_time
from .workdepth import WorkDepth, dynamic_sampling_inflation, iteration_edges
from .workload import Algorithm, Workload, algorithm, check_offline, expected_max, with_critic, workload_from_dict

S = Stage
GIB = 2 ** 30


@dataclass
class StageCost:
    """One row of the prediction."""

    stage: Stage
    model: str
    flops: float
    bytes: float
    memory: int          # peak bytes on one device while this stage runs
    seconds: float       # wall clock on one device
    calls: int           # model calls (forward passes, decode steps, optimizer steps)
    work_s: float        # device-seconds
    depth_s: float       # critical-path seconds of the stage
    breakdown: M.MemoryBreakdown = field(default_factory=M.MemoryBreakdown)  # ``memory`` by kind


HEAD_TENSORS = 2   # a shared actor-critic's value head: Linear(hidden, 1) weight and bias


@dataclass
class Prediction:
    spec: ModelSpec
    algo: Algorithm
    workload: Workload
    profile: HardwareProfile
    rows: list
    memory: M.MemoryBreakdown     # at the peak stage, one device
    dag: WorkDepth = field(repr=False, default=None)
    persistent: M.MemoryBreakdown = field(default_factory=M.MemoryBreakdown)  # held all iteration, one device
    shape: dict = field(default_factory=dict)   # rows per forward call (m), per generate call (g), padded seq
    lora: Lora | None = None
    bookkeeping_s: float = 0.0    # TRL's per-step bookkeeping between the stages (the tracer's "other")
    engine: object = None         # EngineInfo of a continuous engine (engine.py), None for the static one

    # ---- memory ----------------------------------------------------------------------------
    @property
    def capacity(self) -> float:
        return float(self.profile.memory_bytes)

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.capacity and (self.engine is None or self.engine.fits)

    def memory_error(self) -> RlmLabError:
        m = self.memory
        if self.engine is not None and not self.engine.fits:
            return RlmLabError(f"does not fit: {self.engine.why}")
        return RlmLabError(
            f"does not fit: needs {m.total / GIB:.2f} GiB per device (weights {m.weights / GIB:.2f}, "
            f"gradients {m.gradients / GIB:.2f}, optimizer {m.optimizer / GIB:.2f}, KV cache {m.kv_cache / GIB:.2f}, "
            f"activations {m.activations / GIB:.2f}) but {self.profile.name} has {self.capacity / GIB:.2f} GiB; "
            f"use more devices with ZeRO, smaller micro/generation batches, or a smaller model")

    def check_fits(self) -> "Prediction":
        if not self.fits:
            raise self.memory_error()
        return self

    # ---- time, work, depth -------------------------------------------------------------------
    @property
    def total_time(self) -> float:
        """Predicted seconds of one synchronous iteration (raises if it does not fit in memory)."""
        self.check_fits()
        return sum(r.seconds for r in self.rows) + self.bookkeeping_s

    def seconds(self, stage: Stage | str) -> float:
        """Seconds of a stage; ``generate`` = prefill + decode (the tracer measures it as one span)."""
        stage = Stage(stage)
        want = (S.PREFILL, S.DECODE) if stage == S.GENERATE else (stage,)
        return sum(r.seconds for r in self.rows if r.stage in want)

    @property
    def total_flops(self) -> float:
        return sum(r.flops for r in self.rows)

    @property
    def work(self) -> float:
        return self.dag.work

    @property
    def depth(self) -> float:
        return self.dag.depth

    def brent(self, p: int) -> tuple[float, float]:
        """(max(W/p, D), W/p + D) in seconds."""
        return self.dag.brent(p)

    def critical_path(self) -> list[str]:
        return [str(s) for s in self.dag.critical_path()[1]]

    def graph(self) -> dict:
        return self.dag.graph()

    def table(self) -> list[dict]:
        """Rows as plain dicts, with each stage's share of FLOPs and of time."""
        total_f = self.total_flops or 1.0
        total_t = sum(r.seconds for r in self.rows) or 1.0
        return [{"stage": str(r.stage), "model": r.model, "flops": r.flops, "bytes": r.bytes,
                 "memory_bytes": r.memory, "seconds": r.seconds if self.fits else None, "calls": r.calls,
                 "flop_share": r.flops / total_f, "time_share": r.seconds / total_t if self.fits else None,
                 "work_s": r.work_s, "depth_s": r.depth_s, "memory": r.breakdown.to_dict()} for r in self.rows]

    def to_dict(self) -> dict:
        d = {"model": self.spec.to_dict(), "algorithm": self.algo.name, "workload": self.workload.to_dict(),
             "profile": self.profile.name, "profile_kind": self.profile.kind, "fits": self.fits,
             "memory": self.memory.to_dict(), "capacity_bytes": self.capacity, "stages": self.table(),
             "work_s": self.work, "depth_s": self.depth, "graph": self.graph(), "bookkeeping_s": self.bookkeeping_s}
        if self.fits:
            d["total_s"] = self.total_time
        return d


# ---- the assembly -------------------------------------------------------------------------------

def predict(model, algo: str | Algorithm = "grpo", workload: Workload | dict | None = None,
            profile="cpu-2core-epyc", critic=None, reward_model=None, beta: float | None = None,
            lora=None, layout: RankSpan | None = None) -> Prediction:
    """Predict one iteration of ``algo`` on ``model`` with ``workload`` on hardware ``profile``.

    ``critic``/``reward_model`` (PPO) default to the actor's backbone with a scalar head; ``critic="shared"``: a
    value head on the actor's own backbone (shared actor-critic; values from the actor's forward, one backward);
    ``beta=0`` drops the reference model; ``lora`` (a :class:`Lora`, a rank, a mapping or True) trains
    LoRA adapters on the frozen actor (lora.py). ``layout`` (comm.RankSpan; placement.py passes one per set): the
    tensor-/expert-parallel sizes the model shards were cut for, the nodes each group spans, the device memory
    and what other models hold on it; default: tp = ep = 1, the data-parallel ranks packed into the profile's
    nodes, its memory.
    """
    spec = model_spec(model)
    alg = algo if isinstance(algo, Algorithm) else algorithm(algo, beta)
    wl = workload if isinstance(workload, Workload) else workload_from_dict(workload or {})
    prof = load_profile(profile)
    prof.peak_flops(wl.dtype)  # fail early, naming the dtype, if the profile lacks it
    check_offline(alg, wl)
    alg, critic = with_critic(alg, critic)
    critic_spec = scalar_head(model_spec(critic) if critic is not None else spec)
    rm_spec = scalar_head(model_spec(reward_model) if reward_model is not None else spec)
    if layout is None:
        layout = RankSpan(dp_nodes=Topology(prof.devices_per_node).nodes(0, wl.devices))
    return _Assembler(spec, alg, wl, prof, critic_spec, rm_spec, lora_from(lora), layout).run()


class _Assembler:
    def __init__(self, spec, alg, wl, prof, critic_spec, rm_spec, lora=None, layout: RankSpan | None = None):
        self.spec, self.alg, self.wl, self.prof = spec, alg, wl, prof
        self.layout = layout or RankSpan()
        self.engine = None
        self.lora = lora
        self.adapter = lora_params(spec, lora) if lora else 0   # trainable parameters of the actor's adapters
        self.critic_spec, self.rm_spec = critic_spec, rm_spec
        self.head = spec.hidden + 1 if alg.shared_critic else 0   # shared actor-critic: the value head h -> 1
        self.dt, self.db = wl.dtype, wl.dtype_bytes
        self.lengths = wl.lengths()
        self.dev = wl.devices
        # ZeRO's sharding group: all data-parallel ranks, or an HSDP group of layout.shard of them (comm.RankSpan)
        self.shard = self.layout.shard if 0 < self.layout.shard < self.dev else self.dev
        self.shard_nodes = self.layout.shard_nodes if self.shard < self.dev else self.layout.dp_nodes
        self.n_dev = math.ceil(wl.n / self.dev)          # sequences per device
        self.g = min(wl.gen, self.n_dev)                 # rows per generate call
        self.m = min(wl.micro, self.n_dev)               # rows per forward/backward call
        self.r_max = max(self.lengths)
        self.r_gen = expected_max(self.lengths, self.g)  # longest response of one generation batch
        r_pad = {"batch": self.r_gen, "minibatch": expected_max(self.lengths, self.m),
                 "none": sum(self.lengths) / len(self.lengths)}[wl.padding]
        self.seq = wl.prompt_len + math.ceil(r_pad)      # padded training sequence length
        self.seq_max = wl.prompt_len + self.r_max
        self.rows: list[StageCost] = []
        self._peak_transient = M.MemoryBreakdown()
        self.persistent = self._persistent()

    # -- helpers --
    def _persistent(self) -> M.MemoryBreakdown:
        """Model states held for the whole iteration (ZeRO, arXiv 1910.02054): the trainable actor
        (and critic) with AdamW state, frozen reference and reward weights. Gradients are counted
        only while training runs: the Trainer frees them (``zero_grad(set_to_none=True)``) after
        each optimizer step."""
        total = self._lora_state() if self.lora else self._train_state(self.spec)
        if self.alg.critic:  # the critic is trained like the actor: same ZeRO sharding (issue 12 item 4)
            total += self._train_state(self.critic_spec)
        if self.head:  # shared actor-critic: the value head's weights and AdamW state (d + 1 parameters, unsharded)
            w, _, o = M.PRECISIONS[self.wl.precision]  # + torch's 4-byte step scalar of each of its 2 tensors
            total += M.MemoryBreakdown(weights=self.head * w, optimizer=self.head * o + 4 * HEAD_TENSORS)
        if self.alg.reference and not self.lora and not self.wl.precompute_ref_log_probs:
            # LoRA: the reference is the actor with its adapter disabled; precomputed: log-probs stored, no weights
            total += M.MemoryBreakdown(weights=int(self.spec.params * self.db / self.frozen_shards))
        if self.alg.reward_model:
            total += M.MemoryBreakdown(weights=int(self.rm_spec.params * self.db / self.frozen_shards))
        return total

    @property
    def frozen_shards(self) -> int:
        """Devices a frozen model (reference, reward) is sharded over: ZeRO-3 / FSDP wraps it like the trained ones
        (DeepSpeed's eval engine at the same stage: OpenRLHF ``get_eval_ds_config``, TRL ``prepare_deepspeed``; verl's
        FSDP reference), each forward gathering it layer by layer; otherwise a whole copy per device."""
        return self.shard if self.wl.zero_stage == 3 else 1

    def _train_state(self, spec) -> M.MemoryBreakdown:
        """Weights + optimizer state of one trainable model on one device under ZeRO-``zero_stage`` over
        ``devices`` ranks (gradients are added only while training runs)."""
        train = M.train_state_bytes(spec, self.wl.precision, self.wl.zero_stage, self.shard)
        w = spec.params * self.db / (self.shard if self.wl.zero_stage == 3 else 1)
        return M.MemoryBreakdown(weights=int(w), optimizer=int(train - w - self._grad_share(spec)))

    def _lora_state(self) -> M.MemoryBreakdown:
        """LoRA actor: frozen base weights (sharded under ZeRO-3) + the adapters' weights and AdamW state."""
        w, g, o = M.PRECISIONS[self.wl.precision]
        zero, d = self.wl.zero_stage, self.shard
        base = self.spec.params * self.db / (d if zero == 3 else 1)
        a = self.adapter
        return M.MemoryBreakdown(weights=int(base + a * w / (d if zero == 3 else 1)),
                                 optimizer=int(a * o / (d if zero >= 1 else 1) + 4 * lora_tensors(self.spec, self.lora)))

    @property
    def opt_shards(self) -> int:
        """Devices one optimizer step is split over: ZeRO >= 1 partitions the optimizer state, so each rank
        updates only its 1/d of the parameters (Rajbhandari et al. arXiv 1910.02054 Sec. 5.1)."""
        return self.shard if self.wl.zero_stage >= 1 else 1

    def _grad_share(self, spec) -> float:
        trainable = self.adapter if (self.lora and spec is self.spec) else spec.params
        g = M.PRECISIONS[self.wl.precision][1] * trainable
        return g / self.shard if self.wl.zero_stage >= 2 else g

    def _add(self, stage, model, flops, nbytes, transient: M.MemoryBreakdown, seconds, calls, depth):
        mem = self.persistent + transient
        self.rows.append(StageCost(stage, model, float(flops), float(nbytes), int(mem.total), float(seconds),
                                   int(calls), float(seconds * self.dev), float(depth), mem))
        return transient

    def _logit_tokens(self, seq_len: int, head_width: int) -> int:
        if head_width != self.spec.vocab or self.wl.logits == "all":
            return seq_len
        return seq_len - self.wl.prompt_len + 1  # TRL: logits_to_keep = completion length + 1

    def _logprob_rows(self, spec, seq_len: int) -> int:
        """Positions per sequence that TRL's fused log-prob head scores (0 for value/reward heads).

        Without Triton (CPU) TRL projects every position but the last and masks afterwards; with it
        (GPU, ``overlap_overhead`` profiles) only the completion's positions."""
        if spec.head_width != spec.vocab:
            return 0
        return self._logit_tokens(seq_len, spec.head_width) if self.prof.overlap_overhead else seq_len - 1

    def _forward_pass(self, spec, calls_seqs: int, seq_len: int, grad: bool = False):
        """(seconds, flops per sequence, calls) of forwarding ``calls_seqs`` rows in micro-batches."""
        lt = self._logit_tokens(seq_len, spec.head_width)
        lr = self._logprob_rows(spec, seq_len)
        full, rem = divmod(calls_seqs, self.m)
        t = full * forward_time(spec, self.prof, self.m, seq_len, self.m * lt, self.dt, self.db, grad=grad,
                                logprob_rows=self.m * lr)
        if rem:
            t += forward_time(spec, self.prof, rem, seq_len, rem * lt, self.dt, self.db, grad=grad,
                              logprob_rows=rem * lr)
        return t, F.forward_flops(spec, seq_len, lt), full + (rem > 0), lt

    def _transient_forward(self, spec, lt: int, grad: bool) -> M.MemoryBreakdown:
        acts = M.activation_bytes(spec, self.m, self.seq, self.db)
        if grad and self.wl.gradient_checkpointing:  # each layer's input kept + one layer recomputed (peak.py)
            acts = M.activation_bytes(spec, self.m, self.seq, self.db, recompute="full") + acts // spec.layers
        logits = M.logprob_bytes(spec, self.m * lt, 2 if self.dt == "bf16" else 4, self.wl.logprob_chunk, grad)
        if not grad:  # without autograd only about one layer's activations are alive
            return M.MemoryBreakdown(activations=acts // spec.layers + logits)
        grads = self._grad_share(self.spec) + (self._grad_share(self.critic_spec) if self.alg.critic else 0)
        if self.head:  # shared actor-critic: the value head's gradients (h + 1, unsharded like its state)
            grads += self.head * M.PRECISIONS[self.wl.precision][1]
        return M.MemoryBreakdown(gradients=int(grads), activations=acts + logits)

    # -- stages --
    def run(self) -> Prediction:
        if self.alg.offline:
            return self._finish(self.offline_preparation, self.training)
        return self._finish(self._online_generation, self.preparation, self._online_rewards, self.training, self.sync)

    def _online_generation(self):
        self.generation()
        if self.wl.dynamic_sampling_p is not None:
            self._inflate((S.PREFILL, S.DECODE))

    def _online_rewards(self):
        if self.wl.dynamic_sampling_p is not None:
            self._inflate((S.REWARD,))

    def offline_preparation(self):
        """DPO (the survey arXiv 2608.27046 Algorithm 4): the frozen reference scores both completions of every
        pair, teacher-forced, in micro-batches (TRL's DPOTrainer concatenates chosen and rejected into one batch);
        with ``precompute_ref_log_probs`` that pass runs once over the data set before training and is no part of
        the iteration. No generation, reward, advantage or weight sync."""
        if not self.alg.reference or self.wl.precompute_ref_log_probs:
            return
        self._scoring_pass(S.REF_LOGPROB, "reference", self.spec)

    def _finish(self, *phases) -> Prediction:
        for phase in phases:
            phase()
        return self._assemble()

    def _assemble(self) -> Prediction:
        stages = {r.stage for r in self.rows}
        adv_in = (S.REWARD, S.REF_LOGPROB, S.VALUES) if self.alg.advantage == "gae" else (S.REWARD,)
        dag = WorkDepth({r.stage: r.work_s for r in self.rows}, {r.stage: r.depth_s for r in self.rows},
                        tuple(iteration_edges(stages, adv_in)))
        peak = max(self.rows, key=lambda r: r.memory)
        mem = self.persistent + self._peak_transient
        assert mem.total == peak.memory
        shape = {"m": self.m, "g": self.g, "seq": self.seq, "n_dev": self.n_dev, "r_gen": self.r_gen}
        return Prediction(self.spec, self.alg, self.wl, self.prof, self.rows, mem, dag, self.persistent, shape,
                          self.lora, self.bookkeeping(), self.engine)

    def bookkeeping(self) -> float:
        """TRL's bookkeeping of one iteration: per optimizer step, base + rows x row + trainable tensors x tensor
        (``step_benchmarks``); the profile's measured terms, else (datasheet) the assumed ones."""
        base, row, tensor = trl_step_terms(self.prof)
        steps = self.wl.epochs * self.wl.minibatches
        tensors = lora_tensors(self.spec, self.lora) if self.lora else self.spec.param_tensors
        return steps * (base + self.n_dev / self.wl.minibatches * row + tensors * tensor)

    def _track(self, transient: M.MemoryBreakdown):
        if transient.total > self._peak_transient.total:
            self._peak_transient = transient

    def _inflate(self, stages):
        """Dynamic sampling: filtered groups are regenerated (and rescored) in extra sequential rounds."""
        k = dynamic_sampling_inflation(self.wl.dynamic_sampling_p, self.wl.group_size)
        for r in self.rows:
            if r.stage in stages:
                r.flops, r.bytes, r.seconds, r.work_s, r.depth_s = (
                    r.flops * k, r.bytes * k, r.seconds * k, r.work_s * k, r.depth_s * k)
                r.calls = math.ceil(r.calls * k)

    def generation(self):
        if self.wl.engine == "continuous":
            return self._engine_generation()
        spec, wl, prof, P = self.spec, self.wl, self.prof, self.wl.prompt_len
        batches = math.ceil(self.n_dev / self.g)
        rows = max(1, self.g // wl.group_size) if wl.prefix_sharing else self.g
        t_pre = batches * (forward_time(spec, prof, rows, P, rows, self.dt, self.db)
                           + prof.call_overhead("generate_base_s"))
        f_pre = self.dev * batches * rows * F.prefill_flops(spec, P)
        w_bytes = spec.params * self.db
        kv = M.kv_cache_bytes(spec, self.g * M.generate_kv_tokens(P, math.ceil(self.r_gen)), self.db)
        gathered = 0
        if wl.zero_stage == 3 and self.dev > 1:
            # ZeRO-3: TRL's unwrap_model_for_generation gathers the whole model (gather_deepspeed3_params=True)
            # once per generate call: the full weights are resident while generating, and the all-gather is paid
            gathered = int(w_bytes - w_bytes / self.shard)
            t_gather = collective_time("all_gather", w_bytes, self.shard, prof, self.shard_nodes)
            t_pre += batches * t_gather
        tr = M.MemoryBreakdown(weights=gathered, kv_cache=kv, activations=M.logits_bytes(spec, self.g))
        self._track(tr)
        depth_pre = forward_time(spec, prof, 1, P, 1, self.dt, self.db)
        if gathered:
            depth_pre += t_gather
        self._add(S.PREFILL, "actor", f_pre, self.dev * batches * w_bytes, tr, t_pre, batches, depth_pre)

        steps = max(math.ceil(self.r_gen) - 1, 0)
        if wl.engine == "static":
            active = [self.g] * steps
            n_runs = batches
        else:  # continuous: rows still generating at step k, over all of this device's sequences
            per_dev = sorted(self.lengths[self.dev - 1::self.dev] or self.lengths[:1])
            # rows longer than k: all but those <= k (bisect on the sorted lengths; O(R log n), not O(R n))
            active = [min(self.g, len(per_dev) - bisect.bisect_right(per_dev, k)) for k in range(1, per_dev[-1])]
            n_runs = 1
        t_dec = n_runs * self._sum_steps(active)
        f_dec = self.dev * n_runs * sum(F.decode_step_flops(spec, b, P + k) for k, b in enumerate(active, 1))
        kv_read = sum(b * (P + k) for k, b in enumerate(active, 1)) * spec.kv_bytes_per_token(self.db)
        b_dec = self.dev * n_runs * (len(active) * w_bytes + kv_read)
        depth_dec = self._sum_steps([1] * (self.r_max - 1))
        self._add(S.DECODE, "actor", f_dec, b_dec, tr, t_dec, n_runs * len(active), depth_dec)

    def _engine_generation(self):
        """A continuous engine (engine.py) generating this device's sequences with its own copy of the weights: its
        memory pool (the workload's fraction of the device, or 0.9 of it less what the other models hold), the KV
        capacity left in it, and the drained batch's prefill and decode; ZeRO-3 gathers the weights once per step
        to refresh the engine's copy."""
        spec, wl, prof, P, lay = self.spec, self.wl, self.prof, self.wl.prompt_len, self.layout
        capacity = float(lay.capacity or prof.memory_bytes)
        held = float(lay.held if lay.held is not None else self.persistent.total)
        default_seqs, chunk = vllm_defaults(prof)
        max_seqs = wl.gen_batch or default_seqs
        f = wl.engine_memory_fraction
        pool = f * capacity if f is not None else AUTO_MEMORY_FRACTION * capacity - held
        K, w_bytes, reserve = kv_capacity(spec, self.db, pool, max_seqs, chunk)

        def comm(tokens):
            return layer_comm_time(spec, tokens, prof, lay, self.db)

        eng = Engine(spec, prof, P, max(K, 0.0), max_seqs, chunk, wl.group_size, wl.prefix_sharing, self.dt,
                     self.db, comm)
        lengths = arrival_order(self.lengths[self.dev - 1::self.dev] or self.lengths[:1])
        fits = eng.fits_one(max(lengths))
        share = (f"{f:g} of" if f is not None else f"{AUTO_MEMORY_FRACTION:g} of the device less "
                 f"{held / GIB:.1f} GiB the other models hold, of")
        why = (f"the generation engine's KV cache holds {max(K, 0):.0f} tokens per replica ({share} "
               f"{capacity / GIB:.1f} GiB, less weights {w_bytes / GIB:.1f} GiB and reserve {reserve / GIB:.1f} GiB)"
               f" but one sequence needs {P + max(lengths)}; use more tensor parallelism, a larger memory share or "
               f"shorter sequences")
        run = eng.drain(lengths) if fits else EngineRun(0.0, 0.0, 0.0, 0, 0, 0.0)
        kappa = spec.kv_bytes_per_token(self.db)
        tr = M.MemoryBreakdown(weights=int(w_bytes), kv_cache=int(max(K, 0.0) * kappa), activations=int(reserve))
        self._track(tr)
        t_pre, depth_pre = run.prefill_s, forward_time(spec, prof, 1, P, 1, self.dt, self.db)
        if wl.zero_stage == 3 and self.dev > 1:
            t_gather = collective_time("all_gather", spec.params * self.db, self.shard, prof, self.shard_nodes)
            t_pre, depth_pre = t_pre + t_gather, depth_pre + t_gather
        prompts = len(lengths) / wl.group_size if wl.prefix_sharing else len(lengths)
        f_pre = self.dev * prompts * F.prefill_flops(spec, P)
        self._add(S.PREFILL, "actor", f_pre, self.dev * w_bytes, tr, t_pre, max(1, math.ceil(prompts)), depth_pre)
        f_dec = self.dev * sum(F.decode_flops(spec, P, r) for r in lengths)
        kv_read = sum((r - 1) * P + (r - 1) * r // 2 for r in lengths) * kappa
        b_dec = self.dev * (run.steps * w_bytes + kv_read)
        depth_dec = eng.segment_time(1, P + 1, self.r_max - 1)      # the longest sequence alone, step after step
        self._add(S.DECODE, "actor", f_dec, b_dec, tr, run.decode_s, math.ceil(run.steps), depth_dec)
        self.engine = EngineInfo(eng, lengths, run, fits, max(K, 0.0), pool, max_seqs, why)

    def _sum_steps(self, active: list[int]) -> float:
        """sum_k t_step(b_k, P + k); evaluated on a stride for long generations (t_step is smooth in c)."""
        P, n = self.wl.prompt_len, len(active)
        stride = max(1, n // 512)
        total, parts = 0.0, {}
        for k0 in range(0, n, stride):
            k1 = min(n, k0 + stride)
            total += (k1 - k0) * decode_step_time(self.spec, active[k0], P + k0 + 1, self.prof, self.dt, self.db,
                                                    self.wl.engine == "static", parts=parts)
        return total

    def preparation(self):
        seq = self.seq
        passes = []
        if self.recompute_old:
            passes.append((S.OLD_LOGPROB, "actor", self.spec))
        if self.alg.reference:
            passes.append((S.REF_LOGPROB, "reference", self.spec))
        if self.alg.reward_model:
            passes.append((S.REWARD, "reward", self.rm_spec))
        if self.alg.critic:
            passes.append((S.VALUES, "critic", self.critic_spec))
        for stage, name, spec in passes:
            if stage == S.VALUES and not self.alg.reward_model:
                self._verifier()
            self._scoring_pass(stage, name, spec)
        if self.head:
            self._shared_values()
        self._verifier()
        # advantage: elementwise; GAE is a backward-in-time loop over the padded completion
        op = self.prof.call_overhead("op_s")
        steps = 6 * math.ceil(self.r_gen) if self.alg.advantage == "gae" else 10
        t_adv = steps * op
        self._add(S.ADVANTAGE, "-", 10.0 * self.wl.n * (seq - self.wl.prompt_len), 0.0, M.MemoryBreakdown(),
                  t_adv, steps, t_adv)

    def _shared_values(self):
        """Shared actor-critic (the survey's App. B.4.3): the values come from the value head on the actor's hidden
        states. When the old-log-prob pass runs, the head rides on it: 2 d FLOPs per token, one small product per
        micro-batch (time: the op overhead per call; the head is 2d of the backbone's 2N FLOPs per token); without
        that pass the actor's backbone runs a forward for them (the actor with a scalar head)."""
        if not self.recompute_old:
            return self._scoring_pass(S.VALUES, "actor", scalar_head(self.spec))
        calls = math.ceil(self.n_dev / self.m)
        t = calls * self.prof.call_overhead("op_s")
        self._add(S.VALUES, "actor", self.wl.n * 2 * self.spec.hidden * self.seq, 0.0, M.MemoryBreakdown(), t, calls,
                  self.prof.call_overhead("op_s"))

    def _scoring_pass(self, stage, name, spec):
        """One teacher-forced forward without gradients over every sequence of this device, in micro-batches."""
        t, f_seq, calls, lt = self._forward_pass(spec, self.n_dev, self.seq)
        tr = self._transient_forward(spec, lt, grad=False)
        self._track(tr)
        depth = forward_time(spec, self.prof, 1, self.seq_max, self._logit_tokens(self.seq_max, spec.head_width),
                             self.dt, self.db, logprob_rows=self._logprob_rows(spec, self.seq_max))
        if self.wl.zero_stage == 3 and self.dev > 1:
            # a ZeRO-3 model (trained or frozen: frozen_shards) all-gathers its parameters for every forward call
            # (layer by layer: N bytes)
            gather = collective_time("all_gather", spec.params * self.db, self.shard, self.prof, self.shard_nodes)
            t, depth = t + calls * gather, depth + gather
        self._add(stage, name, self.wl.n * f_seq, self.dev * calls * spec.params * self.db, tr, t, calls, depth)

    @property
    def recompute_old(self) -> bool:
        """Whether the run scores the behaviour policy's log-probs in a separate pass. ``workload.recompute_old``
        when set; otherwise what the trainers do: TRL's GRPOTrainer computes ``old_per_token_logps`` when the
        policy moves before a sample is trained (num_iterations > 1, or more optimizer steps per generation
        than one: epochs > 1 or minibatches > 1), and our PPO always does when it has a reference (its
        per-token KL reward needs log pi_old; rlm_lab.train.ppo)."""
        if self.alg.offline:   # DPO's loss compares with the reference only: no behaviour policy
            return False
        if self.wl.recompute_old is not None:
            return bool(self.wl.recompute_old)
        ppo_kl = self.alg.name == "ppo" and self.alg.reference
        return self.wl.epochs > 1 or self.wl.minibatches > 1 or ppo_kl

    def _verifier(self):
        """A rule-based reward (CPU): ``reward_s_per_sample`` seconds per sequence, no model."""
        if any(r.stage == S.REWARD for r in self.rows):
            return
        t = self.n_dev * self.wl.reward_s_per_sample
        self._add(S.REWARD, "verifier", 0.0, 0.0, M.MemoryBreakdown(), t, self.n_dev, self.wl.reward_s_per_sample)

    def training(self):
        wl, prof = self.wl, self.prof
        steps = wl.epochs * wl.minibatches
        models = [("actor", self.spec)] + ([("critic", self.critic_spec)] if self.alg.critic else [])
        for name, spec in models:
            lora = self.lora if name == "actor" else None
            wg = lora is None   # LoRA: the frozen products need only the input gradient (lora.py)
            trainable = (self.adapter if lora else spec.params) + (self.head if name == "actor" else 0)
            t_f, f_seq, calls, lt = self._forward_pass(spec, self.n_dev, self.seq, grad=True)
            full, rem = divmod(self.n_dev, self.m)
            lr = self._logprob_rows(spec, self.seq)
            # checkpointing is the actor's only: the Trainer enables it on its own model, never on PPO's critic (a
            # second model built from the config, train/critic.py); issue 35 found the critic update over-predicted
            # by the recompute it does not run
            rc = wl.gradient_checkpointing and name == "actor"
            t_b = full * backward_time(spec, prof, self.m, self.seq, self.m * lt, self.dt, self.db, self.m * lr,
                                       weight_grads=wg, recompute=rc)
            if rem:
                t_b += backward_time(spec, prof, rem, self.seq, rem * lt, self.dt, self.db, rem * lr, weight_grads=wg,
                                     recompute=rc)
            grad_bytes = trainable * M.PRECISIONS[wl.precision][1]
            comm = self._grad_comm(grad_bytes, spec)
            shards = self.opt_shards
            t_o = optimizer_time(spec, prof, 4, shards, params=trainable,
                                 tensors=lora_tensors(spec, lora) if lora else None)
            tr = self._transient_forward(spec, lt, grad=True)
            self._track(tr)
            lt_max = self._logit_tokens(self.seq_max, spec.head_width)
            lr_max = self._logprob_rows(spec, self.seq_max)
            d_f = steps * forward_time(spec, prof, 1, self.seq_max, lt_max, self.dt, self.db, grad=True,
                                       logprob_rows=lr_max)
            d_b = steps * (backward_time(spec, prof, 1, self.seq_max, lt_max, self.dt, self.db, lr_max,
                                         weight_grads=wg, recompute=rc) + comm)
            w_bytes = spec.params * self.db
            if name == "actor" and self.head:   # the value head's product on every position (shared actor-critic)
                f_seq += 2 * spec.hidden * self.seq
            f_fwd, f_bwd = wl.epochs * wl.n * f_seq, 2 * wl.epochs * wl.n * f_seq
            if lora:  # adapters' forward; backward = input gradient of every product + 2x attention + 2x adapters
                f_ad = lora_forward_flops(spec, lora, self.seq)
                f_fwd = wl.epochs * wl.n * (f_seq + f_ad)
                f_bwd = wl.epochs * wl.n * (F.matmul_flops(spec, self.seq, lt)
                                            + 2 * F.attention_flops(spec, self.seq, self.seq) + 2 * f_ad)
            opt_bytes = self.dev * steps * 7 * trainable * 4 / shards
            opt_flops = self.dev * steps * F.optimizer_flops(trainable) / shards
            if name == "actor":
                self._add(S.ACTOR_FORWARD, name, f_fwd, self.dev * wl.epochs * calls * w_bytes, tr,
                          wl.epochs * t_f, wl.epochs * calls, d_f)
                self._add(S.ACTOR_BACKWARD, name, f_bwd, self.dev * wl.epochs * calls * 2 * w_bytes, tr,
                          wl.epochs * t_b + steps * comm, wl.epochs * calls, d_b)
                self._add(S.OPTIMIZER, name, opt_flops, opt_bytes,
                          M.MemoryBreakdown(gradients=tr.gradients), steps * t_o, steps, steps * t_o)
            else:
                self._add(S.CRITIC_UPDATE, name, f_fwd + f_bwd + opt_flops,
                          self.dev * wl.epochs * calls * 3 * w_bytes + opt_bytes, tr,
                          wl.epochs * (t_f + t_b) + steps * (comm + t_o), wl.epochs * calls + steps,
                          d_f + d_b + steps * t_o)

    def _grad_comm(self, grad_bytes: float, spec) -> float:
        """Gradient synchronization per optimizer step: ring all-reduce (DDP, ZeRO-1/2 as reduce-scatter
        + all-gather: same bytes) or ZeRO-3's 2 all-gathers + 1 reduce-scatter (comm.py)."""
        if self.dev == 1:
            return 0.0
        nodes = self.layout.dp_nodes
        if self.wl.zero_stage == 3:
            p_bytes = spec.params * self.db
            t = (2 * collective_time("all_gather", p_bytes, self.shard, self.prof, self.shard_nodes)
                 + collective_time("reduce_scatter", grad_bytes, self.shard, self.prof, self.shard_nodes))
            if self.shard < self.dev:   # HSDP: each shard's gradients all-reduced across the replicas
                t += collective_time("all_reduce", grad_bytes / self.shard, self.dev // self.shard, self.prof, nodes)
            return t
        return collective_time("all_reduce", grad_bytes, self.dev, self.prof, nodes)

    def sync(self):
        mode = self.wl.weight_sync
        if mode == "none":
            return
        nbytes = (self.adapter if self.lora else self.spec.params) * self.db  # LoRA: only the adapters move
        if mode == "colocated":
            t = 2 * nbytes / self.prof.bandwidth()  # read + write one copy at memory bandwidth
        else:
            if not self.prof.link_bandwidth:
                raise RlmLabError(f"profile {self.prof.name!r} has no link_bandwidth for a disaggregated weight sync")
            t = nbytes / self.prof.link_bandwidth + self.prof.collective("send_recv")["alpha_s"]
        self._add(S.WEIGHT_SYNC, "actor", 0.0, nbytes, M.MemoryBreakdown(), t, 1, t)
