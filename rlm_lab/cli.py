"""The ``rlm-lab`` command. Each subcommand lives in the module it drives and exposes
``register(subparsers)``; modules are imported only when needed, so ``rlm-lab predict`` loads torch only
to read this machine's key when its profile is a calibrated one (a datasheet profile, ``--from``: never).
Any :class:`RlmLabError` is printed as one line and exits with status 2.

After ``predict`` the entry point says, in one ``rlm-lab: WARNING:`` line, when the calibrated profile the
prediction used was measured on another machine, with how far a quick check of this one differs
(:mod:`rlm_lab.calibrate.quick`; the cost model itself imports no torch, so the check lives up here).
Before ``predict`` and ``validate`` it hands them this machine's default profile, measured in situ
(:mod:`rlm_lab.insitu.this_machine`, which the cost model and the validation suite cannot import).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from .calibrate.quick import warn_machine
from .errors import RlmLabError
from .insitu import this_machine as TM

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
    "place": "rlm_lab.chapters.ch05_placement.cli",
    "longtail": "rlm_lab.chapters.ch07_long_tail.cli",
    "open-directions": "rlm_lab.chapters.ch10_open_directions.cli",
    "gpu-archive": "rlm_lab.gpu_archive",
    "launches": "rlm_lab.launches",
    "validate": "rlm_lab.validate",
    "insitu": "rlm_lab.insitu",
    "your-numbers": "rlm_lab.chapters.your_machine.numbers",
    "reference": "rlm_lab.reference",
    "chapter": "rlm_lab.chapters.cli",
    "results": "rlm_lab.ledger",
}

# commands whose module parses its own arguments: name -> ("module:function", help), the function ``fn(argv) -> int``
MAINS = {
    "book": ("rlm_lab.book:main", "build the book, its table of contents or its glued values (see `rlm-lab book -h`)"),
    "crosswalk": ("rlm_lab.crosswalk:main", "print the survey crosswalk page (--write: book/paper_crosswalk.md)"),
    "cluster-rehearsal": ("rlm_lab.cluster_rehearsal:main", "rehearse a two-machine Ray cluster on this machine"),
}

# the child processes the package starts, ``python -m rlm_lab.cli _NAME ...``: the same single entry point as
# every command (no module of the package runs under ``python -m`` but this one), left out of ``--help``
INTERNAL = {
    "_reference-arm": "rlm_lab.reference:child",        # one repeat of a re-measured reference (rlm_lab.protocol)
    "_gpu-archive-step": "rlm_lab.gpu_archive_steps:main",   # one step of `rlm-lab gpu-archive`
    "_ray-start": "rlm_lab.placement.ray_head:main",    # `ray start` with its loopback patches (placement.session)
    "_torchrun-agent": "rlm_lab.parallel.nodes:main",   # one torchrun agent of `rlm-lab parallel --nnodes N`
}


def run_main(name: str, argv: list[str]) -> int:
    """Run the :data:`MAINS` or :data:`INTERNAL` command ``name`` on ``argv``; its module is imported only now."""
    module, _, fn = (MAINS[name][0] if name in MAINS else INTERNAL[name]).partition(":")
    return int(getattr(importlib.import_module(module), fn)(argv) or 0)


# `predict --from` and `advise --from` run the frameworks' importers (rlm_lab.frameworks.importers.cli), which sit
# above the cost model: the entry point dispatches to them, so that the cost model never imports them
FROM_FRAMEWORK = {"predict": "run_predict", "advise": "run_advise"}


def _command(args):
    if getattr(args, "from_", None) is not None and args.command in FROM_FRAMEWORK:
        return getattr(importlib.import_module("rlm_lab.frameworks.importers.cli"), FROM_FRAMEWORK[args.command])
    return args.func


# errors of a write that the user can act on (free space, raise a quota or a file-size limit, another disk)
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS}


STDOUT = "standard output"


class _NamedStdout:
    """Standard output whose failed writes say so: an OSError from ``write``/``flush`` (``rlm-lab ... >
    /dev/full``, a full disk under a redirect) comes back with the filename "standard output", so the one-line
    handler below names it. Everything else is the wrapped stream's."""

    def __init__(self, stream):
        self._stream = stream

    def _named(self, fn, *args):
        try:
            return fn(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            if e.filename is not None:
                raise
            raise OSError(e.errno, e.strerror, STDOUT) from e

    def write(self, text):
        return self._named(self._stream.write, text)

    def flush(self):
        return self._named(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)


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
    for name, (_, text) in MAINS.items():  # listed only: main() hands them their arguments before parsing
        sub.add_parser(name, help=text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    only = first if first in COMMANDS else None
    stdout = sys.stdout
    sys.stdout = _NamedStdout(stdout)
    try:
        return _main(argv, only)
    finally:
        if isinstance(sys.stdout, _NamedStdout):  # not when a handler below replaced it by a sink
            sys.stdout = stdout


def _this_machine(args) -> None:
    """The default profile of ``predict`` and ``validate --run`` is this machine's, measured in situ
    (:mod:`rlm_lab.insitu.this_machine`; the cost model and the validation suite cannot import it, so the entry
    point hands it to them). Its one line goes to standard error (``--json`` keeps standard output JSON)."""
    if args.command not in ("predict", "validate") or getattr(args, "from_", None) is not None:
        return

    def say(msg):
        print(msg, file=sys.stderr)

    args.origin_of = TM.origin
    args.default_profile = lambda: TM.default_profile(args.no_calibrate, say=say)  # called after the input checks


def _main(argv, only) -> int:
    try:
        if argv and (argv[0] in MAINS or argv[0] in INTERNAL):
            result = run_main(argv[0], argv[1:])
            sys.stdout.flush()
            return result
        args = build_parser(only).parse_args(argv)
        _this_machine(args)
        result = _command(args)(args)
        sys.stdout.flush()
        if getattr(args, "profile_used", None):  # predict: is the profile's machine this one?

            warn_machine(args.profile_used, getattr(args, "check_machine", False))  # here, not at exit: a full disk or /dev/full under stdout is then one line too
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `rlm-lab predict | head`: the reader left; not an error of ours
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - Python flushes stdout at exit; give it a sink
        return 0
    except OSError as e:
        # a file the user named (or an output location) that cannot be read or written: say which, one line
        if e.filename == STDOUT:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - Python flushes stdout at exit; give it a sink
            print(f"rlm-lab: error: cannot write to {STDOUT}: {e.strerror or e}", file=sys.stderr)
            return 2
        if e.filename is not None:
            print(f"rlm-lab: error: {e.filename}: {e.strerror or e}", file=sys.stderr)
            return 2
        if e.errno in WRITE_ERRNOS:
            print(f"rlm-lab: error: cannot write: {e.strerror or e}", file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt:
        print("rlm-lab: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
