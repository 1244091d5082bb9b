"""The roles as Ray actors: the trainer (TRL's ``GRPOTrainer``, unchanged but for ``rollout_func``) and the
rollout workers. Plain classes here; :mod:`rlm_lab.placement.runtime` makes them Ray actors
(``ray.remote(cls).options(num_cpus=..., scheduling_strategy=PlacementGroupSchedulingStrategy(...))``,
https://docs.ray.io/en/latest/ray-core/scheduling/placement-group.html), so this module imports no Ray.

Each worker pins itself to its cores: Ray reserves ``num_cpus`` for it and the worker sets
``torch.set_num_threads`` to the same number.

Spans (for the merged timeline, :mod:`rlm_lab.trace_merge`) are ``time.perf_counter()`` seconds: on Linux
that is CLOCK_MONOTONIC, one clock for every process of the machine, so spans of different actors line up
without clock-offset estimation (a multi-node cluster would need one).
"""

from __future__ import annotations

import importlib
import os
import signal
import tempfile
import time

from ..device import pick_device
from ..host import free_port
from ..models import load
from ..record import append_jsonl
from ..tasks import ensure_data, parse_task
from ..train.callbacks import quiet_progress
from ..train.config import from_dict
from ..train.evaluate import evaluate, test_rows
from ..train.rl import make_trainer
from ..train.tracer import trace, window_throughput
from .critic_role import RemoteCritic, split_trainer_class
from .proc import peak_rss as _peak_rss  # noqa: F401 - the names this module always used
from .proc import pin as _pin
from .rollout import RolloutEngine
from .shipping import local_copy
from .trl_rollout import RolloutFunc
from .weights import broadcast_weights, load_synced, make_group, weights_digest


class RolloutWorker:
    """Holds a copy of the policy and generates with :class:`RolloutEngine`; receives weights by broadcast
    (``receive_weights``) or from the object store (``load_state``)."""

    def __init__(self, threads: int, model, lora=None):
        """``model``: the warm start, a folder (one process) or the files Ray carried from the driver
        (:mod:`rlm_lab.placement.shipping`: an actor reads nothing of the driver's machine)."""
        _pin(threads)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()

        with local_copy(model) as model_path:
            model, _ = load(str(model_path))
        model.to(pick_device())  # the GPU Ray gave this actor (CUDA_VISIBLE_DEVICES), else the CPU
        if lora:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(**lora))
        self.model, self.engine, self.group, self.threads = model, None, None, threads
        self._early_spans: list[dict] = []
        self._syncs, self._die_in_sync = 0, None

    def die_in_sync(self, sync: int) -> bool:
        """Fault injection: in weight sync number ``sync`` (1 = the first), this process SIGKILLs itself, as a
        crashed or OOM-killed worker: after the broadcast's first bucket, or on the object-store payload's arrival."""
        self._die_in_sync = sync
        return True

    def _sync_fault(self, *_):
        if self._syncs == self._die_in_sync:
            os.kill(os.getpid(), signal.SIGKILL)

    def configure(self, gen: dict, pad_token_id: int, eos_token_ids, compile: bool = False) -> bool:
        """TRL's generation settings, sent by the trainer once its GRPOTrainer exists (``compile``: see
        :class:`rlm_lab.placement.rollout.RolloutEngine`)."""
        self.engine = RolloutEngine(self.model, gen, pad_token_id, eos_token_ids, compile=compile)
        self.engine.spans.extend(self._early_spans)
        return True

    def pid(self) -> int:
        return os.getpid()

    def join_group(self, port: int, rank: int, world: int, timeout_s: float, backend: str = "gloo",
                   host: str = "127.0.0.1") -> int:
        """Join the sync group whose store the trainer serves at ``host:port`` (the trainer's node)."""
        self.group = make_group(host, port, rank, world, timeout_s, backend)
        return rank

    def receive_weights(self, bucket_bytes: int) -> dict:
        t0 = time.perf_counter()
        self._syncs += 1
        info = broadcast_weights(self.model, self.group, src=0, bucket_bytes=bucket_bytes, on_bucket=self._sync_fault)
        self._spans().append({"name": "receive_weights", "stage": "weight_sync", "start": t0,
                                  "end": time.perf_counter()})
        return info

    def load_state(self, state: dict) -> int:
        t0 = time.perf_counter()
        self._syncs += 1
        self._sync_fault()
        n = load_synced(self.model, state)
        self._spans().append({"name": "load_state(object store)", "stage": "weight_sync", "start": t0,
                                  "end": time.perf_counter()})
        return n

    def generate(self, prompt_ids: list[list[int]], seed: int) -> dict:
        return self.engine.generate(prompt_ids, seed)

    def _spans(self) -> list[dict]:
        return self.engine.spans if self.engine is not None else self._early_spans

    def spans(self) -> list[dict]:
        return list(self._spans())

    def close(self) -> None:
        self.group = None  # drops the gloo backend and its store


