"""The results ledger: one entry per quantity the book shows from a measurement or a prediction.

    entries = build("cpu")            # list[Entry], ids unique
    rlm-lab results [--json]          # prints it

An entry says what the quantity is, its unit, the **estimator** that made the value (one per kind of quantity,
named in :data:`ESTIMATORS`), the value with its interval and the interval's method (chosen by n,
:mod:`rlm_lab.evidence`), n and what n counts, the records it read, the load per core they were measured at where
the records keep it, the record that replaced them (:mod:`rlm_lab.supersession`; a replaced record is never
current: such an entry is ``current = False``), and the verdict with the rule that gave it.

Every entry is computed from the committed records through the chapters' own readers (chapter 9's evidence and
results rows, the reference window's rows, chapter 6's pre-registered test, the run records' loaders), never
typed: the book's pages read the same objects, and ``tests/test_ledger.py`` checks the ledger's promises (one
value per id, nothing current from a replaced record, no bootstrap over fewer than 10 values).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from . import record, reference_report as RR
from . import validate as V
from .chapters.ch01_quickstart import advised as ADV
from .chapters import ch03_work_depth as W3
from .chapters.ch02_anatomy import report as CH2
from .chapters.ch04_parallelism import out_of_sample as OOS
from .chapters.ch04_parallelism import report as CH4
from .chapters.ch05_placement import shared_critic as AC
from .chapters.ch06_async import accuracy_test as A
from .chapters.ch10_open_directions import cases as C10
from .chapters.ch10_open_directions import compare as CMP10
from .chapters.ch10_open_directions import report as CH10
from .chapters.ch06_async import report as CH6
from .chapters.ch06_async.cases import corr_label
from .chapters.ch06_async.compare import advisor_check, goal_vs_reference
from .chapters.ch08_frameworks import report as F
from .chapters.ch09_guidelines import report as R
from .chapters.ch09_guidelines.compare import check_text
from .chapters.ch09_guidelines.run import folders, metric, rel, runs_of
from .errors import RlmLabError
from .compare import OTHER, STEP
from .evidence import (BOOTSTRAP, Interval, error_interval, mean_interval, median_interval, ratio_word,
                       repeat_interval)
from .record import load_record, reference_root
from .supersession import superseded, superseded_by
from .validate.pairs import PAIRS
from .tables import format_table

# the estimators, one per kind of quantity: name -> how the value is made
ESTIMATORS = {
    "repeats": "over independent repeats (seeds, runs, paired repeats of one window): the mean with Student-t for "
               "3-9 values, the median with a percentile bootstrap from 10, no interval for 1-2",
    "paired ratio": "per pair A_i / B_i (measured back to back), then as 'repeats'",
    "paired difference": "per seed A_s - B_s, then the mean with Student-t (chapter 6's pre-registered exact "
                         "sign-flip test decides)",
    "median of steps": "the median of one run's steps after the first (steps of one process decide nothing)",
    "one run": "one run's recorded value (decides nothing)",
    "exact count": "a counted quantity (bytes on the wire), exact by construction",
    "relative error": "predicted / measured - 1, at the estimate and at both ends of the measured interval",
    "prediction": "the cost model or advisor's number (made before the run where stored in its record)",
    "over cases": "a statistic over a suite's cases (one traced run per workload or stage): the median of |error| "
                  "with its exact order-statistics interval below 10 cases and a percentile bootstrap from 10 "
                  "(evidence.median_interval), the mean signed error with Student-t, the worst case with none",
}


@dataclass(frozen=True)
class Entry:
    id: str
    chapter: int
    what: str
    unit: str
    estimator: str
    value: float | None
    lo: float | None = None
    hi: float | None = None
    method: str = "none"
    n: int = 1
    counts: str = "one run"
    records: tuple = ()
    load: str = ""
    superseded_by: str = ""
    verdict: str = ""
    rule: str = ""
    note: str = ""

    @property
    def current(self) -> bool:
        return not self.superseded_by

    def text(self) -> str:
        v = "-" if self.value is None else f"{self.value:.4g}"
        iv = f" [{self.lo:.4g}, {self.hi:.4g}]" if self.lo is not None and self.hi is not None else ""
        return f"{v}{iv} {self.unit}".strip()


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _from_interval(iv: Interval | None) -> dict:
    if iv is None:
        return {"value": None}
    return {"value": _num(iv.estimate), "lo": _num(iv.lo) if iv.decided else None,
            "hi": _num(iv.hi) if iv.decided else None, "method": iv.method or ("none" if not iv.decided else "given"),
            "n": iv.n}


# ---- load ------------------------------------------------------------------------------------------------------

def _per_core(v, cores: int | None) -> float | None:
    if isinstance(v, dict):
        if "per_core" in v:
            return _num(v["per_core"])
        v = v.get("1m", v.get("load1"))
    if isinstance(v, (list, tuple)) and v:
        v = v[0]
    v = _num(v)
    return v / cores if v is not None and cores else v


def load_of(paths, repo: Path) -> str:
    """The load per core the records at ``paths`` were measured at, as "a-b" (from whichever load field the record
    keeps: ``load_start``/``load_end``, ``loadavg``, ``load_average``...); empty when none keeps one."""
    loads = []
    for p in paths:
        try:
            rec = load_record(repo / p)
        except RlmLabError:
            continue
        cores = (rec.data.get("provenance", {}).get("hardware") or {}).get("cpu_count")
        r = rec.results
        for k in ("load_start", "load_end", "loadavg_before", "loadavg_after", "loadavg", "load_average_start",
                  "load_average_end", "load_average"):
            x = _per_core(r.get(k), cores) if k in r else None
            if x is not None:
                loads.append(x)
    if not loads:
        return ""
    lo, hi = min(loads), max(loads)
    return f"{lo:.2f}" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}"


# ---- the sources -----------------------------------------------------------------------------------------------

def _guidelines(repo: Path) -> list[Entry]:
    """Chapter 9: each guideline's measured quantity with its verdict, and its predictions at 8, 64, 512 GPUs."""
    out = []
    for r in R.guideline_rows():
        g, ev, v = r["guideline"], r["evidence"], r["verdict"]
        est = {"paired": "paired ratio" if g.evidence.get("stat") == "ratio" else "paired difference",
               "window": "paired ratio", "pretest": "paired difference", "exact": "exact count",
               "single": "one run", "none": "one run"}.get(g.evidence["kind"], "repeats")
        sup = "" if ev.basis != "superseded" else ev.note.split("which the window ")[1].split(" replaces")[0]
        vals = _from_interval(ev.interval)
        out.append(Entry(f"ch09.{g.id}", 9, g.evidence.get("quantity", g.title), "", est,
                         **vals, counts=ev.basis, records=tuple(ev.sources), load=load_of(ev.sources, repo),
                         superseded_by=sup, verdict=v.word,
                         rule=f"test {check_text(g.test, r['target'])}; chapter 9's rule: {v.why}", note=ev.note))
        for p in r["points"]:
            if p.value is not None:
                out.append(Entry(f"ch09.{g.id}.at{p.devices}", 9,
                                 f"{g.title}: prediction at {p.devices} H100s ({p.note})", "", "prediction",
                                 _num(p.value), n=1, counts="prediction", verdict=(
                                     "holds" if R.holds(g.holds[p.devices], p.value) else "fails"),
                                 rule=f"the claim's condition at scale: {check_text(g.holds[p.devices])}"))
    return out


