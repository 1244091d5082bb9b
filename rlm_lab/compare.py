"""Predicted against measured, the same way in every chapter: relative errors, the whole-step error
first, the per-stage median second, and a verdict against goals fixed before the measurement.

Every chapter's experiment has one shape: *cases* (what runs) -> *run* (a recorded
:class:`rlm_lab.record.RunRecord`) -> *compare* (rows ``{"stage" or a key, "predicted", "measured",
"rel_error"}`` built in the package, unit-tested) -> *table* (what the notebook prints). This module is
the "compare" step they share.

The goals are constants, named before any measurement was made: a comparison first aims at
:data:`BAR` (25 %), then at :data:`GOAL` (10 %). Where a chapter misses one, :func:`verdict` says
"not met" with the live number; a goal is never moved to the level a run happened to reach.

The whole-step error comes first because it is what a reader of a prediction pays for: the step
the cost model predicts is the sum of its stages, while the measured step also holds what the cost
model does not model (TRL's bookkeeping between stages, the "other" row), so that share is part of
the whole-step error. A per-stage median alone would hide it.
"""

from __future__ import annotations

import statistics

from .errors import RlmLabError
from .evidence import median_interval
from .record import reference_root

BAR = 0.25   # the first goal of every comparison: |relative error| <= 25 %
GOAL = 0.10  # the goal after that: <= 10 %

STEP = "step"                       # the row comparing whole steps
OTHER = "other (not modelled)"      # measured time outside every modelled stage


def reference_dir(size: str = "cpu"):
    """Where the committed reference records of ``size`` are read from (``data/runs/<size>``), which is
    never where a command writes by default (``rlm_lab.record.runs_root``)."""
    return reference_root(size)


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured; NaN when nothing was measured."""
    return (predicted - measured) / measured if measured else float("nan")


def _finite(x) -> bool:
    return x is not None and x == x


def median_abs_error(rows: list[dict], stages_only: bool = True) -> float:
    """Median |relative error| over the rows that have one (per-stage rows only: the ``step`` row is
    left out unless ``stages_only`` is False)."""
    errs = [abs(r["rel_error"]) for r in rows if _finite(r["rel_error"])
            and not (stages_only and r.get("stage") == STEP)]
    if not errs:
        raise RlmLabError("no comparable rows: nothing was both predicted and measured")
    return statistics.median(errs)


def verdict(errors, bar: float = BAR, goal: float = GOAL) -> str:
    """One phrase for the relative errors of the workloads compared (one per workload or run; signed or not)
    against the goals, decided on the median |error| and its 95 % interval
    (:func:`rlm_lab.evidence.median_interval`: none below 6 errors), never on the point alone: "meets the goal" only when the whole
    interval is at or under the goal, "meets the bar" when it is under the bar (and "not yet the goal" only when
    wholly above the goal), "not met" only when it is wholly above the bar; otherwise "undecided", and so is a
    single error (one workload, one run: no interval)."""
    errs = [abs(float(e)) for e in ([errors] if isinstance(errors, (int, float)) else errors) if _finite(e)]
    if not errs:
        return "no comparison (nothing both predicted and measured)"
    iv = median_interval(errs)
    if not iv.decided:
        if iv.n == 1:
            return f"undecided: one run, no interval ({iv.estimate:.1%})"
        return f"undecided: {iv.n} errors, too few for a 95 % interval of their median (6 needed) ({iv.estimate:.1%})"
    where = iv.text("{:.1%}")
    if iv.hi <= goal:
        return f"meets the {goal:.0%} goal"
    if iv.hi <= bar:
        return (f"meets the {bar:.0%} bar, not yet the {goal:.0%} goal" if iv.lo > goal
                else f"meets the {bar:.0%} bar; the {goal:.0%} goal undecided ({where})")
    if iv.lo > bar:
        return f"not met: {where} is above the {bar:.0%} bar"
    return f"undecided: {where} straddles the {bar:.0%} bar"


def step_summary(rows: list[dict]) -> dict:
    """Summary of per-stage comparison rows of one or more runs (rows carry ``run`` and ``stage``).

    - ``step_errors``: ``{run: relative error of the whole step}`` (signed);
    - ``step_error``: median over runs of |whole-step error| (the headline number);
    - ``stage_error``: median over every (run, stage) row of |relative error|, ``step`` row excluded;
    - ``other_share``: ``{run: measured "other" seconds / measured step seconds}``, the part of each
      measured step that no modelled stage covers (it is inside the whole-step error).
    """
    runs: dict[str, dict] = {}
    for r in rows:
        runs.setdefault(r.get("run", ""), {})[r["stage"]] = r
    step_errors, other_share = {}, {}
    for run, by_stage in runs.items():
        step = by_stage.get(STEP)
        if step is None or not _finite(step["rel_error"]):
            continue
        step_errors[run] = step["rel_error"]
        other = by_stage.get(OTHER)
        other_share[run] = (other["measured"] / step["measured"]) if other and step["measured"] else 0.0
    if not step_errors:
        raise RlmLabError("no whole-step row: compare() must add a 'step' row per run")
    return {"step_errors": step_errors, "step_error": statistics.median(abs(e) for e in step_errors.values()),
            "stage_error": median_abs_error(rows), "other_share": other_share}
