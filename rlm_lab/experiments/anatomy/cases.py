"""Chapter 2's cases: what runs (algorithm, model, batch, forced completion length, steps) at each size,
and which hardware profile its predictions use."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from ...errors import RlmLabError
from ...record import runs_root
from ...sizes import check_size, get

TASK = "arithmetic:digits=2"
# The calibrated profile of the machine the committed cpu runs were made on; $RLM_CPU_PROFILE points
# the notebooks at another one (a name in data/hardware/ or a path) after `rlm-lab calibrate` elsewhere.
CPU_PROFILE = os.environ.get("RLM_CPU_PROFILE", "cpu-2core-epyc")
# The same machine's profile with its per-call terms fitted in situ on the calibration suite's traced runs
# (rlm_lab.insitu; data/hardware/cpu-2core-epyc-insitu.json): what `rlm-lab validate` judges by default.
# The chapters keep CPU_PROFILE, so that their committed comparisons reproduce as they were made.
INSITU_PROFILE = os.environ.get("RLM_INSITU_PROFILE", "cpu-2core-epyc-insitu")
PROMPT_LEN = 6  # "99+99=": TRL left-pads each batch to its longest prompt, and 8+ prompts almost always hold a 6


def profile_for(size: str):
    """The hardware profile predictions at ``size`` use: the calibrated CPU profile for smoke/cpu; for gpu
    ``$RLM_GPU_PROFILE``, else a calibrated profile of this GPU if one was written, else its datasheet."""
    if check_size(size) != "gpu":
        return CPU_PROFILE
    if os.environ.get("RLM_GPU_PROFILE"):
        return os.environ["RLM_GPU_PROFILE"]
    import torch

    from ...cost import known_profiles
    from ...cost.calibrate import default_name

    if not torch.cuda.is_available():
        return "h100-sxm"
    if default_name("cuda") in known_profiles():
        return default_name("cuda")
    name = torch.cuda.get_device_name(0).lower()
    for key, prof in (("h200", "h200"), ("h100", "h100-sxm"), ("a100", "a100-80gb"), ("l4", "l4"), ("t4", "t4")):
        if key in name:
            return prof
    raise RlmLabError(f"no hardware profile for GPU {name!r}; run `rlm-lab calibrate --device cuda` "
                      "or set RLM_GPU_PROFILE to a profile name or path")


@dataclass(frozen=True)
class Case:
    """One traced run. ``batch`` completions per optimizer step = batch / group prompts x group."""

    name: str
    algo: str = "grpo"       # grpo | ppo  (DAPO-style = grpo with beta 0)
    beta: float = 0.04
    model: str = "micro"
    batch: int = 64
    group: int = 8
    length: int = 16         # forced completion length R
    steps: int = 12
    warmup: int = 2          # traced steps left out of the summary (one-time costs)
    bf16: bool = False       # TRL's default bf16=True kept: bf16 autocast on CPU (accelerate)
    checkpointing: bool = False  # TRL's default gradient_checkpointing=True kept

    @property
    def label(self) -> str:
        kind = "DAPO-style" if self.algo == "grpo" and self.beta == 0 else self.algo.upper()
        return f"{kind} B={self.batch} R={self.length}"


def algorithm_cases(size: str) -> dict[str, Case]:
    """The three algorithms side by side: PPO (actor, critic, reference, verifier), GRPO (actor,
    reference), DAPO-style GRPO with beta = 0 (actor only)."""
    base = dict(get(size).anatomy)  # the base case of this size: rlm_lab.sizes, the one registry
    return {"grpo": Case("grpo", "grpo", 0.04, **base),
            "dapo": Case("dapo", "grpo", 0.0, **base),
            "ppo": Case("ppo", "ppo", 0.04, **base)}


def sweep_cases(size: str) -> dict[str, Case]:
    """GRPO at other completion lengths and batch sizes (the base point is ``algorithm_cases()['grpo']``)."""
    base = algorithm_cases(size)["grpo"]
    lengths, batches = get(size).anatomy_sweep
    out = {f"grpo_R{r}": replace(base, name=f"grpo_R{r}", length=r) for r in lengths}
    out.update({f"grpo_B{b}": replace(base, name=f"grpo_B{b}", batch=b) for b in batches})
    return out


def case_dir(case: Case, size: str) -> Path:
    return runs_root(size) / f"ch02_{case.name}"
