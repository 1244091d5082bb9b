"""The book's chapters, one package each, every one with the same shape (the notebooks stay thin and call it):

    cases  ->  run (RunRecords with provenance)  ->  compare (predicted against measured)  ->  report

* ``cases``: what runs at each size (from the size registry, :mod:`rlm_lab.sizes`);
* ``run``: the chapter's measurements, each predicted first where the chapter predicts, each a
  :class:`rlm_lab.record.RunRecord`; the committed ones (``data/runs/<size>``) are read back, never re-made;
* ``compare``: the prediction against the measurement, in numbers, with verdicts against goals fixed in
  advance (:mod:`rlm_lab.compare`, :mod:`rlm_lab.evidence`);
* ``report``: what the chapter's notebook shows and glues into its prose (tables, figures, verdict words and
  every glued value), computed from the records and unit-tested.

A chapter without one of the four says so in its package docstring ("there is no ``compare`` module: ...");
a module beyond the four (a second experiment, a command line) is named there too
(``tests/test_structure.py`` checks both). Mechanisms (how to train, parallelize, place, run asynchronously,
attack the long tail) stay in their own packages below; a chapter package holds the chapter's experiment.

* :mod:`.ch01_quickstart` -- SFT, then GRPO and PPO; the committed reference runs and the tuning sweep;
* :mod:`.ch02_anatomy` -- traced PPO/GRPO/DAPO runs predicted against measured per stage, memory, shares;
* :mod:`.ch03_work_depth` -- decode step against batch, the long tail, Brent's bounds, depth at scale;
* :mod:`.ch04_parallelism` -- the intra-model layouts on several processes, counted bytes and step times;
* :mod:`.ch05_placement` -- GRPO and PPO under placements on Ray, LoRA, the hybrid engine;
* :mod:`.ch06_async` -- the execution modes (staleness bound eta), the campaign, interruptible rollouts;
* :mod:`.ch07_long_tail` -- the long-tail techniques, each predicted then measured, and their learning effects;
* :mod:`.ch08_frameworks` -- the RL frameworks' knobs, their defaults predicted, the example configs;
* :mod:`.ch09_guidelines` -- the practical guidelines judged from the records and the predictor, the decision map,
  the results page;
* :mod:`.ch10_open_directions` -- parallel reasoning (sequential against fork-join) and multi-domain RLVR (mixed
  against merged), each predicted then measured;
* :mod:`.your_machine` -- the reader's own calibration and headline measurements of chapters 2 and 3.

Every function that measures writes a :class:`rlm_lab.record.RunRecord` (with provenance) and every
function that compares reads one back, so the book shows recorded numbers, never hand-typed ones.
"""
