"""The asynchronous rollout_func: TRL's ``GRPOTrainer`` still does every update; generation runs ahead of it.

:class:`AsyncRolloutFunc` extends chapter 5's :class:`rlm_lab.placement.trl_rollout.RolloutFunc` with one switch,
``eta`` (the staleness bound; the number of batches generation may run ahead of training):

- ``eta = 0``  synchronous: push the weights, generate batch k, train on it (chapter 5's disaggregated step,
  through this machinery: the buffer, the version tags, the look-ahead);
- ``eta = 1``  one-step-off: while the trainer trains on batch k, the rollout workers already generate batch
  k+1 with the weights of update k-1 (verl's one-step-off recipe,
  https://verl.readthedocs.io/en/latest/advance/one_step_off.html);
- ``eta = k``  bounded staleness: up to k batches are queued on the rollout workers; after every update the
  new weights are pushed (``ray.put`` + ``load_state``, queued on each worker *between* its generation
  requests, so generation never stops for them; AReaL arXiv 2505.24298 Sec. 4);
- ``eta = None`` unbounded ("fully async"): limited only by ``ahead`` (default 8), the most batches queued.

Which prompts come next: TRL's own sampler decides. The glue builds a second instance of it
(``trainer._get_train_sampler()``: TRL's ``RepeatSampler`` with the same seed, so the same order) and
generates for the prompts it will be handed; every call checks that TRL handed exactly those prompts (one
clear error if not), so a sample is always trained with the prompt and dataset row it was generated for.

Every completion enters a :class:`rlm_lab.asynchrony.buffer.StalenessBuffer` tagged with the policy version
(optimizer updates applied to the weights that generated it; Ray runs an actor's tasks from one caller in
submission order, so a worker's version at a generation request is the last version pushed before it); the
trainer at version v takes only samples with v - version <= eta, and the record keeps the staleness of every
sample trained on.

A rollout worker that dies (object-store push, eta >= 1): its requests are resubmitted to the remaining
workers (same seeds; the sample's version is that worker's) and the record lists the death; with no worker
left, or with a blocking push (eta = 0, or a broadcast, which every worker must join), the run stops with one
:class:`PlacementRunError` line. Nothing waits longer than ``timeout_s``.

Off-policy correction (``correction=``, e.g. ``"token_truncate"``): TRL's own truncated / masked importance
sampling against the behaviour log-probs this glue returns, switched on by
:func:`rlm_lab.asynchrony.correction.enable` in :meth:`AsyncRolloutFunc.attach` (TRL ties it to vLLM; the adapter and
why it is safe are there). TRL then logs ``sampling/importance_sampling_ratio/*`` per step; the record keeps
them. Without correction, ``importance=True`` re-scores each batch here for the record only.

``curve=`` (task, every, problems, max_new_tokens): a held-out greedy accuracy curve
(:mod:`rlm_lab.asynchrony.curves`), kept in the record. ``spill=`` / ``checkpoint=``: what survives a
trainer crash, the buffer's samples and the last checkpoint (:mod:`rlm_lab.asynchrony.durable`).
"""

from __future__ import annotations

import time

from ..compat.transformers import train_batch_size, train_sampler
from ..placement.rollout import chunk_seed, chunks
from ..placement.trl_rollout import PlacementRunError, RolloutFunc
from ..placement.weights import state_for_object_store
from . import correction
from .buffer import StalenessBuffer, check_eta
from .correction import check_correction, is_ratio_steps
from .curves import curve_record, make_eval_curve
from .durable import SampleLog, make_checkpointer


