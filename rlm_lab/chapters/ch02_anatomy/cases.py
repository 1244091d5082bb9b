"""Chapter 2's cases: what runs (algorithm, model, batch, forced completion length, steps) at each size,
and where their records go (the hardware profile its predictions use is
:func:`rlm_lab.cost.hardware.profile_for`), and :data:`REFERENCES`: the comparisons ``rlm-lab reference --chapter 2``
re-measures."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ...protocol import Reference
from ...record import runs_root
from ...sizes import get
from ...validate.traced_case import Case


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


# rlm-lab reference --chapter 2: the three algorithms' traced steps (the page's per-algorithm predictions and their
# errors read these records), paired against GRPO under the protocol. One repeat at cpu size: the case's ~16-18 s of
# training (data/runs/cpu/ch02_grpo, ch02_dapo: train_seconds) plus a fresh process's start, about 30 s.
_ARM = "rlm_lab.chapters.ch02_anatomy.run:reference_arm"
_PREDICT = "rlm_lab.chapters.ch02_anatomy.run:predict_arm"
REFERENCES = (
    Reference("dapo_vs_grpo", ("dapo", "grpo"), _ARM, "step_s", False, ("ch02_dapo", "ch02_grpo"), 30.0, _PREDICT),
    Reference("ppo_vs_grpo", ("ppo", "grpo"), _ARM, "step_s", False, ("ch02_ppo",), 25.0, _PREDICT),
)
