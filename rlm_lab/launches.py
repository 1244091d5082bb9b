"""``rlm-lab launches --gpus N``: the multi-GPU command lines of the book, each checked before anyone runs it.

    rlm-lab launches --gpus 8            # print every launch for 8 GPUs, each validated by a dry run
    rlm-lab launches --gpus 8 --only ch04-accelerate-zero3

Nothing here starts a process. A launch is a command line built from the committed configs
(``configs/accelerate/*.yaml``, ``configs/deepspeed/*.json``) and the book's own entry points; the dry-run
check parses it with the launcher's *own* argument parser (``torch.distributed.run`` for torchrun,
https://pytorch.org/docs/stable/elastic/run.html; ``accelerate launch``'s parser and config loader,
https://huggingface.co/docs/accelerate/basic_tutorials/launch), checks that the module it runs is runnable
with ``-m`` and accepts the arguments given, that the process count matches the GPUs, and that a DeepSpeed
config's ZeRO stage is the one its name promises (https://www.deepspeed.ai/docs/config-json/). Ray placements
(chapter 5 on) are checked by :mod:`rlm_lab.cost.placement_spec` against a cluster of N GPUs.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import RlmLabError

REPO = Path(__file__).resolve().parent.parent
# Every launch here is one machine's (torchrun --standalone, accelerate on one node). The largest single machines
# hold 16 GPUs (NVIDIA DGX-2, https://www.nvidia.com/en-us/data-center/dgx-2/); more GPUs are several machines,
# each launched with its own share (torchrun --nnodes, https://pytorch.org/docs/stable/elastic/run.html).
MAX_GPUS = 16


@dataclass(frozen=True)
class Launch:
    name: str
    chapter: int
    what: str
    argv: Callable[[int], list[str]]


def _torchrun(n: int, *layout: str) -> list[str]:
    return ["torchrun", "--standalone", f"--nproc-per-node={n}", "-m", "rlm_lab.parallel.cli", *layout,
            "--size", "gpu", "--model", "small"]


def _accelerate(config: str, n: int) -> list[str]:
    return ["accelerate", "launch", "--config_file", f"configs/accelerate/{config}.yaml", "--num_processes", str(n),
            "-m", "rlm_lab.cli", "train", "--algo", "grpo", "--size", "gpu"]


LAUNCHES: tuple[Launch, ...] = (
    Launch("ch04-torchrun-dp", 4, "DDP over all GPUs (rlm-lab parallel)", lambda n: _torchrun(n, "--dp", str(n))),
    Launch("ch04-torchrun-fsdp2", 4, "FSDP2 = ZeRO-3 over all GPUs", lambda n: _torchrun(n, "--dp", str(n), "--zero", "3")),
    Launch("ch04-torchrun-tp", 4, "tensor parallel over 2 GPUs x data parallel over the rest",
           lambda n: _torchrun(n, "--dp", str(n // 2), "--tp", "2")),
    Launch("ch04-accelerate-ddp", 4, "GRPO through TRL, DDP", lambda n: _accelerate("ddp", n)),
    Launch("ch04-accelerate-fsdp2", 4, "GRPO through TRL, FSDP2", lambda n: _accelerate("fsdp2", n)),
    Launch("ch04-accelerate-zero2", 4, "GRPO through TRL, DeepSpeed ZeRO-2", lambda n: _accelerate("deepspeed_zero2", n)),
    Launch("ch04-accelerate-zero3", 4, "GRPO through TRL, DeepSpeed ZeRO-3", lambda n: _accelerate("deepspeed_zero3", n)),
)


def _runnable_module(name: str) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise RlmLabError(f"module {name} does not exist")
    if 'if __name__ == "__main__"' not in Path(spec.origin).read_text():
        raise RlmLabError(f"module {name} does nothing under `python -m` (no __main__ block)")


def _script_args(module: str, args: list[str], gpus: int) -> None:
    """The launched program's own parser accepts ``args`` (and a parallel layout fills the GPUs)."""
    import contextlib
    import io

    from .cli import build_parser

    argv = args if module == "rlm_lab.cli" else ["parallel", *args] if module == "rlm_lab.parallel.cli" else None
    if argv is None:
        raise RlmLabError(f"no argument check for module {module}")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parsed = build_parser(argv[0]).parse_args(argv)
    except SystemExit:  # argparse's own exit; rlm-lab's parser may raise RlmLabError instead
        said = (err.getvalue().strip().splitlines() or ["bad arguments"])[-1]
        raise RlmLabError(f"{module} refuses {shlex.join(args)}: {said}") from None
    except RlmLabError as e:
        raise RlmLabError(f"{module} refuses {shlex.join(args)}: {e}") from None
    if argv[0] == "parallel":
        from .parallel.cli import layout_from_args

        layout = layout_from_args(parsed)
        if layout.world != gpus:
            raise RlmLabError(f"layout {layout.name} uses {layout.world} processes, not the {gpus} GPUs")


