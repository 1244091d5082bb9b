"""``rlm-lab chapter N <step> [args]``: run a step of chapter N, as its record in :mod:`.registry` names it.

    rlm-lab chapter --help                      # every chapter's steps
    rlm-lab chapter 6 campaign --size cpu       # chapter 6's Ray campaign
    rlm-lab chapter 5 run --size smoke          # = rlm-lab place --size smoke

A step's own arguments follow it (``rlm-lab chapter 6 campaign --help`` shows them). This is the only way in: no
module of a chapter runs under ``python -m`` (a child process is ``python -m rlm_lab.cli chapter N <step>``,
:func:`.registry.step_argv`).
"""

from __future__ import annotations

import argparse
import importlib

from ..errors import RlmLabError
from .registry import CHAPTERS, chapter


def steps_text() -> str:
    lines = []
    for c in CHAPTERS:
        if c.steps:
            lines.append(f"  {c.number:>2} {c.title}: " + ", ".join(f"{s} ({t})" for s, t in c.steps.items()))
        elif c.number:
            lines.append(f"  {c.number:>2} {c.title}: report only (its page reads other chapters' records)")
    return "chapters and their steps:\n" + "\n".join(lines)


def register(sub) -> None:
    p = sub.add_parser("chapter", help="run one step of a chapter (rlm-lab chapter --help lists them)",
                       description=__doc__.splitlines()[0], epilog=steps_text(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("number", type=int, help="the chapter, 1-10")
    p.add_argument("step", help="the step (listed below)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the step's own arguments")
    p.set_defaults(func=run_step)


def resolve(number: int, step: str):
    """The callable behind chapter ``number``'s ``step``: ``fn(argv) -> int``."""
    try:
        c = chapter(number)
    except KeyError:
        raise RlmLabError(f"unknown chapter {number}; chapters are 1-10") from None
    if step not in c.steps:
        have = ", ".join(c.steps) or "none: it is report only"
        raise RlmLabError(f"chapter {number} has no step {step!r}; its steps: {have}")
    target = c.steps[step]
    if target.startswith("rlm-lab "):
        command = target.removeprefix("rlm-lab ")
        cli = importlib.import_module("rlm_lab.cli")
        return lambda argv: cli.main([command, *argv])
    module, _, fn = target.partition(":")
    return getattr(importlib.import_module(module), fn)


def run_step(args) -> int:
    return resolve(args.number, args.step)(list(args.args)) or 0
