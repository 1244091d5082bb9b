"""Chapter 6's campaign: learning curves against the staleness bound eta, with and without TRL's off-policy
correction, 3 seeds, and the plain ``trl.GRPOTrainer`` reference; one record per run, one run per call.

    flock -x /tmp/rlm-lab-measure.lock .venv/bin/rlm-lab chapter 6 campaign \\
        --size cpu --mode eta2 --correction token_truncate --seed 1 --out data/runs/cpu
    flock -x /tmp/rlm-lab-measure.lock .venv/bin/rlm-lab chapter 6 campaign \\
        --size cpu --reference --seed 1 --out data/runs/cpu

Task and model: chapter 7's learning runs (``rlm_lab.longtail``: the ``chain`` task, whose completion lengths
vary, the micro model, its SFT warm start; 3 seeds), so the long tail is real. Cells: modes sync (eta 0),
one_step_off (1), eta2, eta4, eta8, async (unbounded) x correction none / token_truncate x seeds 0, 1, 2.
Records: ``<out>/ch06_<mode>_<none|tis>_seed<k>/<UTC time>`` and ``<out>/ch06_trl_reference_seed<k>/<UTC>``.

Fair baselines: every cell of one correction does the same per-step work as its synchronous cell. Runs made
before issue 20 re-scored every batch without correction for the record (``importance``: an extra no-grad
forward inside each step), which made the uncorrected synchronous step about a quarter slower and inflated its
speed-ups; that re-scoring is now off unless ``--record-importance`` asks for the weights (and then the run's
times are not the mode's). With correction, TRL's own recomputation of the log-probs is the mode's work.

Prediction before each run (stored in the record before it starts): every cell but (sync, none) is predicted
from the newest (sync, none) record of the same seed under ``<out>`` (its measured stage times through
:func:`rlm_lab.chapters.ch06_async.run.predict_from_sync`), so run the (sync, none) cell of a seed first.
The command has no default under data/ (committed records are written only when asked, under the lock).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...asynchrony.correction import check_correction
from ...asynchrony.modes import mode_eta, run_mode
from ...errors import RlmLabError
from ...record import runs_root
from ...records.lifecycle import interruptible
from ...sizes import check_size
from .cases import (  # noqa: F401
    CORRECTIONS,
    MODES,
    SEEDS,
    _now,
    budget,
    campaign_config,
    cell_name,
    corr_label,
    curve_spec,
    reference_name,
)
from .reference import run_reference
from .run import latest_in, predict_from_sync


def _sync_record(root: Path, seed: int):
    return latest_in(Path(root) / cell_name("sync", None, seed))


def run_cell(size: str, mode: str, correction, seed: int, root, steps: int | None = None, session=None,
             command=None, record_importance: bool = False) -> dict:
    """One cell of the matrix; returns its results (``dir``: the record folder). ``record_importance``: without
    correction, re-score every batch on the trainer to record the importance weights (one no-grad forward inside
    each step: instrumentation, so off by default; a run with it on times work its mode does not do)."""
    mode_eta(mode)
    check_correction(correction)
    cfg = campaign_config(size, seed, steps)
    if mode == "sync" and correction is None:
        prediction = {"mode": "sync", "note": "the baseline: measured, not predicted"}
    else:
        base = _sync_record(root, seed)
        if base is None:
            raise RlmLabError(f"no (sync, none) record of seed {seed} under {root}: run that cell first, the "
                              "others are predicted from its stage times")
        prediction = predict_from_sync(mode, base.results)
        prediction["sync_record"] = str(base.dir)
    folder = Path(root) / cell_name(mode, correction, seed) / _now()
    out = run_mode(mode, cfg, folder, session=session, prediction=prediction, command=command,
                   correction=correction, curve=curve_spec(cfg, size),
                   importance=record_importance and correction is None)
    out["dir"] = str(folder)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rlm-lab chapter 6 campaign",
                                 description="chapter 6: one run of the eta x correction x seed matrix, or "
                                             "the plain TRL reference")
    ap.add_argument("--size", default="smoke")
    ap.add_argument("--out", default=None, help="root folder of the records (default _build/runs/<size>)")
    ap.add_argument("--mode", default="sync", help=f"one of {', '.join(MODES)} (or eta<k>)")
    ap.add_argument("--correction", default="none", help="none or token_truncate (TRL's modes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--reference", action="store_true", help="plain trl.GRPOTrainer, its defaults, in-process")
    ap.add_argument("--record-importance", action="store_true",
                    help="without correction: re-score each batch to record its importance weights (an extra forward "
                         "inside every step; its step times then include work the mode does not do)")
    a = ap.parse_args(argv)

    interruptible()  # SIGINT / SIGTERM end the run `interrupted` and stop its Ray, within seconds
    try:
        size = check_size(a.size)
        root = Path(a.out) if a.out else runs_root(size)
        corr = None if a.correction == "none" else a.correction
        if a.reference:
            out = run_reference(size, a.seed, root / reference_name(a.seed) / _now(), a.steps, command=sys.argv)
            print(f"trl reference seed {a.seed}: {out['tokens_per_s']:.0f} tokens/s, accuracy "
                  f"{out['curve']['points'][-1]['accuracy']:.3f} -> {out['dir']}")
            return 0
        out = run_cell(size, a.mode, corr, a.seed, root, a.steps, command=sys.argv,
                       record_importance=a.record_importance)
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # SIGINT, or SIGTERM (Terminated): the record says interrupted
        print("rlm-lab: interrupted", file=sys.stderr)
        return 130
    pts = out["glue"]["curve"]["points"]
    print(f"{a.mode} {corr_label(corr)} seed {a.seed}: step {out['step_seconds_median']:.3f} s, accuracy "
          f"{pts[0]['accuracy']:.3f} -> {pts[-1]['accuracy']:.3f} -> {out['dir']}")
    return 0
