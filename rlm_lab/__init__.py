"""rlm_lab: predict, measure and compare RL post-training of small reasoning language models.

The package is the tested truth behind the book: notebooks import it and stay thin.
Heavy dependencies (torch, transformers, trl) are imported inside the modules that need them,
so `rlm_lab.cost` and the plotting code stay importable and fast on any machine.

Layers: a module imports only from its own layer or the layers above it in :data:`LAYERS` (an import inside
a function counts), and no two subpackages import each other, directly or round a loop
(``tests/test_structure.py`` checks both). From the bottom:

1. core: ``errors``, ``sizes``, ``stages``, ``device``, ``host`` (load average, free port), ``compat``
   (every private of TRL, transformers or torch, guarded), ``records``
   (+ ``record``, its public face), ``compare`` (predicted against measured, the same way everywhere),
   ``evidence`` (the median of paired repeats, its bootstrap interval, and the verdict words that follow it),
   ``tables`` (plain text tables, the text of a glued value), ``protocol`` (paired repeats interleaved ABBA,
   each in a fresh process behind a load gate, in one window), ``reference_report`` (a committed window of
   ``rlm-lab reference`` on a chapter's page), ``crosswalk`` (the survey item by item against the book);
2. ``models``, ``tasks``: the model zoo, the task data and rewards;
3. ``cost``: the cost model, formulas only (it imports no torch, not even inside a function);
4. mechanisms, each free to use the ones before it: ``train`` (SFT, GRPO, PPO through TRL; its tracer and
   ``trace_plots``, ``trace_merge``), ``parallel`` (intra-model layouts), ``placement`` (models on devices,
   Ray), ``asynchrony`` (off-policy modes), ``longtail`` (the long-tail techniques), ``forkjoin`` (fork-join
   reasoning: concurrent branches, trie training), ``multidomain`` (mixed and merged multi-task RLVR);
5. ``calibrate``: the micro-benchmarks that measure a machine into a hardware profile;
6. ``frameworks``: the RL frameworks' registry and the importers of their configs into the cost model;
7. ``validate``, ``insitu``: the traced case (``validate.traced_case``: one TRL run with forced lengths, its
   prediction and their join, shared by both suites and chapter 2), the cost model against a suite it was
   not fitted on, and the in-situ fit;
8. ``chapters``: one package per chapter, ``chapters/chNN_<slug>/``, each ``cases`` -> ``run`` -> ``compare`` ->
   ``report`` (what the notebook shows and glues), and ``chapters/your_machine`` (the reader's own numbers);
9. entry points: ``cli``, ``book``, ``launches``, ``gpu_archive``, ``gpu_archive_steps``, ``reference`` (a
   chapter's references re-measured in one window), ``cluster_rehearsal`` (the cluster recipe on one box); ``cli``
   is the one module that runs under ``python -m`` (every command, chapter step and child process goes through it).
"""

__version__ = "0.1.0"

# (name, the top-level subpackages and modules in it): bottom first. A new subpackage goes into one of them.
LAYERS = (
    ("core", ("errors", "sizes", "stages", "device", "host", "compat", "records", "record", "compare", "evidence",
              "tables", "protocol", "reference_report", "crosswalk", "supersession")),
    ("models and tasks", ("models", "tasks")),
    ("cost model", ("cost",)),
    ("mechanism: training", ("train", "trace_plots", "trace_merge")),
    ("mechanism: intra-model parallelism", ("parallel",)),
    ("mechanism: placement", ("placement",)),
    ("mechanism: asynchrony", ("asynchrony",)),
    ("mechanism: long tail", ("longtail",)),
    ("mechanism: fork-join reasoning", ("forkjoin",)),
    ("mechanism: multi-domain RLVR", ("multidomain",)),
    ("calibration", ("calibrate",)),
    ("frameworks", ("frameworks",)),
    ("validation", ("validate", "insitu")),
    ("chapters", ("chapters",)),
    ("entry points", ("cli", "book", "launches", "gpu_archive", "gpu_archive_steps", "reference", "cluster_rehearsal", "ledger")),
)
