"""Provenance of a run: where a number came from (hardware, package versions, git commit, command, seed, date),
its machine key (:func:`rlm_lab.host.machine_key`'s fields) and the measurement window it belongs to
(``$RLM_WINDOW``, set by :mod:`rlm_lab.protocol` for every process it starts; None outside a window).

Standard library only (torch is asked for its thread count and GPUs only if it is installed).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ..device import cpu_name
from ..host import host_name, key_of_provenance
from .portable import portable

WINDOW_ENV = "RLM_WINDOW"
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "numpy", "rlm_lab")
REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# Paths whose changes say nothing about the code a number came from: the run records themselves. A run
# that writes several committed records (a suite refreshing data/runs with an explicit --out) would
# otherwise call every record after its first "dirty" because of its own earlier output.
NOT_CODE = ("data/runs",)


def git_commit(repo: str | os.PathLike | None = None) -> dict:
    """The commit the code ran from, and whether tracked files other than run records (``NOT_CODE``) had
    uncommitted changes; ``dirty_paths`` lists up to 20 of them, so a reader can judge what differed."""
    cwd = repo or REPO_ROOT
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                 *(f":(exclude){p}" for p in NOT_CODE)], cwd=cwd, capture_output=True, text=True,
                                timeout=10)
        paths = [line[3:] for line in status.stdout.splitlines() if line.strip()]
        return {"commit": sha.stdout.strip(), "dirty": bool(paths), "dirty_paths": paths[:20]}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def hardware() -> dict:
    """CPU model (:func:`rlm_lab.device.cpu_name`, faked under ``$RLM_FAKE_MACHINE``), cores, memory and GPUs of
    this machine."""
    info = {"machine": platform.machine(), "cpu_count": os.cpu_count(), "cpu_model": cpu_name() or None}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
                break
    except OSError:
        pass
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            info["cuda"] = torch.version.cuda
        else:
            info["gpus"] = []
    except ImportError:
        info["gpus"] = None
    return info


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def provenance(command: str | list[str] | None = None, seed: int | None = None) -> dict:
    """Everything needed to say where a number came from."""
    if command is None:
        command = sys.argv
    if isinstance(command, (list, tuple)):
        command = shlex.join(str(c) for c in command)

    out = {
        "date": utc_now(),
        "host": host_name(),
        "command": portable(command),
        "seed": seed,
        "hardware": hardware(),
        "versions": versions(),
        "git": git_commit(),
        "window": os.environ.get(WINDOW_ENV) or None,
    }
    out["machine_key"] = key_of_provenance(out)
    return out
