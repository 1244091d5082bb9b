"""Chapter 5's report: what the notebook shows and glues, from the records (timelines, tables, verdicts)."""

from __future__ import annotations

from pathlib import Path


def representative_window(durations: list[float], steps: int) -> int:
    """The first index of the ``steps`` consecutive steps whose total is closest to ``steps`` x the median
    step (the earliest such run of steps on a tie): the steps a timeline shows beside a table of median step
    times, so that a warm-up or a final checkpoint's step does not stand for the run."""
    import statistics

    if len(durations) <= steps:
        return 0
    target = steps * statistics.median(durations)
    sums = [sum(durations[i:i + steps]) for i in range(len(durations) - steps + 1)]
    return min(range(len(sums)), key=lambda i: (abs(sums[i] - target), i))


def timeline(record, steps: int = 3, title: str | None = None):
    """The merged Gantt (every actor of the run) of the record's trace.json, over ``steps`` consecutive steps
    chosen by :func:`representative_window` (their numbers are in the title)."""
    import json

    from ...trace_merge import gantt

    trace = json.loads((Path(record.dir) / "trace.json").read_text())
    spans = sorted((e for e in trace["traceEvents"] if e.get("cat") == "step"), key=lambda e: e["ts"])
    window, shown = None, ""
    if len(spans) > steps:
        i = representative_window([e["dur"] for e in spans], steps)
        sel = spans[i:i + steps]
        window = (sel[0]["ts"] / 1e6, (sel[-1]["ts"] + sel[-1]["dur"]) / 1e6)
        shown = f" (steps {i + 1}-{i + steps} of {len(spans)}: the {steps} closest to the median step)"
    return gantt(trace, title=(title or record.results.get("describe") or "") + shown, window=window)
