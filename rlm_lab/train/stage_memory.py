"""Peak memory per stage for the stage tracer (:mod:`rlm_lab.train.tracer`): on CUDA the peak of
``torch.cuda.max_memory_allocated`` (reset at every stage start); on CPU the process resident-set high-water mark
(``VmHWM`` of ``/proc/self/status``), reset through Linux's ``/proc/self/clear_refs`` ("5" resets the peak RSS,
see proc(5)). Both are nearly free (~20 µs); each probe has ``kind``, ``reset()``, ``peak()`` and ``close()``.
"""

from __future__ import annotations

import os


class CpuMemory:
    """Peak resident set size via /proc/self/status VmHWM, reset through /proc/self/clear_refs."""

    kind = "cpu_rss_hwm"

    def __init__(self):
        self._status = os.open("/proc/self/status", os.O_RDONLY)
        try:
            self._clear = os.open("/proc/self/clear_refs", os.O_WRONLY)
        except OSError:  # not Linux or not allowed: peaks become "high-water mark so far"
            self._clear = None
            self.kind = "cpu_rss_hwm_unreset"

    def reset(self) -> None:
        if self._clear is not None:
            os.write(self._clear, b"5")

    def peak(self) -> int:
        s = os.pread(self._status, 4096, 0)
        i = s.find(b"VmHWM:")
        return int(s[i + 6:s.index(b"kB", i)]) * 1024 if i >= 0 else 0

    def close(self) -> None:
        for fd in (self._status, self._clear):
            if fd is not None:
                os.close(fd)


class CudaMemory:
    """Peak CUDA memory allocated on ``device`` (``torch.cuda.max_memory_allocated``), reset per stage."""

    kind = "cuda_max_allocated"

    def __init__(self, device):
        import torch

        self.cuda, self.device = torch.cuda, device

    def reset(self) -> None:
        self.cuda.synchronize(self.device)
        self.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        self.cuda.synchronize(self.device)
        return int(self.cuda.max_memory_allocated(self.device))

    def close(self) -> None:
        pass


class NoMemory:
    """No memory probe (a machine without /proc): every peak is 0."""

    kind = "none"

    def reset(self) -> None:
        pass

    def peak(self) -> int:
        return 0

    def close(self) -> None:
        pass


def memory_probe(device):
    """The probe for ``device``: CUDA's allocator on a CUDA device, else the process's VmHWM, else none."""
    if device is not None and getattr(device, "type", None) == "cuda":
        return CudaMemory(device)
    try:
        return CpuMemory()
    except OSError:
        return NoMemory()
