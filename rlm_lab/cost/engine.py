"""Generation as serving engines run it (vLLM, SGLang): continuous batching whose concurrency the KV cache limits.

One engine replica spans ``tp`` devices (tensor parallel). On each device it takes a share of the memory (vLLM's
``gpu_memory_utilization``, default 0.9, https://docs.vllm.ai/en/latest/configuration/engine_args.html; SGLang's
``mem_fraction_static``) and splits it into its weights (the model's bytes / tp), an activation reserve and the
KV-cache blocks, allocated up front (PagedAttention, Kwon et al., SOSP 2023, arXiv 2309.06180, Sec. 4):

    K = (pool - W / tp - A) / kappa_rank   tokens,   kappa_rank = 2 L ceil(n_kv / tp) d_h bytes

(KV heads split over the tp ranks, replicated when there are fewer than tp: GQA keeps kappa small). ``A`` is the
activation reserve vLLM measures with a profiling forward before it sizes the cache (``determine_available_memory``
of its GPU worker): here the logits of ``max_num_seqs`` rows in fp32 plus one layer's widest activations for
``max_num_batched_tokens`` tokens, an ASSUMED stand-in for that measurement.

**Scheduling** (iteration-level, Orca, OSDI 2022; vLLM's scheduler): requests wait in submission order; a request
is admitted while fewer than ``max_num_seqs`` run and the cache holds its prompt plus one step of every running
request; every decode step adds one token to each running request; a finished request frees its blocks; when the
cache is full the most recently admitted request is **preempted** (its blocks freed, its tokens recomputed by a
prefill when it is admitted again: vLLM's recompute preemption, arXiv 2309.06180 Sec. 4.5). With **prefix
sharing** (vLLM's automatic prefix caching; SGLang's RadixAttention, arXiv 2312.07104) the G samples of one prompt
share the prompt's blocks while any of them is resident, and the prompt is prefilled once per group. Ignores: the
block granularity (16 tokens), the cache's eviction order beyond "a prompt stays while a member runs".

**Time**: a decode step of b rows whose caches hold T tokens in all costs
``t(b, T) = combine(products(b) + elementwise(b) + attention(T), overheads(b)) + comm(b)``
(timing.decode_step_parts: the weights read once per step, so a step is memory-bound at small b and compute-bound
at large b: the roofline per step; ``comm``: tensor parallelism's 2 all-reduces per layer of b h bytes and expert
parallelism's all-to-alls, placement.py). Prefill: the prompt tokens (and recomputed ones) run as forwards of
``max_num_batched_tokens`` tokens (chunked prefill), compute-bound, added to the decode time (not hidden in
mixed steps: an upper bound).

Two regimes, both for the sequences one replica generates:

* :meth:`Engine.drain`: one batch from an empty engine until its last sequence ends (the synchronous modes: the
  step waits for the longest sequence, and the last rows run at small b, memory-bound: the long tail). An event
  simulation: between two events (a request ends, the cache fills) b is constant and T grows by b per step, so a
  segment of s steps costs sum_j t(b, T0 + j b), summed exactly for s <= 3 and by Simpson's rule (exact while t is
  linear in T) beyond.
* :meth:`Engine.stream`: the steady state with a continuous supply of requests (asynchronous modes whose rollouts
  stream and are interrupted rather than drained): every slot is refilled when its request ends, so b stays at
  C = min(max_num_seqs, cap, K / m), m = P_kv + E[R^2] / (2 E[R]) the time-average KV of a slot (a long request
  holds its slot longer: length-biased), and a batch of sequences costs (sum_i (R_i - 1)) / C steps of
  t(C, C (P + E[R^2] / (2 E[R]))) plus its prefill. No tail.

Response lengths arrive in a fixed, well-mixed order (:func:`arrival_order`: the sorted quantile lengths taken
with a golden-ratio stride, as a shuffled data set would deal them), so a prediction never depends on a seed.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from ..errors import RlmLabError
from .timing import _combine, attention_time, decode_step_parts, forward_time

GIB = 2 ** 30
AUTO_MEMORY_FRACTION = 0.9   # vLLM's default gpu_memory_utilization (engine_args docs)
# A serving engine replays each decode step as a captured CUDA graph and schedules the next batch on the host
# while the GPU runs (vLLM V1, https://blog.vllm.ai/2025/01/27/v1-alpha-release.html): its per-step host cost is
# far below eager PyTorch's per-op dispatch, which the datasheet profiles' decode_step_* overheads describe.
# ASSUMED: 0.5 ms per decode step on a datasheet profile (overridable: overhead key engine_step_s, or assume:);
# a calibrated profile keeps its measured decode overheads (its "engine" is the book's own continuous loop).
ASSUMED_ENGINE_STEP_S = 5e-4


def engine_step_overhead(profile) -> float | None:
    """Per-decode-step host cost of a serving engine: the profile's ``engine_step_s``, else ASSUMED_ENGINE_STEP_S on
    a datasheet profile, else None (use the profile's measured decode overheads)."""
    if "engine_step_s" in profile.overhead:
        return float(profile.overhead["engine_step_s"])
    return ASSUMED_ENGINE_STEP_S if profile.kind == "datasheet" else None


def vllm_defaults(profile) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM chooses when a run sets neither, for the offline ``LLM``
    class the RL frameworks drive: 1024 and 16384 on devices of at least 70 GiB that are not A100s, else 256 and
    8192 (``EngineArgs.get_batch_defaults``, vllm/engine/arg_utils.py, https://github.com/vllm-project/vllm)."""
    big = float(profile.memory_bytes) >= 70 * GIB and "a100" not in str(profile.device).lower()
    return (1024, 16384) if big else (256, 8192)


def arrival_order(lengths) -> list[int]:
    """The lengths in a fixed well-mixed order: the sorted list read with a stride k coprime to n near
    n (sqrt(5) - 1) / 2 (a golden-ratio sequence), so long and short requests alternate as in a shuffled set."""
    vals = sorted(int(x) for x in lengths)
    n = len(vals)
    if n <= 2:
        return vals
    k = max(1, round(n * (math.sqrt(5) - 1) / 2))
    while math.gcd(k, n) != 1:
        k += 1
    return [vals[(i * k) % n] for i in range(n)]


@dataclass
class EngineRun:
    """What one replica's generation cost: seconds (prefill + decode), the decode steps, the largest batch and
    cached tokens reached, the preemptions and the tokens their recompute prefilled."""

    seconds: float
    prefill_s: float
    decode_s: float
    steps: float
    peak_batch: int
    peak_kv_tokens: float
    preemptions: int = 0
    recomputed_tokens: int = 0
    concurrency: float = 0.0          # mean rows per decode step
    notes: list = field(default_factory=list)


class Engine:
    """One replica of a continuous-batching engine for the sequences it generates (module docstring).

    ``spec``: one tensor-parallel rank's shard of the model (placement.tp_shard); ``kv_tokens``: the cache's
    capacity K in tokens; ``comm(b)``: seconds of the step's collectives for b rows (0 without tp/ep)."""

    def __init__(self, spec, profile, prompt_len: int, kv_tokens: float, max_num_seqs: int,
                 chunk_tokens: int, group_size: int = 1, prefix_sharing: bool = False, dtype: str = "bf16",
                 dtype_bytes: int = 2, comm=None):
        if max_num_seqs < 1:
            raise RlmLabError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
        self.spec, self.prof, self.P = spec, profile, int(prompt_len)
        self.K, self.C = float(kv_tokens), int(max_num_seqs)
        self.chunk, self.G, self.share = max(1, int(chunk_tokens)), max(1, int(group_size)), bool(prefix_sharing)
        self.dt, self.db = dtype, dtype_bytes
        self.comm = comm or (lambda b: 0.0)
        self.step_overhead = engine_step_overhead(profile)
        self._parts: dict = {}

    # ---- costs ------------------------------------------------------------------------------------
    def step_time(self, b: int, tokens: float) -> float:
        """t(b, T): one decode step of ``b`` rows reading ``tokens`` cached tokens in all."""
        if b not in self._parts:
            compute, over = decode_step_parts(self.spec, b, self.prof, self.dt, self.db, kv_append=False)
            self._parts[b] = (compute, over if self.step_overhead is None else self.step_overhead)
        compute, over = self._parts[b]
        att = attention_time(self.spec, self.prof, 1, 1, max(1.0, tokens), self.dt, self.db)
        return _combine(self.prof, compute + att, over) + self.comm(b)

    def segment_time(self, b: int, tokens0: float, steps: int) -> float:
        """sum_{j < steps} t(b, tokens0 + j b): exact for steps <= 3, Simpson's rule beyond."""
        if steps <= 0:
            return 0.0
        if steps <= 3:
            return sum(self.step_time(b, tokens0 + j * b) for j in range(steps))
        last = tokens0 + (steps - 1) * b
        return steps * (self.step_time(b, tokens0) + 4 * self.step_time(b, (tokens0 + last) / 2)
                        + self.step_time(b, last)) / 6

    def prefill_time(self, tokens: float) -> float:
        """Chunked prefill of ``tokens`` prompt (or recomputed) tokens: forwards of ``chunk`` tokens, the
        sequences' own attention priced as one sequence of P tokens per P tokens (logits of one row per prompt)."""
        if tokens <= 0:
            return 0.0
        P = max(1, self.P)
        rows_per_chunk = max(1, self.chunk // P)
        chunks = tokens / (rows_per_chunk * P)
        one = forward_time(self.spec, self.prof, rows_per_chunk, P, rows_per_chunk, self.dt, self.db)
        return chunks * one

    def prompt_kv(self) -> float:
        """Prompt tokens one resident request holds on average: P, or P / G when the group shares it."""
        return self.P / self.G if self.share else float(self.P)

    def fits_one(self, longest: int) -> bool:
        """Whether the cache holds one request of the longest response (else the engine cannot run it)."""
        return self.K >= self.P + longest

    # ---- regimes ----------------------------------------------------------------------------------
    def drain(self, lengths) -> EngineRun:
        """One batch of requests with these response lengths (submission order = the given order; samples of a
        prompt are contiguous groups of G), from an empty engine until the last ends (module docstring)."""
        r = [int(x) for x in lengths]
        if not r:
            return EngineRun(0.0, 0.0, 0.0, 0, 0, 0.0)
        if min(r) < 1:
            raise RlmLabError("response lengths must be >= 1")
        if not self.fits_one(max(r)):
            raise RlmLabError(f"the engine's KV cache holds {self.K:.0f} tokens but one sequence needs "
                              f"{self.P + max(r)} (prompt {self.P} + response {max(r)})")
        P, K, C, G = self.P, self.K, self.C, self.G
        waiting = deque((i, 0) for i in range(len(r)))      # (request, decode steps already done)
        running: dict = {}                                   # request -> (admitted at step, steps done then)
        order: list = []                                     # admission order (last = first preempted)
        heap: list = []                                      # (finish step, request)
        resident = [0] * ((len(r) + G - 1) // G)             # running members per group (prefix sharing)
        S = 0                                                # decode steps so far
        mem = 0.0                                            # cached tokens held
        D = 0                                                # sum over running of (done then - admitted at)
        prefill_tokens = recomputed = preemptions = 0
        decode_s = 0.0
        peak_b = 0
        peak_mem = 0.0
        rows_steps = 0.0

        def admit():
            nonlocal mem, D, prefill_tokens, recomputed
            while waiting and len(running) < C:
                i, done = waiting[0]
                group_cached = self.share and resident[i // G] > 0
                need = (0 if group_cached else P) + done
                if mem + need + len(running) + 1 > K:
                    break
                waiting.popleft()
                prefill_tokens += need
                recomputed += done + (P if done and not group_cached else 0)
                resident[i // G] += 1
                mem += need
                if done >= r[i] - 1:          # ends with its prefill token (R = 1)
                    resident[i // G] -= 1
                    mem -= need if not self.share or resident[i // G] == 0 else done
                    continue
                running[i] = (S, done)
                order.append(i)
                D += done - S
                heapq.heappush(heap, (S + r[i] - 1 - done, i))

        def remove(i: int):
            nonlocal mem, D
            a, done0 = running.pop(i)
            done = done0 + S - a
            D -= done0 - a
            resident[i // G] -= 1
            last_of_group = not self.share or resident[i // G] == 0
            mem -= done + (P if last_of_group else 0)
            return done

        admit()
        while running or waiting:
            if not running:
                raise RlmLabError("the engine cannot admit a request: its KV cache is too small")  # pragma: no cover
            b = len(running)
            while heap and heap[0][1] not in running:       # stale entries of preempted requests
                heapq.heappop(heap)
            s_fin = heap[0][0] - S
            s_mem = int((K - mem) // b)
            if s_mem < 1:                                   # out of blocks: preempt the newest
                i = order.pop()
                while i not in running:
                    i = order.pop()
                done = remove(i)
                waiting.appendleft((i, done))
                preemptions += 1
                continue
            s = min(s_fin, s_mem)
            tokens0 = b * (P + 1) + D + b * S               # context of every running row at the next step
            decode_s += self.segment_time(b, tokens0, s)
            rows_steps += b * s
            S += s
            mem += b * s
            peak_b, peak_mem = max(peak_b, b), max(peak_mem, mem)
            while heap and heap[0][0] <= S:
                _, i = heapq.heappop(heap)
                if i in running and running[i][0] + r[i] - 1 - running[i][1] == S:
                    remove(i)          # stays in ``order``: a preemption skips what no longer runs
            admit()
        prefill_s = self.prefill_time(prefill_tokens)
        return EngineRun(prefill_s + decode_s, prefill_s, decode_s, S, peak_b, peak_mem, preemptions, recomputed,
                         rows_steps / S if S else 0.0)

    def stream(self, lengths, cap: float | None = None) -> EngineRun:
        """The steady state generating these sequences within an endless stream of the same kind (module
        docstring); ``cap``: the most requests allowed in flight (a staleness bound: (eta + 1) batches)."""
        r = [int(x) for x in lengths]
        if not r:
            return EngineRun(0.0, 0.0, 0.0, 0, 0, 0.0)
        if not self.fits_one(max(r)):
            raise RlmLabError(f"the engine's KV cache holds {self.K:.0f} tokens but one sequence needs "
                              f"{self.P + max(r)} (prompt {self.P} + response {max(r)})")
        age = sum(x * x for x in r) / (2 * sum(r))           # time-average response tokens a slot holds
        c_mem = self.K / (self.prompt_kv() + age)
        c = max(1.0, min(float(self.C), c_mem, float(cap) if cap else math.inf))
        b = max(1, int(c))
        tokens = b * (self.P + age)
        steps = sum(x - 1 for x in r) / b
        decode_s = steps * self.step_time(b, tokens)
        prompts = len(r) / self.G if self.share else len(r)
        prefill_s = self.prefill_time(prompts * self.P)
        return EngineRun(prefill_s + decode_s, prefill_s, decode_s, steps, b, b * (self.prompt_kv() + age),
                         concurrency=float(b))

    def interrupt_time(self, lengths, cap: float | None = None) -> float:
        """Seconds one weight update costs a streaming engine with interruptible (partial) rollouts that drops
        the in-flight requests' KV and recomputes it with the new weights (AReaL, arXiv 2505.24298 Sec. 4.1:
        "discard KV caches computed by old weights, and re-compute them"): a prefill of the in-flight context."""
        run = self.stream(lengths, cap)
        return self.prefill_time(run.peak_kv_tokens)


def kv_capacity(spec, dtype_bytes: int, pool_bytes: float, max_num_seqs: int, chunk_tokens: int) -> tuple[float, float, float]:
    """(K tokens, weight bytes, activation reserve bytes) of one device of an engine whose shard of the model is
    ``spec`` and whose memory is ``pool_bytes`` (module docstring). K may be <= 0: the engine cannot start."""
    weights = spec.params * dtype_bytes
    act = (spec.top_k * spec.expert_intermediate + spec.shared_intermediate) if spec.moe_layers else spec.intermediate
    reserve = max_num_seqs * spec.head_width * 4 + chunk_tokens * (4 * spec.hidden + 2 * act) * dtype_bytes
    kappa = spec.kv_bytes_per_token(dtype_bytes)
    return (pool_bytes - weights - reserve) / kappa, float(weights), float(reserve)


@dataclass
class EngineInfo:
    """A prediction's continuous engine (predict.py): the engine, this replica's lengths in arrival order, the
    drained batch, whether one longest sequence fits its cache (and why not), its KV capacity, memory pool and
    ``max_num_seqs``. The asynchronous modes (modes.py) ask it for the streaming regime."""

    engine: Engine
    lengths: list
    drain: EngineRun
    fits: bool
    kv_tokens: float
    pool_bytes: float
    max_num_seqs: int
    why: str = ""