def _items(repo: Path) -> list[Entry]:
    """The results page: each taxonomy item's measured, predicted and error cells (chapters 4-7)."""
    out = []
    for r in R.results_rows():
        it, unit = r["item"], R.unit_of(r["what"])
        ch = int(it.chapter[2:4])
        m, p, e, h = r["measured"], r["predicted"], r["error"], r["history"]
        counts = m.basis or "one run"
        est = {"steps of one run": "median of steps", "exact count": "exact count", "one run": "one run",
               "superseded": "one run"}.get(counts, "paired ratio" if it.source in ("ch06", "ch07") else "repeats")
        sup = ""
        if counts == "superseded":
            sup = m.note.split("the window ")[1].split(" replaced")[0]
        base = f"ch{ch:02d}.{it.key}"
        if isinstance(m.value, (int, float)):
            out.append(Entry(f"{base}.measured", ch, f"{it.name}: {r['what']}", unit, est, **_from_interval(m.interval),
                             counts=counts, records=tuple(m.sources), load=load_of(m.sources, repo),
                             superseded_by=sup, verdict=r["bar"].value,
                             rule="the 25 % bar on the error's interval (met / not met only when the whole interval "
                                  "is inside / outside); only repeats across runs decide", note=m.note))
        if isinstance(p.value, (int, float)):
            out.append(Entry(f"{base}.predicted", ch, f"{it.name}: predicted {r['what']}", unit, "prediction",
                             _num(p.value), records=tuple(p.sources), counts="prediction", note=p.note))
        if isinstance(e.value, (int, float)):
            out.append(Entry(f"{base}.error", ch, f"{it.name}: relative error of the prediction", "",
                             "relative error", **_from_interval(e.interval), counts=counts,
                             records=tuple(e.sources), superseded_by=sup, verdict=r["bar"].value,
                             rule="met when the whole interval is within +-25 %"))
        if isinstance(h.value, (int, float)):
            new = m.sources[0] if m.sources else ""
            out.append(Entry(f"{base}.measured.history", ch, f"{it.name}: {r['what']} (the replaced record, history)",
                             unit, "median of steps" if h.basis == "steps of one run" else est,
                             **_from_interval(h.interval), counts=h.basis or "one run", records=tuple(h.sources),
                             load=load_of(h.sources, repo), superseded_by=new or "a reference window"))
    return out


def _windows(size: str, repo: Path) -> list[Entry]:
    """The newest committed reference window of each chapter: each arm's measured and predicted step, the error
    against the 25 % goal, and each reference's paired ratio with its word."""
    out = []
    for ch in (2, 4, 5, 6, 7):
        rec = RR.latest_window(size, ch)
        if rec is None:
            continue
        win = str(Path(rec.dir).resolve().relative_to(repo)) if Path(rec.dir).resolve().is_relative_to(repo) \
            else Path(rec.dir).name
        load = load_of([win], repo)
        arms, pairs = RR.rows(rec, ch)
        for a in arms:   # one entry per arm: an arm several references measured is one quantity (RR.rows)
            base = f"ch{ch:02d}.window.{a['arm']}"
            refs = ", ".join(a["references"])
            out.append(Entry(f"{base}.measured", ch, f"{a['arm']}'s step in the window (references {refs})", "s",
                             "repeats", **_from_interval(a["measured"]), counts="paired repeats", records=(win,),
                             load=load, verdict=a["goal"], rule=f"the {RR.GOAL:.0%} goal on the error's interval",
                             note=f"every repeat of the arm in the window: {refs}"))
            if a["predicted"] is not None:
                out.append(Entry(f"{base}.predicted", ch, f"{a['arm']} predicted before the window's first repeat",
                                 "s", "prediction", _num(a["predicted"]), records=(win,), counts="prediction"))
                out.append(Entry(f"{base}.error", ch, f"{a['arm']}: relative error of the prediction", "",
                                 "relative error", **_from_interval(a["error"]), counts="paired repeats",
                                 records=(win,), load=load, verdict=a["goal"]))
        for p in pairs:
            out.append(Entry(f"ch{ch:02d}.window.{p['reference']}.ratio", ch, f"{p['a']} / {p['b']} (paired)", "x",
                             "paired ratio", **_from_interval(p["ratio"]), counts="paired repeats", records=(win,),
                             load=load, verdict=p["word"], rule="faster / slower only when the interval excludes 1"))
    return out


def _accuracy_test(repo: Path) -> list[Entry]:
    """Chapter 6's pre-registered accuracy plan: each test's mean paired difference and its word."""
    root = repo / A.ROOT
    if not root.is_dir():
        return []
    finals, dirs = A.load_finals(root)
    result = A.decide(finals)
    out = []
    for r in result["tests"]:
        if not r["diffs"]:
            continue
        out.append(Entry(f"ch06.accuracy_test.{r['test']}", 6, r["claim"], "accuracy", "paired difference",
                         **_from_interval(mean_interval(r["diffs"])), counts="seeds",
                         records=tuple(f"{A.ROOT}/{d}" for d in sorted(dirs.values())),
                         verdict=r["word"] if result["status"] == "complete" else "undecided (incomplete)",
                         rule=f"{A.PLAN['test']}; alpha {A.PLAN['alpha']:g}, {A.PLAN['multiplicity']}; "
                              f"Holm p = {r['p_holm']:.3f}"))
    return out


