"""The long tail's formulas: what each technique of chapter 7 should save, predicted from the lengths alone.

Lengths are response lengths in tokens (decode steps). Time is counted in decode steps of a constant step
time unless a function says otherwise; :func:`rlm_lab.cost.generate_time` turns steps into seconds.

* bubble of a static batch: 1 - sum R_i / (n R_max) (:func:`rlm_lab.cost.tail_bubble`; the survey,
  arXiv 2608.27046, and chapter 3);
* over-provisioning with early termination (APRIL, arXiv 2509.18521): ask n' >= n responses, stop when n
  are done; the batch waits for the n-th order statistic of n' draws instead of the maximum of n, and
  keeps the n shortest: a bias toward short answers (:func:`overprovision`);
* tail batching (RollPacker, arXiv 2509.21009): prompts predicted long run in rounds of their own
  (:func:`tail_batching`);
* length-aware dispatch across rollout workers (StreamRL, arXiv 2504.15930) against round-robin: the
  longest-processing-time-first rule and its bound (Graham, SIAM J. Appl. Math. 17(2), 1969,
  doi 10.1137/0117039) (:func:`dispatch_makespan`, :func:`lpt_bound`);
* padding against packing (padding-free) and token-budget micro-batches (:func:`padded_fraction`,
  :func:`token_budget_microbatches`; TRL's ``padding_free``/``packing``:
  https://huggingface.co/docs/trl/main/en/reducing_memory_usage);
* dynamic sampling (DAPO, arXiv 2503.14476): generation inflation 1 / (1 - E[p^G + (1-p)^G]) over a
  distribution of per-prompt success rates p (:func:`dynamic_sampling_inflation_dist`);
* inter-stage fusion (RLHFuse, arXiv 2409.13221): scoring each sample as it finishes ends at about
  T_gen + T_score(last) instead of T_gen + sum T_score (:func:`fusion_time`).

Bad input (an empty batch, a group of 1, n' < n, a length < 1) is one :class:`RlmLabError` line.
No torch here.
"""

from __future__ import annotations

import math
import random
from collections import Counter

from ..errors import RlmLabError
from .workdepth import tail_bubble


def check_lengths(lengths, what: str = "lengths") -> list[int]:
    """A non-empty list of integer lengths >= 1, or one clear error."""
    try:
        out = list(lengths)
    except TypeError:
        raise RlmLabError(f"{what} must be a list of response lengths, got {type(lengths).__name__}") from None
    if not out:
        raise RlmLabError(f"{what} is an empty batch; give at least one response length")
    bad = [x for x in out if isinstance(x, bool) or not isinstance(x, int) or x < 1]
    if bad:
        raise RlmLabError(f"{what} must be integers >= 1 (tokens), got {bad[0]!r}")
    return out


