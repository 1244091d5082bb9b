"""The long-tail techniques of chapter 7, each one switch that attacks the longest response: the mechanisms.

:mod:`.engine` (generation with per-row finish times) -> :mod:`.techniques` (the switches: over-provisioning,
tail batching, length-aware dispatch, packing, dynamic sampling, fusion).

:mod:`.trl_hooks`: two techniques inside TRL's ``GRPOTrainer`` through its ``rollout_func``: fusion
(``FusedRollout``: rewards scored as rows finish travel back as an extra field to :func:`fused_reward`) and
DAPO's dynamic sampling (``DynamicSamplingRollout``: all-equal groups replaced by groups of freshly drawn
prompts); :mod:`.callbacks`: ``LengthLog``, the generated length distribution at each training step.

Not in TRL yet: over-provisioning with recycling changes which prompts a step trains on *and* carries
partial responses across steps, which needs a sampler-side hook (a custom ``RepeatSampler``) not written
yet. TRL 1.16's ``padding_free`` exists for SFT and DPO only (not ``GRPOConfig``).

The chapter's experiment (each technique predicted with :mod:`rlm_lab.cost.longtail`, then measured, and the
learning runs) is :mod:`rlm_lab.chapters.ch07_long_tail`.
"""