def _advised(size: str, root=None) -> list[Entry]:
    """Chapter 1's advice applied (issue 35 item 8): the predicted steps and speed-up (made before the measurement),
    the measured paired speed-up over plain TRL, the whole-process ratio, each arm's accuracy and the paired
    accuracy difference, with the goal's verdict; an earlier measurement (other arm options) under its own ids
    ``ch01.advised.<UTC>.*``. ``root``: another records root than the committed one (tests)."""
    got = ADV.latest(size, root)
    if got is None:
        return []
    pred, v = got["prediction"], got["verdict"]
    base = f"{ADV.RECORDS}/prediction.json"
    out = [Entry("ch01.advised.predicted_speedup", 1, "advised over plain TRL, steps per second, predicted before "
                 "the run", "x", "prediction", _num(pred["speedup"]), counts="prediction", records=(base,))]
    out += [Entry(f"ch01.advised.predicted_step.{arm}", 1, f"the {arm} arm's step, predicted before the run", "s",
                  "prediction", _num(pred[key]), counts="prediction", records=(base,))
            for arm, key in (("plain", "plain_step_s"), ("advised", "pick_step_s"))]
    if v is None:
        return out
    load = f"{got['load']['min']:.2f}-{got['load']['max']:.2f}"
    out += _advised_measured("ch01.advised", v, got["record"], load)
    for e in got["earlier"]:
        name = e["record"].rsplit("/", 1)[-1]
        le = f"{e['load']['min']:.2f}-{e['load']['max']:.2f}"
        out += [x for x in _advised_measured(f"ch01.advised.{name}", e["verdict"], e["record"], le)
                if x.id.endswith(".speedup")]
    return out


def _advised_measured(base: str, v: dict, record: str, load: str) -> list[Entry]:
    """One measurement of chapter 1's advice (its ``verdict.json``) as entries under ``base``."""
    sp, acc, wall = v["speedup"], v["accuracy"]["difference"], v["wall_speedup"]
    out = [Entry(f"{base}.speedup", 1, "advised over plain TRL, RL steps per second at equal steps", "x",
                 "paired ratio", _num(sp["estimate"]), _num(sp["lo"]), _num(sp["hi"]), sp["method"] or "none",
                 sp["n"], "paired repeats", (record,), load, verdict=v["word"],
                 rule=f"met when the interval is at or above {v['goal']:g}x and the accuracy not lower"),
           Entry(f"{base}.wall_speedup", 1, "plain TRL's whole-process wall time over the advised one's (Ray's "
                 "start-up included)", "x", "paired ratio", _num(wall["estimate"]), _num(wall["lo"]),
                 _num(wall["hi"]), wall["method"] or "none", wall["n"], "paired repeats", (record,), load,
                 verdict=ratio_word(Interval(wall["estimate"], wall["lo"], wall["hi"], wall["n"])),
                 rule="faster / slower only when the interval excludes 1")]
    out += [Entry(f"{base}.accuracy.{arm}", 1, f"held-out accuracy of the {arm} arm after the preset's RL steps",
                  "accuracy", "repeats", **_from_interval(repeat_interval(v["accuracy"][arm])),
                  counts="paired repeats (one run of the arm each)", records=(record,), load=load)
            for arm in ("advised", "plain")]
    out.append(Entry(f"{base}.accuracy_difference", 1, "held-out accuracy, advised minus plain TRL, equal steps",
                     "accuracy", "paired difference", _num(acc["estimate"]), _num(acc["lo"]), _num(acc["hi"]),
                     acc["method"] or "none", acc["n"], "seeds (per-seed means of the pairs)", (record,), load,
                     verdict=v["accuracy"]["word"], rule="higher / lower when the interval excludes 0"))
    return out


def _suite(base: str, rep: dict, records: tuple, load: str, what: str) -> list[Entry]:
    """One validation report (``rlm_lab.validate.report``) as entries under ``base``: the whole step's median and
    worst |error| over the workloads and its bias (mean signed error), the judged stages' median and worst |error|,
    the worst peak-memory error and the median error of the part above the runtime's baseline."""
    s, rows = rep["summary"], rep["rows"]

    def fin(x):
        return isinstance(x, (int, float)) and x == x

    steps = [r["rel_error"] for r in rows if r["stage"] == STEP and fin(r["rel_error"])]
    stages = [abs(r["rel_error"]) for r in rows if r["stage"] not in (STEP, OTHER) and fin(r["rel_error"])
              and r["share"] >= V.SHARE_MIN]
    above = [abs(r["transient_rel_error"]) for r in rows if fin(r.get("transient_rel_error"))]

    def word(k):
        v = s["verdicts"].get(k)
        return v.split(" (")[0] if v else ""

    rule = "the point against the bar fixed before the runs (rlm_lab.validate.BARS: {:.0%})"
    kw = {"records": records, "load": load}
    wl, st = "workloads (one traced run each)", "stages of >= 5 % of a step (one traced run each)"
    out = [Entry(f"{base}.step_median", 2, f"{what}: the whole step's median |error| over the workloads", "fraction",
                 "over cases", **_from_interval(median_interval([abs(e) for e in steps])), counts=wl, **kw,
                 verdict=word("step_median"), rule=rule.format(V.BARS["step_median"])),
           Entry(f"{base}.step_worst", 2, f"{what}: the whole step's worst |error|", "fraction", "over cases",
                 _num(s["step_worst"]), n=s["runs"], counts=wl, **kw),
           Entry(f"{base}.bias", 2, f"{what}: the whole step's mean signed error (bias)", "fraction", "over cases",
                 **_from_interval(mean_interval(steps)), counts=wl, **kw, verdict=word("bias"),
                 rule=rule.format(V.BARS["bias"]) + " on |bias|"),
           Entry(f"{base}.stage_median", 2, f"{what}: the judged stages' median |error|", "fraction", "over cases",
                 **_from_interval(median_interval(stages)), counts=st, **kw),
           Entry(f"{base}.stage_worst", 2, f"{what}: the judged stages' worst |error| ({s['worst_stage']})",
                 "fraction", "over cases", _num(s["stage_worst"]), n=len(stages), counts=st, **kw,
                 verdict=word("stage_worst"), rule=rule.format(V.BARS["stage_worst"]))]
    if "peak_worst" in s:
        out.append(Entry(f"{base}.peak_worst", 2, f"{what}: the worst stage's peak-memory |error|", "fraction",
                         "over cases", _num(s["peak_worst"]), n=s["runs"], counts=wl, **kw,
                         verdict=word("peak_worst"), rule=rule.format(V.BARS["peak_worst"])))
    if above:
        out.append(Entry(f"{base}.transient_median", 2, f"{what}: median |error| of the peak above the runtime's "
                         "baseline", "fraction", "over cases", **_from_interval(median_interval(above)),
                         counts="stages with a peak above the baseline", **kw))
    return out


