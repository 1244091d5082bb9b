"""Chapter 6's campaign, read back: per (mode, correction) over seeds, speed, idle fractions, staleness and
the learning curves; the η beyond which learning degrades; predicted against measured speed-ups; the
advisor's pick and its error; the plain-TRL reference and the issue's 2x goal. Standard library only (the
book reads records without torch).

Criteria fixed before the campaign ran (this docstring was committed before the first cpu record):

- **degraded** (accuracy per step): a (mode, correction) cell is degraded when the mean over seeds of its
  final held-out accuracy is below the synchronous run's (same correction) by more than the seed spread,
  the larger of the two cells' ranges (max - min over seeds). The η "beyond which accuracy per step
  degrades" is the largest η below the first degraded one (∞ if none is).
- **speed**: per run the median step (tracer, after the first step); per cell the mean over seeds. The
  predicted speed-up of a run is the synchronous step its prediction was made from over its predicted step
  (both in the record's stored prediction, made from the (sync, none) run of that seed), averaged over
  seeds; the measured one is the synchronous cell's mean step (same correction) over the cell's; the goal
  on the error is |error| <= 25 % (:data:`GOAL`). Amended by issue 20 (one estimator, words from intervals):
  the measured speed-up is the median over seeds of the paired ratios sync step / mode step (same seed) with its
  bootstrap 95 % interval (:func:`by_seed_ratio`); "faster" only when the interval excludes 1, the goal "met"
  only when the whole error interval is within 25 %, "not met" only when wholly outside, else "undecided"; "the
  fastest η" only when its interval lies above every other's (:func:`rlm_lab.evidence.largest`).
- **tokens/s**: tokens TRL counted (prompt + completion, ``num_tokens``) over the training wall time without
  the evaluations (the curve's last ``wall_s``), the same definition for the plain-TRL reference.
- **the issue's goal**: the mode the advisor picks reaches >= 2x the reference's tokens/s *at the same
  accuracy curve*: its final accuracy (mean over seeds) is not below the reference's by more than the seed
  spread (the same rule as "degraded"); the tokens/s ratio paired by seed, "met" only when its whole interval
  is at or above 2x (:func:`rlm_lab.evidence.at_least_word`).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

from ...cost.asynchrony import advise_mode, best_split, simulate
from ...errors import RlmLabError
from ...evidence import Interval, at_least_word, bar_word, error_interval, largest, ratio_interval, ratio_word
from ...record import read_trace
from .cases import CORRECTIONS, MODES, SEEDS, cell_name, reference_name
from .run import latest_in, stage_times

GOAL = 0.25
TWO_X = 2.0


def spread(values) -> float:
    values = list(values)
    return (max(values) - min(values)) if len(values) > 1 else 0.0


def mean(values) -> float:
    values = list(values)
    return statistics.fmean(values) if values else float("nan")


def degraded(finals: list, sync_finals: list) -> bool:
    """The criterion of the module docstring: mean below sync's by more than the larger seed range."""
    return mean(finals) < mean(sync_finals) - max(spread(finals), spread(sync_finals))


def eta_beyond(etas: list, is_degraded: dict):
    """``etas`` in increasing order (None = ∞ last); the largest eta before the first degraded one (None
    when even the first is degraded... which cannot be: eta 0 is the reference itself)."""
    last_ok = etas[0]
    for e in etas:
        if is_degraded.get(e):
            return last_ok
        last_ok = e
    return last_ok


# ---- one run
def final_accuracy(results: dict) -> float | None:
    curve = (results.get("glue") or {}).get("curve") or results.get("curve")
    return curve["points"][-1]["accuracy"] if curve and curve.get("points") else None


def curve_points(results: dict) -> list:
    curve = (results.get("glue") or {}).get("curve") or results.get("curve")
    return list(curve["points"]) if curve else []


def tokens_per_s(results: dict) -> float | None:
    """Tokens TRL counted over the training wall time without the evaluations (module docstring)."""
    pts = curve_points(results)
    n = (results.get("glue") or {}).get("num_tokens") or results.get("num_tokens")
    return n / pts[-1]["wall_s"] if n and pts and pts[-1]["wall_s"] > 0 else None


