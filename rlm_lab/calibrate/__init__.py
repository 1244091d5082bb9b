"""Measuring a machine: the micro-benchmarks behind a hardware profile (``data/hardware/<name>.json``).

``profile`` is ``rlm-lab calibrate`` (repeats the benchmarks, keeps the median and the spread, checks the
load, writes the profile); ``benchmarks`` and ``kernel_benchmarks`` time the products, bandwidth, per-call
overheads, collectives and kernels; ``step_benchmarks``, ``loop_benchmarks``, ``autocast_benchmarks`` and
``dist_benchmarks`` time TRL's per-step bookkeeping, the decode loop, bf16 autocast and gradient
checkpointing, and the distributed layouts. These modules import torch (inside their functions); the
formulas they feed stay in :mod:`rlm_lab.cost`, which imports no torch.
"""
