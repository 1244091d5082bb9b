"""Predict, then measure, on the reader's machine; the table beside the committed reference; ``rlm-lab your-numbers``."""

from __future__ import annotations

import contextlib
import json
import os
import time
from functools import partial
from pathlib import Path
from typing import Callable

from ...calibrate.profile import calibrate
from ...compare import relative_error, verdict
from ...cost.spread import bound_profiles
from ...errors import unknown
from ...host import load_average
from ...record import RecordError, RunRecord
from ...sizes import check_size
from ...tables import print_table, text
from ..ch02_anatomy import CPU_PROFILE
from .calibration import calibration_facts, ensure_calibration, insitu_calibration, now
from .headlines import READER_SIZE, Headline, headlines


def _interval(head: Headline, profile, prep: dict) -> dict:
    """{id: [low, high]} predicted seconds under the calibration's fast and slow quartile profiles."""
    fast, slow = bound_profiles(profile)
    lo, hi = head.predict(fast, prep), head.predict(slow, prep)
    return {k: [min(lo[k], hi[k]), max(lo[k], hi[k])] for k in lo}


def ensure_workloads(head: Headline, cal: dict, folder: Path) -> tuple[RunRecord, bool]:
    """The chapter's workloads on this machine: the record in ``folder`` if it completed for this calibration
    and these workloads, else predicted from the calibration (recorded, with its time) and then measured.
    Returns (the completed record, whether it was reused)."""
    config = json.loads(json.dumps({"chapter": head.chapter, "workloads": head.config(), "labels": head.labels,
                                    "calibration": {"sha256": cal["sha256"], "made": cal["made"]},
                                    "machine_key": cal["machine_key"]}))
    with contextlib.suppress(RecordError, OSError):
        rec = RunRecord.load(folder)
        if rec.config == config:
            return rec, True
    rec = RunRecord(folder, config, command=f"rlm_lab.chapters.your_machine ({head.chapter})", say=print)
    with rec:  # completed at the end of the block; failed / interrupted if it raises
        t0 = time.perf_counter()
        prep = head.prepare(folder)  # calibration inputs of this machine, measured before the prediction
        pred = head.predict(cal["profile"], prep)
        rec.update(prepared=prep, prediction=pred, interval=_interval(head, cal["profile"], prep),
                   profile=cal["profile"], predicted_at=now())
        rec.update(measure_started=now(), loadavg_before=load_average())
        measured, details = head.measure(folder, prep)
        rec.update(measured=measured, details=details, measure_ended=now(), loadavg_after=load_average(),
                   cores=os.cpu_count(), seconds=round(time.perf_counter() - t0, 1))
    return RunRecord.load(folder), False


def _gpu_here() -> bool:
    import torch

    return torch.cuda.is_available()


def _ref_profile() -> str:
    return CPU_PROFILE


def your_numbers(chapter: str, size: str, root: Path | None = None, calibrate_fn: Callable | None = None,
                 heads: dict | None = None, key: dict | None = None) -> dict:
    """The chapter's headline workloads: the committed reference (profile, prediction, measurement, error)
    beside this machine's (its own calibration's prediction, made first, its measurement, error, load).

    Only at ``cpu`` size is anything measured; at other sizes ``rows`` hold the reference alone and
    ``note`` says where the reader's column appears. Unknown size or chapter: RlmLabError before any work."""
    size = check_size(size)
    heads = heads or headlines()
    if chapter not in heads:
        raise unknown("chapter", chapter, heads)
    head = heads[chapter]
    ref = head.reference()
    rows = []
    for k, label in head.labels.items():
        p, m = ref.get(k, (None, None))
        rows.append({"workload": label, "ref_profile": _ref_profile() if k in ref else None, "ref_predicted": p,
                     "ref_measured": m, "ref_error": relative_error(p, m) if k in ref else None})
    out = {"chapter": chapter, "size": size, "reader": False, "calibration": None, "record": None, "rows": rows}
    if size != READER_SIZE:
        out["note"] = (f"This build is at `{size}` size, so only the committed reference is shown. Built at `cpu` "
                       "size (`make book SIZE=cpu`), this table gets a column measured on your machine: an in-situ "
                       "calibration of it (about 2 minutes, made once and cached), then these workloads, predicted "
                       "first and then run.")
        return out
    if _gpu_here():
        out["note"] = ("torch sees a CUDA GPU here; this column measures a CPU against a CPU calibration, so "
                       "it is left out: build the book at `gpu` size for this machine's numbers.")
        return out
    cal = ensure_calibration(key, root, calibrate_fn)
    rec, reused = ensure_workloads(head, cal, Path(cal["profile"]).parent / chapter)
    res = rec.results
    for row, k in zip(rows, head.labels):
        row.update(your_profile="your calibration", your_predicted=res["prediction"][k],
                   your_low=res["interval"][k][0], your_high=res["interval"][k][1], your_measured=res["measured"][k],
                   your_error=relative_error(res["prediction"][k], res["measured"][k]),
                   your_load=res["loadavg_before"][0] / (res["cores"] or 1))
    out.update(reader=True, record=str(rec.dir), calibration=cal | calibration_facts(cal),
               seconds={"calibration": 0.0 if cal["reused"] else cal["seconds"],
                        "workloads": 0.0 if reused else res["seconds"]},
               predicted_at=res["predicted_at"], measure_started=res["measure_started"],
               machine=rec.data["provenance"]["hardware"])
    out["note"] = summary_text(out)
    return out


