"""The benchmark harness of the parallel layouts: run them, measure them, check them against one process,
record them and predict their step. The mechanism it drives is ``rlm_lab.parallel``; chapter 4's experiment
(which layouts, their records, comparison and report) and the distributed calibration
(``rlm_lab.calibrate.dist_benchmarks``) use it.

* :mod:`.measure` — N training steps of any layout through ``parallelize`` (counted collectives, memory,
  the check against one process) and its run record;
* :mod:`.pp`, :mod:`.cp`, :mod:`.ep` — the pipeline, ring-attention and all-to-all measurements and
  parity checks (bubble, ring and routing-dependent predictions the generic harness does not make);
* :mod:`.common` — what those three share (models, batches, the single-process baseline, the
  step-time prediction); their recorded chapter-4 runs are ``rlm_lab.chapters.ch04_parallelism.sweeps``;
* :mod:`.step_time`, :mod:`.framework` — the step time of a layout from the profile alone, and the distributed
  calibration's shared pieces;
* :mod:`.e2e` — the same GRPO run through TRL's Trainer on several processes.
"""
