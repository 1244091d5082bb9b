"""SFT warm start with TRL's ``SFTTrainer``: teach the answer format before RL.

The loss covers the answer and the EOS only (the prompt is context), which is what TRL's
prompt/completion format with ``completion_only_loss=True`` computes. We hand SFTTrainer the
*tokenized* rows (``input_ids`` = prompt + answer + EOS, ``labels`` = -100 on the prompt) and
``skip_prepare_dataset``: TRL's own preparation (add EOS, tokenize, build labels, truncate) runs
four per-row ``Dataset.map`` passes that took ~30 s for 20k rows on 2 shared cores, longer than the
400 training steps. The result is the same sequence TRL builds (its ``add_eos`` appends the EOS
to the completion; tests/train/test_sft.py checks our rows against TRL's for one example).
CPU: ``use_cpu=True, bf16=False`` (bf16 autocast was ~6x slower per GRPO step on the AVX2-only EPYC
the cpu records were made on: no native bf16 matmul), no gradient checkpointing, no saving by the Trainer.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .callbacks import quiet_progress


def sft_cache_key(cfg, task_file: str | Path) -> str:
    """The SFT cache folder's name: a hash of the config fields that decide the SFT model
    (``RunConfig.sft_key``) and of the task file's bytes, so an edited or regenerated task file never
    reuses a model trained on the old one."""
    digest = hashlib.sha256()
    digest.update(cfg.sft_key().encode())
    with open(task_file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


def sft_dataset(rows: list[dict], tokenizer, n: int | None = None):
    """The first ``n`` rows ``{"prompt", "answer"}`` (cycled if needed) -> a tokenized ``datasets.Dataset``
    with ``input_ids`` (prompt + answer + EOS) and ``labels`` (-100 on prompt tokens)."""
    from datasets import Dataset

    n = len(rows) if n is None else n
    rows = [rows[i % len(rows)] for i in range(n)]
    prompts = tokenizer([r["prompt"] for r in rows], add_special_tokens=False)["input_ids"]
    answers = tokenizer([r["answer"] for r in rows], add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    return Dataset.from_dict({
        "input_ids": [p + a + [eos] for p, a in zip(prompts, answers)],
        "labels": [[-100] * len(p) + a + [eos] for p, a in zip(prompts, answers)],
    })


def sft_args(cfg, output_dir: str | Path, on_cuda: bool = False, max_length: int = 64):
    """``max_length``: the longest row (tokens); rows are pre-tokenized, so it must cover them."""
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(output_dir),
        max_steps=cfg.sft_steps,
        learning_rate=cfg.sft_lr,
        lr_scheduler_type="constant",
        per_device_train_batch_size=cfg.sft_batch_size,
        completion_only_loss=True,
        max_length=max_length,
        logging_steps=max(1, cfg.sft_steps // 100),
        dataset_kwargs={"skip_prepare_dataset": True},
        **trainer_switches(cfg, on_cuda),
    )


def trainer_switches(cfg, on_cuda: bool) -> dict:
    """The Trainer arguments every run of ours shares (SFT and RL): CPU-safe precision, no gradient
    checkpointing (TRL turns it on by default; +15-25 % step time on CPU), no checkpoints, no trackers,
    seeded data order, no dataloader workers."""
    return dict(
        use_cpu=not on_cuda,
        bf16=bool(cfg.bf16 and on_cuda),
        activation_checkpointing=False,
        save_strategy="no",
        report_to="none",
        seed=cfg.seed,
        data_seed=cfg.seed,
        disable_tqdm=cfg.disable_tqdm,
        dataloader_num_workers=0,
    )


def train_sft(model, tokenizer, rows: list[dict], cfg, output_dir: str | Path, callbacks=(), dataset=None):
    """Run SFT on ``rows`` in place; returns the TRL trainer (its ``state.log_history`` has the losses).
    ``dataset``: tokenized rows (``input_ids``, ``labels``) to train on instead of :func:`sft_dataset`'s."""
    import torch
    from trl import SFTTrainer

    if dataset is None:
        dataset = sft_dataset(rows, tokenizer, min(len(rows), cfg.sft_steps * cfg.sft_batch_size))
    longest = max(map(len, dataset["input_ids"]))
    trainer = SFTTrainer(
        model=model,
        args=sft_args(cfg, output_dir, on_cuda=torch.cuda.is_available(), max_length=max(64, longest)),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=list(callbacks),
    )

    quiet_progress(trainer).train()
    return trainer
