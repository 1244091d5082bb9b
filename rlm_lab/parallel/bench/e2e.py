"""The same GRPO run through TRL's Trainer on several processes: DDP, DeepSpeed ZeRO-2, ZeRO-3.

    torchrun --nproc_per_node 2 -m rlm_lab.cli chapter 4 e2e --mode ddp   --steps 4
    torchrun --nproc_per_node 2 -m rlm_lab.cli chapter 4 e2e --mode zero2 --steps 4   # needs deepspeed
    rlm-lab parallel ... covers the hand-built layouts; this module covers what the Trainer does.

Each rank builds the same GRPO trainer (``rlm_lab.train.rl.make_trainer``) from the same zoo model,
rank 0 attaches the stage tracer (``rlm_lab.train.tracer.trace``) and writes the run record.

Why :func:`trainer_parallelism` exists: asking the HF Trainer for FSDP on a CPU silently gives plain
DDP (accelerate reports ``MULTI_CPU``, the model is a ``DistributedDataParallel``), so a run labelled
"FSDP" would be DDP. The check reads what the Trainer actually built and :func:`require` refuses a
mismatch with one clear error instead of recording a wrong label.

Prediction (ring collectives, Thakur et al. 2005; roofline, Williams et al. 2009): per rank the rollout and the training work of B/d completions,
plus one gradient all-reduce (DDP/ZeRO-2: 2(d-1)/d·Ψ, ZeRO-3: 3(d-1)/d·Ψ) per optimizer step. On a
2-core machine the two ranks share the cores one process had, so no speed-up is predicted: the
compute per rank halves but runs at half the cores, and the collectives are added on top.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from ... import models
from ...cost.comm import dp_allreduce_bytes, zero3_bytes
from ...errors import RlmLabError
from ...record import RunRecord, repo_root, runs_root
from ...tasks import ensure_data, parse_task
from ...train import make_config
from ...train.callbacks import quiet_progress
from ...train.rl import make_trainer
from ...train.tracer import trace

MODES = {"single": None, "ddp": None, "zero2": "configs/deepspeed/zero2.json", "zero3": "configs/deepspeed/zero3.json",
         "fsdp": "fsdp"}


def trainer_parallelism(trainer) -> dict:
    """What the Trainer really runs: accelerate's distributed type, FSDP/DeepSpeed flags, the wrapper."""
    acc = trainer.accelerator
    wrapped = getattr(trainer, "model_wrapped", None)
    return {
        "distributed_type": str(getattr(acc.distributed_type, "value", acc.distributed_type)),
        "num_processes": acc.num_processes,
        "is_fsdp_enabled": bool(getattr(trainer, "is_fsdp_enabled", False)),
        "is_deepspeed_enabled": bool(getattr(trainer, "is_deepspeed_enabled", False)),
        "wrapped": type(wrapped).__name__ if wrapped is not None else None,
        "zero_stage": _zero_stage(trainer),
    }


def _zero_stage(trainer):
    plugin = getattr(getattr(trainer.accelerator, "state", None), "deepspeed_plugin", None)
    return None if plugin is None else plugin.zero_stage


def require(trainer, mode: str) -> dict:
    """Raise if the Trainer is not running ``mode`` (single | ddp | zero2 | zero3 | fsdp); return what it runs."""
    got = trainer_parallelism(trainer)
    ok = {
        "single": got["num_processes"] == 1,
        "ddp": got["num_processes"] > 1 and not got["is_deepspeed_enabled"] and not got["is_fsdp_enabled"],
        "zero2": got["is_deepspeed_enabled"] and got["zero_stage"] == 2,
        "zero3": got["is_deepspeed_enabled"] and got["zero_stage"] == 3,
        "fsdp": got["is_fsdp_enabled"] and "FSDP" in got["distributed_type"].upper(),
    }[mode]
    if not ok:
        hint = (" (on CPU the HF Trainer turns FSDP into plain DDP; use rlm-lab parallel --zero 3 for FSDP2"
                " on CPU, or a GPU)" if mode == "fsdp" else "")
        raise RlmLabError(f"asked for {mode} but the Trainer runs {got}{hint}")
    return got


def predicted_grad_bytes(param_bytes: int, world: int, mode: str) -> float:
    """Gradient-synchronisation bytes per rank per optimizer step (ring), by mode."""
    if mode == "single":
        return 0.0
    return zero3_bytes(param_bytes, world) if mode == "zero3" else dp_allreduce_bytes(param_bytes, world)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="rlm-lab chapter 4 e2e", description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=sorted(MODES), default="ddp")
    p.add_argument("--model", default="nano")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--size", default="smoke")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    try:
        return _run(args)
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    import torch.distributed as dist

    if "WORLD_SIZE" not in os.environ:
        raise RlmLabError("launch under torchrun: torchrun --nproc_per_node 2 -m rlm_lab.cli chapter 4 e2e --mode ddp")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    extra = {}
    if MODES[args.mode] == "fsdp":
        extra = {"fsdp": "full_shard auto_wrap"}
    elif MODES[args.mode]:
        extra = {"deepspeed": str(repo_root() / MODES[args.mode])}
    cfg = make_config("grpo", args.size, model=args.model, rl_steps=args.steps, disable_tqdm=True, extra=extra)
    task = parse_task(cfg.task)
    rows = ensure_data(task)["train"]
    with tempfile.TemporaryDirectory(prefix=f"rlm_e2e_{rank}_") as scratch:
        model, tok = models.build_model(args.model, seed=cfg.seed)
        model_dir = models.save(model, tok, Path(scratch) / "model")
        trainer = make_trainer(cfg, model_dir, rows, task, Path(scratch) / "out")

        quiet_progress(trainer)
        require(trainer, args.mode)  # the flags are set at init: refuse before spending any time
        record = None
        if rank == 0:
            run_dir = Path(args.out) if args.out else runs_root(args.size) / f"ch04_e2e_grpo_{args.mode}"
            record = RunRecord(run_dir, config={"mode": args.mode, "world": world, "model": args.model,
                                                "steps": args.steps, **cfg.to_dict()})

        trace(trainer, record=record)
        t0 = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - t0
        # again after train(): accelerate wraps the model lazily (model_wrapped is then DDP / the engine)
        got = require(trainer, args.mode)
        if rank == 0:
            psi = 4 * models.count_parameters(model)
            record.update(parallelism=got, rl_seconds=round(seconds, 3), steps=trainer.state.global_step,
                          seconds_per_step=round(seconds / max(1, trainer.state.global_step), 4),
                          predicted_grad_bytes_per_rank=predicted_grad_bytes(psi, world, args.mode))
            print(f"{args.mode}: {got} {seconds / max(1, trainer.state.global_step):.3f} s/step -> {record.dir}")
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0
