"""The ``rlm-lab`` command. Each subcommand lives in the module it drives and exposes
``register(subparsers)``; modules are imported only when needed, so ``rlm-lab predict`` never
loads torch. Any :class:`RlmLabError` is printed as one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .errors import RlmLabError

DESCRIPTION = ("Predict and measure the cost of RL post-training for tiny reasoning language models: "
               "train (SFT, GRPO, RLOO, PPO), predict, calibrate, parallel layouts, task data.")

# subcommand -> module with a register(subparsers) function
COMMANDS = {
    "models": "rlm_lab.models.cli",
    "tasks": "rlm_lab.tasks.cli",
    "train": "rlm_lab.train.cli",
    "predict": "rlm_lab.cost.cli",
    "advise": "rlm_lab.cost.advise",
    "calibrate": "rlm_lab.calibrate.profile",
    "parallel": "rlm_lab.parallel.cli",
    "place": "rlm_lab.placement.cli",
    "longtail": "rlm_lab.longtail.cli",
    "gpu-archive": "rlm_lab.gpu_archive",
    "launches": "rlm_lab.launches",
    "validate": "rlm_lab.validate",
    "insitu": "rlm_lab.insitu",
    "your-numbers": "rlm_lab.experiments.your_machine.numbers",
}


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one ``rlm-lab: error:`` line (exit 2) like every other bad input,
    instead of the usage block plus ``rlm-lab train: error:``; subparsers inherit the class."""

    def error(self, message):
        sub = self.prog.removeprefix("rlm-lab").strip()
        raise RlmLabError(f"{sub + ': ' if sub else ''}{message} (see `{self.prog} --help`)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = Parser(prog="rlm-lab", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        if only is not None and name != only:
            # keep the full list in --help without importing every module
            sub.add_parser(name, help=f"see `rlm-lab {name} --help`")
            continue
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    only = first if first in COMMANDS else None
    try:
        args = build_parser(only).parse_args(argv)
        result = args.func(args)
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `rlm-lab predict | head`: the reader left; not an error of ours
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - Python flushes stdout at exit; give it a sink
        return 0
    except OSError as e:
        # a file the user named (or an output location) that cannot be read or written: say which, one line
        if e.filename is None:
            raise
        print(f"rlm-lab: error: {e.filename}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlm-lab: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
