"""Chapter 7's sizes: how many prompts, rows and repeats each technique's measurement uses, from the one
registry (``rlm_lab.sizes``, field ``long_tail``)."""

from __future__ import annotations

from ...protocol import Reference
from ...sizes import get


def params(size: str) -> dict:
    return dict(get(size).long_tail)


# rlm-lab reference --chapter 7: each technique on (arm A) against off (arm B), seconds of its workload, each repeat a
# fresh process (rlm_lab.chapters.ch07_long_tail.reference). cpu_run_s: the process's start, the model's build and
# warm-up (~8 s on 2 cores), the workload once untimed and once timed (the committed in-process medians, measured at
# load ~3: tail batching's rounds 22-51 s, fusion 0.5-2.5 s, packing 0.6-0.7 s, over-provisioning 10 steps).
_ARM = "rlm_lab.chapters.ch07_long_tail.reference:reference_arm"
_PREDICT = "rlm_lab.chapters.ch07_long_tail.reference:predict_arm"
REFERENCES = (
    Reference("tail_batching", ("tail_batched", "mixed"), _ARM, "seconds", False, ("ch07_tail_batching",), 40.0,
              _PREDICT),
    Reference("fusion", ("fused", "after"), _ARM, "seconds", False, ("ch07_fusion",), 14.0, _PREDICT),
    Reference("packing", ("packed", "padded"), _ARM, "seconds", False, ("ch07_packing",), 12.0, _PREDICT),
    Reference("overprovision", ("early", "full"), _ARM, "seconds", False, ("ch07_overprovision",), 14.0, _PREDICT),
)
