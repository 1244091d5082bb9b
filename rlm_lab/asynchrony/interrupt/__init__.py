"""Interruptible rollouts: a weight update that arrives while a batch is being generated is applied at the next
decode step, not after the batch (AReaL, arXiv 2505.24298, Sec. 4 "interruptible rollout workers": ongoing
generations are interrupted, the new weights loaded, the KV caches computed by the old weights discarded and
recomputed, generation continues; APRIL, arXiv 2509.18521, for partial rollouts that resume across updates).

The mechanism is transformers' own generation loop, stopped and restarted:

- :class:`PendingUpdate` is a ``transformers.StoppingCriteria`` (https://huggingface.co/docs/transformers/main/en/
  internal/generation_utils#transformers.StoppingCriteria). ``generate``'s sampling loop calls it after every
  decode step with the ids so far; it answers True for *every* row once an update is pending. In transformers
  5.24 (``GenerationMixin._sample``) a row answered True is marked finished (``unfinished_sequences &=
  ~criteria``) and the loop ends when no row is left, so an all-True answer ends the call right after the
  token of that step was appended (the deferred stop check, which would run one step more, is used on
  ``mps`` only).
- The new weights are then copied in (:func:`rlm_lab.placement.weights.load_synced`) and ``generate`` is called
  again on prompt + tokens so far, for the remaining ``max_new_tokens``, under one of two KV-cache policies:

  ``keep``       pass the returned cache (``out.cache``) back (every position but the last sampled token is
                 cached; transformers prefills only the uncached tail): cheap, but the keys and values of the
                 tokens before the update were computed by the old weights, so the next tokens are sampled
                 from a mixture that neither policy version defines;
  ``reprefill``  drop the cache and prefill prompt + tokens so far under the new weights (AReaL's choice):
                 from the update on, every token's log-prob is exactly the new weights' (one prefill of
                 P + k tokens more).

  Rows that had already emitted EOS before the interruption are marked finished again at the first step of the
  resumed call (:class:`_Finished`), so the resumed call ends when the unfinished rows end, as the
  uninterrupted one would.

Determinism: the sampling seed is set once per ``generate`` request inside ``torch.random.fork_rng`` (as
:class:`rlm_lab.placement.rollout.RolloutEngine`); the resumed call continues the same RNG stream. With no update
pending the request is one ``generate`` call whose only difference is a criterion that never fires: bitwise the
uninterrupted :meth:`RolloutEngine.generate`. With an update at step k, tokens 0..k-1 are bitwise those of the
uninterrupted run (same weights, same RNG); from k on they follow the new weights and the same RNG stream.

Versions: every token carries the policy version that produced the logits it was sampled from (per-token
``versions``), so a sample can span versions. For the staleness bound and the buffer a sample's version is the
*oldest* of its tokens (:func:`sample_version`): eta then bounds the staleness of every token trained on, the
conservative reading; AReaL's decoupled PPO uses the behaviour log-probs per token, which the result keeps.
A glue that adopts these workers (:class:`rlm_lab.asynchrony.trl_rollout.AsyncRolloutFunc` tags a sample with the worker's
version at submission) tags sample i with ``result["sample_versions"][i]`` instead.

In a Ray worker (:class:`InterruptibleRolloutWorker`) the update must be able to arrive *during* ``generate``.
A plain (threaded) Ray actor runs one task at a time; an async actor would block its event loop in the
compute-bound ``generate``. The worker is therefore a threaded actor with a second *concurrency group*
(https://docs.ray.io/en/latest/ray-core/actors/concurrency_group_api.html, "work with both asyncio and threaded
actors"): ``generate`` stays in the default group (one at a time, in submission order, as chapter 5 relies on)
and ``offer_state`` runs in the ``weights`` group's own thread, where it only stages the update; the generating
thread applies it. :func:`remote_worker` makes that actor class; chapter 5's :class:`RolloutWorker` is unchanged.
"""

from __future__ import annotations

import copy
import threading
import time

from ...errors import RlmLabError
from ...placement.rollout import RolloutEngine, cut_completions, left_pad
from ...placement.weights import load_synced
from ...placement.workers import RolloutWorker

POLICIES = ("keep", "reprefill")
WEIGHTS_GROUP = "weights"


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise RlmLabError(f"unknown KV-cache policy {policy!r}; choose {' or '.join(POLICIES)}")
    return policy


