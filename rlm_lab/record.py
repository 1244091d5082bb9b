"""Run records: config, per-step metrics, results and provenance of one run, on disk.

Layout of a run directory::

    <run_dir>/record.json    config + provenance + results (rewritten atomically)
    <run_dir>/metrics.jsonl  one JSON object per step (appended, one write per line)

Standard library only, so that the book can read records without torch.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

SCHEMA_VERSION = 1
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "numpy", "rlm_lab")


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` so that readers see the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


def append_jsonl(path: str | os.PathLike, obj) -> None:
    """Append one JSON line with a single ``write`` on an O_APPEND file and fsync it:
    a crash loses at most the line being written, never earlier lines."""
    line = json.dumps(obj, sort_keys=True, default=_jsonable) + "\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a JSONL file; a torn last line (a crash mid-write) is skipped, any other bad line raises."""
    rows, lines = [], Path(path).read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise
    return rows


def _jsonable(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "value"):  # enums
        return o.value
    return str(o)


def git_commit(repo: str | os.PathLike | None = None) -> dict:
    """The commit the code ran from, and whether the tree had uncommitted changes."""
    cwd = repo or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return {"commit": None, "dirty": None}
        return {"commit": sha.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def hardware() -> dict:
    """CPU model, cores, memory and GPUs of this machine."""
    info = {"machine": platform.machine(), "cpu_count": os.cpu_count(), "cpu_model": platform.processor() or None}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
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
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "command": command,
        "seed": seed,
        "hardware": hardware(),
        "versions": versions(),
        "git": git_commit(),
    }


class RunRecord:
    """One run on disk: ``record.json`` (config, provenance, results) and ``metrics.jsonl``."""

    def __init__(self, run_dir: str | os.PathLike, config: dict | None = None, command=None, seed=None):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.data = {
            "schema_version": SCHEMA_VERSION,
            "config": config or {},
            "provenance": provenance(command, seed),
            "results": {},
        }
        self.metrics_path.unlink(missing_ok=True)  # a fresh run starts a fresh metric log
        self.save()

    @property
    def path(self) -> Path:
        return self.dir / "record.json"

    @property
    def metrics_path(self) -> Path:
        return self.dir / "metrics.jsonl"

    @property
    def results(self) -> dict:
        return self.data["results"]

    @property
    def config(self) -> dict:
        return self.data["config"]

    def log(self, metrics: dict) -> None:
        append_jsonl(self.metrics_path, metrics)

    def update(self, **results) -> None:
        self.data["results"].update(results)
        self.save()

    def save(self) -> None:
        atomic_write_json(self.path, self.data)

    def metrics(self) -> list[dict]:
        return read_jsonl(self.metrics_path) if self.metrics_path.exists() else []

    @classmethod
    def load(cls, run_dir: str | os.PathLike) -> "RunRecord":
        from .errors import RlmLabError

        run_dir = Path(run_dir)
        path = run_dir / "record.json"
        if not path.exists():
            raise RlmLabError(f"no run record at {path}; pass the directory a run wrote")
        obj = cls.__new__(cls)
        obj.dir = run_dir
        try:
            obj.data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise RlmLabError(f"{path} is not valid JSON ({e}); the run record is damaged") from None
        return obj


REPO_ROOT = Path(__file__).resolve().parent.parent


def runs_root(size: str) -> Path:
    """Where runs of a size are recorded: committed reference runs for ``cpu``/``gpu`` live under
    ``data/runs/<size>/``; ``smoke`` runs (CI, book builds) go to ``_build/runs/smoke/`` and are not
    committed. ``$RLM_RUNS_DIR`` overrides the root for all sizes."""
    override = os.environ.get("RLM_RUNS_DIR")
    if override:
        return Path(override) / size
    if size == "smoke":
        return REPO_ROOT / "_build" / "runs" / "smoke"
    return REPO_ROOT / "data" / "runs" / size