def _validation(repo: Path) -> list[Entry]:
    """Chapter 2's validation suite: the in-situ profile on the suite measured on its own machine before the fit
    (its least-disturbed steps too), and each calibration judged on its own machine's suite
    (``rlm_lab.validate.pairs.PAIRS``); nothing in a checkout without the suite or the in-situ profile."""
    if not CH2.have_validation() or CH2.insitu_profile()[0] is None:
        return []
    val = V.report("cpu")
    root = Path(val["root"]).resolve()
    src = (str(root.relative_to(repo)) if root.is_relative_to(repo) else root.name,)
    loads = [v[0] / 2 for v in val["load"].values()]   # the 1-minute load before each workload, on 2 cores
    load = f"{min(loads):.2f}-{max(loads):.2f}" if loads else ""
    out = _suite("ch02.validation", val, src, load, "the in-situ profile on the suite")
    least = V.report("cpu", statistic="min")
    out += [e for e in _suite("ch02.validation.least_disturbed", least, src, load,
                              "the in-situ profile on each workload's fastest traced step")
            if e.id.endswith(".step_median")]
    for key, label, profile, where in PAIRS:
        if key == "insitu":   # the suite above, judged by the same profile: the same quantities, not a second id
            continue
        try:
            rep = V.report("cpu", repo / where, profile)
        except RlmLabError:
            continue
        out += [e for e in _suite(f"ch02.validation.pair.{key}", rep, (str(where),), "", label)
                if e.id.rsplit(".", 1)[-1] in ("step_median", "bias")]
    return out


def _work_depth(repo: Path) -> list[Entry]:
    """Chapter 3's committed decode steps, long-tail batches and replicas (``data/runs/cpu/ch03_*``): the median
    |error| of the whole ``generate`` calls, of the single decode steps and of every comparison, each over its
    cases with the verdict :func:`rlm_lab.compare.verdict` gives (its interval: ``median_interval``); and the real
    processes' T_p over the simulated one, per replica count and the largest."""
    ref = W3.load_reference("cpu")
    if len(ref) != 3:
        return []
    head = W3.headline(ref, W3.CPU_PROFILE)
    src = tuple(rel(ref[k].dir) for k in sorted(ref))
    load = load_of(src, repo)
    out = []
    for key, errs_key, what, counts in (
            ("whole_error", "whole", "whole generate calls (long-tail batches and replica T_p)",
             "whole generate calls (one timing each)"),
            ("step_error", "step", "single decode steps (model x batch)", "decode steps (model x batch, one timing each)"),
            ("all_error", "every", "every comparison of the chapter", "comparisons (one timing each)")):
        out.append(Entry(f"ch03.{key}", 3, f"the cost model's median |error| over {what}", "fraction", "over cases",
                         **_from_interval(median_interval(head["errors"][errs_key])), counts=counts, records=src,
                         load=load, verdict=head[f"{key.split('_')[0]}_verdict"],
                         rule="rlm_lab.compare.verdict: the median |error|'s interval against the bar and the goal"))
    rsrc = (rel(ref["replicas"].dir),)
    rload = load_of(rsrc, repo)
    for p, x in sorted(head["real_over_sim"].items()):
        out.append(Entry(f"ch03.replicas.real_over_sim.p{p}", 3, f"real processes' T_p over the simulated one, {p} "
                         "replicas (round robin)", "x", "one run", _num(x), counts="one run", records=rsrc, load=rload,
                         verdict="undecided", rule="one run decides nothing"))
    if head["real_over_sim"]:
        out.append(Entry("ch03.replicas.real_over_sim.max", 3, "the largest real / simulated T_p over the replica "
                         "counts run as real processes", "x", "one run", _num(max(head["real_over_sim"].values())),
                         counts="one run", records=rsrc, load=rload, verdict="undecided",
                         rule="one run decides nothing"))
    return out


def _out_of_sample(repo: Path) -> list[Entry]:
    """Chapter 4's out-of-sample runs (``data/runs/cpu/validation_dist_*``, predicted from the profile alone): each
    run's measured step (median of its steps) and prediction, and over the runs the median |error| with its
    exact order-statistics interval and the bar's word (``out_of_sample.bar_met``), the worst |error| and the
    signed median (bias); nothing without a committed profile."""
    _, _, profile, root = CH4.committed("cpu")
    if profile is None:
        return []
    val = OOS.rows(root, profile)
    src = tuple(sorted(rel(p) for p in root.glob(f"{OOS.PREFIX}*") if p.is_dir()))
    load = load_of(src, repo)
    out, errs = [], []
    for r in val:
        base = f"ch04.out_of_sample.{r['layout']}.{r['model']}"
        rec = tuple(s for s in src if Path(s).name.startswith(f"{OOS.PREFIX}{r['layout']}-{r['model']}-")) or src
        out.append(Entry(f"{base}.measured", 4, f"{r['layout']} ({r['model']}, {r['world']} processes): step",
                         "s", "median of steps", _num(r["measured_ms"] / 1e3), n=1, counts="one run", records=rec,
                         load=load_of(rec, repo), verdict="undecided", rule="one run decides nothing"))
        if r.get("predicted_ms") is not None:
            out.append(Entry(f"{base}.predicted", 4, f"{r['layout']} ({r['model']}): step, predicted from the "
                             "profile alone", "s", "prediction", _num(r["predicted_ms"] / 1e3), counts="prediction",
                             records=rec))
        if r.get("time_rel_err") is not None:
            errs.append(r["time_rel_err"])
    if not errs:
        return out
    kw = {"counts": "out-of-sample runs (one each)", "records": src, "load": load}
    s = OOS.summary(val)
    out += [Entry("ch04.out_of_sample.median_abs", 4, "the step's median |error| over the out-of-sample runs",
                  "fraction", "over cases", **_from_interval(median_interval([abs(e) for e in errs])), **kw,
                  verdict=s["met"], rule=f"out_of_sample.bar_met: the interval against the {OOS.BAR:.0%} bar fixed "
                                         "before the runs"),
            Entry("ch04.out_of_sample.worst_abs", 4, "the step's worst |error| over the out-of-sample runs",
                  "fraction", "over cases", _num(s["worst_abs"]), n=len(errs), **kw),
            Entry("ch04.out_of_sample.bias", 4, "the step's signed median error over the out-of-sample runs",
                  "fraction", "over cases", **_from_interval(median_interval(errs)), **kw)]
    return out