def check(launch: Launch, gpus: int) -> list[str]:
    """Validate ``launch`` for ``gpus`` GPUs by a dry run of its command line; returns the argv."""
    argv = launch.argv(gpus)
    if argv[0] == "torchrun":
        from torch.distributed.run import get_args_parser

        a = get_args_parser().parse_args(argv[1:])
        nproc, module, rest = int(a.nproc_per_node), a.training_script, a.training_script_args
        if not a.module:
            raise RlmLabError(f"{launch.name}: torchrun runs a script, not a module")
    elif argv[:2] == ["accelerate", "launch"]:
        from accelerate.commands.config.config_args import load_config_from_file
        from accelerate.commands.launch import launch_command_parser

        a = launch_command_parser().parse_args(argv[2:])
        nproc, module, rest = int(a.num_processes), a.training_script, a.training_script_args
        if not a.module:
            raise RlmLabError(f"{launch.name}: accelerate runs a script, not a module")
        cfg_path = REPO / a.config_file
        if not cfg_path.exists():
            raise RlmLabError(f"{launch.name}: config {a.config_file} does not exist")
        cfg = load_config_from_file(str(cfg_path))
        if cfg.use_cpu or str(cfg.distributed_type).split(".")[-1] == "NO":
            raise RlmLabError(f"{launch.name}: {a.config_file} is not a multi-GPU config")
        ds = (cfg.deepspeed_config or {}).get("deepspeed_config_file")
        if ds:
            stage = json.loads((REPO / ds).read_text())["zero_optimization"]["stage"]
            if f"zero{stage}" not in launch.name:
                raise RlmLabError(f"{launch.name}: {ds} is ZeRO stage {stage}")
    else:
        raise RlmLabError(f"{launch.name}: unknown launcher {argv[0]}")
    if nproc != gpus:
        raise RlmLabError(f"{launch.name}: {nproc} processes for {gpus} GPUs")
    _runnable_module(module)
    _script_args(module, list(rest), gpus)
    return argv


def register(subparsers) -> None:
    p = subparsers.add_parser("launches", help="the book's multi-GPU command lines, checked by a dry run",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, required=True, help=f"GPUs on the machine (an even number, 2 to {MAX_GPUS})")
    p.add_argument("--only", help="one launch: " + ", ".join(x.name for x in LAUNCHES))
    p.set_defaults(func=_run)


def _run(args) -> int:
    if args.gpus < 2 or args.gpus % 2:
        raise RlmLabError(f"--gpus must be an even number >= 2, got {args.gpus}")
    if args.gpus > MAX_GPUS:
        raise RlmLabError(f"--gpus {args.gpus}: these are one machine's launches and a machine holds at most "
                          f"{MAX_GPUS} GPUs; give the GPUs of one machine (several machines: torchrun --nnodes)")
    chosen = [x for x in LAUNCHES if args.only in (None, x.name)]
    if not chosen:
        raise RlmLabError(f"unknown launch {args.only!r}; known: {', '.join(x.name for x in LAUNCHES)}")
    for launch in chosen:
        print(f"# {launch.name}: {launch.what} (chapter {launch.chapter}) - checked\n{shlex.join(check(launch, args.gpus))}")
    return 0
