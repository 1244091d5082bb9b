"""Asynchronous and off-policy RL on the chapter-5 Ray runtime (chapter 6): the version-tagged sample buffer
with a staleness bound (:mod:`.buffer`), the execution modes (:mod:`.modes`) and the rollout glue that feeds
TRL's ``GRPOTrainer`` from the buffer (:mod:`.trl_rollout`)."""
