"""Chapter 4, "Intra-model parallelism": the layouts (DP, ZeRO, TP with and without SP, PP, CP, EP) of a zoo
model on several processes, each checked against one process, its collectives counted, its step time
predicted from the profile alone.

:mod:`.cases` (the layouts and measurements of each size) -> :mod:`.run` (one record per layout, the end-to-end
Trainer runs) and :mod:`.sweeps` (the recorded PP, CP and EP measurements) -> :mod:`.compare` (counted bytes and
step times against the prediction, the chapter's verdict) -> :mod:`.report` (tables, figures and glued values).
:mod:`.out_of_sample` is the out-of-sample check of the distributed step-time model (its own cases, runs and
summary; ``rlm-lab chapter 4 out-of-sample data/runs/cpu``).

The mechanisms are :mod:`rlm_lab.parallel` (the layouts) and its harness :mod:`rlm_lab.parallel.bench` (the
measurement of a layout against one process, the step-time prediction, the PP/CP/EP measurements, the
Trainer's end-to-end run), which the calibration uses too.
"""
