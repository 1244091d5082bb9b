"""This host: its load, read before and after every measurement (a shared machine only ever adds time), a
free local TCP port for a rendezvous (bound on 127.0.0.1 only: nothing here listens beyond this machine), and
the process tree below a process (from /proc, Linux), so that a run leaves none of its processes behind.

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


def free_port(host: str = "127.0.0.1") -> int:
    """A free TCP port on ``host`` (default 127.0.0.1; the OS picks it; for a torch.distributed store or a NCCL
    group). ``host``: an address of this machine, e.g. a Ray node's, where a store is about to listen."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, grandchildren, ...), from /proc (empty where there is none)."""
    from pathlib import Path

    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    from pathlib import Path

    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def still_alive(pids, wait_s: float, poll_s: float = 0.2) -> list[int]:
    """Those of ``pids`` still running after waiting up to ``wait_s`` for all of them to end (sorted)."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        left = sorted(p for p in pids if alive(p))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(poll_s)
