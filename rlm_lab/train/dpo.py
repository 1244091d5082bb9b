"""DPO through TRL's ``DPOTrainer`` on preference pairs built from the verifiable tasks (the survey's third family,
arXiv 2608.27046 Sec. 2.4 and Algorithm 4; DPO: Rafailov et al., arXiv 2305.18290).

    pairs = preference_pairs(task, rows)              # [{"prompt", "chosen", "rejected"}]
    trainer = dpo_trainer(model, tokenizer, pairs, output_dir, steps=2)
    trainer.train()

A pair is one problem's reference answer (the chosen completion, checked correct by the task's own verifier) and a
wrong answer of the same form (the rejected one: the reference with one character changed, checked wrong by the
same verifier), so both completions of a pair differ only where the verifier looks. The pairs are generated, never
downloaded. The cost model prices the same step (``rlm-lab predict --algorithm dpo``: two sequences per pair).

Stages: TRL's ``DPOTrainer`` (1.16) brackets none of its passes with ``trl.extras.profiling`` (GRPO does), so the
trainer built here is a subclass (:func:`profiled_dpo_class`) that opens TRL's own ``profiling_context`` around
``compute_loss`` (the policy's forward over both completions and the loss: ``actor_forward``) and around each
forward of the frozen reference (``ref_logprob``, nested in it and counted apart by the tracer); the backward and
the optimizer step are the tracer's usual hooks. Without a tracer the contexts only time (TRL reports to no service
here: ``report_to=[]``), so the run computes what the stock trainer computes. With precomputed reference log-probs
the reference pass runs once before training, outside every step.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path

from ..errors import RlmLabError

DIGITS = "0123456789"
MAX_TRIES = 64   # mutations tried per problem before it is skipped (a task whose every variant is correct)


def wrong_answer(task, row: dict, rng: random.Random) -> str | None:
    """The reference answer with one character replaced (a digit by another digit, else any by a digit), checked
    wrong by the task's verifier; None when ``MAX_TRIES`` mutations all pass it."""
    ans = row["answer"]
    if not ans:
        return None
    for _ in range(MAX_TRIES):
        i = rng.randrange(len(ans))
        choices = [c for c in DIGITS if c != ans[i]]
        cand = ans[:i] + rng.choice(choices) + ans[i + 1:]
        if not task.is_correct(cand, row):
            return cand
    return None


def preference_pairs(task, rows: list[dict], seed: int = 0) -> list[dict]:
    """One ``{"prompt", "chosen", "rejected"}`` per row whose reference answer the verifier accepts and for which a
    wrong answer of the same form exists; raises when no row gives a pair."""
    rng = random.Random(f"dpo-pairs:{task.slug}:{seed}")
    out = []
    for row in rows:
        if not task.is_correct(row["answer"], row):
            continue
        bad = wrong_answer(task, row, rng)
        if bad is not None:
            out.append({"prompt": row["prompt"], "chosen": row["answer"], "rejected": bad})
    if not out:
        raise RlmLabError(f"task {task.slug}: no preference pair could be built from {len(rows)} problem(s)")
    return out


REF_NAME = "ref_logprob"  # the profiling name of the reference's forward (rlm_lab.train.tracer.TRL_NAMES)
_PROFILED = None


def profiled_dpo_class():
    """``trl.DPOTrainer`` with ``compute_loss`` and the reference's forward inside TRL's ``profiling_context``
    (module docstring); built once, lazily (importing this module imports no trl)."""
    global _PROFILED
    if _PROFILED is not None:
        return _PROFILED
    from trl import DPOTrainer
    from trl.extras.profiling import profiling_context

    class ProfiledDPOTrainer(DPOTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._ref_open = []
            if self.ref_model is not None:
                self.ref_model.register_forward_pre_hook(self._ref_enter)
                self.ref_model.register_forward_hook(self._ref_exit)

        def _ref_enter(self, module, args):
            ctx = profiling_context(self, REF_NAME)
            ctx.__enter__()
            self._ref_open.append(ctx)

        def _ref_exit(self, module, args, output):
            if self._ref_open:
                self._ref_open.pop().__exit__(None, None, None)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            with profiling_context(self, "compute_loss"):
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    _PROFILED = ProfiledDPOTrainer
    return _PROFILED


def dpo_trainer(model, tokenizer, pairs: list[dict], output_dir: str | Path, steps: int = 1, batch_pairs: int = 2,
                beta: float = 0.1, learning_rate: float = 1e-4, precompute_ref_log_probs: bool = False, seed: int = 0):
    """TRL's ``DPOTrainer`` on ``pairs`` (CPU, fp32, no logging services): ``batch_pairs`` pairs per step, the
    reference a frozen copy of ``model`` (a zoo model has no hub path TRL could reload it from), or its log-probs
    computed once before training. Its passes carry TRL's profiling names (:func:`profiled_dpo_class`)."""
    from datasets import Dataset
    from trl import DPOConfig

    args = DPOConfig(output_dir=str(output_dir), max_steps=steps, per_device_train_batch_size=batch_pairs,
                     learning_rate=learning_rate, beta=beta, precompute_ref_log_probs=precompute_ref_log_probs,
                     report_to=[], logging_steps=1, save_strategy="no", use_cpu=True, bf16=False, seed=seed,
                     dataloader_num_workers=0)
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    return profiled_dpo_class()(model=model, ref_model=ref, args=args, train_dataset=Dataset.from_list(pairs),
                      processing_class=tokenizer)
