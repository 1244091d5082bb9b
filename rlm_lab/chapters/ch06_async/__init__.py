"""Chapter 6, "Asynchronous RL": GRPO on Ray in execution modes bounded by a staleness eta (synchronous,
one-step-off, bounded, unbounded), without and with TRL's off-policy correction, each mode predicted from the
synchronous run before it runs; and interruptible rollouts.

:mod:`.cases` (the campaign's cells: modes, corrections, seeds, budget, run config) -> :mod:`.run` (the modes of
one seed, predicted from the synchronous run, one record each) and :mod:`.campaign` (one cell per call,
``rlm-lab chapter 6 campaign``), :mod:`.reference` (plain ``trl.GRPOTrainer`` for
comparison) -> :mod:`.compare` (the campaign's summaries, the criteria fixed in advance, the advisor, the
outlook) -> :mod:`.report` (tables, figures and glued values). :mod:`.interrupt` measures what an interruptible
rollout costs and buys against its prediction
(``rlm-lab chapter 6 interrupt --size cpu --out DIR``).

Under the measurement protocol (:mod:`rlm_lab.protocol`: paired repeats ABBA, each a fresh process):
:mod:`.overhead` (the Ray runtime's own cost against plain ``trl.GRPOTrainer`` on the same cores, one arm per
process), :mod:`.throughput` (the throughput goal: the advisor's pick against plain TRL, paired by seed),
:mod:`.generation_options` (what transformers offers for generation on a CPU, timed on one rollout batch: an
exploration for the goal) and :mod:`.accuracy_test` (the accuracy question, decided by the paired tests its
plan fixed before the runs).

The mechanisms (the sample buffer, the modes, the importance correction, the rollout glue, interruption) are
:mod:`rlm_lab.asynchrony`.
"""
