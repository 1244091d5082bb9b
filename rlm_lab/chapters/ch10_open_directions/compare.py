"""Chapter 10's comparisons: predicted against measured, every verdict from an interval
(:mod:`rlm_lab.evidence`), nothing computed in the notebook.

Parallel reasoning: the prediction (work, depth, Brent's bounds, latency from the reference traces) against the
trained policies' traces; accuracy per arm over the seeds (Student t), the parallel arm's accuracy minus the
sequential arm's paired by seed; work and depth per problem paired by problem and seed; latency per problem
paired, as the median of the per-problem ratios with its bootstrap interval. The bar, fixed before the runs:
a prediction is ``met`` when its whole error interval lies within +-25 % (:data:`rlm_lab.compare.BAR`).

Multi-domain RLVR: each paradigm's held-out accuracy per task over the seeds, and its difference from the
specialist of that task (paired by seed); the bubble and generation time of mixed and one-task batches; the
training runs' step time.
"""

from __future__ import annotations

import statistics

from ...compare import BAR
from ...evidence import (
    Interval,
    bar_word,
    error_interval,
    mean_interval,
    median_interval,
    paired_differences,
    ratio_interval,
    ratio_word,
    sign_word,
)
from ...tasks.mix import COMPONENTS
from . import cases

PARADIGMS = ("sft", "mixed", "merge_linear", "merge_ties", "merge_dare", "merge_cat")


def _iv(iv: Interval, fmt: str = "{:.3f}") -> str:
    return iv.text(fmt)


# ---- parallel reasoning -------------------------------------------------------------------------------------

def prediction_rows(pred: dict) -> list[dict]:
    """The prediction as a table: what each arm's traces cost, in tokens, and the latency model's speedup."""
    lo, hi = pred["speedup_steps_brent"]
    return [
        {"quantity": "work W (tokens decoded)", "sequential": pred["work_seq"], "parallel": pred["work_par"],
         "parallel / sequential": pred["work_par"] / pred["work_seq"]},
        {"quantity": "depth D (critical-path tokens)", "sequential": pred["depth_seq"], "parallel": pred["depth_par"],
         "parallel / sequential": pred["depth_par"] / pred["depth_seq"]},
        {"quantity": "speedup in decode steps, D_seq / T_p, Brent", "sequential": 1.0,
         "parallel": f"{lo:.2f} .. {hi:.2f}", "parallel / sequential": None},
        {"quantity": "latency speedup, roofline (median of problems)", "sequential": 1.0,
         "parallel": pred["latency_speedup"], "parallel / sequential": None},
    ]


def quality(measure: dict, seeds) -> dict:
    """Per arm: accuracy (mean over seeds, Student-t interval), and the per-seed accuracies; the parallel arm's
    accuracy minus the sequential arm's, paired by seed, with its verdict."""
    q = measure["quality"]
    acc = {a: [statistics.mean(q[f"{a}_seed{s}"]["correct"]) for s in seeds] for a in cases.ARMS}
    diff = mean_interval(paired_differences(acc["par"], acc["seq"]))
    return {"accuracy": {a: mean_interval(v) for a, v in acc.items()}, "per_seed": acc, "difference": diff,
            "word": sign_word(diff)}


def tokens(measure: dict, seeds, pred: dict) -> dict:
    """Work and depth of the trained policies' own traces: per arm the mean over problems and seeds, and the
    paired per-problem ratios (sequential over parallel) of depth and of work, against the prediction."""
    q = measure["quality"]
    pairs = {k: [(sx, px) for s in seeds for sx, px in zip(q[f"seq_seed{s}"][k], q[f"par_seed{s}"][k])]
             for k in ("work", "depth")}
    out = {}
    for k, pr in pairs.items():
        mean = {a: statistics.mean(x[i] for x in pr) for i, a in enumerate(cases.ARMS)}
        ratio = ratio_interval([x[0] for x in pr], [x[1] for x in pr])
        predicted = pred[f"{k}_seq"] / pred[f"{k}_par"]
        err = error_interval(predicted, ratio)
        out[k] = {"mean": mean, "ratio": ratio, "predicted": predicted, "error": err, "verdict": bar_word(err, BAR)}
    return out


def latency(measure: dict, pred: dict) -> dict:
    """Wall latency per problem (median of its repeats), the paired ratio sequential / parallel with its
    interval and word, and the predicted ratio's error against the 25 % bar."""
    lat = measure["latency"]
    seq = [r["median_s"] for r in lat["seq"]]
    par = [r["median_s"] for r in lat["par"]]
    ratio = ratio_interval(seq, par)
    err = error_interval(pred["latency_speedup"], ratio)
    return {"seq_s": median_interval(seq), "par_s": median_interval(par), "ratio": ratio,
            "word": ratio_word(ratio, "faster", "slower"), "predicted": pred["latency_speedup"], "error": err,
            "verdict": bar_word(err, BAR), "problems": len(seq)}


def parallel_rows(measure: dict, pred: dict, seeds) -> list[dict]:
    """The closing table: accuracy, work, depth and latency, sequential against parallel."""
    qa, tk, la = quality(measure, seeds), tokens(measure, seeds, pred), latency(measure, pred)
    return [
        {"measure": f"accuracy (mean of {len(seeds)} seeds)", "sequential": _iv(qa["accuracy"]["seq"]),
         "parallel": _iv(qa["accuracy"]["par"]), "comparison": f"par - seq {_iv(qa['difference'])}: {qa['word']}"},
        *({"measure": f"{k} (tokens, mean)", "sequential": f"{tk[k]['mean']['seq']:.1f}",
           "parallel": f"{tk[k]['mean']['par']:.1f}",
           "comparison": f"seq / par {_iv(tk[k]['ratio'], '{:.2f}')}; predicted {tk[k]['predicted']:.2f}: "
                         f"{tk[k]['verdict']}"} for k in ("work", "depth")),
        {"measure": f"latency per problem (s, median of {la['problems']})", "sequential": _iv(la["seq_s"], "{:.4f}"),
         "parallel": _iv(la["par_s"], "{:.4f}"),
         "comparison": f"seq / par {_iv(la['ratio'], '{:.2f}')} ({la['word']}); predicted {la['predicted']:.2f}: "
                       f"{la['verdict']}"},
    ]


