"""``rlm-lab insitu``: the cost model's per-call terms fitted on traced TRL runs, not on microbenchmarks.

Issue 12, items 2 and 3. ``rlm-lab calibrate`` times every kernel and every per-call cost in a tight loop
of a warm process; two such calibrations made minutes apart agree within a few per cent, yet both missed the
validation suite of their machine by about a fifth, in the same direction (and the older chapters' profile
by about a fifth in the other). What a loop of one op does not see is what a real step pays around it: a fresh
process, the trainer's Python between the ops, a model built once and called in between others. So the per-call terms
(dispatch of a forward, a forward with autograd, a backward, a decode step, a generate call, the optimizer's
per-tensor loop, autocast's casts, checkpointing, TRL's bookkeeping) are fitted where they are paid: on
traced TRL runs of a CALIBRATION suite (``calibration`` in :mod:`rlm_lab.sizes`), each run in its own fresh
process exactly as the validation suite runs (:func:`rlm_lab.validate.suite.run_suite`), and never on a
validation workload (tests/insitu/test_cases.py). The kernel rates (products, attention, elementwise, the
log-prob head, bandwidths) stay the microbenchmarks'. Two terms no microbenchmark isolates are added
and fitted the same way: the MoE blocks' Python loop over the experts hit (:func:`rlm_lab.cost.timing.
expert_overhead`) and the generation loop's per-row work per decode step.

How the fit works: :mod:`rlm_lab.insitu.fit`. The result is an ordinary hardware profile (``insitu``
section: the records, the base, each factor; ``spread``: bootstrap quartiles), read by ``rlm-lab predict
--profile`` and ``rlm-lab validate --profile`` like any other.

    rlm-lab insitu --run                       # run the calibration suite into _build/runs/cpu, fit, write
                                               # _build/insitu/cpu-2core-epyc-insitu.json
    flock -x /tmp/rlm-lab-measure.lock rlm-lab insitu --run --out data/runs/cpu/insitu/A \
        --base data/hardware/calibrations/<calibration>.json \
        --write data/hardware/insitu/<name>-A.json --name <name>-A        # a committed calibration suite
    rlm-lab insitu --out data/runs/cpu/insitu/A data/runs/cpu/insitu/B data/runs/cpu/insitu/C \
        --base ... --write data/hardware/<name>.json --validation-root <suite>   # pooled, as committed
"""

from .cli import register
from .fit import FREE, GROUPS, SCALED, features, fit_retention, fit_terms, fitted_profile, measured
from .run import PREFIX, REPEAT_TOL, SUITE, calibrate, calibration_cases, load, repeat_agreement, run

__all__ = ["FREE", "GROUPS", "PREFIX", "REPEAT_TOL", "SCALED", "SUITE", "calibrate", "calibration_cases", "features",
           "fit_retention", "fit_terms", "fitted_profile", "load", "measured", "register", "repeat_agreement", "run"]
