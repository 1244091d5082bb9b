"""Which calibration is judged on which validation records: one machine, one window, each.

This project's machines are re-provisioned between sessions, and the one of 2026-12-01 18:37 UTC ran the
validation suite about twice as slow as the one of that morning (same CPU model string, same torch; chapter 2
prints the ratio): a
profile predicts the machine it was calibrated on, near the time it was calibrated. So every calibration
is judged on the suite measured on its own machine in its own session. :data:`PAIRS` is that registry
(the book's table and ``tests/test_validate_pairs.py`` read it); :func:`pair_rows` summarises each pair.
"""

from __future__ import annotations

from ..cost.hardware import HARDWARE_DIR
from ..errors import RlmLabError
from .compare import report
from ..record import repo_root

CAL = HARDWARE_DIR / "calibrations"
# The suites measured this session on this session's machine: before any in-situ fit (the headline),
# and after the last calibration of the session.
BEFORE = "data/runs/cpu/validation_repeat/2026-12-01"
AFTER = "data/runs/cpu/validation_repeat/2026-12-01-after"
MORNING = "data/runs/cpu"  # the committed suite of the morning session (07:27 UTC) and its machine

# (key, what the profile is, profile, validation records relative to the repository)
PAIRS = (
    ("insitu", "in-situ fit (calibration suites A+B+C), this session's machine", "cpu-2core-epyc-insitu", BEFORE),
    ("insitu_after", "the same in-situ fit, that machine's suite measured after every calibration",
     "cpu-2core-epyc-insitu", AFTER),
    ("micro_now", "microbenchmarks only, this session's machine (18:51)", CAL / "cpu-2core-epyc-2026-12-01T18-51.json",
     BEFORE),
    ("micro_morning", "microbenchmarks only, the morning's machine (full, 07:21)",
     CAL / "cpu-2core-epyc-2026-12-01T07-21.json", MORNING),
    ("chapters", "the chapters' profile (2026-11-30), the morning's suite", "cpu-2core-epyc", MORNING),
)


def pair_rows(size: str = "cpu", statistic: str = "median") -> list[dict]:
    """One row per pair of :data:`PAIRS` whose records and profile are present: its summary and verdicts."""
    rows = []
    for key, label, profile, root in PAIRS:
        try:
            rep = report(size, repo_root() / root, profile, statistic)
        except RlmLabError as e:
            rows.append({"key": key, "pair": label, "missing": str(e)})
            continue
        s = rep["summary"]
        rows.append({"key": key, "pair": label, "records": root, "runs": s["runs"], "step_median": s["step_median"],
                     "step_worst": s["step_worst"], "bias": s["bias"], "stage_median": s["stage_median"],
                     "stage_worst": s["stage_worst"], "worst_stage": s["worst_stage"],
                     "peak_worst": s.get("peak_worst", float("nan")), "verdicts": s["verdicts"],
                     "unpredicted": sorted(s.get("unpredicted", {}))})
    return rows