def idle_fractions(results: dict, trace: dict | None) -> dict:
    """Idle fraction of each resource set over the training window (first step start .. last step end,
    minus the evaluations inside it): the trainer is idle while it waits for generation (the glue's
    ``wait_s``); the rollout worker is idle outside its ``generate`` and ``weight_sync`` spans."""
    glue = results.get("glue") or {}
    if not trace or not glue:
        return {}
    ev = trace["traceEvents"] if isinstance(trace, dict) else trace
    steps = [e for e in ev if e.get("pid") == 0 and e.get("cat") == "step" and e.get("ph") == "X"]
    if not steps:
        return {}
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + e["dur"] for e in steps)
    inner = sum(p["eval_s"] for p in curve_points(results)[1:-1]) * 1e6
    window = max(1e-9, hi - lo - inner)
    out = {"trainer": min(1.0, sum(s["wait_s"] for s in glue.get("steps", [])) * 1e6 / window)}
    names = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    for pid, name in names.items():
        if pid == 0:
            continue
        busy = sum(max(0.0, min(hi, e["ts"] + e["dur"]) - max(lo, e["ts"])) for e in ev
                   if e.get("pid") == pid and e.get("ph") == "X" and e.get("name") in ("generate", "weight_sync"))
        out[name] = max(0.0, 1.0 - busy / window)
    return out


def is_ratio_summary(results: dict) -> dict:
    """TRL's logged importance ratios (correction on) or the glue's own re-scoring (correction off)."""
    glue = results.get("glue") or {}
    rows = glue.get("is_ratio") or []
    if rows:
        return {"source": "trl", "mean": mean(r["importance_sampling_ratio/mean"] for r in rows),
                "min": min(r["importance_sampling_ratio/min"] for r in rows),
                "max": max(r["importance_sampling_ratio/max"] for r in rows)}
    steps = [s for s in glue.get("steps", []) if "is_weight_mean" in s]
    if steps:
        return {"source": "glue", "mean": mean(s["is_weight_mean"] for s in steps),
                "min": min(s["is_weight_min"] for s in steps), "max": max(s["is_weight_max"] for s in steps)}
    return {}


# ---- cells over seeds
def cell_summary(runs: list[dict]) -> dict:
    """``runs``: [{"results", "trace"}] of one (mode, correction) over seeds -> means, ranges, curves."""
    res = [r["results"] for r in runs]
    steps = [r["step_seconds_median"] for r in res if r.get("step_seconds_median")]
    finals = [a for a in (final_accuracy(r) for r in res) if a is not None]
    toks = [t for t in (tokens_per_s(r) for r in res) if t]
    hist = Counter()
    for r in res:
        for k, v in ((r.get("glue") or {}).get("buffer") or {}).get("staleness_hist", {}).items():
            hist[int(k)] += v
    idle = [idle_fractions(r["results"], r.get("trace")) for r in runs]
    keys = sorted({k for d in idle for k in d})
    by_step: dict = {}
    for r in res:
        for p in curve_points(r):
            by_step.setdefault(p["step"], []).append(p)
    curve = [{"step": s, "accuracy": mean(p["accuracy"] for p in ps), "spread": spread(p["accuracy"] for p in ps),
              "wall_s": mean(p["wall_s"] for p in ps), "n": len(ps)} for s, ps in sorted(by_step.items())]
    pred = [(r.get("prediction") or {}).get("step_s") for r in res]
    # per run: the sync step its prediction was made from over its predicted step (same seed, same inputs)
    pred_up = [p["inputs"]["step_s"] / p["step_s"] for p in (r.get("prediction") or {} for r in res)
               if p.get("step_s") and (p.get("inputs") or {}).get("step_s")]
    return {"seeds": len(res), "step_s": mean(steps), "step_s_spread": spread(steps),
            "steps_per_s": 1.0 / mean(steps) if steps else None, "tokens_per_s": mean(toks),
            "tokens_per_s_spread": spread(toks), "final_accuracy": mean(finals), "finals": finals,
            "final_spread": spread(finals), "idle": {k: mean(d[k] for d in idle if k in d) for k in keys},
            "staleness_hist": dict(sorted(hist.items())), "curve": curve,
            "predicted_step_s": mean(p for p in pred if p) if any(pred) else None,
            "predicted_speedup": mean(pred_up) if pred_up else None,
            # per seed, for the ratios paired by seed (one estimator: the median of paired ratios, rlm_lab.evidence)
            "step_s_by_seed": {r.get("seed", i): x["step_seconds_median"] for i, (r, x) in enumerate(zip(runs, res))
                               if x.get("step_seconds_median")},
            "tokens_per_s_by_seed": {r.get("seed", i): t for i, (r, t) in enumerate(zip(runs, map(tokens_per_s, res)))
                                     if t},
            "is_ratio": [is_ratio_summary(r) for r in res]}


