"""Chapter 7, "The long tail": techniques that attack the longest response, each one switch, each measured
against its prediction from :mod:`rlm_lab.cost.longtail`, on the ``chain`` task (worked multi-step
arithmetic whose answer length depends on the problem: :mod:`rlm_lab.tasks.chain`). The techniques
themselves are mechanisms, in :mod:`rlm_lab.longtail`.

:mod:`.cases` (each size's parameters) -> :mod:`.predict` (seconds predicted before each run) -> :mod:`.run`
(one RunRecord ``ch07_<technique>`` each) -> :mod:`.report` (the chapter's tables, verdicts and glued values;
it also holds the chapter's comparison, the ranking by measured gain with its verdicts, so there is no
``compare`` module). :mod:`.cli` is ``rlm-lab longtail`` (``rlm-lab chapter 7 run``).
:mod:`.reference` holds the techniques as arms of the measurement protocol (``rlm-lab reference --chapter 7``:
each variant in a fresh process, predicted from the window's profile before the first repeat).

Produce the committed cpu-size records (the chapter reads them at ``cpu`` size; until then it says "not
measured yet")::

    flock -x /tmp/rlm-lab-measure.lock .venv/bin/rlm-lab longtail --size cpu --out data/runs/cpu

Learning effects (issue 11, item 2): :mod:`.learning`, three GRPO runs of one budget through
:func:`rlm_lab.train.run` with a ``rollout_func`` each (plain, over-provisioning's selection, dynamic
sampling), with ``LengthLog`` and accuracy by number of operations::

    flock -x /tmp/rlm-lab-measure.lock .venv/bin/rlm-lab chapter 7 learning --size cpu --out data/runs/cpu

Not done yet: real parallel rollout workers (dispatch is a sequential simulation), over-provisioning's time
saving inside the trainer (the learning arm generates every group in full), more than one seed per arm.
"""

from __future__ import annotations

from .cases import params
from .report import TABLE_COLUMNS, ensure_runs, load_reference, ranking
from .run import TECHNIQUES, measure


def run_all(size: str, out=None, seed: int = 0, force: bool = False):
    """Measure every technique at ``size``: one record each under ``out`` (default ``_build/runs/<size>``)."""
    return measure(size, out=out, seed=seed, force=force)


__all__ = ["TABLE_COLUMNS", "TECHNIQUES", "ensure_runs", "load_reference", "measure", "params", "ranking", "run_all"]
