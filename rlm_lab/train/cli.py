"""``rlm-lab train``: one recorded run (SFT warm start, then GRPO / RLOO / PPO) from the command line.

    rlm-lab train --algo grpo --task arithmetic:digits=2 --size cpu
    rlm-lab train --algo ppo --size smoke --set rl_steps=20 --set beta=0.04
    rlm-lab train --config run.yaml --out runs/mine
    rlm-lab train --resume _build/runs/cpu/grpo_arithmetic_digits2_micro_s0

Runs go to _build/runs/<size>/<name> unless --out says otherwise (the committed reference runs under
data/runs/ are written only with an explicit --out). A folder that already holds a run is refused unless
--force (the old run is then moved to <parent>/.replaced/ and named). --resume continues an interrupted
run from its last checkpoint with the config it was started with.

Layers, later wins: preset(algo, size, task) <- --config YAML <- --set key=value <- explicit flags.
No torch/TRL import here: ``rlm-lab train --help`` and config errors are instant.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

import yaml

from ..errors import RlmLabError
from ..tasks import parse_task
from .config import FIELD_TYPES, make_config
from .evaluate import test_rows
from .run import resume_config, run
from .validation import check_output_location


def register(sub):
    fields = ", ".join(f"{k} ({v})" for k, v in FIELD_TYPES.items())
    p = sub.add_parser("train", help="train a tiny reasoning LM: SFT warm start, then GRPO, RLOO or PPO",
                       description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="RunConfig fields for --set and --config:\n  " + "\n  ".join(
                           textwrap.wrap(fields, 96)))
    p.add_argument("--algo", default=None, help="sft | grpo | rloo | ppo (default: grpo)")
    p.add_argument("--task", default=None, help="task spec, e.g. arithmetic:digits=2 or countdown:numbers=3")
    p.add_argument("--size", default=None, help="smoke | cpu | gpu: picks the preset (default: cpu)")
    p.add_argument("--model", default=None, help="zoo model name, saved folder, or hub id (default: from preset)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--config", default=None, metavar="FILE.yaml", help="YAML file of RunConfig fields")
    p.add_argument("--out", default=None, metavar="DIR", help="run folder (default: runs root of the size / name)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override any RunConfig field, e.g. --set rl_steps=100 (repeatable)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    p.add_argument("--force", action="store_true",
                   help="replace a run already in the output folder (it is moved to <parent>/.replaced/)")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue the interrupted run in DIR from its last checkpoint (its own config)")
    p.set_defaults(func=_train)
    return p


def _train(args):
    if args.resume:
        return _resume(args)
    cfg = make_config(args.algo, args.size, args.task, config_file=args.config, overrides=args.overrides,
                      model=args.model, seed=args.seed, out=args.out)
    if args.print_config:
        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
        return 0

    check_output_location(cfg.run_dir)  # an unwritable --out fails now, not after SFT

    test_rows(parse_task(cfg.task), cfg.eval_problems)  # task files readable, enough test problems: before the record

    record = run(cfg, command=["rlm-lab", *sys.argv[1:]], force=args.force)
    _summary(cfg, record)
    return 0


def _resume(args):
    given = [f"--{k.replace('_', '-')}" for k in ("algo", "task", "size", "model", "seed", "config", "out")
             if getattr(args, k) is not None] + (["--set"] if args.overrides else []) + \
        (["--force"] if args.force else [])
    if given:
        raise RlmLabError(f"--resume continues a run with the config it was started with; drop {', '.join(given)}")

    cfg = resume_config(args.resume)
    if args.print_config:
        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
        return 0
    _summary(cfg, run(cfg, command=["rlm-lab", *sys.argv[1:]], resume=True))
    return 0


def _summary(cfg, record) -> None:
    r = record.results
    print(f"{cfg.algo} on {r['task']}: held-out accuracy {r['accuracy_before']:.3f} -> {r['accuracy_after']:.3f} "
          f"({r['eval_problems']} problems), total {r['total_seconds']:.0f} s; record: {record.dir}")
    if cfg.size == "smoke":
        print("(smoke size checks that the pipeline runs: a nano model and a few steps learn nothing, so an "
              "accuracy of 0.000 is expected; --size cpu learns)")
