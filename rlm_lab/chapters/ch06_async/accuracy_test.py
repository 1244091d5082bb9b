"""Chapter 6's accuracy question, decided by a paired test fixed before its runs.

Question: does held-out accuracy fall with the staleness bound η when nothing corrects for the stale samples,
and does TRL's truncated importance sampling (``token_truncate``) hold it? Three seeds could not say (the
means fell 0.583 -> 0.425 from η = 0 to 8 without correction, one seed flat, two falling).

**The plan** (:data:`PLAN`), fixed in this module and committed before any of its runs (``git log`` of this
file against the records' start times shows the order):

- cells: the campaign's (mode, correction) for η = 0 (``sync``) and η = 8 (``eta8``), each without correction
  and with ``token_truncate``; every other setting is the campaign's own at ``cpu`` size
  (:func:`rlm_lab.chapters.ch06_async.cases.campaign_config`: 60 GRPO steps, the chain task, the micro model, chapter 7's
  SFT warm start);
- seeds: 0-9 for every cell (10 paired runs; all at one code version, seeds 0-2 run again rather than reused, the
  committed earlier records of seeds 0-2 only serve as a determinism check);
- metric: the **final held-out accuracy** of a run (greedy, the campaign's 500 held-out problems, after the 60th
  step: the last point of its curve);
- tests: for each question a paired difference by seed d_s = metric(cell A, s) - metric(cell B, s), tested
  one-sided (H1: mean d > 0) with the **exact sign-flip permutation test** of the mean difference (under H0 each
  d_s is as likely to have either sign; all 2^n sign patterns enumerated; ``scipy.stats.permutation_test`` with
  one sample, https://docs.scipy.org/doc/scipy/reference/generated/scipy.stats.permutation_test.html):

  1. ``falls_uncorrected``: A = (sync, none), B = (eta8, none): accuracy falls from η = 0 to 8 without correction;
  2. ``tis_recovers``: A = (eta8, tis), B = (eta8, none): at η = 8 truncated IS gives higher accuracy than none;
  3. ``falls_corrected``: A = (sync, tis), B = (eta8, tis): accuracy still falls with truncated IS;

- α = 0.05 family-wise over the three tests, Holm's step-down (Holm, Scand. J. Statist. 6, 1979).

Words: a test whose Holm-adjusted p is at most α is ``decided`` (its claim is made: "falls", "recovers"); any
other is ``undecided`` (no evidence at α; it is *not* evidence of no effect). A plan whose cells miss a seed is
``incomplete`` and decides nothing. The mean difference is given with a percentile-bootstrap 95 % interval
(:func:`rlm_lab.evidence.median_interval`'s method, on the mean) for its size, not for the decision.

Standard library + scipy/numpy (no torch): the book reads it without training anything.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from ...errors import RlmLabError
from ...record import atomic_write_json, provenance, repo_root
from . import compare
from .cases import cell_name
from .run import latest_in

PLAN = {
    "question": "does held-out accuracy fall with the staleness bound eta without correction, and does TRL's "
                "truncated importance sampling hold it?",
    "size": "cpu",
    "cells": (("sync", None), ("eta8", None), ("sync", "token_truncate"), ("eta8", "token_truncate")),
    "seeds": tuple(range(10)),
    "metric": "final held-out greedy accuracy (500 problems) after the last step (the curve's last point)",
    "tests": (
        ("falls_uncorrected", ("sync", None), ("eta8", None),
         "without correction, accuracy falls from eta = 0 to eta = 8"),
        ("tis_recovers", ("eta8", "token_truncate"), ("eta8", None),
         "at eta = 8, truncated importance sampling gives higher accuracy than no correction"),
        ("falls_corrected", ("sync", "token_truncate"), ("eta8", "token_truncate"),
         "with truncated importance sampling, accuracy still falls from eta = 0 to eta = 8"),
    ),
    "test": "exact one-sided sign-flip permutation test of the mean paired difference (H1: mean d > 0)",
    "alpha": 0.05,
    "multiplicity": "Holm step-down over the three tests (family-wise alpha)",
}


def sign_flip_p(diffs) -> float:
    """One-sided exact p of the mean of ``diffs`` under sign flips: the share of the 2^n sign patterns whose
    mean is at least the observed one (the observed pattern included, so p >= 2^-n). Through
    ``scipy.stats.permutation_test`` (one sample: it flips signs)."""
    from scipy.stats import permutation_test

    d = [float(x) for x in diffs]
    if not d or not all(math.isfinite(x) for x in d):
        raise RlmLabError(f"sign_flip_p: need finite paired differences, got {d}")
    if len(d) > 20:
        raise RlmLabError(f"sign_flip_p: {len(d)} pairs: 2^n patterns is too many to enumerate exactly")
    res = permutation_test((np.asarray(d),), lambda x, axis=-1: np.mean(x, axis=axis), permutation_type="samples",
                           n_resamples=np.inf, alternative="greater", vectorized=True)
    return float(res.pvalue)


def holm(pvalues: dict, alpha: float) -> dict:
    """Holm's step-down: ``{name: (adjusted p, rejected)}``. Sorted ascending, the k-th smallest (k from 0) is
    compared with alpha / (m - k); the first that fails stops every later one; the adjusted p is the running
    maximum of (m - k) p, capped at 1."""
    m = len(pvalues)
    out, running, stop = {}, 0.0, False
    for k, (name, p) in enumerate(sorted(pvalues.items(), key=lambda kv: kv[1])):
        running = max(running, min(1.0, (m - k) * p))
        stop = stop or p > alpha / (m - k)
        out[name] = (running, not stop)
    return out


def mean_interval(diffs, level: float = 0.95, resamples: int = 2000, seed: int = 0) -> tuple:
    """The mean of ``diffs`` with its percentile-bootstrap interval (deterministic: fixed seed)."""
    from scipy.stats import bootstrap

    d = np.asarray([float(x) for x in diffs])
    if len(d) < 2 or d.min() == d.max():
        return float(d.mean()), float(d.min()), float(d.max())
    ci = bootstrap((d,), np.mean, confidence_level=level, n_resamples=resamples, method="percentile",
                   rng=np.random.default_rng(seed)).confidence_interval
    return float(d.mean()), float(ci.low), float(ci.high)


def decide(finals: dict, plan: dict | None = None) -> dict:
    """The plan's tests on ``finals`` = ``{(mode, correction): {seed: final accuracy}}``.

    Returns ``{"status": "complete" | "incomplete", "missing": [...], "tests": [row]}``; a row holds the test's
    name, claim, cells, seeds, the differences, their mean and interval, the raw and Holm-adjusted p and the
    word (``decided`` / ``undecided``; every row of an incomplete plan is ``undecided``)."""
    plan = plan or PLAN
    seeds = list(plan["seeds"])
    missing = [(cell, s) for cell in plan["cells"] for s in seeds if s not in finals.get(cell, {})]
    rows, pvals = [], {}
    for name, a, b, claim in plan["tests"]:
        common = [s for s in seeds if s in finals.get(a, {}) and s in finals.get(b, {})]
        diffs = [finals[a][s] - finals[b][s] for s in common]
        row = {"test": name, "claim": claim, "a": list(a), "b": list(b), "seeds": common, "diffs": diffs}
        if diffs:
            row["mean_diff"], row["lo"], row["hi"] = mean_interval(diffs)
            row["p"] = sign_flip_p(diffs)
            pvals[name] = row["p"]
        rows.append(row)
    adjusted = holm(pvals, plan["alpha"]) if pvals else {}
    complete = not missing
    for row in rows:
        p_adj, rejected = adjusted.get(row["test"], (None, False))
        row["p_holm"] = p_adj
        row["word"] = "decided" if complete and rejected else "undecided"
    return {"status": "complete" if complete else "incomplete", "missing": [[list(c), s] for c, s in missing],
            "alpha": plan["alpha"], "tests": rows}


def load_finals(root, plan: dict | None = None) -> tuple[dict, dict]:
    """``({(mode, correction): {seed: final accuracy}}, {cell folder: record folder})`` from the newest completed
    record of each planned cell and seed under ``root`` (the campaign's folders,
    :func:`rlm_lab.chapters.ch06_async.cases.cell_name`); record folders relative to ``root``."""
    plan = plan or PLAN
    out: dict = {}
    dirs: dict = {}
    for cell in plan["cells"]:
        for s in plan["seeds"]:
            rec = latest_in(Path(root) / cell_name(cell[0], cell[1], s))
            acc = compare.final_accuracy(rec.results) if rec is not None else None
            if acc is not None:
                out.setdefault(tuple(cell), {})[s] = acc
                dirs[cell_name(cell[0], cell[1], s)] = str(Path(rec.dir).relative_to(Path(root)))
    return out, dirs


ROOT = "data/runs/cpu/ch06_accuracy"  # the plan's runs, apart from the campaign's timing records (made alone)


def section(root=None) -> tuple[str, dict]:
    """The plan and its result for the book: the plan's words, how many of its runs exist, and each test's
    sentence (:func:`summary_lines`); glued values ``ch06_acc_*``. Reads the committed runs under :data:`ROOT`."""
    root = Path(root) if root is not None else repo_root() / ROOT
    finals, _ = load_finals(root) if root.is_dir() else ({}, {})
    result = decide(finals)
    planned = len(PLAN["cells"]) * len(PLAN["seeds"])
    have = planned - len(result["missing"])
    lines = [f"plan: {PLAN['question']}", f"cells: {len(PLAN['cells'])} (eta 0 and 8, without and with truncated IS); "
             f"seeds {PLAN['seeds'][0]}-{PLAN['seeds'][-1]}; metric: {PLAN['metric']}",
             f"test: {PLAN['test']}; alpha {PLAN['alpha']:g}, {PLAN['multiplicity']}",
             f"runs present: {have} of {planned}"] + summary_lines(result)
    values = {"ch06_acc_runs": f"{have} of {planned}", "ch06_acc_status": result["status"]}
    for r in result["tests"]:
        values[f"ch06_acc_{r['test']}"] = _glued(r) if result["status"] == "complete" else "undecided (incomplete)"
    return "\n".join(lines), values


def _glued(row: dict) -> str:
    """One complete test for the page: "yes" when decided, else "undecided", with the mean paired difference, its
    interval and the Holm-adjusted p (the numbers the word rests on)."""
    if not row["diffs"]:
        return "undecided (no paired runs)"
    word = "yes" if row["word"] == "decided" else "undecided"
    return (f"{word} (mean difference {row['mean_diff']:+.3f} [{row['lo']:+.3f}, {row['hi']:+.3f}] over "
            f"{len(row['diffs'])} seeds, Holm p = {row['p_holm']:.3f})")


def summary_lines(result: dict) -> list[str]:
    """The result as sentences (what the book and the closing note print)."""
    lines = []
    if result["status"] != "complete":
        lines.append(f"incomplete: {len(result['missing'])} planned runs missing; nothing is decided")
    for r in result["tests"]:
        if not r["diffs"]:
            lines.append(f"{r['test']}: no paired runs")
            continue
        pos = sum(1 for d in r["diffs"] if d > 0)
        neg = sum(1 for d in r["diffs"] if d < 0)
        verdict = ("yes: " + r["claim"]) if r["word"] == "decided" else ("undecided (no evidence at alpha = "
                                                                          f"{result['alpha']:g}): " + r["claim"])
        lines.append(f"{r['test']}: mean difference {r['mean_diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}] over "
                     f"{len(r['diffs'])} seeds ({pos} up, {neg} down), p = {r['p']:.4f}, Holm p = {r['p_holm']:.4f}"
                     f" -> {verdict}")
    return lines


def main(argv=None) -> int:
    """``rlm-lab chapter 6 accuracy-test [--root data/runs/cpu/ch06_accuracy] [--write FILE]``: the plan's tests on the
    records under ``root``, printed; ``--write`` keeps them (with the record folders they read) as JSON."""
    ap = argparse.ArgumentParser(prog="rlm-lab chapter 6 accuracy-test", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--write", default=None, help="a JSON file for the result (refused if it exists)")
    a = ap.parse_args(argv)
    try:
        if not Path(a.root).is_dir():
            raise RlmLabError(f"{a.root} is not a folder of run records")
        if a.write and Path(a.write).exists():
            raise RlmLabError(f"{a.write} exists; results are never overwritten")
        finals, dirs = load_finals(a.root)
        result = decide(finals)
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        return 2
    for line in summary_lines(result):
        print(line)
    if a.write:
        plan = {k: v for k, v in PLAN.items()}
        atomic_write_json(a.write, {"plan": plan, "result": result, "records": dirs,
                                    "finals": {f"{m}/{c or 'none'}": v for (m, c), v in finals.items()},
                                    "provenance": provenance()})
    return 0
