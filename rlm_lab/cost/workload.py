"""What one RL iteration does: the algorithm (models held, passes run) and the workload (batch
shape, response lengths, epochs, mini-batches, precision).

Algorithms (HybridFlow arXiv 2409.19256 Sec. 2.1; InstructGPT arXiv 2203.02155; DeepSeekMath arXiv 2402.03300): PPO holds actor, critic, reference and reward model;
GRPO, RLOO and REINFORCE++ hold actor and reference (reward = a rule); DAPO-style drops the
reference (beta = 0). Response lengths are materialized deterministically as the n quantiles
(i + 0.5) / n of the chosen distribution, so a prediction never depends on a random seed.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field, fields

from ..errors import RlmLabError, unknown
from ..stages import MODELS_HELD, OFFLINE
from .memory import PRECISIONS
from .offload import check_offload

# Bounds that keep a prediction from materializing more than it can hold (the model builds per-token and
# per-sequence lists): 2^20 tokens is past the longest context windows models offer (1M tokens), and 2^20
# sequences per step is thousands of times the largest RL batches of the survey's systems.
MAX_TOKENS = 2**20
MAX_SEQUENCES = 2**20

ADVANTAGE = {"ppo": "gae", "grpo": "group", "rloo": "leave_one_out", "reinforce_pp": "global", "dapo": "group",
             "dpo": "none"}

# DPO scores a chosen and a rejected completion of each prompt (arXiv 2305.18290 eq. 7; the survey's Algorithm 4):
# a DPO workload's ``group_size`` is the two sequences of one preference pair, and ``prompts`` counts pairs.
DPO_PAIR = 2


@dataclass(frozen=True)
class Algorithm:
    """Which models an algorithm holds and so which passes it runs."""

    name: str
    models: tuple
    advantage: str
    shared_critic: bool = False   # values from a head on the actor's backbone (with_critic), no critic model

    @property
    def critic(self) -> bool:
        return "critic" in self.models

    @property
    def reference(self) -> bool:
        return "reference" in self.models

    @property
    def reward_model(self) -> bool:
        return "reward" in self.models

    @property
    def offline(self) -> bool:
        """Trains on stored data (DPO's preference pairs): no rollout, reward, advantage or weight sync."""
        return self.name in OFFLINE


def algorithm(name: str, beta: float | None = None) -> Algorithm:
    """``algorithm("grpo")``; ``beta=0`` drops the reference model (no KL term), as DAPO does."""
    key = name.lower().replace("-", "_").replace("++", "_pp")
    if key not in MODELS_HELD:
        raise unknown("algorithm", name, MODELS_HELD)
    models = MODELS_HELD[key]
    if beta == 0 and key in OFFLINE:
        raise RlmLabError(f"beta = 0 with {key}: DPO's beta scales its log-ratio inside the loss (arXiv 2305.18290 "
                          f"eq. 7), it is no KL coefficient, and the loss needs the reference; give beta > 0 or omit it")
    if beta == 0:
        models = tuple(m for m in models if m != "reference")
    return Algorithm(key, models, ADVANTAGE[key])


@dataclass(frozen=True)
class ResponseLengths:
    """A response-length distribution: fixed, uniform, lognormal (clipped) or an explicit list.

    ``kind="fixed", length=R``; ``kind="uniform", low, high``; ``kind="lognormal", median,
    sigma, max (clip), min``; ``kind="list", values=[...]`` (used as is when it has n entries,
    otherwise as an empirical distribution).
    """

    kind: str = "fixed"
    length: int = 16
    low: int = 1
    high: int = 16
    median: float = 16.0
    sigma: float = 0.5
    min: int = 1
    max: int = 4096
    values: tuple = ()

    def __post_init__(self):
        if self.kind not in ("fixed", "uniform", "lognormal", "list"):
            raise RlmLabError(f"response.kind must be fixed, uniform, lognormal or list, got {self.kind!r}")
        if self.kind == "fixed" and self.length < 1:
            raise RlmLabError(f"response.length must be >= 1, got {self.length}")
        if self.kind == "uniform" and not 1 <= self.low <= self.high:
            raise RlmLabError(f"response needs 1 <= low <= high, got low={self.low}, high={self.high}")
        if self.kind == "lognormal" and (self.median <= 0 or self.sigma < 0 or not 1 <= self.min <= self.max):
            raise RlmLabError("response lognormal needs median > 0, sigma >= 0 and 1 <= min <= max")
        if self.kind == "list" and (not self.values or any(int(v) < 1 for v in self.values)):
            raise RlmLabError("response.values must be a non-empty list of lengths >= 1")
        longest = {"fixed": self.length, "uniform": self.high, "lognormal": self.max,
                   "list": max(map(int, self.values), default=0)}[self.kind]
        if longest > MAX_TOKENS:
            raise RlmLabError(f"response lengths up to {longest:,} tokens: the cost model takes at most "
                              f"{MAX_TOKENS:,} ({self.kind} response)")

    def sample(self, n: int) -> list[int]:
        """n lengths at the quantiles (i + 0.5)/n, sorted ascending."""
        q = [(i + 0.5) / n for i in range(n)]
        if self.kind == "fixed":
            return [self.length] * n
        if self.kind == "uniform":
            return [min(self.high, self.low + int(p * (self.high - self.low + 1))) for p in q]
        if self.kind == "lognormal":
            z = statistics.NormalDist()
            mu = math.log(self.median)
            return [min(self.max, max(self.min, round(math.exp(mu + self.sigma * z.inv_cdf(p))))) for p in q]
        vals = sorted(int(v) for v in self.values)
        if len(vals) == n:
            return vals
        return [vals[min(len(vals) - 1, int(p * len(vals)))] for p in q]


def expected_max(lengths: list[int], k: int) -> float:
    """E[max] of k lengths drawn without replacement from ``lengths``: sum_j r_(j) C(j-1, k-1) / C(n, k)
    (order statistics of a random subset; the padded length of a shuffled micro-batch)."""
    r = sorted(lengths)
    n = len(r)
    k = max(1, min(k, n))
    total, c, acc = math.comb(n, k), 1, 0  # c = C(j-1, k-1), updated exactly: C(j, k-1) = C(j-1, k-1) j / (j-k+1)
    for j in range(k, n + 1):
        acc += r[j - 1] * c
        c = c * j // (j - k + 1)
    return acc / total


# The one stated default shape of response lengths where a source or a framework's config gives only the cap (or the
# cap and the mean): a log-normal clipped at the cap. ASSUMED, not measured: sigma 0.8 is the spread of reasoning
# models' lengths (a long right tail; DAPO, arXiv 2503.14476 Fig. 7, and AReaL, arXiv 2505.24298 Fig. 2, show lengths
# spread over an order of magnitude), and with no mean the median is an eighth of the cap (most responses end well
# before it; the cap is set for the tail). Every use prints itself as assumed (:func:`assumed_lengths_note`).
ASSUMED_TAIL_SIGMA = 0.8
ASSUMED_TAIL_MEDIAN_FRACTION = 0.125


def assumed_lengths(cap: int, mean: float | None = None) -> dict:
    """The stated default response-length distribution (see the constants above) as a workload ``response``
    mapping: a log-normal with sigma ASSUMED_TAIL_SIGMA clipped to [1, cap], whose median is
    ASSUMED_TAIL_MEDIAN_FRACTION x cap when no ``mean`` is given, or is set (by bisection) so that the clipped
    distribution's mean over n = 512 quantiles equals ``mean``. Hand check: cap 1024, no mean -> median 128, mean of
    the clipped log-normal about 128 x exp(0.8^2 / 2) = 176."""
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 2:
        raise RlmLabError(f"workload.response max must be an integer >= 2 tokens, got {cap!r}")
    base = dict(kind="lognormal", sigma=ASSUMED_TAIL_SIGMA, max=cap, min=1)
    if mean is None:
        return base | {"median": ASSUMED_TAIL_MEDIAN_FRACTION * cap}
    if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not math.isfinite(mean) or mean < 1:
        raise RlmLabError(f"workload.response mean must be a finite number >= 1, got {mean!r}")
    if mean >= cap:
        raise RlmLabError(f"workload.response mean {mean:g} must be below its cap {cap}")

    def clipped_mean(median: float) -> float:
        xs = ResponseLengths(**(base | {"median": median})).sample(512)
        return sum(xs) / len(xs)

    lo, hi = 1.0, float(cap)      # the clipped mean rises with the median: bisect on it
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if clipped_mean(mid) < mean else (lo, mid)
    return base | {"median": round(math.sqrt(lo * hi), 3)}


def assumed_lengths_note(cap: int, where: str, mean: float | None = None) -> str:
    """The line that says the default distribution was assumed (what an importer prints under ``assumed:``)."""
    xs = ResponseLengths(**assumed_lengths(cap, mean)).sample(512)
    what = f"the mean {mean:g} and the cap {cap}" if mean is not None else f"only the cap {cap}"
    return (f"response lengths: {where} states {what}; assumed a log-normal (sigma {ASSUMED_TAIL_SIGMA:g}) clipped at "
            f"the cap, mean {sum(xs) / len(xs):.0f} tokens, 99th percentile {xs[int(0.99 * len(xs))]} (not the cap)")


def response_lengths(resp) -> ResponseLengths:
    """A ResponseLengths from itself, a fixed length, a list of lengths, or a mapping with 'kind'."""
    if isinstance(resp, ResponseLengths):
        return resp
    if isinstance(resp, (int, float)) and not isinstance(resp, bool):
        return ResponseLengths("fixed", length=int(resp))
    if isinstance(resp, (list, tuple)):
        return ResponseLengths("list", values=tuple(resp))
    if not isinstance(resp, dict):
        raise RlmLabError("workload.response must be a length, a list of lengths or a mapping with 'kind'")
    rnames = {f.name for f in fields(ResponseLengths)}
    bad = sorted(set(resp) - rnames)
    if bad:
        raise RlmLabError(f"unknown workload.response field(s) {', '.join(bad)}; known: {', '.join(sorted(rnames))}")
    if "values" in resp:
        resp = resp | {"values": tuple(resp["values"])}
    try:
        return ResponseLengths(**resp)
    except TypeError as e:
        raise RlmLabError(f"malformed workload.response: {e}") from None


@dataclass(frozen=True)
class Workload:
    """One iteration's shape. n = prompts * group_size sequences.

    micro_batch: sequences per forward/backward call (default: a whole mini-batch);
    gen_batch: sequences per ``generate`` call (default: all n); with the continuous engine the most sequences one
    engine replica runs at once (vLLM's ``max_num_seqs``; default vLLM's own, engine.vllm_defaults);
    engine_memory_fraction: the continuous engine's share of a device's memory (vLLM's ``gpu_memory_utilization``,
    SGLang's ``mem_fraction_static``) holding its weights, activation reserve and KV cache; default (None) 0.9 of
    the device less what the other models on it hold while it generates (engine.py); padding: "batch" (every row padded
    to the longest response of the rollout, as TRL does), "minibatch" (to the expected longest of
    its micro-batch) or "none" (packed); engine: "static" (transformers ``generate``: finished rows
    keep computing until the longest ends) or "continuous" (vLLM/SGLang: continuous batching whose concurrency the
    KV cache limits, engine.py);
    logits: "completion" (TRL keeps logits of the completion only) or "all";
    dynamic_sampling_p: with DAPO-style dynamic sampling, generation (and reward) repeats until the
    batch holds n useful sequences: expected inflation 1 / (1 - p^G - (1-p)^G) (workdepth.py);
    autocast: the products and attention run in bf16 under ``torch.autocast`` while weights, gradients and
    optimizer state keep ``precision`` (what TRL's default ``bf16=True`` means on CPU: accelerate wraps the
    forward in ``torch.autocast("cpu", torch.bfloat16)``; autocast_benchmarks.py);
    gradient_checkpointing: TRL's default: each decoder layer's forward runs again in the backward;
    logprob_chunk: positions whose fp32 log-softmax exist at once while log-probs are computed from the logits, which
    stay in the compute dtype (TRL's ``selective_log_softmax`` loops over rows, verl's ``logprobs_from_logits`` and
    OpenRLHF's run a fused cross-entropy kernel over chunks); None: every logit position of a micro-batch at once in
    fp32, logits and their log-softmax both (memory.logprob_bytes);
    offload: what leaves the device for host memory (offload.py: "params", "optimizer", "frozen", "host_optimizer",
    "sleep"), its bytes crossing the host link each step.
    """

    prompts: int = 8
    group_size: int = 4
    prompt_len: int = 8
    response: ResponseLengths = field(default_factory=ResponseLengths)
    epochs: int = 1
    minibatches: int = 1
    micro_batch: int | None = None
    gen_batch: int | None = None
    recompute_old: bool | None = None  # None: as the trainer does (predict.py _Assembler.recompute_old)
    precision: str = "fp32"
    padding: str = "batch"
    engine: str = "static"
    engine_memory_fraction: float | None = None   # continuous engine: share of a device's memory (None: auto)
    logits: str = "completion"
    prefix_sharing: bool = False
    reward_s_per_sample: float = 0.0
    weight_sync: str = "none"   # none (same weights, e.g. TRL without vLLM) | colocated | disaggregated
    zero_stage: int = 0
    devices: int = 1            # data-parallel replicas of every model
    dynamic_sampling_p: float | None = None  # DAPO dynamic sampling: per-prompt success probability
    autocast: bool = False      # bf16 autocast around fp32 weights (TRL's bf16=True on CPU, via accelerate)
    gradient_checkpointing: bool = False  # every decoder layer recomputed in backward (TRL's default True)
    logprob_chunk: int | None = None   # fp32 log-softmax positions at once (None: the whole micro-batch)
    offload: tuple = ()                # offload.OFFLOADS kinds
    precompute_ref_log_probs: bool = False  # DPO: reference log-probs computed once before training (TRL DPOConfig)

    def __post_init__(self):
        object.__setattr__(self, "response", response_lengths(self.response))
        for name in ("prompts", "group_size", "prompt_len", "epochs", "minibatches", "devices"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise RlmLabError(f"workload.{name} must be an integer >= 1, got {v!r}")
        for name in ("micro_batch", "gen_batch"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise RlmLabError(f"workload.{name} must be an integer >= 1 (or omitted), got {v!r}")
        if self.prompt_len > MAX_TOKENS:
            raise RlmLabError(f"workload.prompt_len={self.prompt_len:,}: the cost model takes at most {MAX_TOKENS:,} tokens")
        if self.n > MAX_SEQUENCES:
            raise RlmLabError(f"{self.n:,} sequences per step ({self.prompts:,} prompts x {self.group_size:,}): the "
                              f"cost model takes at most {MAX_SEQUENCES:,}")
        if self.n % self.minibatches:
            raise RlmLabError(f"workload.minibatches={self.minibatches} must divide the {self.n} sequences")
        if self.precision not in PRECISIONS:
            raise RlmLabError(f"workload.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        choices = {"padding": ("batch", "minibatch", "none"), "engine": ("static", "continuous"),
                   "logits": ("completion", "all"), "weight_sync": ("none", "colocated", "disaggregated")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise RlmLabError(f"workload.{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if self.recompute_old not in (None, True, False):
            raise RlmLabError(f"workload.recompute_old must be true, false or omitted, got {self.recompute_old!r}")
        if self.zero_stage not in (0, 1, 2, 3) or isinstance(self.zero_stage, bool):
            raise RlmLabError(f"workload.zero_stage must be 0, 1, 2 or 3, got {self.zero_stage!r}")
        p = self.dynamic_sampling_p
        if p is not None and not 0 <= p < 1:
            raise RlmLabError(f"workload.dynamic_sampling_p must be in [0, 1), got {p!r}")
        for name in ("autocast", "gradient_checkpointing", "precompute_ref_log_probs"):
            if not isinstance(getattr(self, name), bool):
                raise RlmLabError(f"workload.{name} must be true or false, got {getattr(self, name)!r}")
        f = self.engine_memory_fraction
        if f is not None and (isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1):
            raise RlmLabError(f"workload.engine_memory_fraction must be in (0, 1] (vLLM's gpu_memory_utilization), "
                              f"got {f!r}")
        c = self.logprob_chunk
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise RlmLabError(f"workload.logprob_chunk must be an integer >= 1 (positions) or omitted, got {c!r}")

        object.__setattr__(self, "offload", check_offload(self.offload))
        if self.reward_s_per_sample < 0:
            raise RlmLabError("workload.reward_s_per_sample must be >= 0")

    @property
    def n(self) -> int:
        return self.prompts * self.group_size

    @property
    def dtype(self) -> str:
        """The matmul dtype the profile is asked for (bf16 under autocast, whatever the weights' precision)."""
        return "fp32" if self.precision == "fp32" and not self.autocast else "bf16"

    @property
    def dtype_bytes(self) -> int:
        return PRECISIONS[self.precision][0]

    @property
    def micro(self) -> int:
        return min(self.micro_batch or self.n // self.minibatches, self.n)

    @property
    def gen(self) -> int:
        return min(self.gen_batch or self.n, self.n)

    def lengths(self) -> list[int]:
        return self.response.sample(self.n)

    def to_dict(self) -> dict:
        return asdict(self)


SHARED = "shared"   # the ``critic`` value that puts a value head on the actor's backbone


def with_critic(alg: Algorithm, critic):
    """(algorithm, critic model) for a ``critic`` argument: ``"shared"`` is the survey's shared actor-critic
    (arXiv 2608.27046 Sec. 4.1, App. B.4.3: one backbone with a policy head and a value head, trained by one backward):
    the critic model leaves the algorithm's models and its values come from the actor. Anything else is a critic
    model (None: the actor's backbone, a separate copy)."""
    if critic != SHARED:
        return alg, critic
    if alg.shared_critic:
        return alg, None
    if not alg.critic:
        raise RlmLabError(f"critic: {SHARED}: {alg.name} has no critic to share the actor's backbone with "
                          f"(only ppo learns values)")
    return Algorithm(alg.name, tuple(m for m in alg.models if m != "critic"), alg.advantage, True), None


def offline_group_size(algo, wl: dict) -> dict:
    """A DPO config's workload with ``group_size`` 2 (the pair) when it gives none (the CLIs' default; the
    Workload's own default, 4 samples per prompt, is an online algorithm's)."""
    name = str(algo or "").lower().replace("-", "_")
    return wl if name not in OFFLINE or "group_size" in wl else dict(wl, group_size=DPO_PAIR)


def check_offline(alg: Algorithm, wl: Workload) -> None:
    """What an offline algorithm's workload must be (one line naming the field), and that only it may precompute
    its reference log-probs."""
    if not alg.offline:
        if wl.precompute_ref_log_probs:
            raise RlmLabError(f"workload.precompute_ref_log_probs: only an offline algorithm (dpo) can score its "
                              f"reference once before training; {alg.name} generates new samples every step")
        return
    if wl.group_size != DPO_PAIR:
        raise RlmLabError(f"workload.group_size={wl.group_size}: {alg.name} scores a chosen and a rejected completion "
                          f"of each prompt, so group_size must be {DPO_PAIR} (prompts = preference pairs)")
    for name, off in (("weight_sync", "none"), ("dynamic_sampling_p", None), ("prefix_sharing", False)):
        if getattr(wl, name) != off:
            raise RlmLabError(f"workload.{name}={getattr(wl, name)!r}: {alg.name} generates nothing (stored preference "
                              f"pairs), so {name} must be {off!r}")


def workload_from_dict(d: dict) -> Workload:
    """Build a Workload from a config mapping; unknown or malformed fields are named."""
    if not isinstance(d, dict):
        raise RlmLabError("workload must be a mapping")
    names = {f.name for f in fields(Workload)}
    extra = sorted(set(d) - names)
    if extra:
        raise RlmLabError(f"unknown workload field(s) {', '.join(extra)}; known: {', '.join(sorted(names))}")
    d = dict(d)
    d["response"] = response_lengths(d.get("response", {}))
    try:
        return Workload(**d)
    except TypeError as e:
        raise RlmLabError(f"malformed workload: {e}") from None
