"""The stage tracer: where the wall time and memory of each RL step go, on an unmodified TRL run.

One line turns it on::

    tracer = trace(trainer, record)   # before trainer.train()

It is a ``transformers.TrainerCallback`` plus three small hooks, because no library exposes the stage
boundaries of an RL step:

* TRL (1.16) already brackets its stages with ``trl.extras.profiling.ProfilingContext``
  (``transformers.generate``, ``vLLM.generate``, ``sync_weights``, ``_calculate_rewards``,
  ``_get_per_token_logps_and_entropies``, ``compute_loss``, ...) but only reports them to wandb/mlflow.
  We wrap ``ProfilingContext.__enter__/__exit__`` once per process; the wrapper does nothing unless a
  tracer is active, so the run computes exactly what it computes without it.
* ``trainer.accelerator.backward`` (instance attribute) times the backward pass: the actor's, or, inside our
  PPO's ``critic_update`` span, the critic's (then part of that stage, not of ``actor_backward``).
* ``trainer._get_per_token_logps_and_entropies`` (instance attribute) tells which model the log-prob
  pass runs on: the reference model (or a PEFT model with its adapter disabled) is ``ref_logprob``,
  a no-grad pass on the policy is ``old_logprob``, a pass with grad is the training forward.
* ``on_pre_optimizer_step`` / ``on_optimizer_step`` bracket ``optimizer.step()``.

GRPO's advantage (group z-score) has no TRL profiling point; its span is *derived*: from the end of the
reward stage to the return of ``_prepare_inputs``, so it also holds TRL's post-reward bookkeeping
(metric gathering, buffer shuffling). A trainer that wraps its own ``advantage`` stage (our PPO)
gets the measured span instead.

Memory: on CUDA the peak of ``torch.cuda.max_memory_allocated`` per stage (reset at every stage
start); on CPU the process resident-set high-water mark (``VmHWM``), reset per stage through Linux's
``/proc/self/clear_refs`` ("5" resets the peak RSS, see proc(5)); both are nearly free (~20 µs).
On CUDA each stage boundary synchronizes the device so that spans are the stage's real duration.
The probes: :mod:`rlm_lab.train.stage_memory`; the summaries of the step rows: :mod:`rlm_lab.train.trace_summary`.

Ignores: time between ``on_step_end`` and the next ``on_step_begin`` (logging, data loading), and
what happens on other ranks (each rank traces itself; files are written per rank).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from ..compat.trl import profiling_context
from ..record import write_trace
from ..stages import STAGE_ORDER, Stage  # noqa: F401 - STAGE_ORDER: part of this module's API
from ..trace_plots import gantt
from .stage_memory import memory_probe
from .trace_summary import OTHER, chrome_trace, summarize, window_throughput  # noqa: F401 - part of this API

# TRL profiling names (the part after "<TrainerClass>.") -> stage. Names from trl 1.16.0:
# grpo_trainer.py / rloo_trainer.py (generation paths, weight sync, rewards, loss), the PPO trainer of
# this project (rlm_lab/train/ppo.py) and its profiled DPOTrainer (rlm_lab/train/dpo.py). ``None`` = a container we track for nesting but do not count.
TRL_NAMES: dict[str, Stage | None] = {
    "transformers.generate": Stage.GENERATE,        # HF generate with KV cache
    "transformers.generate_batch": Stage.GENERATE,  # transformers continuous batching
    "vLLM.generate": Stage.GENERATE,                # vLLM, colocate or server mode
    "generate": Stage.GENERATE,                     # VLLMGeneration.generate if decorated in later TRL
    "sync_weights": Stage.WEIGHT_SYNC,              # trainer -> vLLM weights (colocate or server)
    "_sync_fsdp_params_to_vllm": Stage.WEIGHT_SYNC,
    "_move_model_to_vllm": Stage.WEIGHT_SYNC,       # name used by TRL <= 0.2x
    "_calculate_rewards": Stage.REWARD,
    "reward_model": Stage.REWARD,                   # our PPO's reward-model forward
    "values": Stage.VALUES,                         # our PPO's critic forward
    "ref_logprob": Stage.REF_LOGPROB,               # our DPO's reference forward (rlm_lab/train/dpo.py)
    "advantage": Stage.ADVANTAGE,                   # our PPO's GAE
    "critic_update": Stage.CRITIC_UPDATE,           # our PPO's critic forward+backward
    "compute_loss": Stage.ACTOR_FORWARD,            # training forward + loss
    "_prepare_inputs": None,
    "_generate_and_score_completions": None,
}
LOGPS_NAME = "_get_per_token_logps_and_entropies"  # resolved per call: old, ref or training forward


def stage_for_name(name: str) -> Stage | None | str:
    """Map a ProfilingContext name (``"GRPOTrainer.vLLM.generate"``) to a Stage; ``LOGPS_NAME`` for the
    log-prob pass (resolved by the caller); ``None`` for names that are not a stage of their own."""
    suffix = name.split(".", 1)[1] if "." in name else name
    if suffix == LOGPS_NAME:
        return LOGPS_NAME
    if suffix in TRL_NAMES:
        return TRL_NAMES[suffix]
    return None


# --- the one process-wide hook on TRL's profiling context ------------------------------------------
_ACTIVE: list = []  # tracers whose trainer is training now (last one wins)
_INSTALL_LOCK = threading.Lock()


def _install_profiling_hook() -> None:
    ProfilingContext = profiling_context()
    with _INSTALL_LOCK:
        if getattr(ProfilingContext, "_rlm_lab_hooked", False):
            return
        enter, exit_ = ProfilingContext.__enter__, ProfilingContext.__exit__

        def __enter__(self):
            tracer = _ACTIVE[-1] if _ACTIVE else None
            self._rlm_tracer = tracer
            if tracer is not None:
                tracer._open_profiled(self.name)
            return enter(self)

        def __exit__(self, exc_type, exc, tb):
            result = exit_(self, exc_type, exc, tb)
            tracer = getattr(self, "_rlm_tracer", None)
            if tracer is not None:
                tracer._close(self.name)
            return result

        ProfilingContext.__enter__, ProfilingContext.__exit__ = __enter__, __exit__
        ProfilingContext._rlm_lab_hooked = True


def _callback_base():
    from transformers import TrainerCallback

    return TrainerCallback


class _Frame:
    __slots__ = ("name", "stage", "start", "peak", "counted", "nested")

    def __init__(self, name, stage, start, counted):
        self.name, self.stage, self.start, self.peak, self.counted = name, stage, start, 0, counted
        self.nested = 0.0  # seconds of counted spans of other stages inside this one


class _StageTracerCore:
    """The stage tracer's logic: one span per stage per optimizer step, see the module docstring. A plain class,
    so that importing this module loads no transformers: :func:`tracer_class` mixes it with
    ``transformers.TrainerCallback`` (whose no-op events it overrides) on first use."""

    def __init__(self, trainer, record=None, out_dir=None, warmup: int = 1):
        self.trainer, self.record, self.warmup = trainer, record, warmup
        self.out_dir = Path(out_dir) if out_dir else (record.dir if record is not None else None)
        accel = getattr(trainer, "accelerator", None)
        self.rank = accel.process_index if accel is not None else 0
        self.device = accel.device if accel is not None else None
        self.memory = memory_probe(self.device)
        self._sync = None
        if self.device is not None and self.device.type == "cuda":
            import torch

            self._sync = torch.cuda.synchronize
        self.steps: list[dict] = []  # one row per optimizer step (see _finish_step)
        self._stack: list[_Frame] = []
        self._spans: list[dict] = []
        self._logps_stage: Stage | None = None
        self._reward_end = None
        self._saw_advantage = False
        self._t0 = None
        self._patched = {}
        self._spans_file = None
        _install_profiling_hook()

    # ---- span bookkeeping -------------------------------------------------------------------
    def _now(self) -> float:
        if self._sync is not None:  # CUDA kernels are asynchronous: wait so the span is the stage's
            self._sync(self.device)
        return time.perf_counter()

    def _open(self, name: str, stage) -> None:
        if not self._stack:  # outside a step (evaluation, before training): ignore
            return
        now = self._now()
        parent = self._stack[-1]
        parent.peak = max(parent.peak, self.memory.peak())  # the parent's peak before the child
        self.memory.reset()
        # A stage nested in the *same* stage (the training forward's log-prob pass inside compute_loss, a
        # reward model inside _calculate_rewards) is a detail span, not counted twice. A *different* stage
        # nested in a stage (our PPO's critic_update inside compute_loss) is counted, and its time is taken
        # out of the enclosing stage's exclusive time (``self_s``).
        enclosing = next((f for f in reversed(self._stack) if f.stage is not None), None)
        counted = stage is not None and (enclosing is None or enclosing.stage != stage)
        self._stack.append(_Frame(name, stage, now, counted))

    def _open_profiled(self, name: str) -> None:
        stage = stage_for_name(name)
        if stage == LOGPS_NAME:
            stage = self._logps_stage
        self._open(name, stage)

    def _close(self, name: str) -> None:
        if len(self._stack) < 2:
            return
        frame = self._stack.pop()
        if frame.name != name:  # unbalanced (an exception unwound a child): drop silently
            self._stack.append(frame)
            return
        end = self._now()
        frame.peak = max(frame.peak, self.memory.peak())
        parent = self._stack[-1]
        parent.peak = max(parent.peak, frame.peak)
        dur = end - frame.start
        if frame.counted:
            outer = next((f for f in reversed(self._stack) if f.counted), None)
            if outer is not None:
                outer.nested += dur
        self._spans.append({"stage": None if frame.stage is None else frame.stage.value, "name": frame.name,
                            "start_s": frame.start - self._t0, "dur_s": dur, "self_s": dur - frame.nested,
                            "peak_bytes": frame.peak, "depth": len(self._stack), "counted": frame.counted})
        if frame.stage is Stage.REWARD and frame.counted:
            self._reward_end = end
        if frame.stage is Stage.ADVANTAGE:
            self._saw_advantage = True
        if frame.name.endswith("._prepare_inputs") and self._reward_end is not None:
            if not self._saw_advantage:  # GRPO/RLOO: no profiling point for the advantage
                self._spans.append({"stage": Stage.ADVANTAGE.value, "name": "derived:reward_end->_prepare_inputs_end",
                                    "start_s": self._reward_end - self._t0, "dur_s": end - self._reward_end,
                                    "self_s": end - self._reward_end,
                                    "peak_bytes": frame.peak, "depth": len(self._stack), "counted": True})
            self._reward_end, self._saw_advantage = None, False

    # ---- instance hooks -------------------------------------------------------------------
    def _patch(self) -> None:
        trainer, accel = self.trainer, getattr(self.trainer, "accelerator", None)
        if hasattr(accel, "backward") and "backward" not in self._patched:
            orig_backward = accel.backward

            def backward(*args, **kwargs):
                critic = any(f.stage is Stage.CRITIC_UPDATE for f in self._stack)
                self._open("accelerator.backward", Stage.CRITIC_UPDATE if critic else Stage.ACTOR_BACKWARD)
                try:
                    return orig_backward(*args, **kwargs)
                finally:
                    self._close("accelerator.backward")

            accel.backward = backward
            self._patched["backward"] = (accel, "backward")
        if hasattr(trainer, LOGPS_NAME) and LOGPS_NAME not in self._patched:
            orig_logps = getattr(trainer, LOGPS_NAME)

            def logps(model, *args, **kwargs):
                self._logps_stage = self.classify_logps(model)
                try:
                    return orig_logps(model, *args, **kwargs)
                finally:
                    self._logps_stage = None

            setattr(trainer, LOGPS_NAME, logps)
            self._patched[LOGPS_NAME] = (trainer, LOGPS_NAME)

    def _unpatch(self) -> None:
        for obj, attr in self._patched.values():
            obj.__dict__.pop(attr, None)  # the class method shows through again
        self._patched.clear()

    def classify_logps(self, model) -> Stage:
        """Which stage a log-prob pass on ``model`` belongs to (see module docstring)."""
        import torch

        if torch.is_grad_enabled():
            return Stage.ACTOR_FORWARD
        ref = getattr(self.trainer, "ref_model", None)
        if ref is not None and model is ref:
            return Stage.REF_LOGPROB
        return Stage.REF_LOGPROB if _peft_reference_active(self.trainer, model) else Stage.OLD_LOGPROB

    # ---- TrainerCallback events ---------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        self._patch()
        if self not in _ACTIVE:
            _ACTIVE.append(self)
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            name = "spans.jsonl" if self.rank == 0 else f"spans.rank{self.rank}.jsonl"
            # Plain appends (no fsync per step: an fsync costs milliseconds, >3 % of a tiny step);
            # the file is flushed to the OS every step and fsynced at the end of training.
            self._spans_file = open(self.out_dir / name, "w")

    def on_step_begin(self, args, state, control, **kwargs):
        now = self._now()
        if self._t0 is None:
            self._t0 = now
        self.memory.reset()
        self._stack = [_Frame("step", None, now, False)]
        self._spans = []
        self._reward_end, self._saw_advantage = None, False

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._open("optimizer.step", Stage.OPTIMIZER)

    def on_optimizer_step(self, args, state, control, **kwargs):
        self._close("optimizer.step")

    def on_step_end(self, args, state, control, **kwargs):
        if not self._stack:
            return
        end = self._now()
        root = self._stack[0]
        root.peak = max(root.peak, self.memory.peak())
        del self._stack[1:]  # frames left open by an exception are abandoned
        self._finish_step(state.global_step, root, end)
        self._stack = []

    def on_train_end(self, args, state, control, **kwargs):
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self._unpatch()
        if self._spans_file is not None:
            self._spans_file.flush()
            os.fsync(self._spans_file.fileno())
            self._spans_file.close()
            self._spans_file = None
        self.write_outputs()

    def _finish_step(self, step: int, root: _Frame, end: float) -> None:
        wall = end - root.start
        stages: dict[str, float] = {}
        peaks: dict[str, int] = {}
        for s in self._spans:
            if s["counted"]:  # exclusive time: nested stages of another kind are counted on their own
                stages[s["stage"]] = stages.get(s["stage"], 0.0) + s["self_s"]
                peaks[s["stage"]] = max(peaks.get(s["stage"], 0), s["peak_bytes"])
        stages[OTHER] = max(0.0, wall - sum(stages.values()))
        row = {"step": step, "rank": self.rank, "start_s": root.start - self._t0, "wall_s": wall,
               "peak_bytes": root.peak, "stages": stages, "peaks": peaks, "spans": self._spans}
        self.steps.append(row)
        if self._spans_file is not None:
            self._spans_file.write(json.dumps(row, sort_keys=True) + "\n")
            self._spans_file.flush()

    # ---- outputs ------------------------------------------------------------------------------
    def summary(self) -> dict:
        return summarize(self.steps, warmup=self.warmup, memory_kind=self.memory.kind)

    def chrome_trace(self) -> dict:
        return chrome_trace(self.steps)

    def gantt(self, path=None, show=None):
        return gantt(self.steps, path=path, show=show)

    def write_outputs(self) -> None:
        """trace.json.gz (Chrome/Perfetto; :meth:`gantt` draws it on demand) and the record summary; rank 0 owns
        the record."""
        if self.out_dir is not None and self.steps:
            write_trace(self.out_dir, self.chrome_trace(), "trace" if self.rank == 0 else f"trace.rank{self.rank}")
        if self.record is not None and self.rank == 0 and self.steps:
            self.record.update(trace=self.summary())


def _make_tracer_class():
    """``StageTracer``: :class:`_StageTracerCore` with transformers' TrainerCallback as second base, built here because
    transformers is not imported at this module's top."""
    class StageTracer(_StageTracerCore, _callback_base()):
        """Records one span per stage per optimizer step; see the module docstring."""

    return StageTracer


