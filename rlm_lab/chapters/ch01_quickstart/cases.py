"""Chapter 1's cases: this build's GRPO and PPO runs (the size's presets, :mod:`rlm_lab.train.presets`, through
:func:`rlm_lab.train.make_config`), each in a folder of its own under ``_build/runs/<size>/``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...train import make_config
from ...record import repo_root

RUNS = ("ch01_grpo", "ch01_ppo")  # this build's runs, named as the committed reference runs they stand beside


def build_run_dir(name: str, size: str) -> Path:
    """Where a notebook's own run goes: ``_build/runs/<size>/<name>`` (never the committed data/runs),
    so executing the book at cpu size cannot overwrite the reference records."""
    root = Path(os.environ.get("RLM_RUNS_DIR") or repo_root() / "_build" / "runs")
    return root / size / name


def configs(size: str) -> tuple:
    """(GRPO config, PPO config) of ``size``: the presets, quiet, each writing to :func:`build_run_dir`, emptied
    first (each build makes its own runs afresh; the committed ones are in ``data/``)."""
    for name in RUNS:
        shutil.rmtree(build_run_dir(name, size), ignore_errors=True)
    return tuple(make_config(algo, size, out=str(build_run_dir(name, size)), disable_tqdm=True)
                 for algo, name in zip(("grpo", "ppo"), RUNS))
