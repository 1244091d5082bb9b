"""``rlm-lab validate``: the cost model against a fixed suite of workloads it was never fitted on.

Issue 12, item 1. The suite (:data:`WORKLOADS`) is a committed list of traced TRL runs whose model /
shape combinations none of the chapters used while the cost model was developed: chapter 2 traced
``micro`` at B = 16, 64, 256 with G = 8 and R = 4, 16, 64; chapter 4 ran ``micro`` / ``micro-moe``
layouts without RL. Here: other zoo models (``nano``, ``mini``, the MoE ``nano-moe`` / ``micro-moe``),
other G, B and R, GRPO, PPO and DAPO-style GRPO (beta = 0). Every run uses chapter 2's experiment code
(:func:`rlm_lab.experiments.anatomy.run_case` to measure, :func:`~rlm_lab.experiments.anatomy.predict_case`
to predict, :func:`~rlm_lab.experiments.anatomy.time_table` to join them), so the validation exercises
exactly the predictor the chapters use, with the committed hardware profile.

Reported (:func:`summary`): the median and worst |error| of the whole step, the median and worst |error|
over every stage that takes >= 5 % of its measured step, and the signed bias (mean signed whole-step
error). The bars were fixed in issue 12 before any of these runs was made: whole-step median <= 15 %,
every stage >= 5 % of a step <= 25 %, |bias| <= 10 %. A bar missed is printed "not met" with the live
number.

Peak memory (item 2) is compared per stage by :mod:`rlm_lab.cost.peak` against the tracer's per-stage
peak RSS; the runtime's own RSS (interpreter, torch, transformers, TRL, allocator caches) is measured as
the RSS just before each case starts and recorded in the suite record (``validation_suite``).
"""

from __future__ import annotations

import gc
import os
import statistics
from dataclasses import asdict
from pathlib import Path

from .errors import RlmLabError
from .experiments.anatomy import Case

# name, algo, beta, model, batch, group, length, steps, warmup. B / G >= 8 prompts per step, so the
# longest prompt of a batch is almost always 6 tokens (the PROMPT_LEN chapter 2's prediction assumes).
WORKLOADS: dict[str, tuple[Case, ...]] = {
    "smoke": (
        Case("nano-moe_grpo_B16_G2_R6", "grpo", 0.04, "nano-moe", 16, 2, 6, steps=3, warmup=1),
        Case("nano_dapo_B16_G2_R4", "grpo", 0.0, "nano", 16, 2, 4, steps=3, warmup=1),
    ),
    "cpu": (
        Case("nano_grpo_B32_G4_R24", "grpo", 0.04, "nano", 32, 4, 24, steps=8, warmup=3),
        Case("mini_grpo_B32_G4_R12", "grpo", 0.04, "mini", 32, 4, 12, steps=8, warmup=3),
        Case("micro-moe_grpo_B64_G8_R12", "grpo", 0.04, "micro-moe", 64, 8, 12, steps=8, warmup=3),
        Case("nano-moe_dapo_B128_G16_R8", "grpo", 0.0, "nano-moe", 128, 16, 8, steps=8, warmup=3),
        Case("micro_ppo_B32_G4_R24", "ppo", 0.04, "micro", 32, 4, 24, steps=8, warmup=3),
        Case("mini_dapo_B64_G8_R8", "grpo", 0.0, "mini", 64, 8, 8, steps=8, warmup=3),
        Case("micro_grpo_B128_G16_R6", "grpo", 0.04, "micro", 128, 16, 6, steps=8, warmup=3),
    ),
}
WARMUP_CASE = Case("warmup", "grpo", 0.04, "nano", 16, 2, 4, steps=2, warmup=1)  # not measured: see run_suite
SUITE = "validation_suite"   # the suite's own record: workloads, baseline RSS per case, load
SHARE_MIN = 0.05             # stages below 5 % of the measured step are not judged
BARS = {"step_median": 0.15, "stage_worst": 0.25, "bias": 0.10}  # issue 12, fixed before the runs


