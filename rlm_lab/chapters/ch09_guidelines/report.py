"""Chapter 9's tables and figures: the guideline table, the closing guideline x verdict list, the decision map and
the results page. Rows are plain data (tested); HTML and figures are built from them. Every number shown comes
from a record under ``data/`` (its path is in the row) or is a prediction, labelled as one.
"""

from __future__ import annotations

from collections import Counter
from html import escape

from .cases import DEVICES, ITEMS, load_guidelines
from .compare import VERDICTS, check_text, holds, judge
from .run import NONE, Cell, decision_grid, item_row

VERDICT_COLOURS = {"supported": "#d8f0d8", "contradicted": "#f6d6d6", "undecided": "#f3ecd0",
                   "not testable here": "#e6e6e6"}


# ---- the guidelines ----------------------------------------------------------------------------------------------

def guideline_rows(guidelines=None, root=None) -> list[dict]:
    """One judged row per guideline (:func:`.compare.judge`), in file order."""
    return [judge(g, root) for g in (guidelines if guidelines is not None else load_guidelines())]


def counts(rows) -> dict:
    """How many guidelines got each verdict (every verdict word present, zero included)."""
    c = Counter(r["verdict"].word for r in rows)
    return {w: c.get(w, 0) for w in VERDICTS}


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"


def interval_text(ev) -> str:
    if ev.interval is None:
        return "-"
    iv = ev.interval
    if ev.basis == "exact count":
        return f"{_fmt(iv.estimate)} (exact count)"
    if not iv.decided:
        return f"{_fmt(iv.estimate)} ({ev.basis}, no interval)"
    return f"{_fmt(iv.estimate)} [{_fmt(iv.lo)}, {_fmt(iv.hi)}] ({ev.basis}, {iv.label})"


def points_text(row) -> str:
    """Predictions at 8, 64 and 512 GPUs with whether each meets the claim's condition."""
    g = row["guideline"]
    if not row["points"]:
        return f"none: {g.scale_why}" if g.scale_why else "none"
    parts = []
    for p in row["points"]:
        if p.value is None:
            parts.append(f"{p.devices}: not priced ({p.note})")
        else:
            ok = holds(g.holds[p.devices], p.value)
            parts.append(f"{p.devices}: {_fmt(p.value)}, {check_text(g.holds[p.devices])}: {'holds' if ok else 'fails'}")
    # the predicted quantity is not always the measured one (the test column): say which it is
    what = next((p.note for p in row["points"] if p.value is not None and p.note), "")
    return (f"{what}: " if what else "") + "; ".join(parts)


def record_folders(sources) -> list[str]:
    """The run folders (cell names) a row read, without their timestamps."""
    out = []
    for s in sources:
        parts = s.split("/")
        name = parts[3] if len(parts) > 3 and parts[:2] == ["data", "runs"] else s
        if name == "reference" and len(parts) > 4:
            name = f"reference/{parts[4]}"   # a window: its id names it
        if name not in out:
            out.append(name)
    return out


def guideline_html(rows) -> str:
    head = ("<tr><th>guideline (claim; source, date read)</th><th>evidence here</th><th>test</th>"
            "<th>predicted at 8 / 64 / 512 GPUs (H100, 7B GRPO)</th><th>verdict</th></tr>")
    body = []
    for r in rows:
        g, ev, v = r["guideline"], r["evidence"], r["verdict"]
        srcs = "; ".join(f'<a href="{escape(s["url"], quote=True)}">{escape(s["title"])}</a> ({escape(s["read"])})'
                         for s in g.sources) + ("; the survey's guidelines" if g.survey else "")
        recs = ", ".join(f"<code>{escape(f)}</code>" for f in record_folders(ev.sources + r["target_sources"]))
        chapter = f'<a href="{g.chapter}.html">{g.chapter}</a>: ' if g.chapter else ""
        evid = (f"{chapter}{escape(g.evidence.get('quantity', ''))}<br><b>{escape(interval_text(ev))}</b>"
                + (f"<br><small>records: {recs}</small>" if recs else f"<br><small>{escape(ev.note)}</small>"))
        body.append(
            f"<tr><td><b>{escape(g.id)}</b> {escape(g.title)}<br><small>{escape(g.claim)}</small><br>"
            f"<small>{srcs}</small></td><td>{evid}</td><td>{escape(check_text(g.test, r['target']))}</td>"
            f"<td><small>{escape(points_text(r))}</small></td>"
            f'<td style="background:{VERDICT_COLOURS[v.word]}"><b>{escape(v.word)}</b><br><small>{escape(v.why)}</small>'
            f"</td></tr>")
    return f'<table class="rlm-guidelines">{head}{"".join(body)}</table>'


