"""Chapter 6's experiment: predict, then run, each execution mode; one new record folder per run.

    rlm-lab chapter 6 run --size smoke --out _build/runs/smoke

Order: the synchronous run first (the baseline, measured, not predicted); the other modes are predicted from
*its* measured stage times before they run (:func:`predict_from_sync`: per-step generation seconds g_i, the
trainer's remaining seconds t and the push s, through :func:`rlm_lab.cost.asynchrony.simulate`), and the
prediction is stored in each record before the run starts. Records go under ``<out>/ch06_<mode>/<UTC time>``;
the command has no default under data/ (committed records are written only when asked, under the
measurement lock: ``flock -x /tmp/rlm-lab-measure.lock ...``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import statistics
import sys
from pathlib import Path

from ...asynchrony.correction import check_correction
from ...asynchrony.modes import mode_eta, run_mode
from ...cost.asynchrony import simulate
from ...errors import RlmLabError
from ...placement.runtime import RaySession
from ...record import RunRecord, repo_root
from ...sizes import check_size
from ..ch05_placement.cases import run_config

MODES = ("sync", "one_step_off", "eta2", "async")
GOAL = 0.25  # error bar on the predicted step time, fixed before measuring


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def stage_times(results: dict) -> dict:
    """From a synchronous run's results: per-step generation waits (after the first step, which pays the
    workers' warm-up), the mean push and the trainer's remaining time per step."""
    steps = results["glue"]["steps"][1:] or results["glue"]["steps"]
    g = [s["wait_s"] for s in steps]
    push = results["sync"].get("seconds_mean", 0.0)
    step = results["step_seconds_median"] or results["train_seconds"] / max(1, results["steps"])
    imp = statistics.mean(s.get("importance_seconds", 0.0) for s in steps)
    t = max(1e-6, step - statistics.mean(g) - push)
    return {"gen_s": g, "push_s": push, "train_s": t, "step_s": step, "importance_s": imp}


def predict_from_sync(mode: str, sync_results: dict) -> dict:
    st = stage_times(sync_results)
    eta = mode_eta(mode)
    reps = max(1, 200 // len(st["gen_s"]))  # the steady state: the measured g_i repeated
    sim = simulate(st["gen_s"] * reps, st["train_s"], eta if eta is not None else None, st["push_s"])
    return {"mode": mode, "eta": "inf" if eta is None else eta, "step_s": sim.step_s, "goal": GOAL,
            "from": "the synchronous run's measured stage times (rlm_lab.cost.asynchrony.simulate)",
            "inputs": {k: v for k, v in st.items()}, "made": _now(),
            "assumes": "the object-store push costs what the synchronous run's push cost; generation speed "
                       "does not change while the trainer computes on the other core"}


def measure(size: str, root: str | Path, modes=MODES, seed: int = 0, steps: int | None = None,
            session=None, command=None, importance: bool = True, evaluate: bool = False,
            correction: str | None = None) -> dict:
    check_correction(correction)
    for m in modes:
        mode_eta(m)
    if modes[0] != "sync":
        raise RlmLabError("the first mode must be sync: the others are predicted from its stage times")
    over = {"seed": seed}
    if steps:
        over["rl_steps"] = steps
    cfg = run_config(size, **over)
    own = session is None
    session = session or RaySession(num_cpus=2)
    out = {}
    try:
        for m in modes:
            prediction = predict_from_sync(m, out["sync"]) if m != "sync" else \
                {"mode": "sync", "note": "the baseline: measured, not predicted"}
            folder = Path(root) / f"ch06_{m}" / _now()
            out[m] = run_mode(m, cfg, folder, session=session, prediction=prediction, command=command,
                              importance=importance, evaluate=evaluate, correction=correction)
            out[m]["dir"] = str(folder)
    finally:
        if own:
            session.close()
    return out


def comparison(records: dict) -> list[dict]:
    """Per mode: predicted and measured step time, its error against the goal, the staleness distribution."""
    rows = []
    for m, rec in records.items():
        r = rec.results
        measured = r["step_seconds_median"]
        pred = (r.get("prediction") or {}).get("step_s")
        err = (pred - measured) / measured if pred and measured else None
        rows.append({"mode": m, "eta": r.get("eta"), "measured_s": measured, "predicted_s": pred,
                     "error": err, "met": None if err is None else abs(err) <= GOAL,
                     "staleness": r["glue"]["buffer"]["staleness_hist"],
                     "is_abs_log_weight_mean": statistics.mean(s.get("is_abs_log_weight_mean", 0.0)
                                                               for s in r["glue"]["steps"]),
                     "accuracy_after": r.get("accuracy_after"), "load_average": r.get("load_average_start")})
    return rows


def latest(root: str | Path, mode: str):
    return latest_in(Path(root) / f"ch06_{mode}")


def latest_in(base: str | Path):
    """The newest loadable record among the timestamped run folders under ``base`` (None if none)."""
    base = Path(base)
    for d in sorted((p for p in base.iterdir() if p.is_dir()), reverse=True) if base.is_dir() else []:
        try:
            return RunRecord.load(d)
        except RlmLabError:
            continue
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rlm-lab chapter 6 run",
                                 description="chapter 6: predict, then run, each execution mode")
    ap.add_argument("--size", default="smoke")
    ap.add_argument("--out", default=None, help="root folder of the records (default _build/runs/<size>)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--evaluate", action="store_true",
                    help="greedy held-out accuracy after training in each record (accuracy_after)")
    ap.add_argument("--correction", default="none",
                    help="off-policy correction: none or a TRL importance-sampling mode (token_truncate, token_mask, "
                         "sequence_truncate, sequence_mask)")
    ap.add_argument("--no-importance", action="store_true",
                    help="do not re-score batches for the importance weights (one forward per step less)")
    a = ap.parse_args(argv)
    try:
        check_size(a.size)
        out = measure(a.size, a.out or repo_root() / "_build" / "runs" / a.size, tuple(a.modes.split(",")),
                      a.seed, a.steps, command=sys.argv, importance=not a.no_importance,
                      evaluate=a.evaluate, correction=None if a.correction == "none" else a.correction)
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        return 2
    for m, r in out.items():
        print(f"{m:14s} step {r['step_seconds_median']:.3f} s  predicted "
              f"{(r.get('prediction') or {}).get('step_s') or float('nan'):.3f} s  -> {r['dir']}")
    return 0
