"""The length distribution a policy generates, at each stage of training (issue 11, item 1).

:class:`LengthLog` is a transformers ``TrainerCallback`` (https://huggingface.co/docs/transformers/main/en/
main_classes/callback): at every log it keeps TRL's own completion-length statistics (GRPOTrainer logs
``completions/mean_length``, ``min_length``, ``max_length``, ``clipped_ratio`` and the terminated-only
ones: trl/trainer/grpo_trainer.py), with the step they belong to. The full per-sample lengths, where wanted,
come from :class:`rlm_lab.longtail.trl_hooks.FusedRollout` (``lengths`` per generation call).
"""

from __future__ import annotations

from transformers import TrainerCallback

KEYS = ("mean_length", "min_length", "max_length", "clipped_ratio", "mean_terminated_length",
        "min_terminated_length", "max_terminated_length")


class LengthLog(TrainerCallback):
    def __init__(self):
        self.rows: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "completions/mean_length" in logs:
            self.rows.append({"step": state.global_step,
                              **{k: float(logs[f"completions/{k}"]) for k in KEYS if f"completions/{k}" in logs}})