def _campaign(repo: Path) -> list[Entry]:
    """Chapter 6's campaign (``data/runs/cpu/ch06_*``, three seeds a cell): per mode and correction the final
    held-out accuracy and the tokens/s over the seeds, the speed-up over the synchronous step paired by seed with
    its prediction (made from the synchronous run before the mode ran) and the prediction's error; the plain-TRL
    reference's tokens/s and accuracy; the advisor's predicted speed-up; the issue's goal (the advisor's pick's
    tokens/s over the reference's, paired by seed) per correction."""
    c = CH6.campaign_section()
    rows, ref, camp = c["rows"], c["ref"], c["camp"]
    if not rows:
        return []
    out = []

    def srcs(cell) -> tuple:
        return tuple(sorted(rel(r["dir"]) for r in cell if "dir" in r))

    for r in rows:
        base, cell = CH6.campaign_id(r), camp["cells"].get((r["mode"], r["correction"]), [])
        src = srcs(cell)
        load = load_of(src, repo)
        what = f"{r['mode']} (correction {corr_label(r['correction'])})"
        kw = {"counts": "seeds (one run each)", "records": src, "load": load}
        out.append(Entry(f"{base}.final_accuracy", 6, f"{what}: final held-out accuracy", "accuracy", "repeats",
                         **_from_interval(repeat_interval(r["finals"])), **kw))
        out.append(Entry(f"{base}.tokens_per_s", 6, f"{what}: tokens/s over the training wall time", "tokens/s",
                         "repeats", **_from_interval(repeat_interval(list(r["tokens_per_s_by_seed"].values()))), **kw))
        if r.get("speedup_iv") is not None and r["mode"] != "sync":
            out.append(Entry(f"{base}.speedup", 6, f"{what}: speed-up over the synchronous step, paired by seed", "x",
                             "paired ratio", **_from_interval(r["speedup_iv"]), **kw, verdict=r.get("speedup_word", ""),
                             rule="faster / slower only when the interval excludes 1"))
            if r.get("predicted_speedup"):
                out.append(Entry(f"{base}.predicted_speedup", 6, f"{what}: speed-up predicted from the synchronous "
                                 "run before the mode ran", "x", "prediction", _num(r["predicted_speedup"]),
                                 counts="prediction", records=src))
                out.append(Entry(f"{base}.error", 6, f"{what}: relative error of the predicted speed-up", "",
                                 "relative error", **_from_interval(error_interval(r["predicted_speedup"],
                                                                                   r["speedup_iv"])),
                                 **kw, verdict=r.get("met") or "undecided",
                                 rule="met when the whole interval is within +-25 %"))
    if ref:
        src = srcs(camp["reference"])
        kw = {"counts": "seeds (one run each)", "records": src, "load": load_of(src, repo)}
        out.append(Entry("ch06.campaign.reference.tokens_per_s", 6, "plain trl.GRPOTrainer (the reference): tokens/s",
                         "tokens/s", "repeats",
                         **_from_interval(repeat_interval(list(ref["tokens_per_s_by_seed"].values()))), **kw))
        out.append(Entry("ch06.campaign.reference.final_accuracy", 6, "plain trl.GRPOTrainer: final held-out accuracy",
                         "accuracy", "repeats", **_from_interval(repeat_interval(ref["finals"])), **kw))
    sync = camp["cells"].get(("sync", None), [])
    if sync:
        adv = advisor_check([r["results"] for r in sync], rows, None)
        out.append(Entry("ch06.campaign.advisor.predicted_speedup", 6, f"advise_mode's pick (eta {adv['eta']}): its "
                         "speed-up over the synchronous step, predicted from each seed's synchronous run", "x",
                         "prediction", _num(adv["predicted_speedup"]), counts="prediction", records=srcs(sync),
                         note=f"eta {adv['eta']}"))
        picked = [r for r in rows if ("inf" if r["eta"] is None else str(r["eta"])) == adv["eta"]]
        cell = next((r for r in picked if r["correction"] is None and r.get("speedup_iv") is not None), None)
        if cell is not None:
            src = srcs(camp["cells"].get((cell["mode"], None), []))
            err = error_interval(adv["predicted_speedup"], cell["speedup_iv"])
            out.append(Entry("ch06.campaign.advisor.error", 6, f"advise_mode's predicted speed-up against the measured "
                             f"one of its pick ({CH6.campaign_id(cell)}.speedup)", "", "relative error",
                             **_from_interval(err), counts="seeds (paired)", records=src, load=load_of(src, repo),
                             verdict=adv["met"] or "undecided", rule="met when the whole interval is within +-25 %"))
        for r in picked if ref else []:
            g = goal_vs_reference(r, ref)
            src = srcs(camp["cells"].get((r["mode"], r["correction"]), [])) + srcs(camp["reference"])
            out.append(Entry(f"ch06.campaign.goal.{corr_label(r['correction'])}.tokens_ratio", 6,
                             f"the advisor's pick ({r['mode']}, correction {corr_label(r['correction'])}) over plain "
                             "TRL, tokens/s paired by seed", "x", "paired ratio", **_from_interval(g["tokens_iv"]),
                             counts="seeds (paired)", records=src, load=load_of(src, repo), verdict=g["met"],
                             rule="met when the interval is at or above 2x at the same accuracy curve"))
    return out