def closing_list(rows) -> str:
    """The chapter's closing note: guideline x verdict, with the evidence behind each (markdown)."""
    lines = []
    for r in rows:
        g, ev, v = r["guideline"], r["evidence"], r["verdict"]
        lines.append(f"- **{g.id}** {g.title}: **{v.word}**. Measured: {g.evidence.get('quantity', '-')} = "
                     f"{interval_text(ev)}; test {check_text(g.test, r['target'])}. At scale: {points_text(r)}.")
    return "\n".join(lines)


# ---- the decision map ----------------------------------------------------------------------------------------------

MAP_COLOURS = {"one set, synchronous": "#8fb8de", "split, synchronous": "#f2b880", "split, one-step-off": "#9fd49f",
               "split, bounded staleness": "#c7a4e0", "split, unbounded": "#e0a4b8", "does not fit": "#dddddd"}


def map_class(row: dict) -> str:
    if row["placement"] is None:
        return "does not fit"
    if row["kind"] != "split":
        return "one set, synchronous"
    return {"sync": "split, synchronous", "one_step_off": "split, one-step-off"}.get(
        row["mode"], "split, unbounded" if row["eta"] is None else "split, bounded staleness")


def map_label(row: dict) -> str:
    if row["placement"] is None:
        return "does not fit"
    if row["kind"] != "split":
        return f"{row['kind']}\n{row['step_s']:.1f} s"
    eta = "inf" if row["eta"] is None else row["eta"]
    return f"eta {eta}\n{row['split'].replace(' rollout + ', '+').replace(' train', '')}\n{row['step_s']:.1f} s"


def plot_decision_map(grid: list[dict], band: dict | None, band_why: str):
    """One panel per response-length distribution: models (rows) x GPU counts (columns), each cell the advisor's
    pick (colour: placement and mode; text: eta, rollout + train GPUs, predicted step)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    lengths = list(dict.fromkeys(r["lengths"] for r in grid))
    models = list(dict.fromkeys(r["model"] for r in grid))
    devices = list(dict.fromkeys(r["devices"] for r in grid))
    fig, axes = plt.subplots(1, len(lengths), figsize=(5.2 * len(lengths), 1.3 + 1.1 * len(models)), squeeze=False)
    for ax, ln in zip(axes[0], lengths):
        for r in (r for r in grid if r["lengths"] == ln):
            x, y = devices.index(r["devices"]), models.index(r["model"])
            ax.add_patch(plt.Rectangle((x, y), 1, 1, color=MAP_COLOURS[map_class(r)], ec="white"))
            ax.text(x + 0.5, y + 0.5, map_label(r), ha="center", va="center", fontsize=7)
        ax.set_xlim(0, len(devices))
        ax.set_ylim(0, len(models))
        ax.set_xticks([i + 0.5 for i in range(len(devices))], [str(d) for d in devices])
        ax.set_yticks([i + 0.5 for i in range(len(models))], models)
        ax.set_xlabel("GPUs (H100)")
        ax.set_title(f"responses: {ln}", fontsize=9)
    used = list(dict.fromkeys(map_class(r) for r in grid))
    fig.legend(handles=[Patch(color=MAP_COLOURS[c], label=c) for c in used], loc="lower center", ncol=len(used),
               fontsize=8, frameon=False)
    err = (f"validated error of absolute step times: median {band['step_time']:.0%}" if band and band.get("step_time")
           else band_why)
    fig.suptitle(f"The advisor's pick (a prediction), GRPO beta 0, 64 prompts x 8, prompt 256. {err}", fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 0.93))
    return fig


def plot_steps(grid: list[dict], band: dict | None, band_why: str):
    """Predicted step of the advisor's pick against GPUs, per model and length distribution, with the validated
    error band of absolute step times shaded when a validation result exists."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    lengths = list(dict.fromkeys(r["lengths"] for r in grid))
    fig, axes = plt.subplots(1, len(lengths), figsize=(5.2 * len(lengths), 3.4), squeeze=False, sharey=True)
    err = band.get("step_time") if band else None
    for ax, ln in zip(axes[0], lengths):
        for model in dict.fromkeys(r["model"] for r in grid):
            pts = [(r["devices"], r["step_s"]) for r in grid if r["lengths"] == ln and r["model"] == model
                   and r["step_s"] is not None]
            if not pts:
                continue
            xs, ys = zip(*pts)
            line, = ax.plot(xs, ys, marker="o", label=model)
            if err:
                ax.fill_between(xs, [y / (1 + err) for y in ys], [y * (1 + err) for y in ys], color=line.get_color(),
                                alpha=0.15)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = sorted({r["devices"] for r in grid})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.set_xlabel("GPUs (H100)")
        ax.set_title(f"responses: {ln}", fontsize=9)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("predicted seconds per step")
    fig.suptitle("Predicted step of the advisor's pick; " + (f"shaded: the validated median error ({err:.0%})" if err
                                                             else band_why), fontsize=9)
    fig.tight_layout()
    return fig


