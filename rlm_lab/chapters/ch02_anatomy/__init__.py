"""Chapter 2, "Anatomy of an iteration": traced PPO / GRPO / DAPO-style runs against the cost model.

The experiment has the shape every chapter shares: :mod:`.cases` (what runs) -> :mod:`.run` (records)
-> :mod:`.compare` (predicted against measured, the headline numbers) -> :mod:`.report` (what the notebook
prints, draws and glues). A case is a traced case (:mod:`rlm_lab.validate.traced_case`: ``Case``, ``run_case``,
``predict_case``, ``time_table``), the unit the validation and in-situ suites share with this chapter.
``rlm-lab chapter 2 run --size cpu`` makes the records (:func:`.run.main`).
Beside them, :mod:`.families` prices the survey's three families (PPO, GRPO, DPO; arXiv 2608.27046 Table 4) at one
scale, predictions only, next to Table 4's work in the survey's convention; :mod:`.dpo` traces the third family (TRL's
``DPOTrainer`` on the task's preference pairs), its prediction written into the record before the first step.

What is measured (each a recorded run, ``data/runs/<size>/ch02_*``):

* ``run_case``: a TRL run (GRPO, DAPO-style GRPO with beta = 0, our PPO) of a random-init zoo model with
  **forced** completion lengths (``min_new_tokens = max_new_tokens = R``), so the workload the cost model
  is given is exactly the one that ran; the stage tracer times every stage; held-model bytes (weights,
  gradients just before the optimizer step, optimizer state just after it) are counted from the live
  tensors; the KV cache of one ``generate`` call is counted from its cache tensors.
* ``reward_calibration``: seconds per sample of the verifier, timed on synthetic completions (a
  calibration input of the cost model, measured apart from the runs it is judged on).
* ``tracer_overhead``: the same config with and without the tracer, alternated, median step times.

What is predicted: ``predict_case`` builds the cost model's ``Workload`` from the same case and calls
``rlm_lab.cost.predict`` with a calibrated hardware profile. ``time_table`` / ``memory_table`` join the
two on ``rlm_lab.stages.Stage`` keys and give the relative error (predicted - measured) / measured.

Ignores: learning (random-init models, rewards are ~0; stage times do not depend on the reward values),
and TRL bookkeeping outside the stages ("other", shown but not predicted).
"""

from ...compare import OTHER, STEP, median_abs_error, reference_dir, relative_error, step_summary, verdict
from ...train.memory_probes import Probe, measure_kv_cache, measured_memory
from ...cost.hardware import CPU_PROFILE, INSITU_PROFILE, profile_for
from ...validate.traced_case import (MEASURED_STAGES, PROMPT_LEN, TASK, Case, case_of, predict_case, run_case,
                                     time_table)
from .cases import algorithm_cases, case_dir, sweep_cases
from .compare import (ALGORITHMS, algorithms_table, comparison, errors_by_calibration, generation_shares, headline,
                      memory_table, share_row)
from .run import ensure_runs, load_reference, main, reward_calibration, tracer_overhead

__all__ = [
    "ALGORITHMS", "CPU_PROFILE", "INSITU_PROFILE", "MEASURED_STAGES", "OTHER", "PROMPT_LEN", "STEP", "TASK", "Case", "Probe",
    "algorithm_cases", "algorithms_table", "case_dir", "case_of", "comparison", "ensure_runs",
    "errors_by_calibration", "generation_shares", "headline", "load_reference", "main", "measure_kv_cache",
    "measured_memory", "median_abs_error", "memory_table", "predict_case", "profile_for", "reference_dir",
    "relative_error", "reward_calibration", "run_case", "share_row", "step_summary", "sweep_cases",
    "time_table", "tracer_overhead", "verdict",
]