class TrainerWorker:
    """Runs one GRPO training (SFT checkpoint -> ``cfg.rl_steps`` steps) with generation delegated to the
    rollout workers, or done in-process when there are none (colocated)."""

    def __init__(self, threads: int):
        _pin(threads)
        self.threads = threads
        self.group = None
        self.rows: list[dict] = []  # the metrics logged so far, for the driver (:meth:`metrics`)

    def metrics(self, since: int = 0) -> list[dict]:
        """The metric rows logged after the first ``since``: the driver fetches them while :meth:`train` runs
        (the actor is made with ``max_concurrency=2``), so its record gets them wherever this actor runs."""
        return self.rows[since:]

    def pid(self) -> int:
        return os.getpid()

    def node_free_port(self, host: str = "127.0.0.1") -> int:
        """A free port on this actor's node, for the sync group's store (rank 0 serves it)."""
        return free_port(host)

    def join_group(self, port: int, world: int, timeout_s: float, backend: str = "gloo",
                   host: str = "127.0.0.1") -> int:
        """Serve the sync group's store at ``host:port`` (this actor's node address) as rank 0 and join it."""
        self.group = make_group(host, port, 0, world, timeout_s, backend)
        return 0

    def close(self) -> None:
        self.group = None

    def train(self, job: dict) -> dict:
        """``job``: cfg (RunConfig dict), model (the warm start: a folder, or the files Ray carried, see
        :mod:`rlm_lab.placement.shipping`; ``model_path`` is the folder's older name), metrics_path (a file of this
        machine to append the metrics to, optional: they are kept for :meth:`metrics` anyway), rollouts (actor
        handles; empty for colocated), sync ("none" | "collective" | "object_store"), chunks, timeout_s, bucket_bytes.
        ``Metrics``: a class built here, its base (transformers' ``TrainerCallback``) imported in the actor only."""
        from transformers import TrainerCallback
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        cfg = from_dict(job["cfg"])
        task = parse_task(cfg.task)
        data = ensure_data(task)["train"]
        metrics_path, rows = job.get("metrics_path"), self.rows

        class Metrics(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs:
                    rows.append({"phase": cfg.algo, "step": state.global_step, **logs})
                    if metrics_path:
                        append_jsonl(metrics_path, rows[-1])

        with tempfile.TemporaryDirectory(prefix="rlm_place_") as scratch, \
                local_copy(job["model"] if "model" in job else job["model_path"]) as model_path:
            glue_cls = RolloutFunc
            if job.get("glue"):  # another rollout_func glue, "module:Class" (rlm_lab.asynchrony): same arguments + its own

                module, name = job["glue"].split(":")
                glue_cls = getattr(importlib.import_module(module), name)
            glue = glue_cls(None, job["rollouts"], self.group, sync=job["sync"], chunks=job["chunks"],
                            seed=cfg.seed, timeout_s=job["timeout_s"], bucket_bytes=job["bucket_bytes"],
                            **job.get("glue_kwargs", {}))
            critic = job.get("critic")  # split placement: PPO's critic in its own actor (critic_role)
            # PPO generates with TRL's own generate; so does GRPO when the job asks for plain TRL (no rollout_func:
            # the runtime's baseline, rlm_lab.chapters.ch06_async.overhead)
            use_glue = cfg.algo != "ppo" and job.get("rollout_func", True)
            trainer = make_trainer(cfg, model_path, data, task, scratch, [Metrics()],
                                   rollout_func=glue if use_glue else None, peft_config=_lora_config(job.get("lora")),
                                   trainer_cls=split_trainer_class() if critic is not None else None)
            if critic is not None:
                import ray

                trainer.use_remote_critic(RemoteCritic(critic, ray.get, job["timeout_s"]))
            if hasattr(glue, "attach"):  # a glue's own trainer set-up (ch. 6: off-policy correction, eval curve)
                glue.attach(trainer)
            quiet_progress(trainer)

            tracer = trace(trainer, record=None, out_dir=None, warmup=1)
            t0 = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - t0
        return self._output(job, cfg, task, trainer, glue, tracer, seconds, t0)

    def _output(self, job: dict, cfg, task, trainer, glue, tracer, seconds: float, t0: float) -> dict:
        """What the trained run returns to the driver: rewards, step and stage times, throughput, spans, sync,
        parameter counts and digest, memory; held-out accuracy, the glue's record and the weights when asked."""
        critic = job.get("critic")
        model = trainer.accelerator.unwrap_model(trainer.model)
        logs = [r for r in trainer.state.log_history if "reward" in r]
        out = {
            "rewards": [r["reward"] for r in logs],
            "step_time": [r.get("step_time") for r in logs],
            "train_seconds": seconds,
            "steps": trainer.state.global_step,
            "tracer_steps": tracer.steps,
            "tracer_summary": tracer.summary(),
            "throughput": window_throughput(tracer.steps, trainer.state.log_history, tracer.warmup,
                                            _eval_inside(glue, tracer)),
            "tracer_t0": getattr(tracer, "_t0", t0),
            "trainer_spans": glue.spans,
            "sync": glue.sync_stats(),
            "pid": os.getpid(),
            "threads": self.threads,
            "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "parameters": sum(p.numel() for p in model.parameters()),
            "weights_sha256": weights_digest(model),
        }
        if job.get("evaluate"):  # greedy held-out accuracy after training (rlm_lab.train.evaluate)

            model.eval()
            ev = evaluate(model, trainer.processing_class, task, test_rows(task, cfg.eval_problems),
                          cfg.eval_max_new_tokens, cfg.eval_batch_size)
            out["accuracy_after"], out["format_rate_after"] = ev["accuracy"], ev["format_rate"]
        if hasattr(glue, "record"):  # what that glue measured (staleness, versions...) for the run record
            out["glue_record"] = glue.record()
        out["peak_rss_bytes"] = _peak_rss()
        out["state_bytes"] = state_bytes(trainer)
        if job.get("return_weights"):
            out["weights"] = {n: p.detach().clone() for n, p in model.named_parameters()}
            if cfg.algo == "ppo":
                if critic is not None:
                    import ray

                    out["critic_weights"] = ray.get(critic.state_dict.remote(), timeout=job["timeout_s"])
                else:
                    cm = trainer.accelerator.unwrap_model(trainer.critic_trainer.model)
                    out["critic_weights"] = {k: v.detach().clone() for k, v in cm.state_dict().items()}
        return out


def _eval_inside(glue, tracer) -> float:
    """Seconds of held-out evaluations inside the throughput window (a glue's accuracy curve evaluates after a
    step's end, before the next step: after steps warmup .. last - 1), left out of it like the curve leaves them
    out of its own wall clock."""
    curve = getattr(glue, "_curve", None)
    if curve is None or len(tracer.steps) <= tracer.warmup:
        return 0.0
    last = tracer.steps[-1]["step"]
    return sum(p["eval_s"] for p in curve.points if tracer.warmup <= p["step"] < last)


def state_bytes(trainer) -> dict:
    """The training state the trainer holds, counted from the live objects after training: the actor's
    parameters (with LoRA: the frozen base and the adapters), the reference model's (TRL builds none with
    beta = 0 or with PEFT, where the reference is the actor with its adapter disabled), the gradients still
    allocated and AdamW's state (only for what is trained)."""
    import torch

    def nbytes(tensors):
        return sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t))

    model = trainer.accelerator.unwrap_model(trainer.model)
    ref = getattr(trainer, "ref_model", None)
    opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate's wrapper
    return {"actor_parameters": nbytes(model.parameters()),
            "actor_trainable": nbytes(p for p in model.parameters() if p.requires_grad),
            "reference_parameters": nbytes(ref.parameters()) if ref is not None else 0,
            "optimizer_state": nbytes(v for st in opt.state.values() for v in st.values()) if opt is not None else 0}


def _lora_config(lora: dict | None):
    """``peft.LoraConfig(**lora)`` for a job that trains adapters (the job travels as plain data), else None."""
    if not lora:
        return None
    from peft import LoraConfig

    return LoraConfig(**lora)
