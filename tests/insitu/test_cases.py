"""The in-situ calibration suite is never the validation suite: no workload of one is a workload of the other."""

from rlm_lab.insitu import calibration_cases
from rlm_lab.validate import workloads


def _workload(c):
    """What a run measures (its name, steps and warm-up aside)."""
    return (c.algo, c.beta, c.model, c.batch, c.group, c.length, c.bf16, c.checkpointing)


def test_calibration_and_validation_are_disjoint():
    for size in ("smoke", "cpu"):
        cal, val = calibration_cases(size), workloads(size)
        assert not {_workload(c) for c in cal} & {_workload(c) for c in val}
        assert not {c.name for c in cal} & {c.name for c in val}
        assert len({c.name for c in cal}) == len(cal)


def test_cpu_calibration_exercises_every_fitted_group():
    """Each term the fit scales needs a run that pays it: depths 2, 4 and 8 (base vs per layer), MoE, PPO's
    critic, bf16 autocast and checkpointing."""
    cal = calibration_cases("cpu")
    assert {"nano", "micro", "mini", "small"} <= {c.model for c in cal}
    assert {"nano-moe", "micro-moe"} & {c.model for c in cal}
    assert any(c.algo == "ppo" for c in cal) and any(c.beta == 0 for c in cal)
    assert any(c.bf16 and not c.checkpointing for c in cal) and any(c.bf16 and c.checkpointing for c in cal)