def sample_version(token_versions: list[int], default: int) -> int:
    """The version the staleness accounting charges a sample with: its oldest token's (``default`` for an
    empty completion: the version the request started with)."""
    return min(token_versions) if token_versions else default


class PendingUpdate:
    """A ``StoppingCriteria`` that stops the whole batch once the engine has an update pending; it also time-
    stamps every decode step (``engine.step_times``: ``time.perf_counter()`` after each step's token) and offers
    a scheduled update when the request's token count reaches its step (tests and measurements: the same path
    as an update arriving from another thread)."""

    def __init__(self, engine: "InterruptibleEngine", produced: int, width: int, max_new: int, schedule: dict,
                 prompt_width: int):
        self.engine, self.produced, self.width, self.max_new, self.schedule = engine, produced, width, max_new, schedule
        self.prompt_width, self.fired = prompt_width, False

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        n = self.produced + input_ids.shape[1] - self.width  # tokens of this request so far
        self.engine.step_times.append(time.perf_counter())
        if n in self.schedule:
            self.engine.offer(*self.schedule.pop(n))
        stop = self.engine.interruptible and n < self.max_new and self.engine.has_pending()
        if stop:  # not when every row has ended: the request is over anyway (the update follows it at once)
            eos = torch.tensor(self.engine.eos, device=input_ids.device)
            stop = not bool(torch.isin(input_ids[:, self.prompt_width:], eos).any(1).all())
        self.fired = self.fired or stop
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


class _Finished:
    """Marks the rows that ended (EOS) before an interruption finished again in the resumed call."""

    def __init__(self, done):
        self.done = done

    def __call__(self, input_ids, scores, **kwargs):
        return self.done.to(input_ids.device)


def _criteria(*objs):
    """transformers' ``StoppingCriteriaList`` of plain callables (subclassing ``StoppingCriteria`` only adds its
    abstract ``__call__``)."""
    from transformers import StoppingCriteriaList

    return StoppingCriteriaList(list(objs))


