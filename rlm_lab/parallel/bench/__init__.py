"""The benchmark harness of chapter 4: run layouts, measure them, check them against one process,
record them and put them next to the predictions. The mechanism it drives is ``rlm_lab.parallel``.

* :mod:`.measure` — N training steps of any layout through ``parallelize`` (counted collectives, memory,
  the check against one process) and its run record;
* :mod:`.pp`, :mod:`.cp`, :mod:`.ep` — the pipeline, ring-attention and all-to-all measurements and
  parity checks (bubble, ring and routing-dependent predictions the generic harness does not make);
* :mod:`.common` — what those three share (models, batches, the single-process baseline, the
  step-time prediction); :mod:`.sweeps` — their recorded chapter-4 runs;
* :mod:`.suite` — the chapter's layouts per size; :mod:`.report` — its tables and figures;
* :mod:`.e2e` — the same GRPO run through TRL's Trainer on several processes.
"""
