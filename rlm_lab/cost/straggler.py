"""The data-parallel straggler of a trainer's mini-batch: every rank waits at the gradient reduction for the rank
that holds the most tokens, so a step over long-tailed sequences costs the **maximum** per-rank load, not the mean.

    straggler_factor(lengths, dp=32, per_rank=16)      # E[max_r load_r] / E[load_r] >= 1

What it does and does not explain (issue 39, the per-stage comparison against verl's fully-async page,
https://verl.readthedocs.io/en/latest/advance/fully_async.html): a synchronous colocated trainer on N devices
splits each mini-batch over N / sp data groups, an asynchronous split's trainer over N / (2 sp), and the maximum over
fewer, fuller groups is closer to the mean, so a trainer scales less than linearly with its devices (the page's
update_actor column: 133 s on 64 devices, 114 s on 128). It is **not** what under-values asynchrony there: priced on
both sides of those rows it lengthens the synchronous step's update more than the split's, and the predicted
speed-up falls. It is priced only where a resource set says its sequences are dealt as drawn
(``placement_spec.ResourceSet.balance``): frameworks differ (verl's ``trainer.balance_batch`` balances the whole
batch's tokens across ranks, not each mini-batch's; a fixed packed micro-batch, as prime-rl's, is balanced).

Mechanism and sources: FSDP / ZeRO reduce-scatter the gradients of each micro-batch across the data-parallel group
(ZeRO arXiv 1910.02054 Sec. 5; PyTorch FSDP arXiv 2304.11277 Sec. 3), so the optimizer step of a mini-batch starts
when the last rank finishes; verl's dynamic batch size packs each rank's share into micro-batches by a token budget
(``use_dynamic_bsz``, ``ppo_max_token_len_per_gpu``), so a rank's time is proportional to its tokens; verl's
``trainer.balance_batch`` balances the whole batch's tokens across ranks (Karmarkar-Karp), not each mini-batch's,
so within a mini-batch the ranks' shares are as drawn. The factor assumes that: each rank's share of a mini-batch is
``per_rank`` sequences drawn independently from the response-length distribution (``balanced=True`` prices a
perfectly balanced mini-batch instead: factor 1).

The expectation is computed by a seeded Monte-Carlo over ``draws`` mini-batches (deterministic); tests check it
against the closed form of the maximum of exponential sums and against brute-force enumeration.
"""

from __future__ import annotations

import numpy as np

from ..errors import RlmLabError

DRAWS = 2000
SEED = 21


def straggler_factor(lengths, dp: int, per_rank: int, prompt_len: int = 0, balanced: bool = False,
                     draws: int = DRAWS, seed: int = SEED) -> float:
    """E[max over ``dp`` ranks of a rank's tokens] / E[a rank's tokens], each rank holding ``per_rank`` sequences of
    ``prompt_len`` + a response drawn from ``lengths`` (a :class:`rlm_lab.cost.workload.ResponseLengths`, or a
    list of lengths to draw from uniformly). 1 for one rank or a balanced mini-batch."""
    for name, v in (("dp", dp), ("per_rank", per_rank)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise RlmLabError(f"straggler_factor: {name} must be an integer >= 1, got {v!r}")
    if dp == 1 or balanced:
        return 1.0

    pool = np.asarray(lengths.sample(512) if hasattr(lengths, "sample") else list(lengths), dtype=float)
    if pool.size == 0 or not np.all(np.isfinite(pool)) or pool.min() < 0:
        raise RlmLabError("straggler_factor: lengths must be finite, non-negative and not empty")
    rng = np.random.default_rng(seed)
    load = (rng.choice(pool, size=(draws, dp, per_rank)) + prompt_len).sum(axis=-1)
    mean = float(pool.mean() + prompt_len) * per_rank
    return float(load.max(axis=-1).mean() / mean) if mean > 0 else 1.0
