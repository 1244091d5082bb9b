"""Chapter 4, "Intra-model parallelism": the comparison of the layouts' step times, in numbers the prose
can quote. :func:`compare` puts each record (:mod:`.run`) next to its predicted bytes and time, one row per
layout (``report.rows`` adds the family, oversubscription and memory); :func:`summary` is the chapter's
verdict on those rows.

Three questions, each answered from the rows, never from prose:

1. How far is the predicted step time from the measured one? Median |relative error| over the layouts
   (the one-process run included), with its verdict against the goals (``compare.BAR``, ``compare.GOAL``).
2. Relative to one process (the ``slowdown`` columns: a layout's step time over the one-process step
   time), how far is the predicted slowdown from the measured one? The error common to every layout
   cancels in this ratio; what is left is what the model misses about the layout itself.
3. Does the prediction say what the measurement says? How many layouts each calls faster than one
   process (slowdown < 1; measured: only where the interval of repeated runs lies below 1, else undecided), and
   for how many pairs of layouts the two agree on which is slower
   (concordant pairs, the count behind Kendall's tau).
"""

from __future__ import annotations

import itertools
import statistics

from ...compare import verdict
from ...errors import RlmLabError
from ...evidence import ratio_word, repeat_interval
from ...parallel.bench.measure import within_tolerance
from ...parallel.predict import comm_mismatches, layout_of, predicted_comm
from .run import _median, predicted_step_time


def _pairs(rows: list[dict]) -> tuple[int, int]:
    """(concordant, comparable) pairs of layouts: the predicted and measured slowdowns order them alike."""
    conc = total = 0
    for a, b in itertools.combinations(rows, 2):
        dm = a["slowdown_measured"] - b["slowdown_measured"]
        dp = a["slowdown_predicted"] - b["slowdown_predicted"]
        if dm == 0 or dp == 0:
            continue
        total += 1
        conc += (dm > 0) == (dp > 0)
    return conc, total


def _side(row: dict) -> str:
    """A layout against one process from an interval (:mod:`rlm_lab.evidence`): the median of its slowdowns over
    fresh-process repeats (``slowdown_runs``), "faster" only when the interval lies below 1; one run: undecided."""
    iv = repeat_interval(row.get("slowdown_runs") or [row["slowdown_measured"]])
    return ratio_word(iv, above="slower", below="faster")


def summary(rows: list[dict]) -> dict:
    """The chapter's verdict numbers from ``report.rows`` (rows with ``measured_ms``, ``predicted_ms``,
    ``time_rel_err``, ``slowdown_measured``, ``slowdown_predicted``, ``layout``). Layouts without a time
    prediction are left out and counted in ``unpredicted``."""
    timed = [r for r in rows if r.get("predicted_ms") is not None and r.get("time_rel_err") is not None]
    ratio = [r for r in timed if r.get("slowdown_predicted") is not None and r["layout"] != "single"]
    if not timed:
        return {"layouts": 0, "unpredicted": len(rows)}
    step_error = statistics.median(abs(r["time_rel_err"]) for r in timed)
    ratio_errors = [r["slowdown_predicted"] / r["slowdown_measured"] - 1 for r in ratio]
    slowdown_error = statistics.median(abs(e) for e in ratio_errors) if ratio_errors else float("nan")
    conc, total = _pairs(ratio)
    signed = [r["time_rel_err"] for r in timed]
    return {
        "layouts": len(timed), "unpredicted": len(rows) - len(timed),
        "step_error": step_error, "step_verdict": verdict(signed),
        "step_error_min": min(signed), "step_error_max": max(signed),
        "slowdown_error": slowdown_error, "slowdown_verdict": verdict(ratio_errors),
        # each layout is one run (one torchrun): "faster" needs an interval of fresh-process repeats
        # (``slowdown_runs``, e.g. from a reference window), so a single run is counted undecided
        "faster_measured": sorted(r["layout"] for r in ratio if _side(r) == "faster"),
        "slower_measured": sorted(r["layout"] for r in ratio if _side(r) == "slower"),
        "undecided_measured": sorted(r["layout"] for r in ratio if _side(r) == "undecided"),
        "faster_predicted": sorted(r["layout"] for r in ratio if r["slowdown_predicted"] < 1),
        "compared": len(ratio), "pairs_concordant": conc, "pairs": total,
    }


def record_step_time(rec, profile) -> tuple[dict, int]:
    """The profile's prediction of a layout record's step (:func:`predicted_step_time` on the collectives the
    run counted, timed under the counter, on the record's cores) and the torch threads a rank ran with:
    spawned ranks run 1 thread each (launch.spawn), the one-process layout the CLI's threads."""
    r, hw = rec.results, rec.data["provenance"]["hardware"]
    threads = 1 if r["world"] > 1 else hw.get("torch_threads")
    return predicted_step_time(layout_of(r), r["model"], r["batch"], r["seq"], profile, comm=r["comm"],
                               cores=hw.get("cpu_count"), threads=threads, harness=True), threads


def compare(records, profile=None) -> list[dict]:
    """One row per record: measured median step time and counted bytes next to the predictions."""
    rows = []
    for rec in records:
        r = rec.results
        lay = layout_of(r)
        row = {"layout": r["layout"]["name"], "world": r["world"], "model": r["model"],
               "measured_ms": 1000 * _median(r["step_s"]),
               "counted_bytes": sum(v["bytes"] for v in r["comm"].values()),
               "counted_wire": sum(v["wire_bytes"] for v in r["comm"].values()),
               "check_ok": None if "check" not in r else _ok(r["check"])}
        try:
            pred = predicted_comm(lay, r["model"], r["batch"], r["seq"])
            row["predicted_bytes"] = sum(v["bytes"] for v in pred.values())
            row["bytes_equal"] = not comm_mismatches(pred, r["comm"])
        except RlmLabError:
            pred, row["predicted_bytes"], row["bytes_equal"] = None, None, None
        if profile is not None:
            t, threads = record_step_time(rec, profile)
            row |= {"predicted_ms": 1000 * t["total_s"], "predicted_comm_ms": 1000 * t["comm_s"],
                    "predicted_framework_ms": None if t["framework_s"] is None else 1000 * t["framework_s"],
                    "predicted_compute_ms": 1000 * (t["compute_s"] + t["optimizer_s"]),
                    "rank_threads": threads, "rates_threads": t["rates_threads"],
                    "time_rel_err": (1000 * t["total_s"] - row["measured_ms"]) / row["measured_ms"]}
        rows.append(row)
    return rows


def _ok(check) -> bool:
    return within_tolerance(check)