def workloads(size: str) -> tuple[Case, ...]:
    from .sizes import check_size

    size = check_size(size)
    if size not in WORKLOADS:
        raise RlmLabError(f"no validation suite at size {size!r} yet (sizes with one: {', '.join(WORKLOADS)})")
    return WORKLOADS[size]


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

    from .experiments.anatomy import run_case
    from .record import RunRecord

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
    from .record import RecordError, load_record, reference_root, runs_root

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
    from .record import RecordError, load_record, reference_root

    try:
        return load_record(reference_root("cpu") / "ch02_reward_calibration").results["reward_s_per_sample"]
    except RecordError:
        return 0.0


STATISTICS = ("median", "min")


def least_disturbed(rec):
    """A view of ``rec`` whose trace summary holds, per stage and for the step wall, the minimum over the
    traced steps after warm-up instead of the median (read from the tracer's ``spans.jsonl``).

    Why: on a shared machine other jobs only ever add time, so the least-disturbed step is the best
    estimate of the undisturbed cost (the rule of Python's ``timeit`` docs:
    https://docs.python.org/3/library/timeit.html, "the min() of the result" is what to look at).
    Both statistics are reported; the median stays the chapters' statistic."""
    import copy

    kept = _kept_steps(rec)
    out = copy.copy(rec)
    out.data = copy.deepcopy(rec.data)
    t = out.data["results"]["trace"]
    for name, st in t["stages"].items():
        st["median_s"] = min(r["stages"].get(name, 0.0) for r in kept)
    t["step_wall_s"]["median"] = min(r["wall_s"] for r in kept)
    return out


def _kept_steps(rec) -> list[dict]:
    """The traced steps of ``rec`` after its warm-up (the tracer's ``spans.jsonl``, one line per step)."""
    from .record import read_jsonl

    steps = read_jsonl(rec.dir / "spans.jsonl")
    return steps[rec.results["trace"].get("warmup_steps_excluded", 0):] or steps


def compare(recs: dict, profile: str, reward_s: float | None = None, baselines: dict | None = None,
            statistic: str = "median") -> list[dict]:
    """Rows ``{run, stage, predicted, measured, rel_error, share}`` of every run (anatomy's time_table,
    ``share`` = measured stage / measured step), plus the predicted and measured peak memory per stage
    when ``baselines`` (runtime RSS per run) are given."""
    from .cost.peak import peak_rows
    from .experiments.anatomy import case_of, predict_case, time_table

    reward_s = reward_s_per_sample() if reward_s is None else reward_s
    rows = []
    if statistic not in STATISTICS:
        raise RlmLabError(f"unknown statistic {statistic!r}; choose {' or '.join(STATISTICS)}")
    for name, rec in recs.items():
        pred = predict_case(case_of(rec), profile, reward_s)
        if statistic == "min":
            rec = least_disturbed(rec)
        step = rec.results["trace"]["step_wall_s"]["median"]
        peaks = {r["stage"]: r for r in peak_rows(rec, pred, baselines[name])} if baselines else {}
        for r in time_table(rec, pred):
            row = {"run": name, **r, "share": r["measured"] / step if step else float("nan")}
            if r["stage"] in peaks:
                row.update({k: v for k, v in peaks[r["stage"]].items() if k != "stage"})
            rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict:
    """The suite's numbers and verdicts against :data:`BARS` (see the module docstring)."""
    from .experiments.compare import OTHER, STEP

    def fin(x):
        return x == x

    steps = [r["rel_error"] for r in rows if r["stage"] == STEP and fin(r["rel_error"])]
    judged = [r for r in rows if r["stage"] not in (STEP, OTHER) and fin(r["rel_error"])
              and r["share"] >= SHARE_MIN]
    if not steps or not judged:
        raise RlmLabError("nothing to validate: no run has both a prediction and a measurement")
    stage_abs = [abs(r["rel_error"]) for r in judged]
    worst_stage = max(judged, key=lambda r: abs(r["rel_error"]))
    out = {"runs": len(steps), "step_median": statistics.median(abs(e) for e in steps),
           "step_worst": max(abs(e) for e in steps), "bias": statistics.fmean(steps),
           "under_predicted": sum(e < 0 for e in steps), "stage_median": statistics.median(stage_abs),
           "stage_worst": max(stage_abs), "worst_stage": f"{worst_stage['run']}:{worst_stage['stage']}",
           "stages_judged": len(judged)}
    per_stage: dict[str, list[float]] = {}
    for r in judged:
        per_stage.setdefault(r["stage"], []).append(r["rel_error"])
    out["per_stage"] = {s: {"median_abs": statistics.median(abs(e) for e in es), "bias": statistics.fmean(es),
                            "n": len(es)} for s, es in per_stage.items()}
    checks = {"step_median": out["step_median"], "stage_worst": out["stage_worst"], "bias": abs(out["bias"])}
    out["verdicts"] = {k: _verdict(v, BARS[k]) for k, v in checks.items()}
    peaks = [abs(r["peak_rel_error"]) for r in rows if fin(r.get("peak_rel_error", float("nan")))]
    if peaks:
        out["peak_median"], out["peak_worst"] = statistics.median(peaks), max(peaks)
        inc = [abs(r["transient_rel_error"]) for r in rows if fin(r.get("transient_rel_error", float("nan")))]
        out["transient_median"] = statistics.median(inc) if inc else float("nan")
        out["verdicts"]["peak_worst"] = _verdict(out["peak_worst"], 0.15)
    return out