class InterruptibleEngine(RolloutEngine):
    """:class:`RolloutEngine` whose ``generate`` can take a weight update between decode steps.

    ``policy``: ``keep`` or ``reprefill`` (module docstring). ``interruptible=False`` is today's behaviour in the
    same machinery: an update offered during a request waits until the request ends (for the measurement).
    ``version``: the policy version of the weights the model holds now.
    """

    def __init__(self, model, gen: dict, pad_token_id: int, eos_token_ids, policy: str = "reprefill",
                 version: int = 0, interruptible: bool = True):
        super().__init__(model, gen, pad_token_id, eos_token_ids)
        self.policy, self.version, self.interruptible = check_policy(policy), int(version), interruptible
        self._lock = threading.Lock()
        self._pending = None       # (state, version, offered at)
        self._generating = False
        self.step_times: list[float] = []
        self.updates: list[dict] = []  # every applied update: versions, when offered/applied, wait, load seconds

    # ---- updates (any thread)
    def offer(self, state: dict, version: int) -> bool:
        """Hand over new weights: applied now when no request runs, else staged for the running request (a newer
        staged update replaces an older one). Returns True when applied at once."""
        t = time.perf_counter()
        with self._lock:
            if self._generating:
                if self._pending is not None:
                    self.updates.append({"from": self.version, "to": self._pending[1], "superseded_by": version})
                self._pending = (state, int(version), t)
                return False
            self._apply((state, int(version), t), where="between requests")
            return True

    def has_pending(self) -> bool:
        with self._lock:
            return self._pending is not None

    def _apply(self, pending, where: str, at_token: int | None = None) -> None:
        state, version, offered = pending
        t0 = time.perf_counter()
        load_synced(self.model, state)
        t1 = time.perf_counter()
        self.updates.append({"from": self.version, "to": version, "where": where, "at_token": at_token,
                             "wait_s": t0 - offered, "load_s": t1 - t0, "offered": offered, "applied": t1})
        self.version = version

    def _take(self, where: str, at_token: int | None = None) -> bool:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return False
        self._apply(pending, where, at_token)
        return True

    # ---- generation (the request's thread)
    def generate(self, prompt_ids: list[list[int]], seed: int, schedule: dict | None = None) -> dict:
        """Completions, their per-token behaviour log-probs and per-token versions, the sample versions
        (:func:`sample_version`) and the interruptions. ``schedule``: ``{k: (state, version)}`` offers that
        update when the request has produced k tokens (as if it arrived during step k)."""
        import torch

        t0 = time.perf_counter()
        with self._lock:
            self._generating = True
        self.step_times = [t0]
        schedule = dict(schedule or {})
        input_ids, mask = left_pad(prompt_ids, self.pad)
        width, rows = input_ids.size(1), input_ids.size(0)
        max_new = int(self.gen.max_new_tokens)
        start_version, interrupts = self.version, []
        was_training = self.model.training
        self.model.eval()
        try:
            device = next(self.model.parameters()).device
            seqs, mask = input_ids.to(device), mask.to(device)
            cache, scores, versions, produced = None, [], [], 0
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
                torch.manual_seed(seed)
                while True:
                    crit = PendingUpdate(self, produced, seqs.size(1), max_new, schedule, width)
                    extra = [crit]
                    if produced:  # a resumed call: rows that already ended stay ended
                        done = torch.isin(seqs[:, width:], torch.tensor(self.eos, device=device)).any(1)
                        extra.append(_Finished(done))
                    cfg = copy.deepcopy(self.gen)  # the same settings, for the tokens still to come
                    cfg.update(max_new_tokens=max_new - produced, output_scores=True, return_dict_in_generate=True)
                    if self.gen.min_new_tokens:  # a lower bound counts the tokens of the whole request too
                        cfg.update(min_new_tokens=max(0, self.gen.min_new_tokens - produced))
                    kw = {"cache": cache} if cache is not None else {}
                    out = self.model.generate(input_ids=seqs, attention_mask=mask, generation_config=cfg,
                                              stopping_criteria=_criteria(*extra), **kw)
                    new = out.sequences.size(1) - seqs.size(1)
                    scores += list(out.scores)
                    versions += [self.version] * new
                    seqs, produced = out.sequences, produced + new
                    mask = torch.cat([mask, mask.new_ones((rows, new))], dim=1)
                    if not crit.fired:
                        break
                    t_int = time.perf_counter()
                    old = self.version
                    self._take("mid-generation", produced)
                    cache = out.cache if self.policy == "keep" else None
                    interrupts.append({"at_token": produced, "from": old, "to": self.version, "policy": self.policy,
                                       "load_s": time.perf_counter() - t_int, "t": t_int})
        finally:
            self.model.train(was_training)
            late = self._take("after the request")  # arrived during the last step (or not interruptible)
            with self._lock:
                self._generating = False
        completion_ids, logprobs = cut_completions(seqs[:, width:], scores, self.eos)
        token_versions = [versions[:len(c)] for c in completion_ids]
        t1 = time.perf_counter()
        self.spans.append({"name": "generate (interruptible)", "stage": "generate", "start": t0, "end": t1})
        return {"completion_ids": completion_ids, "logprobs": logprobs, "versions": token_versions,
                "sample_versions": [sample_version(v, start_version) for v in token_versions],
                "interrupts": interrupts, "applied_after": late, "seconds": t1 - t0}


class InterruptibleRolloutWorker(RolloutWorker):
    """Chapter 5's rollout worker with an :class:`InterruptibleEngine`; create it with :func:`remote_worker` and
    send updates with ``worker.offer_state.options(concurrency_group=WEIGHTS_GROUP).remote(state, version)``."""

    def configure(self, gen: dict, pad_token_id: int, eos_token_ids, policy: str = "reprefill",
                  version: int = 0) -> bool:
        self.engine = InterruptibleEngine(self.model, gen, pad_token_id, eos_token_ids, policy, version)
        self.engine.spans.extend(self._early_spans)
        return True

    def offer_state(self, state: dict, version: int) -> bool:
        return self.engine.offer(state, version)

    def generate(self, prompt_ids: list[list[int]], seed: int) -> dict:
        return self.engine.generate(prompt_ids, seed)

    def updates(self) -> list[dict]:
        return list(self.engine.updates)


def remote_worker(ray):
    """:class:`InterruptibleRolloutWorker` as a Ray actor class with one extra thread, the ``weights`` concurrency
    group, for ``offer_state`` (Ray takes ``concurrency_groups`` in ``ray.remote``, not in ``.options()``); place
    it with ``.options(num_cpus=..., scheduling_strategy=...)`` as chapter 5's workers."""
    return ray.remote(concurrency_groups={WEIGHTS_GROUP: 1})(InterruptibleRolloutWorker)