# ---- what the book prints ---------------------------------------------------------------------------------

def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}"


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{x:+.0%}"


def _inside(r: dict) -> str:
    """Whether the measurement lies in the prediction's calibration spread (the predictions under the calibration's
    fast and slow quartile profiles). That spread holds the noise of the kernel rates only, not the cost model's
    own error, so a measurement outside it is expected whenever the error exceeds the spread: said, not hidden."""
    lo, hi, m = r.get("your_low"), r.get("your_high"), r.get("your_measured")
    if None in (lo, hi, m):
        return "-"
    return "yes" if min(lo, hi) <= m <= max(lo, hi) else ("no, above" if m > max(lo, hi) else "no, below")


def table(out: dict) -> list[dict]:
    """The rows of :func:`your_numbers` as the book prints them: milliseconds, signed errors, load per core."""
    rows = []
    for r in out["rows"]:
        row = {"workload": r["workload"], "reference_profile": r["ref_profile"] or "-",
               "ref_predicted_ms": _ms(r["ref_predicted"]), "ref_measured_ms": _ms(r["ref_measured"]),
               "ref_error": _pct(r["ref_error"])}
        if out["reader"]:
            row |= {"your_predicted_ms": _ms(r["your_predicted"]),
                    "calibration_spread_ms": f"{_ms(r['your_low'])}-{_ms(r['your_high'])}",
                    "measured_in_spread": _inside(r),
                    "your_measured_ms": _ms(r["your_measured"]), "your_error": _pct(r["your_error"]),
                    "your_load": f"{r['your_load']:.1f}"}
        rows.append(row)
    return rows


def summary_text(out: dict) -> str:
    """One paragraph on the reader's column (markdown), every number from ``out``."""
    c, hw, first = out["calibration"], out["machine"], out["rows"][0]
    spread = (f"the median interquartile range of its headline quantities is {c['median_rel_iqr']:.0%} of the median, "
              f"the widest {c['widest_rel_iqr']:.0%} ({c['widest']})" if c["median_rel_iqr"] is not None else "no spread")
    busy = (f" **The machine was busy** when it was calibrated ({c['load_per_core']:.1f} runnable processes per "
            "core before it, over the 0.5 `rlm-lab calibrate` allows): its rates are slower than the machine's "
            "own, and a later quiet build calibrates again." if c["busy"] else "")
    ref = (f"; the committed reference, on the `{first['ref_profile']}` profile, was off by {_pct(first['ref_error'])}"
           if first["ref_error"] is not None else "")
    sec = out["seconds"]
    if sec["calibration"] + sec["workloads"] == 0:
        spent = ("Both were reused from an earlier build (`_build/your_machine/` holds their records; delete it "
                 "to measure again).")
    else:
        wait = c.get("waited_for_load_s") or 0.0
        spent = (f"This build spent {sec['calibration'] + sec['workloads']:.0f} s on it: "
                 + (f"{sec['calibration']:.0f} s calibrating ({wait:.0f} s of them waiting for the load of "
                    "earlier work to fall), " if sec["calibration"] else "the calibration was reused, ")
                 + f"{sec['workloads']:.0f} s running these workloads. Later builds reuse both "
                 "(`_build/your_machine/`; delete it to measure again).")
    return (f"Your machine: {hw.get('cpu_model')} ({hw.get('cpu_count')} cores, {hw.get('torch_threads')} torch "
            f"threads), calibrated {c['made'][:16].replace('T', ' ')} UTC with {c['repeats']} repeats of the "
            f"micro-benchmarks; {spread}.{busy} From that calibration alone, before it ran, the cost model "
            f"predicted *{first['workload']}* at {_ms(first['your_predicted'])} ms (calibration spread: "
            f"{_ms(first['your_low'])} to {_ms(first['your_high'])} ms); it took {_ms(first['your_measured'])} ms, "
            f"an error of {_pct(first['your_error'])}{ref}. The spread is the calibration's noise carried through "
            f"the cost model, not the model's own error, so it need not hold the measurement (inside it: "
            f"{_inside(first)}). {spent}")


