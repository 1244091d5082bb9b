"""What the stage tracer's step rows (:mod:`rlm_lab.train.tracer`) say, without the trainer: the per-stage
summary a record keeps (:func:`summarize`), the tokens per second of a run's steady window
(:func:`window_throughput`), and the Chrome/Perfetto trace (:func:`chrome_trace`).
"""

from __future__ import annotations

import statistics

from ..stages import STAGE_ORDER

OTHER = "other"  # step time no stage covers (grad clipping, lr schedule, zero_grad, TRL bookkeeping)


def summarize(steps: list[dict], warmup: int = 1, memory_kind: str | None = None) -> dict:
    """Per-stage time per optimizer step (median and mean over steps after ``warmup``), share of the
    step, number of calls and peak memory. A stage that runs every k-th step (generation with
    ``steps_per_generation=k``) is averaged over all steps: the mean is its amortized cost per step."""
    kept = steps[warmup:] if len(steps) > warmup else steps
    if not kept:
        return {"steps": 0}
    walls = [r["wall_s"] for r in kept]
    names = [s.value for s in STAGE_ORDER if any(s.value in r["stages"] for r in kept)] + [OTHER]
    total_wall = sum(walls)
    stages = {}
    for name in names:
        per_step = [r["stages"].get(name, 0.0) for r in kept]
        calls = sum(1 for r in kept for sp in r["spans"] if sp["counted"] and sp["stage"] == name)
        stages[name] = {
            "median_s": statistics.median(per_step), "mean_s": sum(per_step) / len(per_step),
            "share": sum(per_step) / total_wall if total_wall else 0.0, "calls": calls,
            "peak_bytes": max((r["peaks"].get(name, 0) for r in kept), default=0),
        }
    return {"steps": len(kept), "warmup_steps_excluded": len(steps) - len(kept),
            "step_wall_s": {"median": statistics.median(walls), "mean": total_wall / len(kept)},
            "peak_bytes": max(r["peak_bytes"] for r in kept), "memory_kind": memory_kind, "stages": stages}


def window_throughput(steps: list[dict], log_history: list[dict], warmup: int = 1, excluded_s: float = 0.0) -> dict:
    """Tokens per second of a traced run after its first ``warmup`` steps: the tokens TRL counted
    (``num_tokens``, prompt + completion, cumulative in ``log_history``) between the end of step ``warmup`` and
    the end of the last step, over the wall time between those two ends (so the time between steps -- logging,
    callbacks -- counts, and one-time start-up costs do not), minus ``excluded_s`` (evaluations inside the window).
    Every arm of a comparison is measured the same way; ``{}`` when the run is too short or logged no tokens."""
    ends = {r["step"]: r["start_s"] + r["wall_s"] for r in steps}
    tokens = {r["step"]: r["num_tokens"] for r in log_history if "num_tokens" in r and "step" in r}
    last = max((k for k in ends if k in tokens), default=None)
    if last is None or warmup not in ends or warmup not in tokens or last <= warmup:
        return {}
    seconds = round(ends[last] - ends[warmup] - excluded_s, 6)  # rounded once: every field below uses this value
    n = tokens[last] - tokens[warmup]
    return {"tokens": n, "seconds": seconds, "steps": last - warmup,
            "tokens_per_s": n / seconds if seconds > 0 else None, "step_s": seconds / (last - warmup)}


def chrome_trace(steps: list[dict]) -> dict:
    """Chrome trace-event JSON (loads in chrome://tracing and ui.perfetto.dev): complete ("X") events,
    µs timestamps. Thread 0: steps; thread 1: counted stage spans; thread 2: every TRL profiling span."""
    events = []
    for pid in sorted({r.get("rank", 0) for r in steps}) or [0]:
        for tid, label in ((0, "optimizer steps"), (1, "stages"), (2, "TRL profiling spans")):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
    for r in steps:
        pid = r.get("rank", 0)
        events.append({"ph": "X", "name": f"step {r['step']}", "cat": "step", "pid": pid, "tid": 0,
                       "ts": r["start_s"] * 1e6, "dur": r["wall_s"] * 1e6,
                       "args": {"peak_mib": r["peak_bytes"] / 2**20}})
        for sp in r["spans"]:
            counted = sp["counted"]
            events.append({"ph": "X", "name": sp["stage"] if counted else sp["name"],
                           "cat": "stage" if counted else "detail", "pid": pid, "tid": 1 if counted else 2,
                           "ts": sp["start_s"] * 1e6, "dur": sp["dur_s"] * 1e6,
                           "args": {"step": r["step"], "trl_name": sp["name"], "peak_mib": sp["peak_bytes"] / 2**20}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
