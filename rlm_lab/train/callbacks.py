"""Trainer callbacks shared by the SFT warm start, the RL phase and the parallel end-to-end run.

Kept apart from ``run.py`` (which drives SFT and RL) so that ``sft.py`` and ``rl.py`` can use them
without importing the module that imports them (an import loop).
"""

from __future__ import annotations

import time

from ..record import append_jsonl


def quiet_progress(trainer):
    """Keep the Trainer's tqdm bar but stop it printing every log dict (logging_steps=1 would print one
    dict per step; with disable_tqdm the Trainer prints them instead of the bar). The rows go to
    metrics.jsonl instead; transformers has no switch for this
    (https://huggingface.co/docs/transformers/main_classes/callback).
    A class built here: its base, transformers' ``ProgressCallback``, is not imported at this module's top."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class BarOnly(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            pass

    callbacks = trainer.callback_handler.callbacks
    if any(type(cb) is PrinterCallback for cb in callbacks):
        trainer.remove_callback(PrinterCallback)
    if any(type(cb) is ProgressCallback for cb in callbacks):
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(BarOnly())
    return trainer


def step_clock():
    """A ``transformers.TrainerCallback`` that keeps, per optimizer step, its wall seconds and the process's
    CPU seconds (``time.process_time``: all threads; on a shared machine closer to what the step costs than
    the wall time). ``clock.rows``: ``[{"step", "wall_s", "cpu_s"}, ...]``.
    A class built here: its base is not imported at this module's top."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self):
            self.rows: list[dict] = []
            self._start = None

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = (time.perf_counter(), time.process_time())

        def on_step_end(self, args, state, control, **kwargs):
            if self._start is not None:
                w, c = self._start
                self.rows.append({"step": state.global_step, "wall_s": time.perf_counter() - w,
                                  "cpu_s": time.process_time() - c})
                self._start = None

    return StepClock()


def metrics_logger(path, phase: str):
    """A ``transformers.TrainerCallback`` that appends every log dict the Trainer emits to ``path`` (a record's
    ``metrics.jsonl``) as ``{"phase", "step", **logs}``; with ``path`` None it writes nothing (a rank other than 0).
    A class built here: its base is not imported at this module's top."""
    from transformers import TrainerCallback

    class MetricsLogger(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if path and logs:
                append_jsonl(path, {"phase": phase, "step": state.global_step, **logs})

    return MetricsLogger()