def _verdict(value: float, bar: float) -> str:
    return f"met ({value:.1%} <= {bar:.0%})" if value <= bar else f"not met ({value:.1%} > {bar:.0%})"


def table(rows: list[dict]) -> list[dict]:
    """The rows a reader reads: every judged stage (>= 5 % of its step) and every whole step, in %."""
    from .experiments.compare import OTHER, STEP

    out = []
    for r in rows:
        if r["stage"] == OTHER or (r["stage"] != STEP and r["share"] < SHARE_MIN):
            continue
        out.append({"run": r["run"], "stage": r["stage"], "predicted_s": r["predicted"], "measured_s": r["measured"],
                    "error": r["rel_error"], "share": r["share"],
                    "peak_error": r.get("peak_rel_error", float("nan")),
                    "above_baseline_error": r.get("transient_rel_error", float("nan"))})
    return out


def report(size: str, root: Path | None = None, profile: str | None = None, statistic: str = "median") -> dict:
    """Load the suite's records, compare them with the predictions of ``profile`` (default: the chapters'
    calibrated CPU profile) and summarise: ``{"root", "profile", "rows", "summary", "load"}``."""
    from .cost import load_profile
    from .experiments.anatomy import CPU_PROFILE

    profile = profile or CPU_PROFILE
    load_profile(profile)  # an unknown profile is one clear error before any record is read
    suite, recs = load_suite(size, root)
    rows = compare(recs, profile, baselines=suite.results["baseline_rss_bytes"], statistic=statistic)
    # contention: slowest / fastest traced step of each run (a quiet machine gives ~1; others' jobs spread it)
    walls = {n: [r["wall_s"] for r in _kept_steps(rec)] for n, rec in recs.items()}
    return {"contention": {n: max(w) / min(w) for n, w in walls.items() if w and min(w) > 0},"root": str(suite.dir.parent), "profile": profile, "rows": rows, "summary": summary(rows),
            "load": suite.results["loadavg_before"], "statistic": statistic}


