"""Chapter 2's runs: traced TRL runs of each case (with memory probes), the verifier's calibration and the
tracer's own overhead, each a RunRecord; the committed ones are loaded instead of re-run. :func:`reference_arm` is
one repeat of one algorithm for ``rlm-lab reference --chapter 2``."""

from __future__ import annotations

import argparse
import datetime as _dt
import random
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from ...compare import reference_dir
from ...errors import RlmLabError
from ...host import load_average
from ...record import RecordError, RunRecord, load_record, runs_root
from ...sizes import check_size
from ...tasks import ensure_data, parse_task, reward_funcs
from ...validate.traced_case import TASK, predict_case, run_case
from .cases import algorithm_cases, case_dir, sweep_cases


def reward_calibration(size: str, n: int = 4096, run_dir: Path | None = None, seed: int = 0) -> RunRecord:
    """Seconds per sample of the task's verifier rewards on synthetic completions (calibration input)."""
    task = parse_task(TASK)
    rows = ensure_data(task)["train"][:n]
    rng = random.Random(seed)
    length = algorithm_cases(size)["grpo"].length
    completions = ["".join(rng.choice("0123456789+-= ") for _ in range(length)) for _ in rows]
    columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
    funcs = reward_funcs(task)

    def once():
        for f in funcs:
            f(completions=completions, prompts=[r["prompt"] for r in rows], **columns)

    once()
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    record = RunRecord(run_dir or runs_root(size) / "ch02_reward_calibration",
                       {"task": TASK, "samples": n, "completion_length": length},
                       command=f"rlm_lab.chapters.ch02_anatomy.reward_calibration(size={size!r})", seed=seed)
    record.complete(reward_s_per_sample=statistics.median(times) / n, repeats_s=times)
    return record


def tracer_overhead(size: str, repeats: int = 3, run_dir: Path | None = None, seed: int = 0) -> RunRecord:
    """The GRPO case run ``repeats`` times with and ``repeats`` times without the tracer (alternating),
    median step time of each (first ``warmup`` steps left out). Run it on a quiet machine."""
    case = algorithm_cases(size)["grpo"]
    walls = {"traced": [], "plain": []}
    record = RunRecord(run_dir or runs_root(size) / "ch02_tracer_overhead", {"case": asdict(case), "repeats": repeats},
                       command=f"rlm_lab.chapters.ch02_anatomy.tracer_overhead(size={size!r})", seed=seed)
    tmp = record.scratch("overhead_")  # inside the run folder: a killed run's leftovers are cleaned by the next
    for i in range(repeats):
        for mode in ("plain", "traced"):
            rec = run_case(case, size, tmp / f"{mode}{i}", seed=seed, trace_on=mode == "traced")
            walls[mode].append(rec.results["step_walls"][case.warmup:])
    med = {m: statistics.median(w for run in runs for w in run) for m, runs in walls.items()}
    record.complete(step_walls=walls, median_step_s=med, overhead=med["traced"] / med["plain"] - 1)
    return record


def ensure_runs(size: str, force: bool = False) -> dict[str, RunRecord]:
    """The chapter's records: the committed ones of ``size`` (``data/runs/<size>``) when present, else this
    build's own finished runs under ``runs_root(size)``, else run now (an unfinished or damaged build run is
    run again; ``force``: run everything again)."""
    ref = load_reference(size) if not force else {}
    out = {"reward_calibration": ref.get("reward_calibration")
           or _own(runs_root(size) / "ch02_reward_calibration", force, ("reward_s_per_sample",))
           or reward_calibration(size)}
    for name, case in {**algorithm_cases(size), **sweep_cases(size)}.items():
        if name in ref and "trace" in ref[name].results:
            out[name] = ref[name]
        else:
            out[name] = _own(case_dir(case, size), force, ("trace",)) or run_case(case, size, case_dir(case, size))
    return out


def predict_arm(arm: str, size: str, profile: str) -> float:
    """One algorithm's predicted step (the sum of its predicted stages, as the page's step row) from ``profile``
    for ``rlm-lab reference --chapter 2``; the verifier's seconds per sample from the committed calibration run of
    this size (else cpu's; none: 0), a separate earlier run, never the window's own."""
    reward_s = 0.0
    for where in dict.fromkeys((size, "cpu")):
        try:
            reward_s = RunRecord.load(reference_dir(where) / "ch02_reward_calibration").results["reward_s_per_sample"]
            break
        except (RlmLabError, KeyError):
            continue
    pred = predict_case(algorithm_cases(size)[arm], profile, reward_s)
    return sum(r.seconds for r in pred.rows)


def reference_arm(arm: str, size: str, out) -> dict:
    """One repeat of one algorithm's traced case for ``rlm-lab reference --chapter 2`` (:data:`.cases.REFERENCES`),
    into ``<out>/ch02_<arm>/<UTC time>``: ``{"step_s": median step after the warm-up steps, "record": folder}``."""
    case = algorithm_cases(size)[arm]
    folder = Path(out) / f"ch02_{arm}" / _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    rec = run_case(case, size, folder)
    return {"step_s": statistics.median(rec.results["step_walls"][case.warmup:]), "record": str(folder)}


def _own(run_dir: Path, force: bool, require) -> RunRecord | None:
    """This build's finished record in ``run_dir`` holding ``require``, or None (missing, unfinished, damaged)."""
    if force or not (run_dir / "record.json").exists():
        return None
    try:
        return load_record(run_dir, require=require)
    except RecordError:
        return None


def load_reference(size: str = "cpu") -> dict[str, RunRecord]:
    """The committed records of this chapter at ``size`` (empty if none were committed). Every ``ch02_*``
    folder there must hold a completed run: a damaged or unfinished one is a RecordError naming it."""
    out = {}
    root = reference_dir(size)
    for d in sorted(p for p in root.glob("ch02_*") if p.is_dir()):
        out[d.name.removeprefix("ch02_")] = RunRecord.load(d)
    return out


def main(argv=None) -> int:
    """``rlm-lab chapter 2 run --size cpu [--force] [--overhead]``: make the chapter's records."""
    ap = argparse.ArgumentParser(prog="rlm-lab chapter 2 run", description=main.__doc__)
    ap.add_argument("--size", default="cpu")
    ap.add_argument("--force", action="store_true", help="re-run records that exist")
    ap.add_argument("--overhead", action="store_true", help="also measure the tracer's overhead")
    ap.add_argument("--only", nargs="*", help="case names to (re-)run, e.g. grpo ppo")
    args = ap.parse_args(argv)
    size = check_size(args.size)
    if args.only:
        cases = {**algorithm_cases(size), **sweep_cases(size)}
        for name in args.only:
            if name == "reward_calibration":
                reward_calibration(size)
            elif name == "tracer_overhead":
                tracer_overhead(size)
            else:
                run_case(cases[name], size, case_dir(cases[name], size))
            print("recorded", name, f"load {load_average()[0]:.1f}", flush=True)
        return 0
    ensure_runs(size, force=args.force)
    if args.overhead:
        tracer_overhead(size)
    return 0
