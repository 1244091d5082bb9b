"""Measurement functions behind the book's chapters (the notebooks stay thin and call these).

* :mod:`.anatomy` -- chapter 2: traced PPO/GRPO/DAPO runs, predicted against measured per stage,
  FLOP share against time share, memory per algorithm, the tracer's own overhead.
* :mod:`.work_depth` -- chapter 3: decode step time against batch size, the long tail, Brent's bounds
  against generation replicas.

Every function that measures writes a :class:`rlm_lab.record.RunRecord` (with provenance) and every
function that compares reads one back, so the book shows recorded numbers, never hand-typed ones.
"""
