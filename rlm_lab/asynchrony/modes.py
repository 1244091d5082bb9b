"""The execution modes of chapter 6 as one switch on the chapter-5 runtime: a disaggregated placement (rollout
workers on their own cores, TRL's ``GRPOTrainer`` on the others) whose rollout_func is
:class:`rlm_lab.asynchrony.trl_rollout.AsyncRolloutFunc` with a staleness bound eta.

    sync          eta = 0   generation waits for the latest weights (chapter 5's disaggregated step)
    one_step_off  eta = 1   batch k+1 is generated while the trainer trains on batch k
    eta<k>        eta = k   up to k batches generated ahead; weights pushed after each update
    async         eta = inf unbounded (``ahead`` batches queued at most)

Each mode runs with or without off-policy correction (TRL's truncated / masked importance sampling,
:mod:`rlm_lab.asynchrony.correction`).

In every mode a weight push waits on the worker until the generation request in flight ends. Interruptible
rollouts (the push applied at the next decode step, with the KV cache kept or re-prefilled) are built and
measured in one worker (:mod:`rlm_lab.asynchrony.interrupt`), but these modes do not use them yet; partial
rollouts (a long generation continued across steps) are not built.
"""

from __future__ import annotations

from pathlib import Path

from ..cost.placement_spec import Cluster, get_placement
from ..errors import RlmLabError
from ..placement.runtime import algo_roles, run_placement
from .correction import check_correction

ROLLOUT_FUNC = "rlm_lab.asynchrony.trl_rollout:AsyncRolloutFunc"
NAMED = {"sync": 0, "one_step_off": 1, "async": None}


def mode_eta(mode: str):
    """``"sync"`` -> 0, ``"one_step_off"`` -> 1, ``"eta4"`` -> 4, ``"async"`` -> None; one error line otherwise."""
    if mode in NAMED:
        return NAMED[mode]
    if mode.startswith("eta") and mode[3:].isdigit():
        return int(mode[3:])
    raise RlmLabError(f"unknown execution mode {mode!r}; choose sync, one_step_off, async or eta<k> (e.g. eta4)")


def mode_placement(cfg, devices: int = 2, sync: str = "object_store", rollout_devices: int = 1):
    return get_placement("disaggregated", Cluster(devices, "cpu"), algo_roles(cfg),
                         rollout_devices=rollout_devices, sync=sync)


def run_mode(mode: str, cfg, run_dir: str | Path, *, session=None, sync: str | None = None, devices: int = 2,
             ahead: int | None = None, importance: bool = False, prediction: dict | None = None,
             correction: str | None = None, curve: dict | None = None, durable: int = 0,
             generation: dict | None = None, **kw) -> dict:
    """Run GRPO ``cfg`` in execution ``mode``; the record (``run_dir``) holds ``results['glue']``: the bound,
    the staleness of every sample trained on, per-step versions and rollout-worker deaths.

    ``sync``: how weights reach the workers; default ``collective`` for ``sync`` (exactly chapter 5's
    disaggregated run) and ``object_store`` for the others (a push that does not wait for the generation in
    flight; a broadcast would). ``importance``: re-score every batch on the trainer to record the importance
    weights (one extra no-grad forward inside every step, its seconds in the record): instrumentation, off by
    default so that a mode's time is its own work.
    ``correction``: None or a TRL importance-sampling mode (``"token_truncate"``...; TRL's own code, switched on
    by :mod:`rlm_lab.asynchrony.correction`). ``curve``: held-out accuracy curve settings
    (:func:`rlm_lab.asynchrony.curves.make_eval_curve` arguments). ``durable=k``: every sample to
    ``<run_dir>/buffer.jsonl`` and the policy to ``<run_dir>/checkpoint`` every k steps, readable after a
    trainer crash (:mod:`rlm_lab.asynchrony.durable`); 0 (default) off. ``generation``: the rollout workers'
    generation options beyond TRL's (:class:`rlm_lab.asynchrony.trl_rollout.AsyncRolloutFunc`). Other keywords
    (``role_threads``, ``command``...) go to :func:`rlm_lab.placement.runtime.run_placement`."""
    check_correction(correction)
    eta = mode_eta(mode)
    sync = sync or ("collective" if eta == 0 else "object_store")
    placement = mode_placement(cfg, devices, sync)

    return run_placement(placement, cfg, run_dir, session=session, prediction=prediction, glue=ROLLOUT_FUNC,
                         glue_kwargs={"eta": eta, "ahead": ahead, "importance": importance, "correction": correction,
                                      "curve": curve, "generation": generation,
                                      "spill": str(Path(run_dir) / "buffer.jsonl") if durable else None,
                                      "checkpoint": {"folder": str(Path(run_dir) / "checkpoint"), "every": durable}
                                      if durable else None},
                         extra_results={"mode": mode, "eta": "inf" if eta is None else eta,
                                        "correction": correction}, **kw)