def grid_rows(grid: list[dict]) -> list[dict]:
    """The map as a table (numbers rounded for reading; every one a prediction)."""
    return [{"model": r["model"], "GPUs": r["devices"], "responses": r["lengths"], "pick": map_class(r),
             "placement": r["placement"] or "-", "eta": "-" if r["placement"] is None or r["kind"] != "split" else
             ("inf" if r["eta"] is None else r["eta"]), "split": r["split"] or "-",
             "step_s": None if r["step_s"] is None else round(r["step_s"], 2),
             "synchronous_step_s": None if r["sync_step_s"] is None else round(r["sync_step_s"], 2),
             "fastest synchronous step without assumed overheads": "-" if r.get("bare_step_s") is None else
             (f"{r['bare_step_s']:.2f} s ({r['bare_moved']:+.0%}), "
              + ("same placement" if r["bare_same"] else f"placement {r['bare_placement']}")),
             "note": r.get("note", "")} for r in grid]


def assumed_moves(grid: list[dict]) -> str:
    """The map's rows ranked by how far the synchronous step moves without the assumed overheads (text)."""
    rows = [r for r in grid if r.get("bare_moved") is not None]
    if not rows:
        return "no row priced"
    worst = min(rows, key=lambda r: r["bare_moved"])
    return (f"{worst['bare_moved']:+.0%} ({worst['model']}, {worst['devices']} GPUs, {worst['lengths']}); "
            f"the least: {max(r['bare_moved'] for r in rows):+.0%}")


# ---- the results page --------------------------------------------------------------------------------------------

def results_rows(items=ITEMS, root=None, gpu_root=None) -> list[dict]:
    return [item_row(i, root, gpu_root) for i in items]


def unit_of(what: str) -> str:
    return "B" if "bytes" in what else "s" if "seconds" in what else "x"


def value_text(v, unit: str) -> str:
    if not isinstance(v, (int, float)):
        return str(v)
    if unit == "B":
        return f"{v / 2**20:.3f} MiB"
    if unit == "s":
        return f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s"
    return f"{v:.2f}x"


def cell_text(c: Cell, unit: str) -> str:
    if c is NONE or c.kind == "text":
        return str(c.value)
    if c.kind == "error":
        if c.interval is not None and c.interval.decided:
            return f"{c.value:+.0%} [{c.interval.lo:+.0%}, {c.interval.hi:+.0%}]"
        return f"{c.value:+.0%}"
    text = value_text(c.value, unit)
    if c.kind == "measured" and c.interval is not None:
        iv = c.interval
        if c.basis == "exact count":
            text += " (exact count)"
        elif iv.decided:
            text += f" [{value_text(iv.lo, unit)}, {value_text(iv.hi, unit)}] ({c.basis}, n = {iv.n})"
        else:
            text += f" ({c.basis}, no interval)"
    return text


def results_table(rows) -> list[dict]:
    """The results page as plain rows of text (what the HTML shows), each with the records it read."""
    out = []
    for r in rows:
        it, unit = r["item"], unit_of(r["what"])
        out.append({"taxonomy": it.taxonomy, "item": it.name, "chapter": it.chapter, "quantity": r["what"],
                    "predicted here": cell_text(r["predicted"], unit), "measured here": cell_text(r["measured"], unit),
                    "error": cell_text(r["error"], unit), "bar (25 %)": r["bar"].value,
                    "GPU record": cell_text(r["gpu"], unit) if r["gpu"] is not NONE else "none",
                    "prediction at 64 GPUs": r["scale"].value,
                    "records": record_folders(r["measured"].sources + r["predicted"].sources)})
    return out


