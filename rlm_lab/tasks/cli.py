"""``rlm-lab tasks generate|show``: write the deterministic task files, or print a few problems."""

from __future__ import annotations


def register(sub):
    p = sub.add_parser("tasks", help="generate or show task data")
    s = p.add_subparsers(dest="action", required=True)
    g = s.add_parser("generate", help="write data/tasks/<slug>/{train,test}.jsonl")
    g.add_argument("--task", action="append", default=None,
                   help="task spec, e.g. arithmetic:digits=2 (repeatable; default: the built-in set)")
    g.add_argument("--train", type=int, default=20_000)
    g.add_argument("--test", type=int, default=1_000)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--root", default=None, help="output root (default: data/tasks)")
    g.set_defaults(func=_generate)
    sh = s.add_parser("show", help="print a few problems of a task")
    sh.add_argument("task")
    sh.add_argument("-n", type=int, default=5)
    sh.set_defaults(func=_show)
    return p


DEFAULT_TASKS = ("arithmetic:digits=2", "arithmetic:digits=3,ops=add+sub", "countdown:numbers=3")


def _generate(args):
    from . import generate, parse_task

    for spec in args.task or DEFAULT_TASKS:
        paths = generate(parse_task(spec), args.root, args.train, args.test, args.seed)
        print(f"{spec}: {paths['train']} ({args.train}), {paths['test']} ({args.test})")


def _show(args):
    import random

    from . import parse_task

    task = parse_task(args.task)
    rng = random.Random(0)
    for _ in range(args.n):
        row = task.sample(rng)
        print(f"{row['prompt']}{row['answer']}")
