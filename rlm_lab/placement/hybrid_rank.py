"""One rank of the hybrid-engine placement (:mod:`rlm_lab.placement.hybrid`), the code that runs inside each
Ray actor: the rank's TRL config (DeepSpeed ZeRO-3, TRL's gather for generation on), the counter around TRL's
gather and release, and the training itself. Plain functions and classes (no Ray), so tests run a rank in a
spawned process.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
import time

from ..parallel.bench.e2e import require
from ..tasks import ensure_data, parse_task
from ..train.callbacks import metrics_logger, quiet_progress
from ..train.config import from_dict
from ..train.rl import make_trainer
from ..train.tracer import trace
from .proc import peak_rss, pin
from ..record import repo_root

ZERO3_CONFIG = "configs/deepspeed/zero3.json"
TRAIN_STAGES = ("actor_forward", "actor_backward", "optimizer")


def rank_config(cfg, world: int, timeout_s: float):
    """``cfg`` for one rank: ZeRO-3 through TRL, the gather for generation on, per-device batch = batch / s,
    the process group's timeout (``ddp_timeout``: a dead peer fails the collective instead of waiting 30 min)."""
    extra = {"deepspeed": str(repo_root() / ZERO3_CONFIG), "ds3_gather_for_generation": True,
             "ddp_timeout": int(max(10, timeout_s))}
    return cfg.replace(batch_size=cfg.batch_size // world, extra={**cfg.extra, **extra})


class _Reshard:
    """Counts TRL's gather for generation and its release: wraps the generation context of TRL's GRPO module
    (looked up at call time) so that a :class:`CommCounter` is active only while the context is entered and
    exited, not during ``generate`` (a dispatch mode would slow every op of the generation)."""

    def __init__(self):
        from ..parallel.comm_counter import CommCounter  # noqa: PLC0415  heavy: rlm_lab.parallel.comm_counter imports torch at its top

        self.counter, self.spans, self.gathers, self.per_gather = CommCounter(), [], 0, []
        import trl.trainer.grpo_trainer as grpo

        self._orig, self._module = grpo.unwrap_model_for_generation, grpo
        grpo.unwrap_model_for_generation = self._counted

    @contextlib.contextmanager
    def _counted(self, *args, **kwargs):
        cm = self._orig(*args, **kwargs)
        t0, before = time.perf_counter(), len(self.counter.events)
        with self.counter.phase("gather"), self.counter:
            model = cm.__enter__()
        t1 = time.perf_counter()
        self.per_gather.append(sum(e[2] for e in self.counter.events[before:] if e[1] == "all_gather"))
        self.spans.append({"name": "gather (ZeRO-3 -> replicated)", "stage": "reshard", "start": t0, "end": t1})
        self.gathers += 1
        try:
            yield model
        except BaseException as e:
            if not cm.__exit__(type(e), e, e.__traceback__):
                raise
        else:
            t2 = time.perf_counter()
            with self.counter.phase("release"), self.counter:
                cm.__exit__(None, None, None)
            self.spans.append({"name": "release (-> ZeRO-3)", "stage": "reshard", "start": t2,
                               "end": time.perf_counter()})

    def close(self):
        self._module.unwrap_model_for_generation = self._orig

    def record(self) -> dict:
        gather = self.counter.summary("gather")
        ag = gather.get("all_gather", {})
        n = max(1, self.gathers)
        dur = [s["end"] - s["start"] for s in self.spans]
        return {"gathers": self.gathers, "collectives": gather, "release": self.counter.summary("release"),
                "allgather_message_bytes_per_gather": ag.get("bytes", 0) / n,
                "allgather_calls_per_gather": ag.get("calls", 0) / n, "allgather_bytes_each_gather": self.per_gather,
                "gather_seconds_mean": sum(d for s, d in zip(self.spans, dur) if s["name"].startswith("gather")) / n,
                "release_seconds_mean": sum(d for s, d in zip(self.spans, dur) if s["name"].startswith("release")) / n}


def _no_shm_comm() -> None:
    """DeepSpeed's torch backend JIT-compiles a shared-memory C++ op on CPU at start (~55 s the first time, and
    it probes every op's compiler). The op serves only ``inference_all_reduce`` (DeepSpeed's AutoTP inference),
    which ZeRO-3 training never calls, so the backend is told there is none: every collective then goes
    through ``torch.distributed`` (gloo), which is also what the counter sees."""
    # by sys.modules' name: the package attribute ``deepspeed.comm.torch`` is the torch library itself
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


def train_rank(job: dict) -> dict:
    """One rank of the hybrid run (the body of :class:`HybridWorker`; plain, so tests can run it without Ray).
    ``job``: cfg (the rank's RunConfig dict), model_path, metrics_path (rank 0 writes it), world."""
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    _no_shm_comm()
    cfg = from_dict(job["cfg"])
    task = parse_task(cfg.task)
    rank = int(os.environ["RANK"])
    metrics_path = job.get("metrics_path") if rank == 0 else None

    reshard = _Reshard()
    try:
        with tempfile.TemporaryDirectory(prefix="rlm_hybrid_") as scratch:
            trainer = make_trainer(cfg, job["model_path"], ensure_data(task)["train"], task, scratch,
                                   [metrics_logger(metrics_path, cfg.algo)])
            quiet_progress(trainer)

            parallelism = require(trainer, "zero3")  # refuse a run that is not really ZeRO-3
            tracer = trace(trainer, record=None, out_dir=None, warmup=1)
            t0 = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - t0
            parallelism = require(trainer, "zero3")
    finally:
        reshard.close()
    model = trainer.accelerator.unwrap_model(trainer.model)
    params = list(model.parameters())
    full = sum(p.ds_numel * p.element_size() for p in params)
    sharded = [p for p in params if not getattr(p, "ds_persist", False)]
    logs = [r for r in trainer.state.log_history if "reward" in r]
    summary = tracer.summary()
    stages = summary.get("stages", {})
    out = {
        "rank": rank, "pid": os.getpid(), "threads": torch.get_num_threads(), "parallelism": parallelism,
        "rewards": [r["reward"] for r in logs], "losses": [r.get("loss") for r in logs],
        "steps": trainer.state.global_step, "train_seconds": seconds,
        "tracer_steps": tracer.steps, "tracer_summary": summary, "tracer_t0": getattr(tracer, "_t0", t0),
        "reshard": reshard.record(), "reshard_spans": reshard.spans,
        "param_bytes": full, "partitioned_param_bytes": sum(p.ds_numel * p.element_size() for p in sharded),
        "persistent_param_bytes": full - sum(p.ds_numel * p.element_size() for p in sharded),
        "shard_bytes": sum(p.ds_tensor.numel() * p.ds_tensor.element_size() for p in sharded),
        "parameters": sum(p.ds_numel for p in params),
        "trainable_parameters": sum(p.ds_numel for p in params if p.requires_grad),
        "generate_peak_rss_bytes": (stages.get("generate") or {}).get("peak_bytes"),
        "train_peak_rss_bytes": max([(stages.get(k) or {}).get("peak_bytes") or 0 for k in TRAIN_STAGES]) or None,
        "peak_rss_bytes": peak_rss(),
    }
    return out


class HybridWorker:
    """One rank as a Ray actor: pins its threads, sets the torch.distributed environment, runs :func:`train_rank`."""

    def __init__(self, threads: int, rank: int, world: int, port: int):
        pin(threads)
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))

    def pid(self) -> int:
        return os.getpid()

    def train(self, job: dict) -> dict:
        return train_rank(job)