def table(cells: dict, modes, corrections, eta_of) -> list[dict]:
    """Rows per (mode, correction): the cell summary plus the speed-ups against the synchronous cell of
    the same correction (measured, and predicted from the stored predictions) and the degradation verdict."""
    rows = []
    for corr in corrections:
        base = cells.get(("sync", corr))
        for m in modes:
            c = cells.get((m, corr))
            if not c:
                continue
            row = {"mode": m, "eta": eta_of(m), "correction": corr, **c}
            if base:
                iv = by_seed_ratio(base["step_s_by_seed"], c["step_s_by_seed"])  # sync / mode: above 1 is faster
                row["speedup"], row["speedup_iv"] = iv.estimate, iv
                row["speedup_word"] = ratio_word(iv, "faster", "slower") if m != "sync" else "-"
                row["degraded"] = degraded(c["finals"], base["finals"]) if m != "sync" else False
            if c.get("predicted_speedup") and "speedup" in row and m != "sync":
                err = error_interval(row["predicted_speedup"], row["speedup_iv"])
                row["speedup_error"], row["met"] = err.estimate, bar_word(err, GOAL)
            rows.append(row)
    return rows


def beyond(rows: list[dict], correction) -> object:
    """The η beyond which accuracy per step degrades, for one correction (module docstring)."""
    rs = [r for r in rows if r["correction"] == correction and "degraded" in r]
    etas = [r["eta"] for r in rs]
    return eta_beyond(etas, {r["eta"]: r["degraded"] for r in rs})


def by_seed_ratio(a: dict, b: dict) -> Interval:
    """The median of the ratios ``a[seed] / b[seed]`` over the seeds both have, with its bootstrap 95 % interval
    (:func:`rlm_lab.evidence.ratio_interval`); one common seed: no interval (undecided)."""
    seeds = [k for k in a if k in b]
    if not seeds:
        raise RlmLabError("no seed measured in both cells: nothing to pair")
    return ratio_interval([a[k] for k in seeds], [b[k] for k in seeds])


def goal_vs_reference(row: dict, reference: dict) -> dict:
    """The issue's goal for one cell against the plain-TRL reference: tokens/s paired by seed (median of the
    ratios, its interval), ``met`` only when the whole interval is at or above 2x at the same accuracy curve,
    ``not met`` when it lies wholly below or the curve degraded, else ``undecided``."""
    iv = by_seed_ratio(row["tokens_per_s_by_seed"], reference["tokens_per_s_by_seed"])
    same = not degraded(row["finals"], reference["finals"])
    return {"tokens_ratio": iv.estimate, "tokens_iv": iv, "same_curve": same,
            "met": at_least_word(iv, TWO_X) if same else "not met"}


# ---- the advisor and the outlook
def _label(eta) -> str:
    return "inf" if eta is None else str(eta)


