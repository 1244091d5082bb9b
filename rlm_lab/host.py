"""This host: its load, read before and after every measurement (a shared machine only ever adds time), its
machine key (what a calibration or a measurement is valid for), a free local TCP port for a rendezvous (bound on
127.0.0.1 only: nothing here listens beyond this machine), the process tree below a process (from /proc,
Linux), so that a run leaves none of its processes behind, and a child that dies with its parent.

The one place ``os.getloadavg`` is read (https://docs.python.org/3/library/os.html#os.getloadavg), so that a
platform without it gives ``None`` in a record instead of an error after the run.
"""

from __future__ import annotations

import ctypes
import hashlib
import ipaddress
import json
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import psutil

from .device import FAKE_HOST, cpu_name, faked

KEY_FIELDS = ("host", "cpu_model", "cores", "torch", "threads")


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
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def still_alive(pids, wait_s: float, poll_s: float = 0.2) -> list[int]:
    """Those of ``pids`` still running after waiting up to ``wait_s`` for all of them to end (sorted)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = sorted(p for p in pids if alive(p))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(poll_s)


def host_name() -> str:
    """This machine's host name (``socket.gethostname``), ``device.FAKE_HOST`` under ``$RLM_FAKE_MACHINE``."""
    return FAKE_HOST if faked() else socket.gethostname()


def machine_key(**override) -> dict:
    """What a calibration or a measurement is valid for: host, CPU model, cores, torch version, torch's thread
    count. Two machines can share a key (a VM image keeps its host name; a CPU model line names a family), so a
    key that matches is necessary, not sufficient: :func:`rlm_lab.calibrate.quick_check` measures the rest."""
    import torch

    key = {"host": host_name(), "cpu_model": cpu_name(), "cores": os.cpu_count(),
           "torch": torch.__version__, "threads": torch.get_num_threads()}
    return key | override


def key_of_provenance(prov: dict) -> dict:
    """The machine key of a record's or profile's provenance (``rlm_lab.records.provenance``): the same fields
    as :func:`machine_key`, None where the provenance lacks one."""
    hw = prov.get("hardware") or {}
    return {"host": prov.get("host"), "cpu_model": hw.get("cpu_model"), "cores": hw.get("cpu_count"),
            "torch": (prov.get("versions") or {}).get("torch"), "threads": hw.get("torch_threads")}


def key_differences(a: dict, b: dict) -> list[str]:
    """``field: a != b`` for every key field on which ``a`` and ``b`` differ."""
    return [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in KEY_FIELDS if a.get(k) != b.get(k)]


def key_slug(key: dict) -> str:
    """A folder name for ``key``: readable host and thread count, then a hash of every field."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    host = re.sub(r"[^A-Za-z0-9]+", "-", str(key.get("host", "host"))).strip("-")[:24] or "host"
    return f"{host}-t{key.get('threads')}-{digest}"


def die_with_parent(sig=None, parent: int | None = None) -> None:
    """Linux: have the kernel send ``sig`` (default SIGKILL) to this process when its parent dies (e.g. is
    SIGKILLed), as torch's own spawn does (``prctl(PR_SET_PDEATHSIG)``, prctl(2)), so that nothing is left
    running without its driver. Call it in the child (a rank's first line, or a ``preexec_fn``); ``parent``:
    the pid the child expects as its parent, so that a parent that died before the call is caught too.
    The signal follows the parent *thread* that forked the child (prctl(2)): fork from a long-lived thread."""
    sig = signal.SIGKILL if sig is None else sig
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(sig))  # 1 = PR_SET_PDEATHSIG
        except OSError:
            return
        if parent is not None and os.getppid() != parent:  # the parent is already gone
            os.kill(os.getpid(), sig)


def loopback(ip: str) -> bool:
    """Is ``ip`` (as psutil reports a socket's address) on the loopback network?"""

    addr = ipaddress.ip_address(ip.split("%")[0])
    if getattr(addr, "ipv4_mapped", None) is not None:  # ::ffff:127.0.0.1 (a dual-stack socket)
        addr = addr.ipv4_mapped
    return addr.is_loopback


def bound_sockets(pids) -> list[tuple]:
    """``(pid, process name, ip, port)`` of every listening TCP and bound UDP socket of ``pids`` (psutil)."""
    bound = []
    for pid in sorted(pids):
        try:
            proc = psutil.Process(pid)
            conns = proc.net_connections(kind="inet")
            name = proc.name()
        except psutil.Error:  # a process that just exited
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN or (c.type == 2 and not c.raddr):  # listening TCP, bound UDP
                bound.append((pid, name, c.laddr.ip, c.laddr.port))
    return bound
