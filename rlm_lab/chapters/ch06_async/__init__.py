"""Chapter 6, "Asynchronous RL": GRPO on Ray in execution modes bounded by a staleness eta (synchronous,
one-step-off, bounded, unbounded), without and with TRL's off-policy correction, each mode predicted from the
synchronous run before it runs; and interruptible rollouts.

:mod:`.cases` (the campaign's cells: modes, corrections, seeds, budget, run config) -> :mod:`.run` (the modes of
one seed, predicted from the synchronous run, one record each) and :mod:`.campaign` (one cell per call,
``python -m rlm_lab.chapters.ch06_async.campaign``), :mod:`.reference` (plain ``trl.GRPOTrainer`` for
comparison) -> :mod:`.compare` (the campaign's summaries, the criteria fixed in advance, the advisor, the
outlook) -> :mod:`.report` (tables, figures and glued values). :mod:`.interrupt` measures what an interruptible
rollout costs and buys against its prediction
(``python -m rlm_lab.chapters.ch06_async.interrupt --size cpu --out DIR``).

The mechanisms (the sample buffer, the modes, the importance correction, the rollout glue, interruption) are
:mod:`rlm_lab.asynchrony`.
"""
