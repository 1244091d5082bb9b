"""``rlm-lab tasks generate|show``: write the deterministic task files, or print a few problems."""

from __future__ import annotations

import argparse
import random

from ..record import atomic_write_text
from . import CHECKSUMS, checksums, generate, parse_task


def _counter(most: int):
    """argparse type: an integer in [1, most] (``--train -5`` or ``--test 0`` would write empty files, and
    ``--train 10**12`` would run until memory runs out)."""

    def count(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if not 1 <= n <= most:
            raise argparse.ArgumentTypeError(f"must be in 1..{most:,}, got {n:,}")
        return n

    return count


def register(sub):
    p = sub.add_parser("tasks", help="generate or show task data")
    s = p.add_subparsers(dest="action", required=True)
    g = s.add_parser("generate", help="write data/tasks/<slug>/{train,test}.jsonl")
    g.add_argument("--task", action="append", default=None,
                   help="task spec, e.g. arithmetic:digits=2 (repeatable; default: the built-in set)")
    g.add_argument("--train", type=_counter(10_000_000), default=20_000, help="training problems (1..10M)")
    g.add_argument("--test", type=_counter(1_000_000), default=1_000, help="held-out problems (1..1M)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--root", default=None, help="output root (default: data/tasks)")
    g.add_argument("--checksums", action="store_true",
                   help="also write each folder's SHA256SUMS (the file git keeps; ensure_data checks against it)")
    g.set_defaults(func=_generate)
    sh = s.add_parser("show", help="print a few problems of a task")
    sh.add_argument("task")
    sh.add_argument("-n", type=_counter(10_000), default=5, help="how many problems (1..10,000)")
    sh.set_defaults(func=_show)
    return p


DEFAULT_TASKS = ("arithmetic:digits=2", "arithmetic:digits=3,ops=add+sub", "countdown:numbers=3")


def _generate(args):
    for spec in args.task or DEFAULT_TASKS:
        paths = generate(parse_task(spec), args.root, args.train, args.test, args.seed)
        if args.checksums:
            atomic_write_text(paths["train"].parent / CHECKSUMS, checksums(paths))
        print(f"{spec}: {paths['train']} ({args.train}), {paths['test']} ({args.test})")


def _show(args):
    task = parse_task(args.task)
    rng = random.Random(0)
    for _ in range(args.n):
        row = task.sample(rng)
        print(f"{row['prompt']}{row['answer']}")
