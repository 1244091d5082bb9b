"""Chapter 1, "Quick start": a tiny reasoning LM trained on a CPU, SFT then GRPO, and PPO from the same SFT model.

:mod:`.cases` (this build's two runs, from the size's presets) -> :mod:`.report` (curves, the runs' summary and
provenance, the committed reference runs, the tuning sweep and the aim judged on its reference run, and every
glued value). There is no ``run`` module: the chapter's runs are :func:`rlm_lab.train.run` itself, the
mechanism the chapter introduces, called by the notebook; and no ``compare`` module: the chapter predicts
nothing, its check is the accuracy gain against the bar fixed before the sweep (:func:`.report.sweep_section`).
The sweep's runs are made by ``rlm-lab chapter 1 sweep`` (the presets' tuning).
:mod:`.advised` (issue 35, item 8): the advisor's pick for the chapter's GRPO workload, predicted and then measured
against plain TRL with the preset under the measurement protocol (its records under ``data/runs/cpu/ch01_advised``).
"""
