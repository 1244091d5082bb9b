"""Chapter 2's cases: what runs (algorithm, model, batch, forced completion length, steps) at each size,
and where their records go (the hardware profile its predictions use is
:func:`rlm_lab.cost.hardware.profile_for`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ...record import runs_root
from ...sizes import check_size, get

TASK = "arithmetic:digits=2"
PROMPT_LEN = 6  # "99+99=": TRL left-pads each batch to its longest prompt, and 8+ prompts almost always hold a 6


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