class AsyncRolloutFunc(RolloutFunc):
    def __init__(self, trainer, rollouts, group, sync: str, chunks: int, seed: int, timeout_s: float,
                 bucket_bytes: int, eta: int | None = 0, ahead: int | None = None, importance: bool = True,
                 correction: str | None = None, curve: dict | None = None, spill: str | None = None,
                 checkpoint: dict | None = None, generation: dict | None = None):
        super().__init__(trainer, rollouts, group, sync, chunks, seed, timeout_s, bucket_bytes)
        self.correction = check_correction(correction)
        self.importance = importance and self.correction is None  # with correction TRL computes the ratio
        self.curve_spec = curve
        self._curve = None
        # generation options of the rollout workers beyond TRL's settings: GenerationConfig fields (e.g.
        # cache_implementation) and "compile" (rlm_lab.chapters.ch06_async.generation_options measures them)
        self.generation = dict(generation or {})
        self.checkpoint = checkpoint  # {"folder", "every"}: the policy saved atomically (durable.py)
        self.spill = None
        if spill:  # every sample put and handed out, one JSON line each (survives a trainer crash)

            self.spill = SampleLog(spill)
        if not self.rollouts:
            raise PlacementRunError("the asynchronous modes need rollout workers (a disaggregated placement)")
        self.eta = check_eta(eta)
        self.ahead = ahead if ahead is not None else (self.eta if self.eta is not None else 8)
        if self.eta is not None and self.ahead > self.eta:
            raise PlacementRunError(f"ahead={self.ahead} would break the staleness bound eta={self.eta}")
        self.buffer = StalenessBuffer(self.eta)
        self.alive = list(range(len(self.rollouts)))
        self.worker_version = [0] * len(self.rollouts)
        self.inflight: dict[int, list] = {}  # batch -> [(chunk, slice, worker, version, ref)]
        self.batches: list[list[str]] = []   # the look-ahead of TRL's prompts, batch by batch
        self._batch_iter = None
        self.steps: list[dict] = []          # per call: version, staleness of its samples, wait
        self.deaths: list[dict] = []
        self._loads: list = []               # pending object-store loads (checked, never waited on blindly)
        self._prompt_ids: dict[int, list] = {}
        self.submitted = 0                   # the next batch to request

    # ---- the trainer this glue feeds
    def attach(self, trainer) -> None:
        """Called once the trainer exists (before training): TRL's correction on, the accuracy curve."""
        self.trainer = trainer
        if self.correction:
            correction.enable(trainer, self.correction)
        if self.curve_spec:
            self._curve = make_eval_curve(**self.curve_spec)
            self._curve.trainer = trainer
            trainer.add_callback(self._curve)
        if self.checkpoint:
            cb = make_checkpointer(self.checkpoint["folder"], self.checkpoint["every"])
            cb.trainer = trainer
            trainer.add_callback(cb)

    # ---- which prompts come next
    def _prompt_batches(self, trainer):
        sampler = train_sampler(trainer)
        column = trainer.train_dataset["prompt"]
        size = train_batch_size(trainer) * trainer.args.steps_per_generation
        while True:  # one pass of the sampler per epoch, batched as TRL's dataloader batches it
            batch = []
            for idx in sampler:
                batch.append(column[idx])
                if len(batch) == size:
                    yield batch
                    batch = []
            if batch:
                yield batch

    def _batch(self, b: int) -> list[str]:
        while len(self.batches) <= b:
            self.batches.append(next(self._batch_iter))
        return self.batches[b]

    # ---- weights
    def _push(self, version: int) -> None:
        t0 = time.perf_counter()
        if self.eta == 0 or self.sync == "collective":
            # blocking: synchronous mode, or a broadcast (every worker must enter the collective, after
            # the generation requests queued before it: that wait is exposed and recorded)
            info = self._sync_collective() if self.sync == "collective" else self._sync_object_store()
        else:
            import ray

            self._check_loads()
            state = state_for_object_store(self.trainer.accelerator.unwrap_model(self.trainer.model))
            ref = ray.put(state)
            self._loads += [(w, self.rollouts[w].load_state.remote(ref)) for w in self.alive]
            info = {"calls": 1, "bytes": sum(t.numel() * t.element_size() for t in state.values()),
                    "seconds": time.perf_counter() - t0, "counted_bytes": None}
        for w in self.alive:
            self.worker_version[w] = version
        self.sync_events.append(info)
        self._span(f"push v{version} ({self.sync})", "weight_sync", t0)

    def _check_loads(self) -> None:
        import ray

        done = [x for x in self._loads if ray.wait([x[1]], timeout=0)[0]]
        for w, ref in done:
            self._loads.remove((w, ref))
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                self._dead(w, "weight load")
            except ray.exceptions.RayTaskError as e:  # the load itself failed: one line, the run stops
                lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
                raise PlacementRunError(f"rollout worker {w} could not load the pushed weights: "
                                        f"{lines[-1][:160] if lines else type(e).__name__}") from None

    # ---- generation requests
    def _submit(self, b: int, chunk_ids=None) -> None:
        prompt_ids = self.trainer.processing_class(text=self._batch(b))["input_ids"]
        slices = chunks(len(prompt_ids), self.chunks, self.trainer.num_generations)
        reqs = self.inflight.setdefault(b, [])
        for i, (lo, hi) in enumerate(slices):
            if chunk_ids is not None and i not in chunk_ids:
                continue
            if not self.alive:
                raise PlacementRunError(f"every rollout worker died (generation call {b}): no rollout worker "
                                        f"left, the run stops")
            w = self.alive[i % len(self.alive)]
            ref = self.rollouts[w].generate.remote(prompt_ids[lo:hi], chunk_seed(self.seed, b, i))
            reqs.append((i, (lo, hi), w, self.worker_version[w], ref))
        self._prompt_ids[b] = prompt_ids

    def _dead(self, w: int, what: str) -> None:
        if w in self.alive:
            self.alive.remove(w)
            self.deaths.append({"worker": w, "during": what, "call": self.calls - 1,
                                "t": time.perf_counter(), "remaining": len(self.alive)})

    def _collect(self, b: int) -> list[tuple]:
        """The chunks of batch ``b`` in chunk order: [(chunk, slice, version, result)]; a dead worker's
        chunks are resubmitted to the others (same seeds)."""
        import ray

        out = {}
        deadline = time.perf_counter() + self.timeout_s
        while True:
            for req in list(self.inflight.get(b, [])):
                i, sl, w, version, ref = req
                left = max(0.0, deadline - time.perf_counter())
                try:
                    out[i] = (i, sl, version, ray.get(ref, timeout=left))
                except ray.exceptions.GetTimeoutError:
                    raise PlacementRunError(f"rollout worker did not answer generation within {self.timeout_s:g} s "
                                            f"(generation call {b})") from None
                except ray.exceptions.RayActorError:
                    self._dead(w, "generation")
                self.inflight[b].remove(req)
            todo = self._expected_chunks(b) - set(out)
            if not todo:
                del self.inflight[b]
                return [out[i] for i in sorted(out)]
            self._submit(b, chunk_ids=todo)  # raises when no worker is left

    def _expected_chunks(self, b: int) -> set:
        return set(range(len(chunks(len(self._prompt_ids[b]), self.chunks, self.trainer.num_generations))))

    # ---- the rollout_func
    def __call__(self, prompts, trainer):
        from trl.extras.profiling import profiling_context

        self.trainer = trainer
        b = self.calls
        self.calls += 1
        version = int(trainer.state.global_step)
        if b == 0:
            gen, pad, eos = self._gen_settings()
            extra = dict(self.generation)
            compile_ = bool(extra.pop("compile", False))
            kw = {"compile": True} if compile_ else {}  # only asked of workers when used
            self._get([r.configure.remote(gen | extra, pad, eos, **kw) for r in self.rollouts], "configure")
            self._batch_iter = self._prompt_batches(trainer)
        if list(prompts) != self._batch(b):
            raise PlacementRunError(f"TRL handed generation call {b} other prompts than its sampler's look-ahead: "
                                    "the asynchronous glue cannot know the next batches")
        with profiling_context(trainer, "sync_weights"):
            self._push(version)
        last = self._last_call(trainer)
        while self.submitted <= min(b + self.ahead, last):  # `ahead` batches queued beyond the one trained now
            self._submit(self.submitted)
            self.submitted += 1
        t0 = time.perf_counter()
        with profiling_context(trainer, "generate"):
            parts = self._collect(b)
        self._span("wait for rollout", "generate", t0)
        for i, (lo, hi), v, res in parts:
            for j, (c, lp) in enumerate(zip(res["completion_ids"], res["logprobs"])):
                s = self.buffer.put(v, (b, lo + j, c, lp))
                if self.spill is not None:
                    self.spill.put(s)
        n = len(self._prompt_ids[b])
        samples = self.buffer.try_take(n, version)
        if samples is None or any(s.payload[0] != b for s in samples):
            raise PlacementRunError(f"generation call {b}: the buffer could not hand out its {n} samples within "
                                    f"eta={self.eta} (evicted {len(self.buffer.evicted)})")
        if self.spill is not None:
            self.spill.taken(samples, version)
        samples.sort(key=lambda s: s.payload[1])
        out = {"prompt_ids": self._prompt_ids.pop(b), "completion_ids": [s.payload[2] for s in samples],
               "logprobs": [s.payload[3] for s in samples]}
        step = {"call": b, "version": version, "wait_s": round(time.perf_counter() - t0, 6),
                "staleness": sorted({version - s.version for s in samples}), "workers_alive": len(self.alive),
                "behaviour_logprob_sum": sum(sum(lp) for lp in out["logprobs"])}
        if self.importance:
            t1 = time.perf_counter()
            step.update(importance_weights(self.trainer, out["prompt_ids"], out["completion_ids"], out["logprobs"]))
            step["importance_seconds"] = round(time.perf_counter() - t1, 6)
        self.steps.append(step)
        return out

    @staticmethod
    def _last_call(trainer) -> int:
        """The last generation call of the run (no batch is generated that nothing will train on): one call
        per optimizer step when TRL generates once per step (num_iterations = 1, steps_per_generation =
        gradient_accumulation_steps); otherwise unknown, no limit."""
        a = trainer.args
        if getattr(a, "num_iterations", 1) == 1 and a.steps_per_generation == a.gradient_accumulation_steps \
                and trainer.state.max_steps:
            return int(trainer.state.max_steps) - 1
        return 1 << 62

    def record(self) -> dict:
        """For the run record: the bound, the per-sample staleness distribution, per-step versions, deaths."""
        return {"eta": "inf" if self.eta is None else self.eta, "ahead": self.ahead, "buffer": self.buffer.stats(),
                "generation": self.generation, "importance": self.importance,
                "steps": self.steps, "worker_deaths": self.deaths, "workers_alive_end": len(self.alive),
                "workers": len(self.rollouts), "push": self.sync if self.eta != 0 else f"{self.sync} (blocking)",
                "correction": self.correction, "is_ratio": self._is_ratio(), "curve": self._curve_record(),
                "num_tokens": self._num_tokens()}

    def _is_ratio(self) -> list:
        return is_ratio_steps(self.trainer.state.log_history) if self.trainer is not None else []

    def _curve_record(self):
        if self._curve is None:
            return None
        return curve_record(self._curve, self.curve_spec["every"], self.curve_spec["problems"])

    def _num_tokens(self):
        rows = [r["num_tokens"] for r in self.trainer.state.log_history if "num_tokens" in r] if self.trainer else []
        return rows[-1] if rows else None


