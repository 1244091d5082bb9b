"""The plain-TRL reference of chapter 6: ``trl.GRPOTrainer`` with its own defaults, generating in-process
(no Ray, no ``rollout_func``), on the same cores, task, SFT warm start and held-out curve as the campaign.

Set, because they must be (https://huggingface.co/docs/trl/main/en/grpo_trainer): the model, the data, the
rewards, ``max_steps``, and the knobs the asynchronous runs share so that the curves are comparable
(``per_device_train_batch_size``, ``num_generations``, ``max_completion_length``, ``learning_rate``,
``seed``), plus ``output_dir``, ``report_to="none"`` (no tracker) and ``bf16=False``: TRL's default turns bf16
on, and on a machine without a GPU that config refuses to start ("Your setup doesn't support bf16/gpu. You
need to assign use_cpu"); the other way out, ``use_cpu=True``, runs bf16 autocast, which a CPU without bf16
units (this one) runs several times slower than fp32, and the asynchronous runs are fp32. Everything else is
TRL's default, and the record keeps those that matter on a CPU (``gradient_checkpointing``: on, it
recomputes activations in the backward; ``logging_steps``: 10; torch's own thread count: both cores). The held-out curve
(:mod:`rlm_lab.asynchrony.curves`) evaluates in ``on_log``, at steps that are multiples of 10 (TRL's default
logging interval) and at the end, outside the training wall clock it reports.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from ...asynchrony.curves import curve_record, make_eval_curve
from ...errors import RlmLabError
from ...host import load_average
from ...models import load
from ...placement.runtime import _sft_checkpoint
from ...record import RunRecord
from ...tasks import ensure_data, parse_task
from ...train.rl import rl_dataset, task_rewards
from .cases import budget, campaign_config, curve_spec

RECORDED_DEFAULTS = ("bf16", "fp16", "gradient_checkpointing", "logging_steps", "lr_scheduler_type", "beta",
                     "loss_type", "temperature", "epsilon", "scale_rewards", "num_iterations", "use_vllm",
                     "steps_per_generation", "generation_batch_size", "torch_compile", "use_cpu",
                     "dataloader_num_workers")


def run_reference(size: str, seed: int, folder, steps: int | None = None, command=None) -> dict:
    import torch
    from trl import GRPOConfig, GRPOTrainer

    cfg = campaign_config(size, seed, steps)
    spec = curve_spec(cfg, size)
    if spec["every"] % 10:
        raise RlmLabError("the reference evaluates at TRL's default logging interval (10): use a multiple of 10")
    folder = Path(folder)
    record = RunRecord(folder, {"run": cfg.to_dict(), "reference": "plain trl.GRPOTrainer, in-process"},
                       command, seed)
    record.update(load_average_start=load_average(2), mode="trl_reference",
                  prediction={"note": "the reference point: measured, not predicted"})
    try:
        task = parse_task(cfg.task)
        model_path = _sft_checkpoint(cfg)
        model, tokenizer = load(str(model_path))
        curve = make_eval_curve(**spec)
        with tempfile.TemporaryDirectory(prefix="rlm_trl_ref_") as scratch:
            args = GRPOConfig(output_dir=scratch, report_to="none", max_steps=cfg.rl_steps, seed=seed,
                              per_device_train_batch_size=cfg.batch_size, num_generations=cfg.num_generations,
                              max_completion_length=cfg.max_completion_length, learning_rate=cfg.rl_lr,
                              bf16=False, disable_tqdm=True)
            trainer = GRPOTrainer(model=model, reward_funcs=task_rewards(task, cfg.format_weight), args=args,
                                  train_dataset=rl_dataset(ensure_data(task)["train"]), processing_class=tokenizer,
                                  callbacks=[curve])
            curve.trainer = trainer
            t0 = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - t0
        rows = [r for r in trainer.state.log_history if "num_tokens" in r]
        pts = curve.points
        train_wall = pts[-1]["wall_s"]
        results = {
            "mode": "trl_reference", "steps": trainer.state.global_step, "train_seconds": round(seconds, 3),
            "train_wall_excluding_eval_s": train_wall, "num_tokens": rows[-1]["num_tokens"] if rows else None,
            "tokens_per_s": (rows[-1]["num_tokens"] / train_wall) if rows and train_wall else None,
            "rewards": [r["reward"] for r in trainer.state.log_history if "reward" in r],
            "curve": curve_record(curve, spec["every"], spec["problems"]),
            "trl_defaults": {k: getattr(args, k, None) for k in RECORDED_DEFAULTS},
            "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
            "budget": budget(size), "load_average_end": load_average(2),
        }
        record.complete(**results)
        results["dir"] = str(folder)
        return results
    except BaseException as e:
        record.update(error=str(e) or type(e).__name__, load_average_end=load_average(2))
        record.interrupt() if isinstance(e, KeyboardInterrupt) else record.fail(e)
        raise