def headline_values(yours: dict) -> dict:
    """The values chapters 2 and 3 glue from :func:`your_numbers`: the reference's error and, at cpu size, the
    reader's error and its verdict against the chapters' goals. Chapter 2 quotes its whole GRPO step (the first
    row); chapter 3 the largest |error| over its whole ``generate`` calls."""
    c = yours["chapter"]
    if c == "ch02":
        step = yours["rows"][0]
        return {"ch02_yours_ref_error": text(step["ref_error"] if step["ref_error"] is not None else "n/a",
                                             "+.0%" if step["ref_error"] is not None else ""),
                "ch02_yours_error": text(step["your_error"] if yours["reader"] else "n/a (cpu size only)",
                                         "+.0%" if yours["reader"] else ""),
                "ch02_yours_verdict": text(verdict(abs(step["your_error"])) if yours["reader"] else "n/a")}
    gens = [r for r in yours["rows"] if r["workload"].startswith("generate")]
    ref_errs = [abs(r["ref_error"]) for r in gens if r["ref_error"] is not None]
    your_errs = [abs(r["your_error"]) for r in gens] if yours["reader"] else []
    return {f"{c}_yours_ref_error": text(max(ref_errs) if ref_errs else "n/a", ".0%" if ref_errs else ""),
            f"{c}_yours_error": text(max(your_errs) if your_errs else "n/a (cpu size only)", ".0%" if your_errs else ""),
            f"{c}_yours_verdict": text(verdict(max(your_errs)) if your_errs else "n/a")}


# ---- rlm-lab your-numbers ----------------------------------------------------------------------------------

def register(subparsers) -> None:
    p = subparsers.add_parser(
        "your-numbers", help="this machine's calibration and chapters 2-3's headline workloads beside ours",
        description=("Calibrate this machine in situ (once, about 2 minutes behind the load gate, cached by machine "
                     "key in the user's cache folder), predict the headline workloads of chapters 2 and 3 from that "
                     "calibration, then run them, and print both beside the committed reference. At any size but "
                     "cpu only the reference is printed."))
    p.add_argument("--no-calibrate", action="store_true",
                   help="no in-situ calibration: this machine's quick micro-benchmark calibration instead")
    p.add_argument("--chapter", default="all", help="ch02, ch03 or all (default)")
    p.add_argument("--size", default=READER_SIZE, help="cpu (default: measures) or smoke/gpu (reference only)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    heads = headlines()
    check_size(args.size)  # bad input: one error line before any work
    chapters = list(heads) if args.chapter == "all" else [args.chapter]
    for c in chapters:
        if c not in heads:
            raise unknown("chapter", c, [*heads, "all"])
    for c in chapters:
        out = your_numbers(c, args.size, heads=heads, calibrate_fn=partial(
            insitu_calibration, fallback=calibrate, no_calibrate=args.no_calibrate))
        print(f"== {c}")
        print_table(table(out))
        print(out["note"])
    return 0


__all__ = ["ensure_workloads", "headline_values", "register", "summary_text", "table", "your_numbers"]