def importance_weights(trainer, prompt_ids, completion_ids, behaviour_logprobs) -> dict:
    """Per-token importance weights pi_train / pi_behaviour of the samples about to be trained on, for the
    record only (nothing corrects the loss): the trainer's log-probs under its current weights (one extra
    no-grad forward, logits / temperature as TRL scores them) minus the log-probs the rollout returned.
    Returns the mean, min and max per-token weight and the mean |log weight| per sequence."""
    import torch

    model = trainer.accelerator.unwrap_model(trainer.model)
    pad = trainer.processing_class.pad_token_id or 0
    seqs = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids)]
    width = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, x in enumerate(seqs):  # right padding: positions of the real tokens start at 0
        ids[i, :len(x)] = torch.tensor(x)
        mask[i, :len(x)] = 1
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits.float() / float(trainer.temperature)
    finally:
        model.train(was)
    logp = logits.log_softmax(-1)
    log_w, per_seq = [], []
    for i, (p, c, lb) in enumerate(zip(prompt_ids, completion_ids, behaviour_logprobs)):
        if not c:
            continue
        pos = torch.arange(len(p) - 1, len(p) - 1 + len(c))
        lt = logp[i, pos, torch.tensor(c)]
        d = lt - torch.tensor(lb, dtype=lt.dtype)
        log_w.append(d)
        per_seq.append(d.abs().mean().item())
    flat = torch.cat(log_w) if log_w else torch.zeros(1)
    w = flat.exp()
    return {"is_weight_mean": w.mean().item(), "is_weight_min": w.min().item(), "is_weight_max": w.max().item(),
            "is_abs_log_weight_mean": sum(per_seq) / max(1, len(per_seq))}
