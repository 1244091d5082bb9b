"""A committed reference window on a chapter's page: predicted beside measured, each with its interval.

    text, values = reference_report.section(5, "cpu")   # the newest completed window that measured chapter 5

A window is one call of ``rlm-lab reference`` (:mod:`rlm_lab.reference`) whose folder was committed under
``data/runs/<size>/reference/<window id>/``: its record holds the machine key, the load at its start and end, the
in-situ profile it calibrated first, the **predictions** made from that profile before its first repeat, and per
reference the protocol's paired repeats (fresh processes, ABBA, behind the load gate).

Per arm the page shows the prediction, the measured value with its 95 % interval chosen by n
(:func:`rlm_lab.evidence.repeat_interval`), the error predicted / measured - 1 at both ends of that interval
(:func:`rlm_lab.evidence.error_interval`) and the goal's word (:data:`GOAL`, fixed before the measurements as in
chapters 2-5: "met" only when the whole error interval is within it, "not met" only when wholly outside, else
"undecided"; :func:`rlm_lab.evidence.bar_word`). Per reference: the median of the paired ratios A / B with its
interval and the word it decides (:func:`rlm_lab.evidence.ratio_word`), beside the predicted ratio. An arm that
appears in several references (chapter 5's ``disaggregated`` is the partner of three) is one quantity, the same
config run in fresh processes in one window: its step is **one** value, over every repeat of it in the window (the
references pooled, their names listed); each reference's paired ratio stays within its own pairs.
"""

from __future__ import annotations

from pathlib import Path

from .errors import RlmLabError
from .evidence import bar_word, error_interval, ratio_interval, ratio_word, repeat_interval
from .record import RunRecord, reference_root
from .tables import format_table

GOAL = 0.25   # the step-time error goal of chapters 2-5, fixed before their measurements


def windows_root(size: str) -> Path:
    return reference_root(size) / "reference"


def latest_window(size: str, chapter: int, root: Path | None = None):
    """The newest completed window record (folders are window ids, which start with the UTC time) under
    ``root`` (default :func:`windows_root`) that measured ``chapter``; None if there is none."""
    base = Path(root) if root is not None else windows_root(size)
    for d in sorted((p for p in base.iterdir() if p.is_dir()), reverse=True) if base.is_dir() else []:
        try:
            rec = RunRecord.load(d)
        except RlmLabError:
            continue
        if any(r.get("chapter") == chapter for r in rec.results.get("references", [])):
            return rec
    return None


def rows(rec, chapter: int) -> tuple[list[dict], list[dict]]:
    """(per-arm rows, per-reference rows) of ``chapter`` in the window record ``rec`` (module docstring). An arm
    measured in several references is one row over all its repeats (``references`` names them)."""
    preds = {(p["name"], p["arm"]): p for p in rec.results.get("predictions", []) if p.get("chapter") == chapter}
    asked = {c["name"]: c for c in rec.config.get("references", []) if c.get("chapter") == chapter}
    pooled = arm_values(rec, chapter)
    arms, pairs, done = [], [], set()
    for ref in (r for r in rec.results.get("references", []) if r.get("chapter") == chapter):
        values = ref["summary"]["values"]
        names = list(asked[ref["name"]]["arms"])   # A, B as asked (a record's keys are stored sorted)
        higher = bool(asked.get(ref["name"], {}).get("higher_is_better", False))
        predicted = {}
        for arm in names:
            p = preds.get((ref["name"], arm), {})
            if p.get("predicted") is not None:
                predicted[arm] = p["predicted"]
            if arm in done:
                continue
            done.add(arm)
            vals, refs = pooled[arm]
            m = repeat_interval(vals)
            row = {"reference": ref["name"], "references": refs, "arm": arm, "predicted": p.get("predicted"),
                   "measured": m, "error": None, "goal": "nothing predicted", "why": p.get("why", "")}
            if p.get("predicted") is not None:
                row["error"] = error_interval(p["predicted"], m)
                row["goal"] = bar_word(row["error"], GOAL)
            arms.append(row)
        iv = ratio_interval(values[names[0]], values[names[1]])
        above, below = ("faster", "slower") if higher else ("slower", "faster")
        pairs.append({"reference": ref["name"], "a": names[0], "b": names[1], "ratio": iv,
                      "word": ratio_word(iv, above=above, below=below),
                      "predicted_ratio": (predicted[names[0]] / predicted[names[1]]
                                          if len(predicted) == 2 else None)})
    return arms, pairs


