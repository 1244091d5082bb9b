"""The validation suite against the cost model: rows, summary, verdicts (see :mod:`rlm_lab.validate`)."""

from __future__ import annotations

import copy
import statistics
from pathlib import Path

from ..calibrate.loop_benchmarks import with_loop_terms
from ..calibrate.step_benchmarks import KEYS, with_trl_step_terms
from ..compare import OTHER, STEP, relative_error
from ..cost import load_profile
from ..cost.hardware import CPU_PROFILE, INSITU_PROFILE
from ..cost.peak import peak_rows
from ..errors import RlmLabError
from ..record import load_record, read_jsonl, repo_root
from .suite import BARS, SHARE_MIN, load_suite, reward_s_per_sample
from .traced_case import case_of, predict_case, time_table

STATISTICS = ("median", "min")


def least_disturbed(rec):
    """A view of ``rec`` whose trace summary holds, per stage and for the step wall, the minimum over the
    traced steps after warm-up instead of the median (read from the tracer's ``spans.jsonl``).

    Why: on a shared machine other jobs only ever add time, so the least-disturbed step is the best
    estimate of the undisturbed cost (the rule of Python's ``timeit`` docs:
    https://docs.python.org/3/library/timeit.html, "the min() of the result" is what to look at).
    Both statistics are reported; the median stays the chapters' statistic."""
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
    steps = read_jsonl(rec.dir / "spans.jsonl")
    return steps[rec.results["trace"].get("warmup_steps_excluded", 0):] or steps


def compare(recs: dict, profile: str, reward_s: float | None = None, baselines: dict | None = None,
            statistic: str = "median") -> list[dict]:
    """Rows ``{run, stage, predicted, measured, rel_error, share}`` of every run (anatomy's time_table,
    ``share`` = measured stage / measured step), plus the predicted and measured peak memory per stage
    when ``baselines`` (runtime RSS per run) are given."""
    reward_s = reward_s_per_sample() if reward_s is None else reward_s
    rows = []
    if statistic not in STATISTICS:
        raise RlmLabError(f"unknown statistic {statistic!r}; choose {' or '.join(STATISTICS)}")

    for name, rec in recs.items():
        try:
            pred = predict_case(case_of(rec), profile, reward_s)
        except RlmLabError as e:  # e.g. a bf16-autocast workload and a profile that never measured bf16
            step = rec.results["trace"]["step_wall_s"]["median"]
            rows.append({"run": name, "stage": STEP, "predicted": float("nan"), "measured": step,
                         "rel_error": float("nan"), "share": 1.0, "unpredicted": str(e)})
            continue
        if statistic == "min":
            rec = least_disturbed(rec)
        step = rec.results["trace"]["step_wall_s"]["median"]
        ckpt = getattr(pred.workload, "gradient_checkpointing", False)
        peaks = {r["stage"]: r for r in peak_rows(rec, pred, baselines[name], ckpt)} if baselines else {}
        for r in with_bookkeeping(time_table(rec, pred), pred):
            row = {"run": name, **r, "share": r["measured"] / step if step else float("nan")}
            if r["stage"] in peaks:
                row.update({k: v for k, v in peaks[r["stage"]].items() if k != "stage"})
            rows.append(row)
    return rows


def with_bookkeeping(rows: list[dict], pred) -> list[dict]:
    """Chapter 2's time table with TRL's predicted per-step bookkeeping (``Prediction.bookkeeping_s``, 0 for
    a profile without the terms) as the prediction of the measured "other" row and added to the step."""
    extra = getattr(pred, "bookkeeping_s", 0.0)
    out = []
    for r in rows:
        if r["stage"] in (OTHER, STEP) and extra:
            p = r["predicted"] + extra
            r = {**r, "predicted": p, "rel_error": relative_error(p, r["measured"])}
        out.append(r)
    return out


def summary(rows: list[dict]) -> dict:
    """The suite's numbers and verdicts against :data:`BARS` (see the module docstring)."""
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
    out["unpredicted"] = {r["run"]: r["unpredicted"] for r in rows if r.get("unpredicted")}
    peaks = [abs(r["peak_rel_error"]) for r in rows if fin(r.get("peak_rel_error", float("nan")))]
    if peaks:
        out["peak_median"], out["peak_worst"] = statistics.median(peaks), max(peaks)
        inc = [abs(r["transient_rel_error"]) for r in rows if fin(r.get("transient_rel_error", float("nan")))]
        out["transient_median"] = statistics.median(inc) if inc else float("nan")
        out["verdicts"]["peak_worst"] = _verdict(out["peak_worst"], BARS["peak_worst"])
    return out


