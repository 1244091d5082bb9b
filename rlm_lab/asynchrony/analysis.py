"""Chapter 6's campaign, read back: per (mode, correction) over seeds, speed, idle fractions, staleness and
the learning curves; the η beyond which learning degrades; predicted against measured speed-ups; the
advisor's pick and its error; the plain-TRL reference and the issue's 2x goal. Standard library only (the
book reads records without torch).

Criteria fixed before the campaign ran (this docstring was committed before the first cpu record):

- **degraded** (accuracy per step): a (mode, correction) cell is degraded when the mean over seeds of its
  final held-out accuracy is below the synchronous run's (same correction) by more than the seed spread,
  the larger of the two cells' ranges (max - min over seeds). The η "beyond which accuracy per step
  degrades" is the largest η below the first degraded one (∞ if none is).
- **speed**: per run the median step (tracer, after the first step); per cell the mean over seeds. The
  predicted speed-up of a mode is the synchronous step over its predicted step (both from the record's
  stored prediction, made from the (sync, none) run of that seed); the goal on its error against the
  measured speed-up is |error| <= 25 % (:data:`GOAL`).
- **tokens/s**: tokens TRL counted (prompt + completion, ``num_tokens``) over the training wall time without
  the evaluations (the curve's last ``wall_s``), the same definition for the plain-TRL reference.
- **the issue's goal**: the mode the advisor picks reaches >= 2x the reference's tokens/s *at the same
  accuracy curve*: its final accuracy (mean over seeds) is not below the reference's by more than the seed
  spread (the same rule as "degraded").
"""

from __future__ import annotations

import statistics

GOAL = 0.25
TWO_X = 2.0


def spread(values) -> float:
    values = list(values)
    return (max(values) - min(values)) if len(values) > 1 else 0.0


def mean(values) -> float:
    values = list(values)
    return statistics.fmean(values) if values else float("nan")


def degraded(finals: list, sync_finals: list) -> bool:
    """The criterion of the module docstring: mean below sync's by more than the larger seed range."""
    return mean(finals) < mean(sync_finals) - max(spread(finals), spread(sync_finals))


def eta_beyond(etas: list, is_degraded: dict):
    """``etas`` in increasing order (None = ∞ last); the largest eta before the first degraded one (None
    when even the first is degraded... which cannot be: eta 0 is the reference itself)."""
    last_ok = etas[0]
    for e in etas:
        if is_degraded.get(e):
            return last_ok
        last_ok = e
    return last_ok
