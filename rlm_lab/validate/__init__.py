"""``rlm-lab validate``: the cost model against a fixed suite of workloads it was never fitted on.

Issue 12, item 1. The suite (``rlm_lab.sizes.get(size).validation``) is a committed list of traced TRL runs whose model /
shape combinations none of the chapters used while the cost model was developed: chapter 2 traced
``micro`` at B = 16, 64, 256 with G = 8 and R = 4, 16, 64; chapter 4 ran ``micro`` / ``micro-moe``
layouts without RL. Here: other zoo models (``nano``, ``mini``, the MoE ``nano-moe`` / ``micro-moe``),
other G, B and R, GRPO, PPO and DAPO-style GRPO (beta = 0), and two runs with TRL's defaults kept (bf16
autocast on CPU; bf16 + gradient checkpointing). A workload the profile cannot predict (bf16 and a profile
without bf16-autocast rates) is listed with the reason and left out of the numbers. Every run is a traced case,
as chapter 2's are (:mod:`.traced_case`: :func:`~.traced_case.run_case` to measure,
:func:`~.traced_case.predict_case` to predict, :func:`~.traced_case.time_table` to join them), so the validation
exercises exactly the predictor the chapters use, with the committed hardware profile.

Reported (:func:`summary`): the median and worst |error| of the whole step, the median and worst |error|
over every stage that takes >= 5 % of its measured step, and the signed bias (mean signed whole-step
error). The bars were fixed in issue 12 before any of these runs was made: whole-step median <= 15 %,
every stage >= 5 % of a step <= 25 %, |bias| <= 10 %. A bar missed is printed "not met" with the live
number.

Peak memory (item 2) is compared per stage by :mod:`rlm_lab.cost.peak` against the tracer's per-stage
peak RSS; the runtime's own RSS (interpreter, torch, transformers, TRL, allocator caches) is measured as
the RSS just before each case starts and recorded in the suite record (``validation_suite``). Each case runs
in its own fresh process (spawned, after a warm-up run there), so that no other workload's freed-but-kept
memory hides in, or inflates, its peak: the part above the baseline is the workload's own (item 5).
"""

from .cli import register
from .compare import (STATISTICS, compare, least_disturbed, loop_terms_effect, report, summary,
                      table, trl_step_terms_effect)
from .suite import (BARS, SHARE_MIN, SUITE, WARMUP_CASE, load_suite, reward_s_per_sample, run_dir,
                    run_suite, workloads)

__all__ = ["BARS", "SHARE_MIN", "STATISTICS", "SUITE", "WARMUP_CASE", "compare", "least_disturbed",
           "load_suite", "loop_terms_effect", "register", "report", "reward_s_per_sample", "run_dir", "run_suite",
           "summary", "table", "trl_step_terms_effect", "workloads"]