# ---- multi-domain RLVR --------------------------------------------------------------------------------------

def matrix(records: dict) -> dict:
    """``{paradigm: {task: Interval}}`` over the seeds' matrix records (``{seed: record}``); a specialist's
    column is ``own``: each task scored by the model trained on it."""
    seeds = sorted(records)
    mats = {s: records[s].results["matrix"] for s in seeds}
    out = {}
    for par in PARADIGMS:
        if all(par in mats[s] for s in seeds):
            out[par] = {t: mean_interval([mats[s][par][t]["accuracy"] for s in seeds]) for t in COMPONENTS}
    out["own"] = {t: mean_interval([mats[s][t][t]["accuracy"] for s in seeds]) for t in COMPONENTS}
    return out


def transfer(records: dict) -> dict:
    """``{specialist: {task: Interval}}``: each specialist scored on every task (off the diagonal: what training
    on one task does to the others)."""
    seeds = sorted(records)
    return {sp: {t: mean_interval([records[s].results["matrix"][sp][t]["accuracy"] for s in seeds])
                 for t in COMPONENTS} for sp in COMPONENTS}


def against_specialists(records: dict) -> dict:
    """``{paradigm: {task: (Interval of paradigm - specialist, word)}}``, paired by seed."""
    seeds = sorted(records)
    mats = {s: records[s].results["matrix"] for s in seeds}
    out = {}
    for par in PARADIGMS:
        if par == "sft" or not all(par in mats[s] for s in seeds):
            continue
        out[par] = {}
        for t in COMPONENTS:
            d = mean_interval(paired_differences([mats[s][par][t]["accuracy"] for s in seeds],
                                                 [mats[s][t][t]["accuracy"] for s in seeds]))
            out[par][t] = (d, sign_word(d))
    return out


def power(records: dict) -> dict:
    """``{task: (Interval of specialist - SFT start, word)}``, paired by seed: whether GRPO moved the task at all.
    A task its own specialist did not move (``undecided``) gives the matrix no power there: a mixed run or a merge
    can neither lose (interference) nor gain (synergy) measurably against a specialist that did not learn."""
    seeds = sorted(records)
    mats = {s: records[s].results["matrix"] for s in seeds}
    if not all("sft" in mats[s] for s in seeds):
        return {}
    out = {}
    for t in COMPONENTS:
        d = mean_interval(paired_differences([mats[s][t][t]["accuracy"] for s in seeds],
                                             [mats[s]["sft"][t]["accuracy"] for s in seeds]))
        out[t] = (d, sign_word(d))
    return out


def powered_word(word: str, power_cell) -> str:
    """A paradigm-against-specialist word on a task, said as what it can mean: "no power" in place of "undecided"
    where the task's own specialist did not move it (``power_cell``, a :func:`power` cell, not "higher"): the
    comparison could not have decided there, so "undecided" would promise a test that was never possible. A decided
    word stays as it is."""
    if word == "undecided" and power_cell is not None and power_cell[1] != "higher":
        return "no power"
    return word


def matrix_rows(records: dict) -> list[dict]:
    """The task x paradigm accuracy matrix as rows (one per task), each cell a mean over seeds [95 % interval]."""
    m = matrix(records)

    cols = ["sft", "own", *[p for p in PARADIGMS if p in m and p != "sft"]]
    return [{"task": t, **{c: _iv(m[c][t], "{:.2f}") for c in cols}} for t in COMPONENTS]


def systems(rec_systems, pred: dict) -> dict:
    """Per batch kind (mixed, each task): the bubble (mean over batches and repeats, t interval), the generate
    seconds (median, bootstrap), the predicted bubble; and the mixed batch's seconds over the mean one-task
    batch's, paired by repeat and batch index."""
    b = rec_systems.results["batches"]
    out = {k: {"bubble": mean_interval([x["bubble"] for x in v]), "seconds": median_interval([x["seconds"] for x in v]),
               "predicted_bubble": pred[f"bubble_{k}"], "max_length": max(max(x["lengths"]) for x in v),
               "mean_length": statistics.mean(statistics.mean(x["lengths"]) for x in v)} for k, v in b.items()}
    sep = [statistics.mean(b[t][i]["seconds"] for t in COMPONENTS) for i in range(len(b["mixed"]))]
    ratio = ratio_interval([x["seconds"] for x in b["mixed"]], sep)
    out["mixed_over_separate"] = {"ratio": ratio, "word": ratio_word(ratio, "slower", "faster")}
    return out


def step_times(runs: dict) -> dict:
    """Per run kind: the median step wall and CPU seconds over steps and seeds (first step left out: one-time
    costs; a run of one step, as each task's at smoke size, keeps it, so the smoke book shows that the code
    runs). ``runs``: ``{kind: [rows of the step clock of each seed]}``."""
    out = {}
    for kind, per_seed in runs.items():
        rows = [r for seed_rows in per_seed for r in (seed_rows[1:] if len(seed_rows) > 1 else seed_rows)]
        out[kind] = {"wall_s": median_interval([r["wall_s"] for r in rows]),
                     "cpu_s": median_interval([r["cpu_s"] for r in rows]), "steps": len(rows)}
    return out