def arm_values(rec, chapter: int) -> dict:
    """``{arm: (values, references)}``: every repeat of each arm of ``chapter`` in the window ``rec``, over all the
    references that measured it (in the window's order), and those references' names. One arm, one config, one
    quantity: the value a page shows for it reads all of them (module docstring)."""
    out: dict = {}
    for ref in (r for r in rec.results.get("references", []) if r.get("chapter") == chapter):
        for arm, vals in ref["summary"]["values"].items():
            v, refs = out.setdefault(arm, ([], []))
            v.extend(float(x) for x in vals)
            refs.append(ref["name"])
    return {a: (v, tuple(r)) for a, (v, r) in out.items()}


def section(chapter: int, size: str, root: Path | None = None) -> tuple[str, dict]:
    """(text, glue values) of the chapter's newest committed window at ``size`` (module docstring); where none
    was committed, one line saying how to make one, and every value "not measured"."""
    c = f"ch{chapter:02d}_win"
    rec = latest_window(size, chapter, root)
    keys = ("id", "machine", "load", "profile", "pairs", "met", "not_met", "undecided", "decided_pairs")
    goal = {f"{c}_goal": f"±{GOAL:.0%}"}
    if rec is None:
        values = goal | {f"{c}_{k}": "not measured" for k in keys}
        return (f"no reference window of chapter {chapter} committed at {size} size: `rlm-lab reference --chapter "
                f"{chapter} --size {size} --out data/runs/{size}/reference/<window>`"), values
    arms, pairs = rows(rec, chapter)
    r = rec.results
    load = (f"{r['load_start']['per_core']:.2f} at the start, {r['load_end']['per_core']:.2f} at the end"
            if r.get("load_end") else f"{r['load_start']['per_core']:.2f} at the start")
    words = [a["goal"] for a in arms if a["error"] is not None]
    mk = r.get("machine_key") or {}
    machine = ", ".join(str(x) for x in (mk.get("cpu_model"), mk.get("cores") and f"{mk['cores']} cores",
                                         mk.get("torch") and f"torch {mk['torch']}") if x) or "-"
    values = goal | {f"{c}_id": r["window"], f"{c}_machine": machine, f"{c}_load": load,
              f"{c}_profile": ("the window's in-situ profile" if r.get("predicted_from") == "profile.json"
                               else r.get("predicted_from", "-")), f"{c}_pairs": str(rec.config.get("pairs")),
              f"{c}_met": str(words.count("met")), f"{c}_not_met": str(words.count("not met")),
              f"{c}_undecided": str(words.count("undecided")),
              f"{c}_decided_pairs": str(sum(p["word"] != "undecided" for p in pairs))}
    for p in pairs:
        values[f"{c}_{p['reference']}"] = f"{p['ratio'].text()} ({p['word']})"
    t1 = format_table([{"arm": a["arm"], "references": ", ".join(a["references"]),
                        "predicted": "-" if a["predicted"] is None else f"{a['predicted']:.4g}",
                        "measured [95 %]": a["measured"].text("{:.4g}"),
                        "error [95 %]": "-" if a["error"] is None else a["error"].text("{:+.0%}"),
                        f"goal ±{GOAL:.0%}": a["goal"]} for a in arms])
    t2 = format_table([{"reference": p["reference"], "A / B": f"{p['a']} / {p['b']}",
                        "measured [95 %]": p["ratio"].text(), "word": p["word"],
                        "predicted": "-" if p["predicted_ratio"] is None else f"{p['predicted_ratio']:.2f}"}
                       for p in pairs])
    head = (f"window {r['window']} ({rec.config.get('pairs')} pairs a reference; load per core {load}; "
            f"predictions from {values[f'{c}_profile']}, made before the first repeat)")
    return "\n\n".join((head, t1, t2)), values
