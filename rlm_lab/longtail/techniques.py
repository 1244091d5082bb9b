"""Chapter 7's techniques, each one switch on the generation (or training-forward) path.

* :class:`OverProvisioner` (APRIL, arXiv 2509.18521): start n' >= n rows, stop when n are done, recycle
  the unfinished ones, *resumed* from their partial responses, into the next step (APRIL's partial rollout);
* :func:`tail_rounds` (RollPacker, arXiv 2509.21009): rounds of prompts in arrival order, or with the
  prompts predicted longest in rounds of their own;
* :func:`dispatch_shares` (StreamRL, arXiv 2504.15930): round-robin or longest-first (LPT) to workers;
* :func:`packed_batch` / :func:`padded_batch`: padding-free packing (one row, position ids restarting at 0
  per sequence: transformers builds the block-diagonal mask from them, ``masking_utils.
  find_packed_sequence_indices``; TRL 1.16 has ``padding_free`` for SFT and DPO only, not GRPOConfig);
* :class:`DynamicSampler` (DAPO, arXiv 2503.14476): drop groups whose rewards are all equal, draw again
  until the batch is full; a wrapper around any ``sample_group(row) -> completions`` and TRL-signature
  reward function, not a fork of the trainer;
* :func:`fused_scoring`: score each sample as it finishes, on a second thread, while generation continues
  (RLHFuse, arXiv 2409.13221), against scoring after generation ends.
"""

from __future__ import annotations

import random
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from ..cost import longtail as cost
from ..errors import RlmLabError
from . import engine


class OverProvisioner:
    """Over-provisioning with early termination and recycling. ``prompts``: token ids of the pool;
    ``lengths``: each prompt's forced length. ``step(model)`` returns the n rows kept this step."""

    def __init__(self, prompts, lengths, n: int, n_prime: int):
        cost.check_lengths(lengths)
        if len(prompts) != len(lengths):
            raise RlmLabError(f"{len(prompts)} prompts but {len(lengths)} lengths")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise RlmLabError(f"n (responses needed) must be an integer >= 1, got {n!r}")
        if not isinstance(n_prime, int) or n_prime < n:
            raise RlmLabError(f"over-provisioning needs n' >= n (start at least as many as are needed), got n'={n_prime} < n={n}")
        self.prompts, self.lengths, self.n, self.n_prime = list(prompts), list(lengths), n, n_prime
        self.fresh = deque(range(len(prompts)))
        self.recycled: deque = deque()  # (prompt index, tokens generated so far)

    def step(self, model, seed: int = 0) -> dict:
        batch = []
        while len(batch) < self.n_prime and self.recycled:
            batch.append(self.recycled.popleft())
        while len(batch) < self.n_prime:
            if not self.fresh:
                raise RlmLabError("over-provisioning ran out of fresh prompts; give a larger pool")
            batch.append((self.fresh.popleft(), []))
        rows = [self.prompts[i] + part for i, part in batch]
        remaining = [self.lengths[i] - len(part) for i, part in batch]
        gen = engine.generate(model, rows, remaining, stop_after=self.n, seed=seed)
        done = sorted(gen.finished, key=lambda j: (gen.finish_step[j], j))[:self.n]
        for j, (i, part) in enumerate(batch):
            if j not in done:  # unfinished, or finished in the same step as the n-th but not needed
                self.recycled.append((i, part + gen.new_tokens[j]))
        kept = [batch[j][0] for j in done]
        return {"seconds": gen.seconds, "kept": kept, "kept_lengths": [self.lengths[i] for i in kept],
                "recycled": len(self.recycled), "steps": max(gen.finish_step[j] for j in done),
                "resumed": sum(1 for j in done if batch[j][1])}


def tail_rounds(lengths, batch: int, predicted, tail_fraction: float) -> dict:
    """Index rounds for the mixed (arrival order) and tail-batched schedules (the cost model's
    :func:`rlm_lab.cost.longtail.tail_batching`, on indices)."""
    lengths = cost.check_lengths(lengths)
    plan = cost.tail_batching(lengths, batch, predicted, tail_fraction)
    n_tail = round(tail_fraction * len(lengths))
    order = sorted(range(len(lengths)), key=lambda i: (-predicted[i], i))
    tail = order[:n_tail]
    short = [i for i in range(len(lengths)) if i not in set(tail)]
    mixed = [list(range(i, min(i + batch, len(lengths)))) for i in range(0, len(lengths), batch)]
    tailed = [short[i:i + batch] for i in range(0, len(short), batch)] + \
             [tail[i:i + batch] for i in range(0, len(tail), batch)]
    assert [[lengths[i] for i in r] for r in tailed] == plan["tail_batched"]  # one rule, two views
    return {"mixed": mixed, "tail_batched": tailed, "plan": plan}


