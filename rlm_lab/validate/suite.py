"""The validation suite's workloads, its runs and its records (see :mod:`rlm_lab.validate`)."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import time
from dataclasses import asdict
from pathlib import Path

from ..errors import RlmLabError
from ..host import load_average
from ..record import RecordError, RunRecord, load_record, reference_root, runs_root
from ..sizes import check_size, get
from .traced_case import Case, run_case

# The suite of each size is in the one registry (rlm_lab.sizes: ``validation``), as tuples of Case fields.
# B / G >= 8 prompts per step, so the longest prompt of a batch is almost always 6 tokens (the PROMPT_LEN
# chapter 2's prediction assumes).
WARMUP_CASE = Case("warmup", "grpo", 0.04, "nano", 16, 2, 4, steps=2, warmup=1)  # not measured: see run_suite
SUITE = "validation_suite"   # the suite's own record: workloads, baseline RSS per case, load
SHARE_MIN = 0.05             # stages below 5 % of the measured step are not judged
# How the workloads were run (recorded in the suite record): since issue 12 item 5, each in its own process
PROCESS = "fresh process per workload (spawn), warm-up run, then baseline RSS, then the workload"
BARS = {"step_median": 0.15, "stage_worst": 0.25, "bias": 0.10, "peak_worst": 0.15}  # issue 12, fixed before the runs


def workloads(size: str) -> tuple[Case, ...]:
    """The size's suite (``rlm_lab.sizes.get(size).validation``); a size without one is one clear error."""
    size = check_size(size)
    cases = tuple(Case(*fields) for fields in get(size).validation)
    if not cases:
        raise RlmLabError(f"no validation suite at size {size!r} yet (rlm_lab.sizes: validation)")
    return cases


def run_dir(root: Path, case: Case, prefix: str = "validation_") -> Path:
    return Path(root) / f"{prefix}{case.name}"


def _rss() -> int:
    """Current resident set size (VmRSS) of this process in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _fresh_case(case: Case, size: str, out: str, warmup_dir: str, seed: int, conn) -> None:
    """In a fresh (spawned) process: a throwaway warm-up run, then the RSS baseline, then ``case``.

    The warm-up loads the whole runtime (transformers' and TRL's lazily imported modules, the data set,
    thread pools) so that the baseline holds it; what an earlier workload allocated and freed (and the
    allocator kept) is not in this process at all, so the peak above the baseline is this workload's own."""
    try:
        run_case(WARMUP_CASE, size, Path(warmup_dir), seed=seed)
        gc.collect()
        baseline, load = _rss(), load_average()
        run_case(case, size, Path(out), seed=seed)
        conn.send(("ok", baseline, load))
    except BaseException as e:  # sent to the parent, which raises one clear error naming the workload
        conn.send(("error", f"{type(e).__name__}: {e}", None))
    finally:
        conn.close()


def _run_in_fresh_process(case: Case, size: str, out: Path, warmup_dir: Path, seed: int) -> tuple:
    """(baseline RSS bytes, load average before) of ``case`` run by :func:`_fresh_case` in a spawned process."""
    ctx = mp.get_context("spawn")  # not fork: a fork would inherit this process's heap and runtime
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_fresh_case, args=(case, size, str(out), str(warmup_dir), seed, send),
                       name=f"validate-{case.name}", daemon=True)
    proc.start()
    send.close()
    try:
        msg = recv.recv()
    except EOFError:
        msg = ("error", "the process ended without a result", None)
    proc.join()
    if msg[0] != "ok" or proc.exitcode != 0:
        raise RlmLabError(f"validation workload {case.name} failed in its process (exit code {proc.exitcode}): "
                          f"{msg[1] if msg[0] != 'ok' else 'no result'}")
    return msg[1], msg[2]


def run_suite(size: str, root: Path, names=None, seed: int = 0, say=print, suite_cases=None, suite_name: str = SUITE,
              command: str | None = None, prefix: str = "validation_"):
    """Run the suite's workloads (all, or ``names``) into ``root`` and write the suite record there.

    Each workload runs in its own fresh process (issue 12, item 5): a warm-up run there, then the RSS
    (``baseline_rss_bytes``: the runtime's share of every stage's measured peak), then the workload
    (:func:`_fresh_case`). Run it under ``flock -x /tmp/rlm-lab-measure.lock`` when the records are to be
    committed. ``suite_cases`` / ``suite_name`` / ``command``: another suite run the same way (the in-situ
    calibration's, :mod:`rlm_lab.insitu`), its run folders ``<root>/<prefix><name>``; default the validation suite."""
    every = tuple(suite_cases) if suite_cases is not None else workloads(size)
    cases = [c for c in every if names is None or c.name in names]
    unknown = set(names or ()) - {c.name for c in cases}
    if unknown:
        raise RlmLabError(f"unknown workload(s) {', '.join(sorted(unknown))}; "
                          f"choose from {', '.join(c.name for c in every)}")
    suite = RunRecord(Path(root) / suite_name, {"size": size, "workloads": [asdict(c) for c in cases],
                                                "warmup_case": asdict(WARMUP_CASE), "process": PROCESS},
                      command=command or f"rlm-lab validate --size {size} --run", seed=seed)
    with suite:
        baselines, loads = {}, {}
        for case in cases:
            t0 = time.perf_counter()
            baselines[case.name], loads[case.name] = _run_in_fresh_process(
                case, size, run_dir(root, case, prefix), suite.scratch(f"warmup_{case.name}") / "run", seed)
            say(f"ran {case.name}: {time.perf_counter() - t0:.1f} s, load {load_average()[0]:.2f}")
        suite.complete(baseline_rss_bytes=baselines, loadavg_before=loads, loadavg_after=load_average(),
                       cpu_count=os.cpu_count())
    return suite


def load_suite(size: str, root: Path | None = None, suite_name: str = SUITE, prefix: str = "validation_"):
    """(suite record, {name: case record}) from ``root``; default: the committed records of ``size``
    (``data/runs/<size>``) when the suite is there, else this build's own (``_build/runs/<size>``)."""
    if root is None:
        root = reference_root(size) if (reference_root(size) / suite_name).exists() else runs_root(size)
    root = Path(root)
    if not (root / suite_name).exists():
        raise RlmLabError(f"no {suite_name} records in {root}; run it first "
                          f"(`rlm-lab validate --size {size} --run`, or `rlm-lab insitu --run`)")
    try:
        suite = load_record(root / suite_name, require=("baseline_rss_bytes",))
        # the workloads the suite record lists (all of the size's, unless it was run with --only)
        cases = [Case(**c) for c in suite.config["workloads"]]
        recs = {c.name: load_record(run_dir(root, c, prefix), require=("trace",)) for c in cases}
    except RecordError as e:
        raise RlmLabError(str(e)) from None
    return suite, recs


def reward_s_per_sample() -> float:
    """The verifier's seconds per sample from chapter 2's committed calibration (an input of the model,
    measured apart from the runs it is judged on); 0 if it was never committed."""
    try:
        return load_record(reference_root("cpu") / "ch02_reward_calibration").results["reward_s_per_sample"]
    except RecordError:
        return 0.0