def _open_directions(repo: Path) -> list[Entry]:
    """Chapter 10's parallel-against-sequential reasoning (``data/runs/cpu/ch10_par_*``): each arm's held-out
    accuracy over the GRPO seeds (one SFT model per arm: the SFT variance is not in the interval) and their paired
    difference; the traces' depth and work, sequential over parallel per problem, with the prediction and its
    error; the latency per problem (median over problems) and its paired ratio with the prediction; and the
    multi-domain systems run's bubble and the mixed / separate generation ratio (``ch10_md_systems``)."""
    runs = CH10.ensure_runs("cpu")
    out = []
    if CH10.parallel_ready(runs, "cpu"):
        pred_rec, meas_rec = runs[C10.name("par", "predict")], runs[C10.name("par", "measure")]
        pred, meas = pred_rec.results["predicted"], meas_rec.results
        seeds = C10.parallel("cpu")["seeds"]
        qa, tk, la = CMP10.quality(meas, seeds), CMP10.tokens(meas, seeds, pred), CMP10.latency(meas, pred)
        src, psrc = (rel(meas_rec.dir),), (rel(pred_rec.dir),)
        load = load_of(src, repo)
        kw = {"counts": "GRPO seeds (one SFT model per arm)", "records": src, "load": load}
        base = "ch10.parallel"
        for a in C10.ARMS:
            out.append(Entry(f"{base}.accuracy.{a}", 10, f"held-out accuracy of the {a} arm after GRPO", "accuracy",
                             "repeats", **_from_interval(qa["accuracy"][a]), **kw))
        out.append(Entry(f"{base}.accuracy_difference", 10, "held-out accuracy, parallel minus sequential, paired by "
                         "seed", "accuracy", "paired difference", **_from_interval(qa["difference"]), **kw,
                         verdict=qa["word"], rule="higher / lower when the interval excludes 0"))
        for k in ("work", "depth"):
            t = tk[k]
            pk = {"counts": "problems x seeds (paired traces)", "records": src}
            for a in C10.ARMS:
                out.append(Entry(f"{base}.{k}.{a}", 10, f"{k} of the {a} arm's traces (tokens, mean over problems and "
                                 "seeds)", "tokens", "over cases", _num(t["mean"][a]), n=t["ratio"].n, **pk))
                out.append(Entry(f"{base}.{k}.{a}.predicted", 10, f"{k} of the {a} arm, predicted", "tokens",
                                 "prediction", _num(pred[f"{k}_{a}"]), counts="prediction", records=psrc))
            out.append(Entry(f"{base}.{k}_ratio", 10, f"{k}, sequential over parallel, per problem (paired)", "x",
                             "paired ratio", **_from_interval(t["ratio"]), **pk))
            out.append(Entry(f"{base}.{k}_ratio.predicted", 10, f"{k}, sequential over parallel, predicted", "x",
                             "prediction", _num(t["predicted"]), counts="prediction", records=psrc))
            out.append(Entry(f"{base}.{k}_ratio.error", 10, f"{k} ratio: the prediction's relative error", "",
                             "relative error", **_from_interval(t["error"]), **pk, verdict=t["verdict"],
                             rule="met when the whole interval is within +-25 %"))
        lk = {"counts": "problems (median of each one's repeats)", "records": src, "load": load}
        for a, key in (("seq", "seq_s"), ("par", "par_s")):
            out.append(Entry(f"{base}.latency.{a}", 10, f"wall latency per problem, {a} policy", "s", "over cases",
                             **_from_interval(la[key]), **lk))
        out.append(Entry(f"{base}.latency_ratio", 10, "latency, sequential over parallel, per problem (paired)", "x",
                         "paired ratio", **_from_interval(la["ratio"]), **lk, verdict=la["word"],
                         rule="faster / slower only when the interval excludes 1"))
        out.append(Entry(f"{base}.latency_ratio.predicted", 10, "latency speed-up, predicted", "x", "prediction",
                         _num(la["predicted"]), counts="prediction", records=psrc))
        out.append(Entry(f"{base}.latency_ratio.error", 10, "latency ratio: the prediction's relative error", "",
                         "relative error", **_from_interval(la["error"]), **lk, verdict=la["verdict"],
                         rule="met when the whole interval is within +-25 %"))
    if CH10.md_ready(runs, "cpu"):
        sys_rec, pred_rec = runs[C10.name("md", "systems")], runs[C10.name("md", "predict")]
        sysr = CMP10.systems(sys_rec, pred_rec.results["predicted"])
        src = (rel(sys_rec.dir),)
        kw = {"records": src, "load": load_of(src, repo)}
        out.append(Entry("ch10.multidomain.bubble_mixed", 10, "the mixed batch's bubble (idle share of its decode "
                         "slots)", "fraction", "repeats", **_from_interval(sysr["mixed"]["bubble"]),
                         counts="generate calls", **kw, note="the mean with Student-t (compare.systems)"))
        out.append(Entry("ch10.multidomain.bubble_mixed.predicted", 10, "the mixed batch's bubble, predicted",
                         "fraction", "prediction", _num(sysr["mixed"]["predicted_bubble"]), counts="prediction",
                         records=(rel(pred_rec.dir),)))
        g = sysr["mixed_over_separate"]
        out.append(Entry("ch10.multidomain.gen_ratio", 10, "generation seconds, the mixed batch over the separate "
                         "ones", "x", "paired ratio", **_from_interval(g["ratio"]), counts="generate calls (paired)",
                         **kw, verdict=g["word"], rule="faster / slower only when the interval excludes 1"))
    return out


# (chapter, folder glob, results key, what, unit, estimator): single runs' headline numbers of chapters 1-3, 5, 8, 10
RUN_FIELDS = (
    (1, "ch01_*", "accuracy_after", "held-out accuracy after RL", "accuracy", "one run"),
    (1, "ch01_*", "accuracy_before", "held-out accuracy before RL (after SFT)", "accuracy", "one run"),
    (1, "ch01_*", "rl_seconds_per_step", "seconds per RL step", "s", "one run"),
    (2, "ch02_*", "train_seconds", "training seconds of the run", "s", "one run"),
    (3, "ch03_replicas", "depth_s", "the longest sequence's decode seconds (the fork-join depth)", "s", "one run"),
    (5, "ch05_*", "step_seconds_median", "median step seconds of the run", "s", "median of steps"),
    (5, "ch05_*", "sync.seconds_mean", "seconds per weight sync (mean over the run's syncs)", "s", "one run"),
    (6, "ch06_*", "step_seconds_median", "median step seconds of the run", "s", "median of steps"),
    (6, "ch06_*", "reward_final", "mean reward of the run's last step", "reward", "one run"),
    (6, "ch06_*", "prediction.step_s", "step seconds predicted before the run", "s", "prediction"),
    (5, "ch05_*", "stage_seconds_mean.weight_sync", "weight-sync seconds per step (mean over the run)", "s", "one run"),
    (4, "ch04_*", "comm.all_gather.bytes", "all-gather bytes a rank sent in one step", "B", "exact count"),
    (4, "ch04_*", "comm.all_reduce.bytes", "all-reduce bytes a rank sent in one step", "B", "exact count"),
    (4, "ch04_*", "predicted_comm.all_gather.bytes", "all-gather bytes per rank, predicted", "B", "prediction"),
    (4, "ch04_*", "predicted_comm.all_reduce.bytes", "all-reduce bytes per rank, predicted", "B", "prediction"),
    (5, "ch05_*", "trainer_peak_rss_bytes", "the trainer's peak resident memory", "B", "one run"),
    (10, "ch10_*", "accuracy_after", "held-out accuracy after RL", "accuracy", "one run"),
    (10, "ch10_*", "accuracy_before", "held-out accuracy before RL (after SFT)", "accuracy", "one run"),
    (10, "ch10_*", "rl_seconds_per_step", "seconds per RL step", "s", "one run"),
)


def _runs(size: str, repo: Path, replaced: dict) -> list[Entry]:
    """Every committed run of chapters 1, 2, 5, 6 and 10 with a headline field (:data:`RUN_FIELDS`): one entry per
    folder and field, read from the folder's newest completed run; a folder a window replaces is marked so."""
    root = reference_root(size)
    out = []
    for ch, glob, key, what, unit, est in RUN_FIELDS:
        for f in folders(glob, root) if root.is_dir() else []:
            try:
                rec = runs_of(f)[-1]
                v = metric(rec, key)
            except RlmLabError:
                continue
            src = rel(rec.dir)
            hit = superseded_by(src, replaced)
            exact = est in ("exact count", "prediction")
            out.append(Entry(f"ch{ch:02d}.run.{f.name}.{key}", ch, f"{what} ({f.name})", unit, est, v,
                             v if est == "exact count" else None, v if est == "exact count" else None,
                             "exact" if est == "exact count" else "none", n=1,
                             counts=est if exact else "one run", records=(src,), load=load_of([src], repo),
                             superseded_by=hit.window if hit and not exact else "",
                             verdict="" if exact else "undecided", rule="" if exact else "one run decides nothing"))
    return out


