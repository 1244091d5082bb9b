"""Plots of traced and predicted stage times: the step timeline (Gantt), predicted-against-measured
bars with relative errors, and time share against FLOP share.

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state, no backend switch), so they work
in notebooks, tests and headless runs alike; a notebook displays the returned figure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .compare import relative_error
from .stages import STAGE_ORDER, Stage

# One colour per stage, stable across every figure of the book (tab20-like, colour-blind friendly pairs).
STAGE_COLORS = {
    Stage.WEIGHT_SYNC.value: "#7f7f7f", Stage.GENERATE.value: "#1f77b4", Stage.PREFILL.value: "#aec7e8",
    Stage.DECODE.value: "#1f77b4", Stage.OLD_LOGPROB.value: "#9467bd", Stage.REF_LOGPROB.value: "#c5b0d5",
    Stage.REWARD.value: "#2ca02c", Stage.VALUES.value: "#98df8a", Stage.ADVANTAGE.value: "#bcbd22",
    Stage.ACTOR_FORWARD.value: "#ff7f0e", Stage.ACTOR_BACKWARD.value: "#d62728",
    Stage.CRITIC_UPDATE.value: "#e377c2", Stage.OPTIMIZER.value: "#8c564b", "other": "#dddddd",
}


def _figure(width=8.0, height=3.5):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _save(fig, path):
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(path).with_name(f".{Path(path).name}.tmp.png")
        fig.savefig(tmp, dpi=110)
        tmp.replace(path)  # atomic: readers never see a half-written image
    return fig


def gantt(steps: list[dict], path=None, show=None, title=None):
    """Timeline of traced steps (the tracer's step rows): one row per stage, one bar per counted span,
    step starts dashed. ``show``: step numbers to draw (default: the last three)."""
    show = set(show) if show is not None else {r["step"] for r in steps[-3:]}
    rows = [r for r in steps if r["step"] in show]
    present = [s.value for s in STAGE_ORDER if any(sp["counted"] and sp["stage"] == s.value
                                                   for r in rows for sp in r["spans"])]
    fig = _figure(9, 0.45 * len(present) + 1.6)
    ax = fig.add_subplot()
    if not rows:
        ax.set_title("no traced steps")
        return _save(fig, path)
    t0 = rows[0]["start_s"]
    for r in rows:
        for sp in r["spans"]:
            if sp["counted"]:
                y = present.index(sp["stage"])
                ax.barh(y, sp["dur_s"] * 1e3, left=(sp["start_s"] - t0) * 1e3, height=0.7,
                        color=STAGE_COLORS.get(sp["stage"], "#333333"))
        ax.axvline((r["start_s"] - t0) * 1e3, color="black", lw=0.6, ls="--")
        ax.text((r["start_s"] - t0) * 1e3, -0.9, f" step {r['step']}", fontsize=8, va="bottom")
    ax.set_yticks(range(len(present)), present)
    ax.invert_yaxis()
    ax.set_xlabel("time since first shown step (ms)")
    ax.set_title(title or "Stage timeline (measured)")
    return _save(fig, path)


def predicted_vs_measured(table: list[dict], path=None, title=None, unit="s", log=False):
    """Grouped bars per stage: predicted and measured, the relative error written above each pair.

    ``table`` rows: ``{"stage", "predicted", "measured"}`` (any unit, said by ``unit``)."""
    fig = _figure(max(6.0, 0.9 * len(table) + 2), 3.6)
    ax = fig.add_subplot()
    x = np.arange(len(table))
    pred = [r["predicted"] for r in table]
    meas = [r["measured"] for r in table]
    ax.bar(x - 0.2, pred, 0.4, label="predicted", color="#9ecae1", edgecolor="#3182bd")
    ax.bar(x + 0.2, meas, 0.4, label="measured", color=[STAGE_COLORS.get(r["stage"], "#666") for r in table])
    for i, r in enumerate(table):
        err = relative_error(r["predicted"], r["measured"])
        ax.text(i, max(r["predicted"], r["measured"]), f"{err:+.0%}" if err == err else "n/a",
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [r["stage"] for r in table], rotation=30, ha="right")
    ax.set_ylabel(unit)
    if log:
        ax.set_yscale("log")
    ax.legend(frameon=False)
    ax.set_title(title or "Predicted against measured")
    return _save(fig, path)


def _stage_rank(stage: str) -> int:
    """Position of a stage in one synchronous step (``STAGE_ORDER``); prefill/decode with generate, "other" last."""
    order = [s.value for s in STAGE_ORDER]
    alias = {Stage.PREFILL.value: Stage.GENERATE.value, Stage.DECODE.value: Stage.GENERATE.value}
    stage = alias.get(stage, stage)
    return order.index(stage) if stage in order else len(order)


def share_bars(rows: list[dict], keys=("flop_share", "time_share_predicted", "time_share"),
               names=("FLOPs (predicted)", "time (predicted)", "time (measured)"), path=None, title=None):
    """Stacked horizontal bars: for each configuration, one bar per share kind (``keys``), each split
    into stages. ``rows``: ``{"label", <key>: {stage: share}}``."""
    per = len(keys)
    fig = _figure(9, 0.32 * per * len(rows) + 1.6)
    ax = fig.add_subplot()
    labels, seen = [], {}
    for i, r in enumerate(rows):
        for j, key in enumerate(keys):
            y, left = (per + 0.6) * i + j, 0.0
            for stage, f in sorted(r[key].items(), key=lambda kv: _stage_rank(kv[0])):  # same order in every bar
                bar = ax.barh(y, f, left=left, color=STAGE_COLORS.get(stage, "#444"), height=0.85)
                seen.setdefault(stage, bar)
                left += f
            labels.append((y, f"{r['label']} · {names[j]}"))
    ax.set_yticks([y for y, _ in labels], [t for _, t in labels], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of one step")
    ax.legend(seen.values(), seen.keys(), fontsize=7, ncol=6, frameon=False, loc="upper center",
              bbox_to_anchor=(0.5, -0.12))
    ax.set_title(title or "Share of FLOPs against share of wall time")
    return _save(fig, path)


def _log_y(ax) -> None:
    """A log y axis that is readable over any span: ticks at 1, 1.5, 2, 3, 5 and 7 per decade, in plain
    numbers (a span of less than a decade would otherwise get one labelled tick)."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)))
    fmt = ScalarFormatter()
    fmt.set_scientific(False)
    ax.yaxis.set_major_formatter(fmt)
    ax.yaxis.set_minor_formatter(NullFormatter())


def curve(xs, series: dict, path=None, xlabel="", ylabel="", title=None, logx=False, logy=False):
    """Lines for ``series`` (``{label: ys}``, a label starting with "predicted" is dashed)."""
    fig = _figure(6.4, 3.6)
    ax = fig.add_subplot()
    for label, ys in series.items():
        ax.plot(xs, ys, ls="--" if label.startswith("predicted") else "-", marker="o", ms=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        _log_y(ax)
    ax.legend(frameon=False, fontsize=8)
    ax.set_title(title or "")
    return _save(fig, path)
