"""Verifiable tasks (arithmetic, countdown, chain, psum, and their mixture), their data files and reward functions.

``get_task("arithmetic", digits=2)`` builds a task; ``parse_task("countdown:numbers=3")`` does the same
from a CLI string; ``ensure_data(task)`` writes (or reads back) the deterministic train/test files
under ``data/tasks/<slug>/`` (git keeps only their checksums, ``SHA256SUMS``).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import fields
from pathlib import Path

from ..errors import RlmLabError, check_output_location, unknown
from .arithmetic import Arithmetic
from .base import Task, read_rows, write_rows
from .chain import Chain
from .countdown import Countdown
from .mix import Mix
from .psum import Psum
from .rewards import checked, completion_text, correctness_reward, format_reward, parallelism_aware_reward

TASKS: dict[str, type[Task]] = {"arithmetic": Arithmetic, "chain": Chain, "countdown": Countdown, "mix": Mix, "psum": Psum}
DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "tasks"
DEFAULT_SPLIT = {"n_train": 20_000, "n_test": 1_000, "seed": 0}
# The default split's files are generated, not committed: each task folder commits only this file, the files'
# SHA-256 in `sha256sum` format (``sha256sum -c SHA256SUMS`` checks them); ensure_data checks what it writes.
CHECKSUMS = "SHA256SUMS"


def get_task(name: str, **knobs) -> Task:
    if name not in TASKS:
        raise unknown("task", name, TASKS)
    cls = TASKS[name]
    valid = {f.name: f.type for f in fields(cls)}
    for k, v in knobs.items():
        if k not in valid:
            raise RlmLabError(f"task {name!r} has no knob {k!r}; its knobs are: {', '.join(valid) or 'none'}")
        want = {"int": int, "str": str}.get(valid[k])
        if want is not None and (not isinstance(v, want) or isinstance(v, bool)):
            raise RlmLabError(f"task {name!r} knob {k} must be {'an integer' if want is int else 'a string'}, got {v!r}")
    return cls(**knobs)


def parse_task(spec: str) -> Task:
    """``"arithmetic"``, ``"arithmetic:digits=3,ops=add+mul"`` or ``"countdown:numbers=4"``."""
    name, _, rest = spec.partition(":")
    knobs = {}
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if not eq:
            raise RlmLabError(f"task knob {part!r} in {spec!r} is not key=value")
        key, value = key.strip(), value.strip()
        if not key or not value:
            raise RlmLabError(f"task knob {part!r} in {spec!r} needs a name and a value, e.g. digits=2")
        if key in knobs:
            raise RlmLabError(f"task knob {key!r} given twice in {spec!r}")
        knobs[key] = int(value) if value.lstrip("-").isdigit() else value
    return get_task(name.strip(), **knobs)


def data_paths(task: Task, root: str | Path | None = None) -> dict[str, Path]:
    folder = Path(root or DATA_DIR) / task.slug
    return {"train": folder / "train.jsonl", "test": folder / "test.jsonl"}


def generate(task: Task, root: str | Path | None = None, n_train: int = DEFAULT_SPLIT["n_train"],
             n_test: int = DEFAULT_SPLIT["n_test"], seed: int = DEFAULT_SPLIT["seed"]) -> dict[str, Path]:
    """Write the deterministic train/test files (regenerating gives byte-identical files)."""
    for name, n in (("n_train", n_train), ("n_test", n_test)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise RlmLabError(f"{name} must be an integer >= 1, got {n!r}")
    check_output_location(data_paths(task, root)["train"].parent, "task folder")
    train, test = task.split(n_train, n_test, seed)
    paths = data_paths(task, root)
    folder = paths["train"].parent
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    new = [p for p in paths.values() if not p.exists()]
    try:
        write_rows(paths["train"], train)
        write_rows(paths["test"], test)
    except BaseException:
        # all or nothing (a full disk under the second file): no half-written task, no empty folders left
        for p in new:
            p.unlink(missing_ok=True)
        for d in made:  # deepest first
            with contextlib.suppress(OSError):
                d.rmdir()
        raise
    return paths


def task_from_slug(slug: str) -> Task:
    """The task whose ``slug`` this is (``arithmetic_digits2_opsadd`` → ``Arithmetic(digits=2, ops="add")``)."""
    name, _, rest = slug.partition("_")
    cls = TASKS.get(name)
    if cls is None:
        raise unknown("task", name, TASKS)
    names = [f.name for f in fields(cls)]
    m = re.fullmatch("_".join(f"{re.escape(n)}(?P<{n}>.+?)" for n in names), rest)
    if m is None:
        raise RlmLabError(f"{slug!r} is not a {name} slug (its knobs are {', '.join(names)})")
    return get_task(name, **{n: int(v) if v.isdigit() else v for n, v in m.groupdict().items()})


def checksums(paths: dict[str, Path]) -> str:
    """The task files' SHA-256 in ``sha256sum`` format (``<hex>  train.jsonl``), test then train."""
    return "".join(f"{hashlib.sha256(paths[s].read_bytes()).hexdigest()}  {paths[s].name}\n" for s in ("test", "train"))


def _check_generated(task: Task, paths: dict[str, Path]) -> None:
    """Generated default files must be the committed checksums' (a changed generator says so, once)."""
    committed = paths["train"].parent / CHECKSUMS
    if committed.is_file() and committed.read_text() != checksums(paths):
        for p in paths.values():
            p.unlink(missing_ok=True)
        raise RlmLabError(f"{committed}: the regenerated {task.slug} files differ from these checksums (the generator "
                          "changed); if that is meant, write the new ones with `rlm-lab tasks generate --checksums`")


def extra_fields(task: Task) -> tuple[str, ...]:
    if isinstance(task, Mix):
        return ("task", "numbers", "target")
    return ("numbers", "target") if isinstance(task, Countdown) else ()


def ensure_files(task: Task, root: str | Path | None = None) -> dict[str, Path]:
    """The task's default train/test files, generated (and checked against ``SHA256SUMS``) if missing."""
    paths = data_paths(task, root)
    if not paths["train"].exists() or not paths["test"].exists():
        _check_generated(task, generate(task, root))
    return paths


def ensure_data(task: Task, root: str | Path | None = None) -> dict[str, list[dict]]:
    """Read the task's train/test rows, generating the default files first if they are missing."""
    paths = ensure_files(task, root)
    return {split: read_rows(p, extra_fields(task)) for split, p in paths.items()}


def reward_funcs(task: Task, format_weight: float = 0.1) -> list:
    """The task's rewards for TRL: correctness (1.0) and format (``format_weight``)."""
    funcs = [correctness_reward(task)]
    if format_weight:
        funcs.append(format_reward(task, format_weight))
    return funcs


__all__ = [
    "CHECKSUMS", "TASKS", "Arithmetic", "Countdown", "Mix", "Psum", "Task", "checked", "completion_text", "correctness_reward",
    "checksums", "data_paths", "ensure_data", "ensure_files", "format_reward", "generate", "get_task", "parallelism_aware_reward", "parse_task", "read_rows",
    "reward_funcs", "task_from_slug",
]