def _peft_reference_active(trainer, model) -> bool:
    """True when ``model`` is a PEFT model whose adapters are disabled or whose "ref" adapter is active
    (TRL's ``use_adapter`` context: the reference is the base model, no second copy)."""
    accel = getattr(trainer, "accelerator", None)
    inner = accel.unwrap_model(model) if accel is not None else model
    if not hasattr(inner, "peft_config"):
        return False
    if getattr(inner, "active_adapter", None) == "ref":
        return True
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return False
    for module in inner.modules():
        if isinstance(module, BaseTunerLayer):
            return bool(module.disable_adapters)
    return False


_TRACER_CLASS = None


def tracer_class():
    """The StageTracer class (built lazily so that importing this module does not import transformers)."""
    global _TRACER_CLASS
    if _TRACER_CLASS is None:
        _TRACER_CLASS = _make_tracer_class()
    return _TRACER_CLASS


def trace(trainer, record=None, out_dir=None, warmup: int = 1):
    """Attach a stage tracer to ``trainer`` (TRL GRPOTrainer, RLOOTrainer, our PPOTrainer) and return it.

    ``record`` (a RunRecord) receives ``spans.jsonl`` and ``trace.json.gz`` in its folder and a per-stage
    summary under ``results["trace"]``; ``out_dir`` writes the files without a record; with neither,
    everything stays in memory (``tracer.steps``, ``tracer.summary()``, ``tracer.chrome_trace()``).
    The first ``warmup`` steps are left out of the summary (one-time costs), never out of the files.
    """
    tracer = tracer_class()(trainer, record=record, out_dir=out_dir, warmup=warmup)
    trainer.add_callback(tracer)
    return tracer
