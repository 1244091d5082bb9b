"""The validation suite's workloads, its runs and its records (see :mod:`rlm_lab.validate`)."""

from __future__ import annotations

import gc
import os
from dataclasses import asdict
from pathlib import Path

from ..errors import RlmLabError
from ..experiments.anatomy import Case

# The suite of each size is in the one registry (rlm_lab.sizes: ``validation``), as tuples of Case fields.
# B / G >= 8 prompts per step, so the longest prompt of a batch is almost always 6 tokens (the PROMPT_LEN
# chapter 2's prediction assumes).
WARMUP_CASE = Case("warmup", "grpo", 0.04, "nano", 16, 2, 4, steps=2, warmup=1)  # not measured: see run_suite
SUITE = "validation_suite"   # the suite's own record: workloads, baseline RSS per case, load
SHARE_MIN = 0.05             # stages below 5 % of the measured step are not judged
BARS = {"step_median": 0.15, "stage_worst": 0.25, "bias": 0.10, "peak_worst": 0.15}  # issue 12, fixed before the runs


def workloads(size: str) -> tuple[Case, ...]:
    """The size's suite (``rlm_lab.sizes.get(size).validation``); a size without one is one clear error."""
    from ..sizes import check_size, get

    size = check_size(size)
    cases = tuple(Case(*fields) for fields in get(size).validation)
    if not cases:
        raise RlmLabError(f"no validation suite at size {size!r} yet (rlm_lab.sizes: validation)")
    return cases


def run_dir(root: Path, case: Case) -> Path:
    return Path(root) / f"validation_{case.name}"


def _rss() -> int:
    """Current resident set size (VmRSS) of this process in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def run_suite(size: str, root: Path, names=None, seed: int = 0, say=print):
    """Run the suite's workloads (all, or ``names``) into ``root`` and write the suite record there.

    Before each case: ``gc.collect()`` and the RSS, the runtime's share of every stage's measured peak.
    Run it under ``flock -x /tmp/rlm-lab-measure.lock`` when the records are to be committed."""
    import time

    from ..experiments.anatomy import run_case
    from ..record import RunRecord

    cases = [c for c in workloads(size) if names is None or c.name in names]
    unknown = set(names or ()) - {c.name for c in cases}
    if unknown:
        raise RlmLabError(f"unknown validation workload(s) {', '.join(sorted(unknown))}; "
                          f"choose from {', '.join(c.name for c in workloads(size))}")
    suite = RunRecord(Path(root) / SUITE, {"size": size, "workloads": [asdict(c) for c in cases],
                                           "warmup_case": asdict(WARMUP_CASE)},
                      command=f"rlm-lab validate --size {size} --run", seed=seed)
    with suite:
        # A throwaway run first, so that every case's baseline holds the whole runtime (transformers' and
        # TRL's lazily imported modules, the data set, thread pools), not only the first case's.
        run_case(WARMUP_CASE, size, suite.scratch("warmup") / "run", seed=seed)
        baselines, loads = {}, {}
        for case in cases:
            gc.collect()
            baselines[case.name] = _rss()
            loads[case.name] = os.getloadavg()
            t0 = time.perf_counter()
            run_case(case, size, run_dir(root, case), seed=seed)
            say(f"validated {case.name}: {time.perf_counter() - t0:.1f} s, load {os.getloadavg()[0]:.2f}")
        suite.complete(baseline_rss_bytes=baselines, loadavg_before=loads, loadavg_after=os.getloadavg(),
                       cpu_count=os.cpu_count())
    return suite


def load_suite(size: str, root: Path | None = None):
    """(suite record, {name: case record}) from ``root``; default: the committed records of ``size``
    (``data/runs/<size>``) when the suite is there, else this build's own (``_build/runs/<size>``)."""
    from ..record import RecordError, load_record, reference_root, runs_root

    if root is None:
        root = reference_root(size) if (reference_root(size) / SUITE).exists() else runs_root(size)
    root = Path(root)
    if not (root / SUITE).exists():
        raise RlmLabError(f"no validation records in {root}; run `rlm-lab validate --size {size} --run`")
    try:
        suite = load_record(root / SUITE, require=("baseline_rss_bytes",))
        # the workloads the suite record lists (all of the size's, unless it was run with --only)
        cases = [Case(**c) for c in suite.config["workloads"]]
        recs = {c.name: load_record(run_dir(root, c), require=("trace",)) for c in cases}
    except RecordError as e:
        raise RlmLabError(str(e)) from None
    return suite, recs


def reward_s_per_sample() -> float:
    """The verifier's seconds per sample from chapter 2's committed calibration (an input of the model,
    measured apart from the runs it is judged on); 0 if it was never committed."""
    from ..record import RecordError, load_record, reference_root

    try:
        return load_record(reference_root("cpu") / "ch02_reward_calibration").results["reward_s_per_sample"]
    except RecordError:
        return 0.0
