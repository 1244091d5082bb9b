"""What every role's actor does to its own process: pin torch's threads to the cores Ray gave it, and read
its resident-set high-water mark (Linux ``/proc/self/status``, VmHWM; proc(5))."""

from __future__ import annotations

import os


def peak_rss() -> int:
    """This process's resident-set high-water mark (VmHWM, Linux)."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def pin(threads: int) -> None:
    import torch

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func's "experimental" warning
    torch.set_num_threads(max(1, int(threads)))
