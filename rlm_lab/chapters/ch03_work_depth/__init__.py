"""Chapter 3, "Work and depth": decode step time against batch size, the long tail, Brent's bounds.

The experiment has the shape every chapter shares: :mod:`.cases` -> :mod:`.run` (records) ->
:mod:`.compare` (predicted against measured, the headline numbers) -> :mod:`.report` (what the notebook
prints, draws and glues); :mod:`.scale` is the prediction-only section. ``rlm-lab
chapter 3 run --size cpu`` makes the records (:func:`.run.main`).

Measured (each a recorded run, ``data/runs/<size>/ch03_*``):

* ``decode_knee``: seconds per decode step of transformers ``generate`` (sampling, KV cache, the engine
  TRL uses) for batch sizes 1, 2, 4, ...: t_step = (T(k1 new tokens) - T(k0)) / (k1 - k0), so the
  prefill cancels. Predicted with ``rlm_lab.cost.decode_step_time`` (a roofline, Williams et al., CACM 2009).
* ``long_tail``: one ``generate`` call over n sequences whose lengths are *forced* row by row
  (:class:`ForceLengths`: EOS banned before R_i, forced at R_i), for length distributions with the same
  mean and growing tails. A static batch runs until the longest row ends, so the time follows R_max,
  not the mean: predicted T = prefill + sum_{t < R_max} t_step(n, P + t), and the idle share of the
  decode slots is the bubble 1 - sum R_i / (n R_max).
* ``replicas``: the same n sequences split over p generation replicas (data parallel). Each replica's
  share runs on one core (1 thread). p = 1, 2 run as real processes (``rlm_lab.parallel.launch.spawn``,
  2 cores); p = 1..8 also run as a **sequential simulation**: every replica's share is generated one
  after another on the same core and T_p = the slowest replica. Brent's bounds use W = T_1 (all n on one
  replica, device-seconds) and D = the longest sequence alone: max(W/p, D) <= T_p <= W/p + D
  (Brent, JACM 1974, doi 10.1145/321812.321815; Blelloch, CACM 39(3) 1996).

Ignores: continuous batching (rows join and leave the batch: vLLM), which changes who fills the idle
slots, not the depth; prefix sharing; the weight sync a real disaggregated rollout would add.
"""

from ...cost.hardware import CPU_PROFILE, profile_for
from .cases import EOS, PROMPT_LEN, Lengths, assign, bubble, distributions, params
from .compare import (brent_table, headline, knee, knee_table, predicted_decode_steps, predicted_generate,
                      replica_table, tail_table)
from .run import (decode_knee, ensure_runs, sweep, generate_timed, load_reference, long_tail, main, measure_decode_steps,
                  replicas)
from .run import _load  # noqa: F401 (tests build models through it)
from .scale import QWEN25_1_5B, scaling

__all__ = [
    "CPU_PROFILE", "EOS", "PROMPT_LEN", "QWEN25_1_5B", "Lengths", "assign", "brent_table", "bubble", "decode_knee",
    "distributions", "ensure_runs", "generate_timed", "headline", "knee", "knee_table", "load_reference",
    "long_tail", "main", "measure_decode_steps", "params", "sweep", "predicted_decode_steps", "predicted_generate",
    "profile_for", "replica_table", "replicas", "scaling", "tail_table",
]
