"""Tuned settings per (algorithm, size, task): the first layer of every ``RunConfig``.

The per-size fields live in the size registry (``rlm_lab.sizes``, ``Size.train``); this module adds what
every size shares, the per-algorithm and per-task adjustments.

- ``smoke``: CI. The nano model, a few steps, tiny batches: proves the pipeline runs, learns nothing.
- ``cpu``: a few minutes on 2 CPU cores. The micro model (341,632 parameters); the numbers come from the
  sweep recorded in ``data/runs/cpu/ch01_sweep`` (see ``rlm_lab.train.sweep``).
- ``gpu``: one H100/H200-class GPU. A bigger zoo model, more steps, bf16 (only on CUDA).

Settings that the CPU sweep found to matter: learning rate (1e-4 for RL; >= 2e-4 damaged the
micro model in the first measurements: held-out accuracy fell during RL), SFT length (the RL
start point), completions per step, and beta = 0 (no reference forward: ~20-40 % faster per step).
"""

from __future__ import annotations

from ..errors import unknown
from ..sizes import check_size, get

ALGOS = ("sft", "grpo", "rloo", "ppo")  # the algorithms a preset (and hence a RunConfig) exists for

_COMMON = dict(
    # One intra-op thread on CPU: these models are too small to gain from a second thread (measured on
    # the 2-core machine of the cpu records), and on a machine shared with other jobs two spinning
    # OpenMP threads made a micro-model training
    # step 16x slower (8.6 s vs 0.55 s measured here at load ~14). On CUDA the setting only affects the host.
    threads=1,
    lr_scheduler="constant",
    beta=0.0,
    loss_type="dapo",
    scale_rewards="group",
    format_weight=0.1,
    temperature=1.0,
)

# Per-algorithm adjustments on top of the size preset.
_BY_ALGO = {
    "sft": {},
    "grpo": {},
    "rloo": {},
    # PPO holds a reference model for its per-token KL reward (rlm_lab.train.ppo.PPOConfig default 0.05).
    "ppo": {"beta": 0.05},
}


def _task_adjust(task: str, size: str) -> dict:
    """Longer answers need longer completions (countdown writes an expression)."""
    name = task.partition(":")[0]
    if name == "countdown":
        n = 16 if size != "gpu" else 24
        return {"max_completion_length": n, "eval_max_new_tokens": n}
    if name == "arithmetic":
        digits = 2
        for part in task.partition(":")[2].split(","):
            if part.startswith("digits="):
                try:
                    digits = int(part.split("=", 1)[1])
                except ValueError:
                    pass
        if digits > 2:
            n = 2 * digits + 3
            return {"max_completion_length": n, "eval_max_new_tokens": n}
    return {}


def preset(algo: str, size: str, task: str = "arithmetic:digits=2") -> dict:
    """The tuned field values for ``algo`` at ``size`` on ``task`` (a dict of RunConfig fields)."""
    if algo not in ALGOS:
        raise unknown("algorithm", algo, ALGOS)
    check_size(size)
    return {**_COMMON, **get(size).train, **_BY_ALGO[algo], **_task_adjust(task, size),
            "algo": algo, "size": size, "task": task}