def repo_root() -> Path:
    """The repository the records are read from (paths in entries are relative to it)."""
    return record.repo_root().resolve()


def _frameworks() -> list[Entry]:
    """Chapter 8: the 7B GRPO step under each framework's default (static generation) and as each framework's
    own config is imported (its engine), both predictions."""
    out = []
    for r in F.default_rows():
        if r.get("step_s") is not None:
            out.append(Entry(f"ch08.default.{r['framework'].lower()}.step_s", 8,
                             f"7B GRPO step on 64 H100s, {r['framework']}'s default ({r['placement']}, {r['mode']}), "
                             "static generation", "s", "prediction", _num(r["step_s"]), counts="prediction"))
    same, _ = F.same_workload_rows()
    for r in same:
        if r.get("step_s") is not None:
            out.append(Entry(f"ch08.imported.{r['framework'].lower()}.step_s", 8,
                             f"7B GRPO step on 64 H100s, {r['framework']}'s config imported ({r['placement']}, "
                             f"{r['mode']}), its engine", "s", "prediction", _num(r["step_s"]), counts="prediction"))
    return out


def _shared_critic(size: str) -> list[Entry]:
    """Chapter 5's shared actor-critic: the committed prediction and its paired repeats (``shared_critic.analysis``,
    what the page glues): the predicted and measured ratio shared / separate, the error against the bar, the model
    states and the peak saving; nothing when no committed protocol record exists at ``size``."""
    folder = AC.folder_of(size)
    if folder.parent != reference_root(size):
        return []
    a = AC.analysis(size, folder)
    p, src, base = a["prediction"], (a["record"],), "ch05.shared_critic"
    load = f"{a['load'][0]:.2f}-{a['load'][1]:.2f}"
    what = "PPO step, shared value head / separate critic"
    return [
        Entry(f"{base}.ratio_predicted", 5, f"{what}, predicted before the repeats", "ratio", "prediction",
              _num(p["ratio"]), counts="prediction", records=src),
        Entry(f"{base}.ratio", 5, f"{what}, measured", "ratio", "paired ratio", **_from_interval(a["ratio"]),
              counts="paired repeats", records=src, load=load, verdict=a["word"],
              rule="the interval against 1 (rlm_lab.protocol)"),
        Entry(f"{base}.error", 5, f"{what}: the prediction's relative error", "fraction", "relative error",
              **_from_interval(a["error"]), counts="paired repeats", records=src, load=load, verdict=a["verdict"],
              rule=f"|error| <= {a['bar']:.0%} on the whole interval (rlm_lab.compare.BAR)"),
        Entry(f"{base}.model_state_saving_predicted", 5, "model states the shared head saves, predicted", "B",
              "prediction", _num(p["model_state_saving_bytes"]), counts="prediction", records=src),
        Entry(f"{base}.model_state_saving", 5, "model states the shared head saves, counted on the live trainers",
              "B", "exact count", _num(a["state_saving"]), _num(a["state_saving"]), _num(a["state_saving"]),
              "exact", counts="exact count", records=src,
              verdict="equal to the prediction" if a["state_exact"] else "differs from the prediction"),
        Entry(f"{base}.peak_saving", 5, "peak resident memory the shared head saves (separate - shared per pair)", "B",
              "paired difference", **_from_interval(a["peak_saving"]), counts="paired repeats", records=src,
              load=load, verdict=f"prediction {a['peak_word']} the interval",
              note=f"predicted {p['peak_saving_bytes']:,} B at the peak stage"),
    ]


def build(size: str = "cpu") -> list[Entry]:
    """The ledger of the committed records at ``size`` (module docstring); ids are unique (an error names a
    repeated id)."""
    repo = repo_root()
    replaced = superseded(size)
    entries = (_guidelines(repo) + _items(repo) + _windows(size, repo) + _accuracy_test(repo)
               + _runs(size, repo, replaced) + _frameworks() + _advised(size) + _shared_critic(size)
               + (_validation(repo) + _work_depth(repo) + _out_of_sample(repo) + _campaign(repo)
                  + _open_directions(repo)
                  if size == "cpu" else []))
    seen: dict = {}
    for e in entries:
        if e.id in seen and seen[e.id] != e:
            raise RlmLabError(f"ledger: the quantity id {e.id} has two entries ({seen[e.id].text()} and {e.text()})")
        seen[e.id] = e
    return list(seen.values())


def bootstrap_under(entries, n_min: int = 10) -> list[Entry]:
    """Entries whose interval is labelled a bootstrap over fewer than ``n_min`` values (none should be)."""
    return [e for e in entries if e.method == BOOTSTRAP and e.n < n_min]


def as_json(entries) -> str:
    return json.dumps([asdict(e) | {"current": e.current} for e in entries], indent=1)


def as_text(entries) -> str:
    return format_table([{"id": e.id, "value [95 %]": e.text(), "method": e.method, "n": f"{e.n} {e.counts}",
                          "verdict": e.verdict or "-", "current": "yes" if e.current else f"no: {e.superseded_by}"}
                         for e in entries])


def register(sub) -> None:
    p = sub.add_parser("results", help="the results ledger: every quantity the book shows, with its estimator, "
                                       "interval, n, records and verdict",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="cpu", help="the committed records' size (default cpu)")
    p.add_argument("--json", action="store_true", help="print the entries as JSON")
    p.add_argument("--chapter", type=int, default=None, help="only this chapter's entries")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    entries = build(args.size)
    if args.chapter is not None:
        entries = [e for e in entries if e.chapter == args.chapter]
    print(as_json(entries) if args.json else as_text(entries))
    return 0


# ---- what the pages show, read from the entries ----------------------------------------------------------------

def by_id(entries) -> dict:
    return {e.id: e for e in entries}


def verdict_counts(entries, prefix: str, words) -> dict:
    """How many of the top-level entries under ``prefix`` (``ch09.g``: the guidelines) got each word."""
    tops = [e for e in entries if e.id.startswith(prefix) and ".at" not in e.id[len(prefix):]]
    return {w: sum(e.verdict == w for e in tops) for w in words}


