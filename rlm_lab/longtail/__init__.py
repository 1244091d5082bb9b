"""Chapter 7, "The long tail": techniques that attack the longest response, each one switch, each measured
against its prediction from :mod:`rlm_lab.cost.longtail`, on the ``chain`` task (worked multi-step
arithmetic whose answer length depends on the problem: :mod:`rlm_lab.tasks.chain`).

:mod:`.engine` (generation with per-row finish times) -> :mod:`.techniques` (the switches) ->
:mod:`.predict` (seconds predicted before each run) -> :mod:`.run` (one RunRecord ``ch07_<technique>`` each)
-> :mod:`.report` (the chapter's tables).

:mod:`.trl_hooks`: two techniques inside TRL's ``GRPOTrainer`` through its ``rollout_func``: fusion
(``FusedRollout``: rewards scored as rows finish travel back as an extra field to :func:`fused_reward`) and
DAPO's dynamic sampling (``DynamicSamplingRollout``: all-equal groups replaced by groups of freshly drawn
prompts); :mod:`.callbacks`: ``LengthLog``, the generated length distribution at each training step.

Not in TRL yet: over-provisioning with recycling changes which prompts a step trains on *and* carries
partial responses across steps, which needs a sampler-side hook (a custom ``RepeatSampler``) not written
yet. TRL 1.16's ``padding_free`` exists for SFT and DPO only (not ``GRPOConfig``).

Produce the committed cpu-size records (the chapter reads them at ``cpu`` size; until then it says "not
measured yet")::

    flock -x /tmp/rlm-lab-measure.lock .venv/bin/python -m rlm_lab.longtail --size cpu --out data/runs/cpu

Learning effects (issue 11, item 2): :mod:`.learning`, three GRPO runs of one budget through
:func:`rlm_lab.train.run` with a ``rollout_func`` each (plain, over-provisioning's selection, dynamic
sampling), with ``LengthLog`` and accuracy by number of operations::

    flock -x /tmp/rlm-lab-measure.lock .venv/bin/python -m rlm_lab.longtail.learning --size cpu --out data/runs/cpu

Not done yet: real parallel rollout workers (dispatch is a sequential simulation), over-provisioning's time
saving inside the trainer (the learning arm generates every group in full), more than one seed per arm.
"""

from __future__ import annotations

from .params import params
from .report import TABLE_COLUMNS, ensure_runs, load_reference, ranking
from .run import TECHNIQUES, measure


def run_all(size: str, out=None, seed: int = 0, force: bool = False):
    """Measure every technique at ``size``: one record each under ``out`` (default ``_build/runs/<size>``)."""
    return measure(size, out=out, seed=seed, force=force)


__all__ = ["TABLE_COLUMNS", "TECHNIQUES", "ensure_runs", "load_reference", "measure", "params", "ranking", "run_all"]
