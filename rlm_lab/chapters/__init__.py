"""Measurement functions behind the book's chapters (the notebooks stay thin and call these).

Every chapter's experiment has one shape, so that later chapters follow one pattern:

    cases  ->  run (a RunRecord with provenance)  ->  compare (in the package, unit-tested)  ->  table

* :mod:`rlm_lab.compare` -- what every chapter's comparison shares: relative errors, the whole-step error first
  and the per-stage median second, verdicts against the goals fixed in advance (25 %, then 10 %).
* :mod:`.anatomy` -- chapter 2: traced PPO/GRPO/DAPO runs, predicted against measured per stage,
  FLOP share against time share, memory per algorithm, the tracer's own overhead.
* :mod:`.work_depth` -- chapter 3: decode step time against batch size, the long tail, Brent's bounds
  against generation replicas, and depth at scale (prediction only).
* :mod:`.intra_model` -- chapter 4's comparison of the parallel layouts (cases and runs live in
  ``rlm_lab.parallel.bench``).
* :mod:`.memory_probes` -- byte counts of the tensors a TRL trainer holds.

Every function that measures writes a :class:`rlm_lab.record.RunRecord` (with provenance) and every
function that compares reads one back, so the book shows recorded numbers, never hand-typed ones.
"""