def results_html(table: list[dict]) -> str:
    cols = ["item", "quantity", "predicted here", "measured here", "error", "bar (25 %)", "GPU record",
            "prediction at 64 GPUs"]
    head = "<tr><th>taxonomy</th>" + "".join(f"<th>{escape(c)}</th>" for c in cols) + "<th>records</th></tr>"
    body = []
    for t in table:
        word = t["bar (25 %)"]
        colour = {"met": "#d8f0d8", "not met": "#f6d6d6"}.get(word, "#f3ecd0")
        cells = "".join(f'<td style="background:{colour}">{escape(str(t[c]))}</td>' if c == "bar (25 %)"
                        else f"<td>{escape(str(t[c]))}</td>" for c in cols)
        recs = ", ".join(f"<code>{escape(x)}</code>" for x in t["records"])
        body.append(f'<tr><td>{escape(t["taxonomy"])}<br><small><a href="{t["chapter"]}.html">{t["chapter"]}</a>'
                    f"</small></td>{cells}<td><small>{recs}</small></td></tr>")
    return f'<table class="rlm-results">{head}{"".join(body)}</table>'


def bar_counts(rows) -> dict:
    c = Counter(r["bar"].value for r in rows)
    return {w: c.get(w, 0) for w in ("met", "not met", "undecided")}


__all__ = ["DEVICES", "decision_grid", "guideline_rows", "counts", "guideline_html", "closing_list", "plot_decision_map", "plot_steps",
           "grid_rows", "results_rows", "results_table", "results_html", "bar_counts"]


def ledger_html(table: list[dict]) -> str:
    """The results page's table from the ledger's rows (:func:`rlm_lab.ledger.item_table`): a compact line per
    item (id, value with its interval, the bar) and the details (interval method and n, history, records) in a
    second, smaller line, so that every column fits at 1280 px."""
    head = ("<tr><th>item</th><th>predicted</th><th>measured [95 %]</th><th>error</th><th>bar (25 %)</th></tr>")
    body = []
    for t in table:
        colour = {"met": "#d8f0d8", "not met": "#f6d6d6"}.get(t["bar"], "#f3ecd0")
        recs = ", ".join(f"<code>{escape(x)}</code>" for x in record_folders(t["records"]))
        hist = t["replaced record (history)"]
        body.append(
            f'<tr><td><b>{escape(t["item"])}</b><br><small><a href="{t["chapter"]}.html">{t["chapter"]}</a>, '
            f'<code>{escape(t["id"])}</code></small></td><td>{escape(t["predicted"])}</td>'
            f'<td>{escape(t["measured [95 %]"])}<br><small>{escape(t["interval"])}'
            + (f"; replaced record (history): {escape(hist)}" if hist != "-" else "")
            + f'<br>records: {recs}</small></td><td>{escape(t["error"])}</td>'
            f'<td style="background:{colour}">{escape(t["bar"])}</td></tr>')
    return f'<table class="rlm-results">{head}{"".join(body)}</table>'


def plot_predicted_measured(points: list[dict]):
    """Predicted against measured for every results-page row that has both (:func:`rlm_lab.ledger.predicted_measured`),
    one panel per unit, log axes, the measured interval as a horizontal bar where there is one, the diagonal and
    the +-25 % bar around it."""
    import matplotlib.pyplot as plt

    units = sorted({p["unit"] for p in points})
    fig, axes = plt.subplots(1, max(1, len(units)), figsize=(4.2 * max(1, len(units)), 4.0), squeeze=False)
    for ax, unit in zip(axes[0], units):
        ps = [p for p in points if p["unit"] == unit]
        for p in ps:
            err = None if p["lo"] is None else [[p["measured"] - p["lo"]], [p["hi"] - p["measured"]]]
            ax.errorbar(p["measured"], p["predicted"], xerr=err, fmt="o", ms=4, capsize=2)
            ax.annotate(p["label"], (p["measured"], p["predicted"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
        vals = [v for p in ps for v in (p["predicted"], p["measured"], p["lo"], p["hi"]) if v]
        lo, hi = min(vals) / 1.3, max(vals) * 1.3
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.fill_between([lo, hi], [0.75 * lo, 0.75 * hi], [1.25 * lo, 1.25 * hi], color="0.9")
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
               xlabel=f"measured ({unit or 'x'})", ylabel=f"predicted ({unit or 'x'})")
    fig.suptitle("Predicted against measured (the grey band: the 25 % bar)")
    fig.tight_layout()
    return fig
