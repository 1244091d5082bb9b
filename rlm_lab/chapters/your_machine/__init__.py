"""Your machine, your numbers: the reader's own calibration and measurements beside the committed reference.

The cpu book compares the cost model with records committed under ``data/runs/cpu``, made on the machine
their provenance names. A reader who builds it (``make book SIZE=cpu``) also gets, in chapters 2 and 3, a
column made on *their* machine, in the order a prediction demands:

1. **Calibrate** once (:mod:`.calibration`): the micro-benchmarks of ``rlm-lab calibrate``
   (:func:`rlm_lab.calibrate.profile.calibrate`) repeated ``CAL_REPEATS`` times, the median and the spread
   kept; no collectives (no workload here is distributed). A busy machine is not refused: the profile is
   marked busy and the book says so. Cached under ``_build/your_machine/<key>/`` (never ``data/``), keyed
   by host, CPU model, cores, torch version and torch's thread count.
2. **Predict** each headline workload (:mod:`.headlines`) from that profile, with the interval its spread
   gives (:func:`rlm_lab.cost.spread.bound_profiles`), and write the prediction and its time into the
   workload's run record (:class:`rlm_lab.record.RunRecord`, with provenance) ...
3. ... then **measure** it with the chapter's own measurement code and complete the record
   (:mod:`.numbers`). Later builds reuse the record while the calibration and the workloads are the same.

Headline workloads: chapter 2, the GRPO case of the cpu size (micro model, B = 64, G = 8, R = 16), fewer
steps (whole step and generation, median over the traced steps); chapter 3, one decode step of the micro
model at batch 1 and 64, and one whole ``generate`` of the mini model over 64 sequences with fixed and
with long-tailed (lognormal, sigma 1) lengths.

At any size but ``cpu`` nothing is measured: :func:`your_numbers` returns the committed reference alone
and says that the reader's column appears at cpu size. ``rlm-lab your-numbers`` does the same from a shell.
"""

from .calibration import CACHE, CAL_REPEATS, calibration_facts, ensure_calibration, key_slug, machine_key, now
from .headlines import CH02_STEPS, READER_SIZE, Headline, ch03_headline, headlines
from .numbers import ensure_workloads, headline_values, register, summary_text, table, your_numbers

__all__ = [
    "CACHE", "CAL_REPEATS", "CH02_STEPS", "READER_SIZE", "Headline", "calibration_facts", "ch03_headline",
    "ensure_calibration", "ensure_workloads", "headline_values", "headlines", "key_slug", "machine_key", "now",
    "register", "summary_text", "table", "your_numbers",
]
