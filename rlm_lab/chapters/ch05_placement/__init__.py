"""Chapter 5, "Placement": GRPO and PPO under placements of their models on a local Ray (colocated,
disaggregated with a gloo or object-store weight sync, LoRA, PPO split, the hybrid engine), each predicted
with :mod:`rlm_lab.cost.placement` before it runs, then measured.

:mod:`.cases` (the placements and run configs of each size) -> :mod:`.run` (predict, then run; one record per
placement under ``ch05_<key>/<UTC time>``) -> :mod:`.compare` (step time and sync bytes against the prediction,
verdicts, the predictor as an advisor) -> :mod:`.report` (timelines, tables and glued values).
:mod:`.cli` is ``rlm-lab place``; :mod:`.sync_calibration` the weight-sync calibration
(``rlm-lab chapter 5 sync-calibration data/runs/cpu``); :mod:`.shared_critic` PPO's
shared actor-critic against a separate critic (predicted, committed, then paired repeats under the protocol).

The mechanisms (Ray actors, placement groups, weight sync, reshard, the hybrid engine, the split critic) are
:mod:`rlm_lab.placement`.
"""