def _value(e: Entry | None) -> str:
    if e is None or e.value is None:
        return "-"
    pct = e.estimator == "relative error"
    f = (lambda v: f"{v:+.0%}") if pct else (lambda v: f"{v * 1e3:.1f} ms" if e.unit == "s" and abs(v) < 1 else
                                             f"{v / 2**20:.3f} MiB" if e.unit == "B" else f"{v:.3g}")
    iv = f" [{f(e.lo)}, {f(e.hi)}]" if e.lo is not None and e.hi is not None and e.method != "exact" else ""
    return f"{f(e.value)}{iv}"


def item_table(entries, items) -> list[dict]:
    """The results page's rows, read from the ledger's ``chNN.<item>.*`` entries: the prediction, the current
    measurement with its interval, method and n, the error, the bar, and the replaced record's value (history)."""
    d = by_id(entries)
    out = []
    for it in items:
        base = f"ch{int(it.chapter[2:4]):02d}.{it.key}"
        m, p, e, h = (d.get(f"{base}.{k}") for k in ("measured", "predicted", "error", "measured.history"))
        replaced = m is not None and not m.current
        out.append({"item": it.name, "chapter": it.chapter, "id": base,
                    "predicted": _value(p), "measured [95 %]": (f"not current: {m.superseded_by} replaced the record "
                                                                "and did not re-measure this") if replaced else _value(m),
                    "interval": "-" if m is None else f"{m.method}, n = {m.n} ({m.counts})",
                    "error": _value(e), "bar": m.verdict if m else "-",
                    "replaced record (history)": "-" if h is None else f"{_value(h)} ({h.counts})",
                    "records": sorted({s for x in (m, p) if x for s in x.records})})
    return out


# chapter 8's measured knobs (``ch08_frameworks.report.KNOBS``: a record folder and a field) -> the ledger quantity
# that is their one value: the results page's item where there is one, else the run's own entry
KNOB_IDS = {("ch05_colocated", "step_seconds_mean"): "ch05.colocated",
            ("ch05_disaggregated", "step_seconds_mean"): "ch05.disaggregated",
            ("ch05_disaggregated", "stage_seconds_mean.weight_sync"): "ch05.sync_collective",
            ("ch07_overprovision", "measured.speedup"): "ch07.overprovision",
            ("ch07_dynamic_sampling", "measured.inflation"): "ch07.dynamic_sampling",
            ("ch07_packing", "measured.speedup"): "ch07.packing"}
# one estimator per quantity: a run's step is the median of its steps; a weight sync is the seconds per sync call
# (chapter 5 and the results page's ch05.sync_* read it), not the trainer's weight_sync stage, which adds the wait
RUN_KEY = {"step_seconds_mean": "step_seconds_median", "stage_seconds_mean.weight_sync": "sync.seconds_mean"}


def knob_rows(entries, knobs) -> list[dict]:
    """Chapter 8's "what the book measured of each knob" rows, read from the ledger: the same value the results
    page and the chapter show, with its interval method; a record a window replaced and did not re-measure is
    said so instead of a number."""
    d = by_id(entries)
    rows = []
    for k in knobs.values():
        for m in k.measures:
            folder = Path(m.record).name
            base = KNOB_IDS.get((folder, m.measured))
            if base is not None:
                meas, pred = d.get(f"{base}.measured"), d.get(f"{base}.predicted")
            else:
                ch = folder[2:4]
                meas = d.get(f"ch{ch}.run.{folder}.{RUN_KEY.get(m.measured, m.measured)}")
                pred = d.get(f"ch{ch}.run.{folder}.{m.predicted}") if m.predicted else None
            current = meas is not None and meas.current
            mv = meas.value if current else None
            pv = pred.value if pred is not None and current else None
            what = m.what if meas is None or current else f"{m.what} (not current: {meas.superseded_by} replaced " \
                                                            "the record and did not re-measure it)"
            rows.append({"knob": k.title, "chapter": k.chapter, "what": what, "measured": mv, "predicted": pv,
                         "error": (pv - mv) / mv if pv is not None and mv else None, "unit": m.unit,
                         "record": (meas.records[0] if meas is not None and meas.records else m.record),
                         "id": meas.id if meas is not None else "-",
                         "interval": "-" if meas is None else f"{meas.method}, n = {meas.n} ({meas.counts})"})
    return rows


def values(entries, prefix: str, suffix: str) -> list[float]:
    """The values of the entries whose id starts with ``prefix`` and ends with ``suffix`` (e.g. every seed of one
    arm), in id order."""
    return [e.value for e in sorted(entries, key=lambda e: e.id)
            if e.id.startswith(prefix) and e.id.endswith(suffix) and e.value is not None]


def spread_text(xs, fmt: str = "{:.2f}") -> str:
    """``mean (min to max, n = k)`` of a few values, for prose that states a spread without an interval."""
    if not xs:
        return "not measured"
    if min(xs) == max(xs):
        return f"{fmt.format(xs[0])} (the same in all {len(xs)} runs: one model)"
    return f"{fmt.format(sum(xs) / len(xs))} ({fmt.format(min(xs))} to {fmt.format(max(xs))}, n = {len(xs)})"


def chapter_summary(entries) -> list[dict]:
    """One row per chapter of the ledger: how many quantities, how many predictions and measurements, how many
    read a record a newer one replaced (history), and the verdict words of its measured quantities."""
    out = []
    for ch in sorted({e.chapter for e in entries}):
        es = [e for e in entries if e.chapter == ch]
        meas = [e for e in es if e.estimator not in ("prediction", "relative error")]
        words = {w: sum(e.verdict == w for e in meas if e.current)
                 for w in ("met", "not met", "supported", "contradicted", "faster", "slower", "decided")}
        out.append({"chapter": ch, "quantities": len(es), "predictions": sum(e.estimator == "prediction" for e in es),
                    "measured": len(meas), "history (replaced)": sum(not e.current for e in es),
                    "decided": ", ".join(f"{n} {w}" for w, n in words.items() if n) or "none",
                    "undecided": sum(e.verdict.startswith("undecided") for e in meas if e.current)})
    return out


def predicted_measured(entries, items) -> list[dict]:
    """For the results page's figure: every item whose current measurement and prediction both exist, as numbers
    (label, unit, predicted, measured, lo, hi), read from the ledger's ``chNN.<item>.*`` entries."""
    d = by_id(entries)
    out = []
    for it in items:
        base = f"ch{int(it.chapter[2:4]):02d}.{it.key}"
        m, p = d.get(f"{base}.measured"), d.get(f"{base}.predicted")
        if m is None or p is None or not m.current or m.value is None or p.value is None:
            continue
        out.append({"label": it.key, "unit": m.unit, "predicted": p.value, "measured": m.value, "lo": m.lo,
                    "hi": m.hi})
    return out