def advisor_check(sync_results: list[dict], rows: list[dict], correction=None) -> dict:
    """``advise_mode`` on each seed's synchronous stage times (what it sees before any asynchronous run):
    its pick (the most frequent over seeds), its predicted speed-up, and the measured speed-up of that eta's
    cell; the error against :data:`GOAL`, and the η that measured fastest."""
    advice = []
    for r in sync_results:
        st = stage_times(r)
        reps = max(1, 200 // len(st["gen_s"]))
        advice.append(advise_mode(st["gen_s"] * reps, st["train_s"], st["push_s"]))
    pick = Counter(_label(a["eta"]) for a in advice).most_common(1)[0][0]
    predicted = mean(a["speedup_vs_sync"] for a in advice if _label(a["eta"]) == pick)
    cells = {_label(r["eta"]): r for r in rows if r["correction"] == correction and "speedup" in r}
    measured = cells[pick]["speedup"] if pick in cells else None
    err = error_interval(predicted, cells[pick]["speedup_iv"]) if pick in cells else None
    fastest, why = largest({eta: r["speedup_iv"] for eta, r in cells.items()})
    return {"eta": pick, "mode": advice[0]["mode"] if advice else None, "predicted_speedup": predicted,
            "measured_speedup": measured, "error": None if err is None else err.estimate,
            "met": None if err is None else bar_word(err, GOAL),
            "fastest_eta": fastest, "fastest_why": why,
            "fastest_speedup": cells[fastest]["speedup"] if fastest else None,
            "per_seed": [_label(a["eta"]) for a in advice]}


def outlook(sync_results: dict, devices: int = 64, etas=(0, 1, 2, 4, 8, None)) -> dict:
    """A prediction, nothing measured: ``devices`` devices split between generation replicas (one batch per
    replica at the measured per-batch times g_i, so their variation - the long tail - is kept) and training
    (t / training devices: perfect data-parallel scaling), the split that equalises the two rates
    (:func:`rlm_lab.cost.asynchrony.best_split`), then the step for each eta (:func:`simulate`) and the
    advisor's pick. The baseline is the synchronous step colocated on all devices, (g + t) / devices (every
    device generates, then every device trains). Assumes stage times scale perfectly with devices and the
    push stays as measured: under those assumptions asynchrony can only hide the variation of g_i and the
    push, so the outlook is a lower bound on what a memory-bound decode (generation scaling worse than
    training) would leave to gain."""
    st = stage_times(sync_results)
    g, t, s = st["gen_s"], st["train_s"], st["push_s"]
    g_mean = mean(g)
    split = best_split(devices, lambda d: g_mean / d, lambda d: t / d, s)
    r, dt = split["rollout_devices"], split["train_devices"]
    gen = g * max(1, (20 * r) // len(g) + 1)
    sims = {_label(e): simulate(gen, t / dt, e, s, replicas=r).step_s for e in etas}
    adv = advise_mode(gen, t / dt, s, replicas=r, etas=etas)
    colocated = (g_mean + t) / devices + s
    return {"devices": devices, "rollout_devices": r, "train_devices": dt, "step_s_by_eta": sims,
            "sync_colocated_step_s": colocated,
            "speedup_by_eta": {k: colocated / v for k, v in sims.items()}, "advice_eta": _label(adv["eta"]),
            "advice_speedup_vs_colocated": colocated / adv["step_s"]}


# ---- reading the committed campaign
def load_campaign(root) -> dict:
    """``{"cells": {(mode, correction): [run]}, "reference": [run], "sync_none": [results]}`` from the newest
    record of each campaign folder under ``root``; a run is ``{"results", "trace", "dir", "status"}``.
    Failed records are listed under ``"failed"`` (kept, not averaged)."""
    def one(name):
        rec = latest_in(Path(root) / name)
        if rec is None:
            return None
        trace = read_trace(rec.dir) if any(Path(rec.dir).glob("trace.json*")) else None
        return {"results": rec.results, "trace": trace, "dir": str(rec.dir)}

    out = {"cells": {}, "reference": [], "failed": []}
    for m in MODES:
        for c in CORRECTIONS:
            runs = [dict(r, seed=s) for s, r in ((s, one(cell_name(m, c, s))) for s in SEEDS) if r is not None]
            if runs:
                out["cells"][(m, c)] = runs
    out["reference"] = [dict(r, seed=s) for s, r in ((s, one(reference_name(s))) for s in SEEDS) if r is not None]
    base = Path(root)
    for d in sorted(base.glob("ch06_*_seed*/*")):
        rec = d / "record.json"
        if rec.exists():
            status = json.loads(rec.read_text()).get("status", "")
            if str(status).startswith("failed"):
                out["failed"].append({"dir": str(d), "status": status})
    return out
