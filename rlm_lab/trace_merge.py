"""Merge the spans of several processes (the Ray actors of one placement) into one Chrome/Perfetto trace
and one Gantt chart.

Input per process: the stage tracer's step rows (``rlm_lab.train.tracer``: ``start_s`` relative to the
tracer's ``t0``) and/or raw spans ``{"name", "stage", "start", "end"}`` in ``time.perf_counter()`` seconds.
On Linux ``perf_counter`` is CLOCK_MONOTONIC, shared by every process of a machine, so subtracting one
``t0`` puts all processes on one time axis (processes on other machines would need a clock offset).

Output: Chrome trace-event JSON (``"X"`` complete events, µs; loads in https://ui.perfetto.dev and
chrome://tracing; format: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU),
one ``pid`` per process with its name as metadata, and a matplotlib Gantt with one row per process lane.
"""

from __future__ import annotations

from pathlib import Path

from .trace_plots import STAGE_COLORS, _figure, _save


def merge(processes: dict[str, dict], t0: float) -> dict:
    """``processes``: name -> ``{"steps": tracer step rows (optional), "t0": their tracer t0,
    "spans": raw perf_counter spans (optional)}``. Returns the trace dict."""
    events = []
    for pid, (name, proc) in enumerate(processes.items()):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        offset = proc.get("t0", t0) - t0
        lanes = set()
        for r in proc.get("steps", []):
            lanes.update((0, 1))
            events.append({"ph": "X", "name": f"step {r['step']}", "cat": "step", "pid": pid, "tid": 0,
                           "ts": (r["start_s"] + offset) * 1e6, "dur": r["wall_s"] * 1e6,
                           "args": {"lane": "steps"}})
            for sp in r["spans"]:
                if sp.get("counted") and sp.get("stage"):
                    events.append({"ph": "X", "name": sp["stage"], "cat": "stage", "pid": pid, "tid": 1,
                                   "ts": (sp["start_s"] + offset) * 1e6, "dur": sp["dur_s"] * 1e6,
                                   "args": {"lane": "stages", "step": r["step"], "detail": sp.get("name")}})
        tid = 2 if proc.get("steps") else 1
        for sp in proc.get("spans", []):
            lanes.add(tid)
            events.append({"ph": "X", "name": sp.get("stage") or sp["name"], "cat": "span", "pid": pid, "tid": tid,
                           "ts": (sp["start"] - t0) * 1e6, "dur": (sp["end"] - sp["start"]) * 1e6,
                           "args": {"lane": "runtime" if tid == 2 else "work", "detail": sp["name"]}})
        for tid_, label in ((0, "optimizer steps"), (1, "stages" if proc.get("steps") else "work"), (2, "runtime")):
            if tid_ in lanes:
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid_, "args": {"name": label}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def lanes(trace: dict) -> list[tuple[str, list[dict]]]:
    """``[(label, [X events])]`` per (process, thread) lane that holds stage-coloured work (steps excluded)."""
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    rows: dict[tuple[int, int], list[dict]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") != "step":
            rows.setdefault((e["pid"], e["tid"]), []).append(e)
    return [(f"{names.get(p, p)}: {threads.get((p, t), t)}", rows[(p, t)]) for p, t in sorted(rows)]


def busy_seconds(trace: dict) -> dict[str, float]:
    """Per lane, the seconds covered by at least one span (overlaps counted once)."""
    out = {}
    for label, events in lanes(trace):
        iv = sorted((e["ts"], e["ts"] + e["dur"]) for e in events)
        total, cur_s, cur_e = 0.0, None, None
        for s, e in iv:
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    total += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            total += cur_e - cur_s
        out[label] = total / 1e6
    return out


def gantt(trace: dict, path=None, title=None, window: tuple[float, float] | None = None):
    """One Gantt of a merged trace: a row per process lane, bars coloured by stage (``trace_plots`` colours).
    ``window`` = (start, end) seconds limits the x axis (e.g. two steps)."""
    from matplotlib.patches import Patch

    rows = lanes(trace)
    fig = _figure(9.0, 1.1 + 0.45 * max(1, len(rows)))
    ax = fig.add_subplot()
    seen = {}
    for i, (label, events) in enumerate(rows):
        for e in events:
            color = STAGE_COLORS.get(e["name"], "#cccccc")
            seen.setdefault(e["name"] if e["name"] in STAGE_COLORS else "other", color)
            ax.broken_barh([(e["ts"] / 1e6, e["dur"] / 1e6)], (i - 0.4, 0.8), facecolors=color)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since training start")
    if window is not None:
        ax.set_xlim(*window)
    if title:
        ax.set_title(title, fontsize=9)
    fig.legend(handles=[Patch(color=c, label=n) for n, c in seen.items()], fontsize=7, loc="outside lower center",
               ncols=min(6, len(seen)), frameon=False)
    return _save(fig, Path(path) if path else None)
