"""Chapter 4's cases: the layouts of each size (every 2-process layout shares ONE process group, spawning
costs seconds per process on 2 cores; 4-process layouts, oversubscribed on 2 cores and labelled so, share
another), their run arguments, and the PP, CP and EP measurements (all from the size registry,
``rlm_lab.sizes``). The out-of-sample cases are :data:`.out_of_sample.CASES`; :data:`REFERENCES` the layouts against
one process that ``rlm-lab reference --chapter 4`` re-measures."""

from __future__ import annotations

from ...parallel.mesh import Layout
from ...protocol import Reference
from ...sizes import get


def run_args(size: str) -> dict:
    """The run arguments of every layout at ``size`` (model, steps, batch, sequence): ``rlm_lab.sizes``."""
    return dict(get(size).parallel)


def suite(size: str) -> dict:
    """The layouts of ``size``: ``{world: [(layout, kwargs)]}``. ``gpu`` adapts to the visible GPUs (1-8):
    every ZeRO stage over all of them, and TP 2 (x DP over the rest, FSDP2) with and without SP.
    The other sizes' layouts are in the size registry (``rlm_lab.sizes``, ``parallel_layouts``)."""
    if size != "gpu":
        return {world: [(Layout(**deg), dict(kw)) for deg, kw in items] for world, items in get(size).parallel_layouts}
    import torch

    n = torch.cuda.device_count()
    if n < 2:
        return {}
    items = [(Layout(dp=n, zero=z), {}) for z in (0, 1, 2, 3)]
    dp = n // 2 if n % 2 == 0 else 0
    if dp:
        items += [(Layout(dp=dp, tp=2, zero=2 if dp > 1 else 0, sp=sp), {}) for sp in (False, True)]
    return {n: items}


def measurements(size: str) -> list:
    """``[(kind, kwargs)]`` of ``size`` from the size registry (``rlm_lab.sizes``, ``parallel_sweeps``); the
    gpu size runs the cpu list. "oversubscribed" (world > cores) is recorded with each run."""
    return [(kind, dict(kw)) for kind, kw in (get(size).parallel_sweeps or get("cpu").parallel_sweeps)]


# rlm-lab reference --chapter 4: the page's "faster than one process" question, each 2-process layout against the
# one-process run, step time under the protocol (each repeat a fresh process that spawns its ranks). One repeat at
# cpu size: 8 steps of the micro model take a few seconds; the process and its 2 spawned ranks start in about
# 10 s on 2 cores: about 15 s a repeat.
_ARM = "rlm_lab.chapters.ch04_parallelism.run:reference_arm"
_PREDICT = "rlm_lab.chapters.ch04_parallelism.run:predict_arm"
REFERENCES = tuple(
    Reference(f"{name}_vs_single", (name, "single"), _ARM, "step_s", False, (f"ch04_{name}", "ch04_single"), 15.0,
              _PREDICT)
    for name in ("dp2", "tp2", "pp2-1f1b", "cp2"))
