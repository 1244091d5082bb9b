"""Learning curves for chapter 6: greedy held-out accuracy every ``every`` steps (and at step 0 and at the
end), each point with its optimizer step and the training wall time so far.

:func:`make_eval_curve` builds a ``transformers.TrainerCallback`` (https://huggingface.co/docs/transformers/main_classes/callback).
It evaluates in ``on_log``: the Trainer calls ``on_step_end`` and only then logs (``logging_steps = 1``), so
the evaluation runs *between* two steps, which the stage tracer (:mod:`rlm_lab.train.tracer`, step =
``on_step_begin`` .. ``on_step_end``) does not count. The curve's wall clock is the time since
``on_train_begin`` minus every evaluation's seconds. Greedy decoding draws no random numbers, so the run
trains exactly as without the callback. What it cannot hide: in the asynchronous modes the rollout workers
keep generating while the trainer evaluates (up to the bound on queued batches), so the step after an
evaluation may find its batch ready; measured step times are medians, which one step in ``every`` barely moves.
"""

from __future__ import annotations

import functools
import time

from ..tasks import parse_task
from ..train.evaluate import evaluate, test_rows


class EvalCurveCore:
    """What :class:`EvalCurve` does, written here at module level; :func:`make_eval_curve` adds
    ``transformers.TrainerCallback`` as the second base (this module does not import transformers at its top).
    Set ``.trainer`` before training (the glue's ``attach`` or the caller does)."""

    def __init__(self, task: str, every: int, problems: int, max_new_tokens: int, batch_size: int = 500):
        self.task = parse_task(task)
        self.rows = test_rows(self.task, problems)
        self.every, self.max_new_tokens, self.batch_size = every, max_new_tokens, batch_size
        self.trainer = None
        self.points: list[dict] = []
        self._t0 = None
        self._eval_s = 0.0

    def _eval(self, step: int) -> None:
        if self.points and self.points[-1]["step"] == step:
            return
        wall = time.perf_counter() - self._t0 - self._eval_s
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        was = model.training
        model.eval()
        t = time.perf_counter()
        try:
            ev = evaluate(model, self.trainer.processing_class, self.task, self.rows, self.max_new_tokens,
                          self.batch_size)
        finally:
            model.train(was)
        took = time.perf_counter() - t
        self._eval_s += took
        self.points.append({"step": step, "wall_s": round(wall, 4), "accuracy": ev["accuracy"],
                            "format_rate": ev["format_rate"], "eval_s": round(took, 4)})

    def on_train_begin(self, args, state, control, **kwargs):
        self._t0 = time.perf_counter()
        self._eval(state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        s = state.global_step
        if s and (s % self.every == 0 or s >= state.max_steps):
            self._eval(s)


@functools.cache
def _eval_curve_class():
    """``EvalCurve``: :class:`EvalCurveCore` with transformers' ``TrainerCallback`` as second base, built on first
    use because transformers is not imported at this module's top."""
    from transformers import TrainerCallback

    class EvalCurve(EvalCurveCore, TrainerCallback):
        pass

    return EvalCurve


def make_eval_curve(task: str, every: int, problems: int, max_new_tokens: int, batch_size: int = 500):
    """An ``EvalCurve`` callback (:class:`EvalCurveCore`; importing this module does not import transformers)."""
    return _eval_curve_class()(task, every, problems, max_new_tokens, batch_size)


def curve_record(cb, every: int, problems: int) -> dict:
    return {"every": every, "problems": problems, "points": list(cb.points),
            "eval_seconds": round(sum(p["eval_s"] for p in cb.points), 3),
            "excluded_from_step_timing": "evaluated in on_log, after on_step_end; wall_s excludes eval time"}
