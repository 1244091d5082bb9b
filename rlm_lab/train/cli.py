"""``rlm-lab train``: one recorded run (SFT warm start, then GRPO / RLOO / PPO) from the command line.

    rlm-lab train --algo grpo --task arithmetic:digits=2 --size cpu
    rlm-lab train --algo ppo --size smoke --set rl_steps=20 --set beta=0.04
    rlm-lab train --config run.yaml --out runs/mine

Layers, later wins: preset(algo, size, task) <- --config YAML <- --set key=value <- explicit flags.
No torch/TRL import here: ``rlm-lab train --help`` and config errors are instant.
"""

from __future__ import annotations

import sys
import textwrap


def register(sub):
    import argparse

    from .config import FIELD_TYPES

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
    p.set_defaults(func=_train)
    return p


def _train(args):
    from .config import make_config

    cfg = make_config(args.algo, args.size, args.task, config_file=args.config, overrides=args.overrides,
                      model=args.model, seed=args.seed, out=args.out)
    if args.print_config:
        import yaml

        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
        return 0
    from .validation import check_output_location

    check_output_location(cfg.run_dir)  # an unwritable --out fails now, not after SFT
    from .run import run

    record = run(cfg, command=["rlm-lab", *sys.argv[1:]])
    r = record.results
    print(f"{cfg.algo} on {r['task']}: held-out accuracy {r['accuracy_before']:.3f} -> {r['accuracy_after']:.3f} "
          f"({r['eval_problems']} problems), total {r['total_seconds']:.0f} s; record: {record.dir}")
    if cfg.size == "smoke":
        print("(smoke size checks that the pipeline runs: a nano model and a few steps learn nothing, so an "
              "accuracy of 0.000 is expected; --size cpu learns)")
    return 0