def dispatch_shares(lengths, workers: int, policy: str) -> list[list[int]]:
    """Indices per worker: round-robin or LPT (the cost model's rule, on indices)."""
    shares = cost.dispatch(lengths, workers, policy)  # validates lengths, workers and policy
    if policy == "round_robin":
        return [list(range(w, len(lengths), workers)) for w in range(workers)]
    pool = {}
    for i, x in enumerate(lengths):
        pool.setdefault(x, []).append(i)
    return [[pool[x].pop(0) for x in share] for share in shares]


def padded_batch(seqs: list[list[int]]):
    """(input_ids, attention_mask, labels) right-padded to the longest sequence."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), engine.PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


def packed_batch(seqs: list[list[int]]):
    """(input_ids, position_ids, labels): the sequences concatenated in one row, positions restarting at 0,
    the first label of each sequence masked so no token is predicted across a boundary."""
    import torch

    ids = torch.tensor([t for s in seqs for t in s]).unsqueeze(0)
    pos = torch.tensor([k for s in seqs for k in range(len(s))]).unsqueeze(0)
    labels = ids.clone()
    labels[pos == 0] = -100
    return ids, pos, labels


def train_forward_backward(model, seqs: list[list[int]], mode: str) -> float:
    """Seconds of one forward + backward over ``seqs``: ``padded`` or ``packed`` (padding-free)."""
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    if mode == "padded":
        ids, mask, labels = padded_batch(seqs)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    elif mode == "packed":
        ids, pos, labels = packed_batch(seqs)
        # use_cache=False: transformers reads packed sequences from position_ids only without a KV cache
        # (masking_utils: "only if the 2D attention mask is explicitly None, and we don't have cache")
        loss = model(input_ids=ids, position_ids=pos, labels=labels, use_cache=False).loss
    else:
        raise RlmLabError(f"packing mode must be padded or packed, got {mode!r}")
    loss.backward()
    return time.perf_counter() - t0


class DynamicSampler:
    """DAPO's dynamic sampling as a wrapper: draw a prompt, sample a group of G, score it with a reward
    function in TRL's signature, keep the group unless all rewards are equal; repeat until ``groups`` kept.
    Counts every group generated, so the inflation (generated / kept) is measured, not assumed."""

    def __init__(self, rows, sample_group, reward_func, group_size: int, seed: int = 0):
        if not rows:
            raise RlmLabError("dynamic sampling needs at least one prompt (empty batch)")
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
            raise RlmLabError("group size 1: every group's rewards are all equal, so dynamic sampling never "
                              "fills a batch; use a group size >= 2")
        self.rows, self.sample_group, self.reward, self.g = rows, sample_group, reward_func, group_size
        self.rng = random.Random(seed)
        self.generated = 0

    def fill(self, groups: int, max_draws: int = 10_000) -> list[dict]:
        kept = []
        while len(kept) < groups:
            if self.generated >= max_draws:
                raise RlmLabError(f"dynamic sampling drew {max_draws} groups and kept {len(kept)}: every group's "
                                  "rewards are all equal (the policy always or never solves these prompts)")
            row = self.rng.choice(self.rows)
            completions = self.sample_group(row, self.g)
            rewards = self.reward(completions, **{k: [v] * len(completions) for k, v in row.items()})
            self.generated += 1
            if max(rewards) != min(rewards):
                kept.append({"row": row, "completions": completions, "rewards": rewards})
        return kept


def fused_scoring(model, rows, lengths, score, fused: bool, seed: int = 0) -> dict:
    """Generate ``rows`` and score every sample with ``score(token_ids)``: on a scorer thread as each row
    finishes (``fused``), or one after another once generation has ended. Returns the wall time, the
    generation time, each row's finish time and each score's seconds."""
    score_s = [0.0] * len(rows)

    def timed(i, ids):
        t = time.perf_counter()
        score(ids)
        score_s[i] = time.perf_counter() - t

    width = max(len(r) for r in rows)
    t0 = time.perf_counter()
    if fused:
        with ThreadPoolExecutor(max_workers=1) as pool:
            futures = []
            gen = engine.generate(model, rows, lengths, seed=seed, on_finish=lambda i, ids: futures.append(
                pool.submit(timed, i, ids[width - len(rows[i]):])))  # the row without its left padding
            for f in futures:
                f.result()
    else:
        gen = engine.generate(model, rows, lengths, seed=seed)
        for i, new in enumerate(gen.new_tokens):
            timed(i, _row_ids(rows[i], new))
    return {"wall_s": time.perf_counter() - t0, "gen_s": gen.seconds, "finish_s": gen.finish_s, "score_s": score_s}


def _row_ids(prompt: list[int], new: list[int]):
    import torch

    return torch.tensor(prompt + new)
