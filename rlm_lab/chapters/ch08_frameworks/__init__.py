"""Chapter 8, "Frameworks": the RL post-training frameworks' knobs (the registry, ``data/frameworks/``), where the
book measures each knob and what it measured, the frameworks' published numbers, and predictions of one workload
under each framework's default and of each documented example config.

:mod:`.report` is the whole chapter: its tables (rows and HTML) and the values its prose glues. There is no
``cases``, ``run`` or ``compare`` module: the chapter measures nothing of its own. Its inputs are the registry
(:mod:`rlm_lab.frameworks.registry`), the importers of the frameworks' configs
(:mod:`rlm_lab.frameworks.importers`, the mechanism) and the records other chapters committed.
"""
