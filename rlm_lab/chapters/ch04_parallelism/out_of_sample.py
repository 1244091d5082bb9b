"""Out-of-sample check of the distributed step-time prediction (issue 12, item 3).

The chapter-4 records (``ch04_*``) were used while the distributed model was developed, so they are
in-sample for it. These cases use models, batches and sequence lengths that no ``ch04_*`` record used
(the chapter trains ``micro``/``micro-moe``); they are run once, under the exclusive measurement lock, into
``data/runs/cpu/validation_dist_*`` and predicted from the profile alone (``step_time``). The RL
validation suite (``rlm_lab.validate``, ``sizes.validation``) describes RL workloads (algorithm, G, R);
a training step of a layout does not fit its shape, hence this parallel list.

Bar, fixed before the runs: median |error| of the whole step <= 25 % (:data:`BAR`).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from ...evidence import median_interval
from ...host import load_average
from ...parallel.bench.measure import spawn_layouts, write_record
from ...parallel.mesh import Layout
from .compare import compare
from .run import load_records, oversubscribed
from ...record import repo_root

BAR = 0.25
PREFIX = "validation_dist_"
# (layout, run_layout kwargs): 2 processes, 1 thread each; none of these models/batches is a ch04 record's
CASES = (
    (Layout(dp=2, zero=2), {"model": "nano", "batch": 16, "seq": 32}),
    (Layout(tp=2), {"model": "mini", "batch": 4, "seq": 32}),
    (Layout(pp=2, schedule="1f1b", microbatches=4), {"model": "mini", "batch": 8, "seq": 32}),
    (Layout(cp=2), {"model": "nano", "batch": 4, "seq": 64}),
    # added after the first four were recorded (the model unchanged): EP, SP and an oversubscribed layout
    (Layout(ep=2), {"model": "nano-moe", "batch": 8, "seq": 32}),
    (Layout(tp=2, sp=True), {"model": "nano", "batch": 8, "seq": 32}),
    (Layout(dp=4, zero=3), {"model": "nano", "batch": 16, "seq": 32}),
)
STEPS = 8


def case_name(layout: Layout, kw: dict) -> str:
    return f"{PREFIX}{layout.name()}-{kw['model']}-B{kw['batch']}-s{kw['seq']}"


def run(root: str | Path, steps: int = STEPS, say=print) -> list[Path]:
    """Run the cases without a record under ``root`` (one set of processes per world size) and write one
    record each; an existing record is kept, never overwritten (its case is skipped and said so)."""
    root = Path(root)
    todo: dict[int, list] = {}
    for lay, kw in CASES:
        if (root / case_name(lay, kw)).exists():
            say(f"{case_name(lay, kw)}: recorded already, kept")
        else:
            todo.setdefault(lay.world, []).append((lay, kw))
    dirs = []
    for world, cases in todo.items():
        load_before = load_average()
        res = spawn_layouts([(lay, kw | {"steps": steps}) for lay, kw in cases], world=world, timeout_s=300)
        for (lay, kw), r in zip(cases, res):
            d = write_record(root / case_name(lay, kw), r, {"validation": "distributed, out of sample",
                                                              "rank_threads": 1, "load_before": load_before,
                                                              "oversubscribed": oversubscribed(world)})
            say(f"{d.name}: {1000 * statistics.median(r['step_s'][1:]):.1f} ms/step")
            dirs.append(d)
    return dirs


def rows(root: str | Path, profile) -> list[dict]:
    """Measured vs predicted (``suite.compare``) for the validation records under ``root``."""
    return compare(load_records(root, PREFIX), profile)


def summary(rs: list[dict]) -> dict:
    """Median and worst |error|, signed bias, and the verdict against :data:`BAR`."""
    errs = [r["time_rel_err"] for r in rs if r.get("time_rel_err") is not None]
    if not errs:
        return {"n": 0, "median_abs": None, "worst_abs": None, "bias": None, "met": None}
    med = statistics.median(abs(e) for e in errs)
    return {"n": len(errs), "median_abs": med, "worst_abs": max(abs(e) for e in errs),
            "bias": statistics.median(errs), "bar": BAR, "met": bar_met([abs(e) for e in errs], BAR)}


def bar_met(abs_errors: list, bar: float) -> str:
    """The median |error| against ``bar`` from its 95 % interval (:func:`rlm_lab.evidence.median_interval`: exact
    order statistics below 10 errors, none below 6): "met" only when the whole interval is at or under the bar,
    "not met" only when wholly above, else "undecided" (too few errors too)."""
    iv = median_interval(abs_errors)
    if not iv.decided:
        return ("undecided (one run, no interval)" if iv.n == 1 else
                f"undecided ({iv.n} errors, too few for a 95 % interval of the median)")
    return "met" if iv.hi <= bar else "not met" if iv.lo > bar else f"undecided ({iv.text('{:.0%}')})"


def main(argv=None) -> int:
    """``rlm-lab chapter 4 out-of-sample [RUNS_ROOT]`` (default ``data/runs/cpu``): run the out-of-sample layouts."""
    argv = sys.argv[1:] if argv is None else argv
    run(Path(argv[0]) if argv else repo_root() / "data" / "runs" / "cpu")
    return 0