def _verdict(value: float, bar: float) -> str:
    return f"met ({value:.1%} <= {bar:.0%})" if value <= bar else f"not met ({value:.1%} > {bar:.0%})"


def table(rows: list[dict]) -> list[dict]:
    """The rows a reader reads: every judged stage (>= 5 % of its step) and every whole step, in %."""
    out = []
    for r in rows:
        if r["stage"] == OTHER or (r["stage"] != STEP and r["share"] < SHARE_MIN):
            continue
        out.append({"run": r["run"], "stage": r["stage"], "predicted_s": r["predicted"], "measured_s": r["measured"],
                    "error": r["rel_error"], "share": r["share"],
                    "peak_error": r.get("peak_rel_error", float("nan")),
                    "above_baseline_error": r.get("transient_rel_error", float("nan"))})
    return out


def paired_root(profile):
    """The validation records a profile is judged on by default: those its in-situ fit names
    (``insitu.validation_root``: the suite measured on the same machine, in the same session, before the
    fit), else the committed suite (``data/runs/<size>``). A profile describes one machine at one time: this
    project's machines are re-provisioned between sessions and ran the same suite about twice as fast or slow."""
    where = (profile.insitu or {}).get("validation_root")
    return (repo_root() / where) if where else None


def report(size: str, root: Path | None = None, profile: str | None = None, statistic: str = "median") -> dict:
    """Load the suite's records, compare them with the predictions of ``profile`` (default: the machine's
    in-situ profile, ``INSITU_PROFILE``: rlm_lab.insitu) and summarise: ``{"root", "profile", "rows", "summary",
    "load"}``."""
    profile = profile or INSITU_PROFILE
    prof = load_profile(profile)  # an unknown profile is one clear error before any record is read
    root = root if root is not None else paired_root(prof)
    suite, recs = load_suite(size, root)
    rows = compare(recs, profile, baselines=suite.results["baseline_rss_bytes"], statistic=statistic)
    # contention: slowest / fastest traced step of each run (a quiet machine gives ~1; others' jobs spread it)
    walls = {n: [r["wall_s"] for r in _kept_steps(rec)] for n, rec in recs.items()}
    return {"contention": {n: max(w) / min(w) for n, w in walls.items() if w and min(w) > 0},"root": str(suite.dir.parent), "profile": profile, "rows": rows, "summary": summary(rows),
            "load": suite.results["loadavg_before"], "statistic": statistic}


def loop_terms_effect(size: str, loop_record, root: Path | None = None, profile: str | None = None,
                      statistic: str = "median") -> dict:
    """Issue 12, item 3: the suite's summary without and with the generation-loop terms fitted by
    ``rlm_lab.calibrate.loop_benchmarks`` (``loop_record``: its run folder); a term is adopted only if
    the validation error improves. ``{"before", "after", "fit", "improves"}``."""
    fit = load_record(loop_record, require=("generate_loop_base_s",)).results
    before = report(size, root, profile, statistic)
    after = report(size, root, with_loop_terms(profile or CPU_PROFILE, fit), statistic)
    b, a = before["summary"], after["summary"]
    improves = a["step_median"] < b["step_median"] and a["stage_median"] <= b["stage_median"]
    return {"before": before, "after": after, "fit": fit, "improves": improves}


def trl_step_terms_effect(size: str, step_record, root: Path | None = None, profile: str | None = None,
                          statistic: str = "median") -> dict:
    """Issue 12, item 3: the suite's summary without and with TRL's per-step bookkeeping terms fitted by
    ``rlm_lab.calibrate.step_benchmarks`` (``step_record``: its run folder); the term is kept only if the
    whole-step error improves and no stage gets worse. ``{"before", "after", "fit", "improves"}``."""
    fit = {k: load_record(step_record, require=KEYS).results[k] for k in KEYS}
    before = report(size, root, profile, statistic)
    after = report(size, root, with_trl_step_terms(profile or CPU_PROFILE, fit), statistic)
    b, a = before["summary"], after["summary"]
    improves = a["step_median"] < b["step_median"] and a["stage_median"] <= b["stage_median"]
    return {"before": before, "after": after, "fit": fit, "improves": improves}
