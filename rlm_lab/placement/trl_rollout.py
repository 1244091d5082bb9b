"""The ``rollout_func`` given to TRL's ``GRPOTrainer``: weight sync, then generation on the rollout role.

Per generation call (one per optimizer step with ``num_iterations = 1``):

1. sync (only when the rollout role is another process): ``collective`` broadcasts the trainer's weights
   in buckets over the actors' own process group, its bytes counted by
   :class:`rlm_lab.parallel.comm_counter.CommCounter`; ``object_store`` ``ray.put``-s the state dict and
   each worker copies it in (the naive baseline);
2. generation: the prompts (TRL's per-step slice, already ``num_generations`` times repeated) are cut into
   ``chunks`` slices of whole groups, each generated with its own seed (:func:`rollout.chunk_seed`) by a
   rollout worker (round robin) or, colocated, by the in-process engine on the trainer's own module.

Both steps run inside ``trl.extras.profiling.profiling_context`` (names ``sync_weights`` and ``generate``),
the same hook TRL uses for its own stages, so the stage tracer sees them as ``weight_sync`` and ``generate``.
A dead or hung worker fails the step within ``timeout_s`` with one :class:`PlacementRunError` line.
"""

from __future__ import annotations

import time

from ..compat.ray import actor_id
from ..compat.trl import trainer_tokenizer
from ..errors import RlmLabError
from .rollout import RolloutEngine, chunk_seed, chunks
from .weights import broadcast_weights, state_for_object_store


class PlacementRunError(RlmLabError):
    """A placement run that failed while running (a worker died or timed out)."""


class RolloutFunc:
    def __init__(self, trainer, rollouts, group, sync: str, chunks: int, seed: int, timeout_s: float,
                 bucket_bytes: int):
        self.trainer, self.rollouts, self.group = trainer, list(rollouts), group
        self.sync, self.chunks, self.seed, self.timeout_s = sync, chunks, seed, timeout_s
        self.bucket_bytes = bucket_bytes
        self.calls = 0
        self.spans: list[dict] = []
        self.sync_events: list[dict] = []
        self._local = None
        if not self.rollouts and sync != "none":
            raise ValueError("a sync mode needs rollout workers")

    # ---- helpers
    def _gen_settings(self):
        t = self.trainer
        return t.generation_config.to_dict(), trainer_tokenizer(t).pad_token_id, t.eos_token_ids

    def _engine(self):
        if self._local is None:
            gen, pad, eos = self._gen_settings()
            self._local = RolloutEngine(self.trainer.accelerator.unwrap_model(self.trainer.model), gen, pad, eos)
        return self._local

    def _get(self, refs, what: str, t0: float | None = None):
        import ray

        since = f", {time.perf_counter() - t0:.1f} s into it" if t0 is not None else ""
        try:
            return ray.get(refs, timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise PlacementRunError(f"rollout worker did not answer {what} within {self.timeout_s:g} s "
                                    f"(generation call {self.calls})") from None
        except ray.exceptions.RayActorError as e:
            raise PlacementRunError(f"{self._which(e)} died during {what} (generation call {self.calls}{since}): "
                                    f"{type(e).__name__}") from None

    def _which(self, error) -> str:
        """"rollout worker i" for the actor ``error`` is about (Ray's RayActorError.actor_id), else "rollout worker"."""
        dead = getattr(error, "actor_id", None)
        for i, r in enumerate(self.rollouts):
            rid = actor_id(r)
            if dead is not None and rid is not None and rid.hex() == dead:
                return f"rollout worker {i} of {len(self.rollouts)}"
        return "rollout worker"

    def _span(self, name, stage, t0):
        self.spans.append({"name": name, "stage": stage, "start": t0, "end": time.perf_counter()})

    # ---- the sync
    def _sync_collective(self) -> dict:
        from ..parallel.comm_counter import CommCounter  # noqa: PLC0415  heavy: rlm_lab.parallel.comm_counter imports torch at its top

        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        t0 = time.perf_counter()
        refs = [r.receive_weights.remote(self.bucket_bytes) for r in self.rollouts]
        counter = CommCounter()
        try:
            with counter:
                info = broadcast_weights(model, self.group, src=0, bucket_bytes=self.bucket_bytes)
        except RuntimeError as e:  # gloo: a peer vanished or the collective timed out (the group's timeout_s)
            self._get(refs, "the weight broadcast", t0)  # names the dead worker if that is why
            raise PlacementRunError(f"weight broadcast failed (generation call {self.calls}, "
                                    f"{time.perf_counter() - t0:.1f} s into it): {str(e).splitlines()[0][:160]}") from None
        self._get(refs, "the weight broadcast", t0)
        info["counted_bytes"] = counter.total_bytes()
        return info

    def _sync_object_store(self) -> dict:
        import ray

        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        t0 = time.perf_counter()
        state = state_for_object_store(model)
        ref = ray.put(state)
        loaded = self._get([r.load_state.remote(ref) for r in self.rollouts], "the object-store weight load", t0)
        del ref
        return {"calls": 1, "bytes": int(loaded[0]), "seconds": time.perf_counter() - t0, "counted_bytes": None}

    def sync_stats(self) -> dict:
        ev = self.sync_events
        if not ev:
            return {"mode": self.sync, "syncs": 0}
        after = ev[1:] if len(ev) > 1 else ev  # the first sync pays one-time connection set-up
        return {"mode": self.sync, "syncs": len(ev), "bytes_per_sync": ev[-1]["bytes"],
                "counted_bytes_per_sync": ev[-1].get("counted_bytes"), "calls_per_sync": ev[-1]["calls"],
                "seconds_mean": sum(e["seconds"] for e in after) / len(after),
                "seconds_first": ev[0]["seconds"]}

    # ---- the rollout_func
    def __call__(self, prompts, trainer):
        from trl.extras.profiling import profiling_context

        self.trainer = trainer
        call = self.calls
        self.calls += 1
        if call == 0 and self.rollouts:  # TRL's generation settings exist only now that the trainer does
            gen, pad, eos = self._gen_settings()
            self._get([r.configure.remote(gen, pad, eos) for r in self.rollouts], "configure")
        if self.sync != "none":
            t0 = time.perf_counter()
            with profiling_context(trainer, "sync_weights"):
                info = self._sync_collective() if self.sync == "collective" else self._sync_object_store()
            self.sync_events.append(info)
            self._span(f"sync ({self.sync})", "weight_sync", t0)
        prompt_ids = trainer.processing_class(text=prompts)["input_ids"]

        slices = chunks(len(prompt_ids), self.chunks, trainer.num_generations)
        t0 = time.perf_counter()
        with profiling_context(trainer, "generate"):
            if self.rollouts:
                refs = [self.rollouts[i % len(self.rollouts)].generate.remote(prompt_ids[a:b],
                                                                             chunk_seed(self.seed, call, i))
                        for i, (a, b) in enumerate(slices)]
                parts = self._get(refs, "generation")
            else:
                engine = self._engine()
                parts = [engine.generate(prompt_ids[a:b], chunk_seed(self.seed, call, i))
                         for i, (a, b) in enumerate(slices)]
        self._span("generate" if not self.rollouts else "wait for rollout", "generate", t0)
        completion_ids = [c for p in parts for c in p["completion_ids"]]
        logprobs = [lp for p in parts for lp in p["logprobs"]]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}