def loop_terms_effect(size: str, loop_record, root: Path | None = None, profile: str | None = None,
                      statistic: str = "median") -> dict:
    """Issue 12, item 3: the suite's summary without and with the generation-loop terms fitted by
    ``rlm_lab.cost.loop_benchmarks`` (``loop_record``: its run folder); a term is adopted only if
    the validation error improves. ``{"before", "after", "fit", "improves"}``."""
    from .cost.loop_benchmarks import with_loop_terms
    from .experiments.anatomy import CPU_PROFILE
    from .record import load_record

    fit = load_record(loop_record, require=("generate_loop_base_s",)).results
    before = report(size, root, profile, statistic)
    after = report(size, root, with_loop_terms(profile or CPU_PROFILE, fit), statistic)
    b, a = before["summary"], after["summary"]
    improves = a["step_median"] < b["step_median"] and a["stage_median"] <= b["stage_median"]
    return {"before": before, "after": after, "fit": fit, "improves": improves}


def _print(rep: dict) -> None:
    s = rep["summary"]
    name = rep["profile"] if isinstance(rep["profile"], str) else rep["profile"].get("name", "?") + " (+ terms)"
    print(f"validation suite: {s['runs']} runs in {rep['root']}, profile {name}, measured {rep['statistic']} "
          "over the traced steps")
    print(f"{'run':28} {'stage':15} {'pred s':>9} {'meas s':>9} {'error':>8} {'share':>6} {'peak err':>9}")
    for r in table(rep["rows"]):
        print(f"{r['run']:28} {r['stage']:15} {r['predicted_s']:9.4f} {r['measured_s']:9.4f} {r['error']:+8.1%} "
              f"{r['share']:6.0%} {r['peak_error']:+9.1%}")
    print(f"whole step: median |error| {s['step_median']:.1%}, worst {s['step_worst']:.1%}, bias {s['bias']:+.1%} "
          f"({s['under_predicted']} of {s['runs']} under-predicted)")
    print(f"stages >= {SHARE_MIN:.0%} of a step: median |error| {s['stage_median']:.1%}, worst {s['stage_worst']:.1%} "
          f"({s['worst_stage']})")
    if "peak_median" in s:
        print(f"peak memory per stage: median |error| {s['peak_median']:.1%}, worst {s['peak_worst']:.1%}; "
              f"the part above the runtime baseline: median |error| {s['transient_median']:.1%}")
    for k, v in s["verdicts"].items():
        print(f"  {k}: {v}")
    c = rep.get("contention", {})
    if c:
        print(f"slowest / fastest traced step per run: {min(c.values()):.1f}x to {max(c.values()):.1f}x "
              "(about 1x on a quiet machine)")


def register(subparsers) -> None:
    p = subparsers.add_parser("validate", help="the cost model against the validation suite (never fitted on)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="cpu", help="suite size (smoke, cpu; default cpu)")
    p.add_argument("--run", action="store_true", help="run the suite now (else read its records)")
    p.add_argument("--out", help="records folder: where --run writes (default _build/runs/<size>) and what is "
                                 "read (default: the committed data/runs/<size>, else _build/runs/<size>)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="with --run: only these workloads")
    p.add_argument("--profile", help="hardware profile name or path (default: the chapters' cpu profile)")
    p.add_argument("--statistic", default="median", choices=STATISTICS,
                   help="per stage and step over the traced steps: median (default) or min (least disturbed)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_run)


def _run(args) -> int:
    import json

    from .cost import load_profile
    from .record import runs_root

    cases = workloads(args.size)  # an unknown size: one clear error
    if args.only and not args.run:
        raise RlmLabError("--only needs --run")
    if args.profile:
        load_profile(args.profile)
    root = Path(args.out) if args.out else None
    if args.run:
        root = root or runs_root(args.size)
        for d in [root / SUITE] + [run_dir(root, c) for c in cases]:
            if d.is_dir() and any(d.iterdir()) and not str(d.resolve()).startswith(str(runs_root(args.size).resolve())):
                raise RlmLabError(f"{d} already holds a run; write to another folder (--out)")
        run_suite(args.size, root, args.only)
        if args.only:
            return 0
    rep = report(args.size, root, args.profile, args.statistic)
    if args.json:
        print(json.dumps({k: rep[k] for k in ("root", "profile", "summary", "load")}, indent=1, default=str))
    else:
        _print(rep)
    return 0
