"""This host: its load, read before and after every measurement (a shared machine only ever adds time), and a
free local TCP port for a rendezvous (bound on 127.0.0.1 only: nothing here listens beyond this machine).

The one place ``os.getloadavg`` is read (https://docs.python.org/3/library/os.html#os.getloadavg), so that a
platform without it gives ``None`` in a record instead of an error after the run.
"""

from __future__ import annotations

import os
import socket


def load_average(digits: int | None = None) -> list[float] | None:
    """The 1-, 5- and 15-minute load averages (rounded to ``digits`` if given); None where the OS has none."""
    try:
        la = [float(x) for x in os.getloadavg()]
    except OSError:
        return None
    return la if digits is None else [round(x, digits) for x in la]


def machine_load(cores: int | None = None, loadavg=os.getloadavg) -> dict:
    """The 1-, 5- and 15-minute load averages and the 1-minute one per core."""
    cores = cores or os.cpu_count() or 1
    la = [float(x) for x in loadavg()]
    return {"loadavg": la, "cores": cores, "per_core": la[0] / cores}


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the OS picks it; for a torch.distributed store or a NCCL group)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