def _positive_int(value, what: str, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise RlmLabError(f"{what} must be an integer >= {least}, got {value!r}")
    return value


def bubble(lengths) -> float:
    """Idle share of a static batch's decode slots: 1 - sum R_i / (n R_max)."""
    return tail_bubble(check_lengths(lengths))


# ---- over-provisioning: order statistics of a discrete length distribution ---------------------------

def pmf(lengths) -> dict[int, float]:
    """The empirical distribution of ``lengths``: {length: probability}."""
    lengths = check_lengths(lengths)
    return {x: c / len(lengths) for x, c in sorted(Counter(lengths).items())}


def order_statistic_cdf(dist: dict[int, float], k: int, n: int, x: int) -> float:
    """P(X_(k:n) <= x) for n independent draws from ``dist``: at least k of the n draws are <= x,
    sum_{j=k}^{n} C(n, j) F(x)^j (1 - F(x))^(n-j) (David & Nagaraja, *Order Statistics*, 3rd ed., eq. 2.1.3)."""
    f = min(1.0, sum(p for v, p in dist.items() if v <= x))
    return sum(math.comb(n, j) * f ** j * (1 - f) ** (n - j) for j in range(k, n + 1))


def expected_order_statistic(dist: dict[int, float], k: int, n: int) -> float:
    """E[X_(k:n)], exact for a discrete distribution: sum_x x (P(X_(k) <= x) - P(X_(k) <= x-))."""
    if not dist:
        raise RlmLabError("the length distribution is empty; give at least one response length")
    if not 1 <= k <= n:
        raise RlmLabError(f"order statistic k must be in 1..n ({n}), got {k}")
    values, prev, out = sorted(dist), 0.0, 0.0
    for v in values:
        c = order_statistic_cdf(dist, k, n, v)
        out += v * (c - prev)
        prev = c
    return out


def monte_carlo_order_statistic(dist: dict[int, float], k: int, n: int, trials: int = 20_000,
                                seed: int = 0) -> float:
    """The same expectation by simulation: an independent check of :func:`expected_order_statistic`."""
    rng = random.Random(seed)
    values, weights = list(dist), list(dist.values())
    return sum(sorted(rng.choices(values, weights, k=n))[k - 1] for _ in range(trials)) / trials


def overprovision(lengths, n: int, n_prime: int) -> dict:
    """APRIL's over-provisioning (arXiv 2509.18521), from the length distribution of ``lengths``:

    * ``t_full`` = E[X_(n:n)]: a batch of n waits for its longest response (decode steps);
    * ``t_early`` = E[X_(n:n')]: n' are started and generation stops when n are done;
    * ``speedup`` = t_full / t_early;
    * ``kept_mean`` = (1/n) sum_{k<=n} E[X_(k:n')]: the mean length of the n responses kept (the shortest);
    * ``short_bias`` = kept_mean / E[X] - 1 (< 0: trained-on answers are shorter than the policy's own).

    Assumes independent lengths; recycled unfinished prompts are not counted (they shift work to the next
    step, the bias above is what the current step trains on)."""
    dist = pmf(lengths)
    n = _positive_int(n, "n (responses needed)")
    n_prime = _positive_int(n_prime, "n' (responses started)")
    if n_prime < n:
        raise RlmLabError(f"over-provisioning needs n' >= n (start at least as many as are needed), got n'={n_prime} < n={n}")
    mean = sum(v * p for v, p in dist.items())
    t_full = expected_order_statistic(dist, n, n)
    t_early = expected_order_statistic(dist, n, n_prime)
    kept = sum(expected_order_statistic(dist, k, n_prime) for k in range(1, n + 1)) / n
    return {"n": n, "n_prime": n_prime, "mean": mean, "t_full": t_full, "t_early": t_early,
            "speedup": t_full / t_early, "kept_mean": kept, "short_bias": kept / mean - 1}


# ---- tail batching ------------------------------------------------------------------------------------

def rounds_cost(rounds) -> int:
    """Decode steps of static rounds run one after another: sum over rounds of the longest response."""
    return sum(max(r) for r in rounds if r)


def tail_batching(lengths, batch: int, predicted=None, tail_fraction: float = 0.25) -> dict:
    """RollPacker's tail batching (arXiv 2509.21009): the ``tail_fraction`` of prompts predicted longest
    (``predicted``, default: the true lengths, an oracle) are taken out of the arrival-order rounds and run
    in rounds of their own. Returns both schedules (lists of rounds of lengths) and their decode steps."""
    lengths = check_lengths(lengths)
    batch = _positive_int(batch, "batch (responses per round)")
    predicted = lengths if predicted is None else check_lengths(predicted, "predicted lengths")
    if len(predicted) != len(lengths):
        raise RlmLabError(f"predicted lengths has {len(predicted)} values for {len(lengths)} prompts")
    if not 0 <= tail_fraction <= 1:
        raise RlmLabError(f"tail_fraction must be in [0, 1], got {tail_fraction!r}")
    n_tail = round(tail_fraction * len(lengths))
    order = sorted(range(len(lengths)), key=lambda i: (-predicted[i], i))
    tail = set(order[:n_tail])
    short = [lengths[i] for i in range(len(lengths)) if i not in tail]
    long_ = [lengths[i] for i in sorted(tail, key=lambda i: (-predicted[i], i))]
    mixed = [lengths[i:i + batch] for i in range(0, len(lengths), batch)]
    tailed = [short[i:i + batch] for i in range(0, len(short), batch)] + \
             [long_[i:i + batch] for i in range(0, len(long_), batch)]
    m, t = rounds_cost(mixed), rounds_cost(tailed)
    return {"mixed": mixed, "tail_batched": tailed, "steps_mixed": m, "steps_tail_batched": t,
            "speedup": m / t, "bubble_mixed": _slot_bubble(mixed), "bubble_tail_batched": _slot_bubble(tailed)}


def _slot_bubble(rounds) -> float:
    slots = sum(len(r) * max(r) for r in rounds if r)
    return 1 - sum(sum(r) for r in rounds) / slots


# ---- dispatch across rollout workers ------------------------------------------------------------------

def dispatch(lengths, workers: int, policy: str = "round_robin") -> list[list[int]]:
    """Which lengths each worker gets: ``round_robin`` (arrival order) or ``lpt`` (longest first, each to
    the least-loaded worker: Graham 1969's LPT rule; StreamRL, arXiv 2504.15930, dispatches by predicted
    length)."""
    lengths = check_lengths(lengths)
    workers = _positive_int(workers, "workers")
    if policy == "round_robin":
        return [lengths[w::workers] for w in range(workers)]
    if policy == "lpt":
        shares, loads = [[] for _ in range(workers)], [0] * workers
        for x in sorted(lengths, reverse=True):
            w = min(range(workers), key=lambda i: (loads[i], i))
            shares[w].append(x)
            loads[w] += x
        return shares
    raise RlmLabError(f"dispatch policy must be round_robin or lpt, got {policy!r}")


def dispatch_makespan(lengths, workers: int, policy: str = "round_robin") -> int:
    """The busiest worker's tokens when each worker decodes its share one token per sequence per step with
    a constant cost per token (continuous batching saturated, or one sequence at a time): max_w sum R_i."""
    return max(sum(s) for s in dispatch(lengths, workers, policy))


def lpt_bound(lengths, workers: int) -> tuple[float, float]:
    """(lower, upper) on LPT's makespan: no schedule beats max(sum R / m, R_max), and any list schedule,
    LPT included, ends by sum R / m + (1 - 1/m) R_max (Graham, Bell Syst. Tech. J. 45, 1966); LPT is also
    within 4/3 - 1/(3m) of the optimum (Graham 1969). Round-robin is not a list schedule: no such bound."""
    lengths = check_lengths(lengths)
    m = _positive_int(workers, "workers")
    return max(sum(lengths) / m, max(lengths)), sum(lengths) / m + (1 - 1 / m) * max(lengths)


# ---- padding, packing, token budgets ------------------------------------------------------------------

def padded_fraction(lengths, micro_batch: int) -> float:
    """Useful share of the token slots when micro-batches of ``micro_batch`` sequences (in order) are each
    padded to their longest: sum L / sum_b |b| max(b). Padding-free packing makes it 1."""
    lengths = check_lengths(lengths)
    mb = _positive_int(micro_batch, "micro_batch")
    chunks = [lengths[i:i + mb] for i in range(0, len(lengths), mb)]
    return sum(lengths) / sum(len(c) * max(c) for c in chunks)


def token_budget_microbatches(lengths, budget: int) -> list[list[int]]:
    """Indices of sequences per micro-batch, packed first-fit decreasing into at most ``budget`` tokens each
    (Johnson et al., SIAM J. Comput. 3(4), 1974: FFD uses <= 11/9 OPT + 4 bins)."""
    lengths = check_lengths(lengths)
    budget = _positive_int(budget, "token budget")
    if max(lengths) > budget:
        raise RlmLabError(f"a sequence of {max(lengths)} tokens does not fit a token budget of {budget}")
    bins, room = [], []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        for b, r in enumerate(room):
            if lengths[i] <= r:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(budget - lengths[i])
    return bins


# ---- dynamic sampling ---------------------------------------------------------------------------------

def useless_probability(p: float, group_size: int) -> float:
    """P(all G rewards equal) for a prompt solved with probability p: p^G + (1-p)^G."""
    if not 0 <= p <= 1:
        raise RlmLabError(f"a success rate must be in [0, 1], got {p!r}")
    g = _positive_int(group_size, "group size")
    if g < 2:
        raise RlmLabError("group size 1: every group's rewards are all equal, so dynamic sampling never fills "
                          "a batch; use a group size >= 2")
    return p ** g + (1 - p) ** g


def dynamic_sampling_inflation_dist(ps, group_size: int) -> float:
    """Expected groups generated per group kept when prompts are drawn uniformly from a pool whose success
    rates are ``ps``: a drawn group is kept with q = 1 - mean_i(p_i^G + (1-p_i)^G), and the draws until a
    keep are geometric, so 1/q (DAPO, arXiv 2503.14476, for one p: 1 / (1 - p^G - (1-p)^G)). Infinite when
    every prompt is always or never solved."""
    ps = list(ps)
    if not ps:
        raise RlmLabError("dynamic sampling needs the success rates of at least one prompt (empty batch)")
    q = 1 - sum(useless_probability(p, group_size) for p in ps) / len(ps)
    return math.inf if q <= 0 else 1 / q


# ---- inter-stage fusion -------------------------------------------------------------------------------

def fusion_time(finish_times, score_time: float) -> dict:
    """One scorer, samples scored in the order they finish (RLHFuse, arXiv 2409.13221):
    c_i = max(c_{i-1}, f_i) + s; fused T = c_n, against T_gen + n s for scoring after generation ends.
    When the scorer keeps up, T = T_gen + T_score(last) = max f + s: the bound."""
    f = sorted(float(x) for x in finish_times) if finish_times is not None else []
    if not f:
        raise RlmLabError("fusion needs the finish times of at least one sample (empty batch)")
    if min(f) < 0 or score_time < 0:
        raise RlmLabError("finish times and the score time must be >= 0")
    c = 0.0
    for t in f:
        c = max(c, t) + score_time
    t_gen = f[-1]
    after = t_gen + len(f) * score_time
    return {"t_gen": t_gen, "fused": c, "after": after, "bound": t_gen + score_time, "speedup": after / c}
