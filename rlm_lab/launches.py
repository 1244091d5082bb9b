"""``rlm-lab launches --gpus N``: the multi-GPU command lines of the book, each checked before anyone runs it;
``--nodes N --gpus-per-node G``: the same for a cluster of N machines.

    rlm-lab launches --gpus 8            # print every launch for 8 GPUs, each validated by a dry run
    rlm-lab launches --gpus 8 --only ch04-accelerate-zero3
    rlm-lab launches --nodes 2 --gpus-per-node 8     # torchrun, accelerate, Slurm, Ray job, KubeRay RayJob

Nothing here starts a process. A launch is a command line built from the committed configs
(``configs/accelerate/*.yaml``, ``configs/deepspeed/*.json``) and the book's own entry points; the dry-run
check parses it with the launcher's *own* argument parser (``torch.distributed.run`` for torchrun,
https://pytorch.org/docs/stable/elastic/run.html; ``accelerate launch``'s parser and config loader,
https://huggingface.co/docs/accelerate/basic_tutorials/launch), checks that the module it runs is runnable
with ``-m`` and accepts the arguments given, that the process count matches the GPUs, and that a DeepSpeed
config's ZeRO stage is the one its name promises (https://www.deepspeed.ai/docs/config-json/). Ray placements
(chapter 5 on) are checked by :mod:`rlm_lab.cost.placement_spec` against a cluster of N GPUs.

Several machines (:data:`CLUSTER_LAUNCHES`): each text is what a reader runs, with ``$NODE_RANK`` (this
machine's rank, 0 on the head) and ``$HEAD_ADDR`` (the head's address) left for the reader. The check fills
them in for every node rank and parses each machine's line with the launcher's own parser: torchrun's
(``--nnodes``, ``--node-rank``, a c10d ``--rdzv-endpoint``; N x G processes), accelerate's (``--num_machines``,
``--machine_rank``, ``--main_process_ip``; its ``--num_processes`` counts every machine's), Ray's own ``ray
start`` and ``ray job submit`` (click commands, parsed without running,
https://docs.ray.io/en/latest/cluster/running-applications/job-submission/cli.html), a Slurm batch script
(``bash -n``, its ``#SBATCH`` directives read, and the ``srun``'d torchrun line parsed;
https://slurm.schedmd.com/sbatch.html) and a KubeRay ``RayJob`` (YAML read, its cluster's shape and Ray
version checked, its entrypoint parsed by rlm-lab's parser; https://ray-project.github.io/kuberay/reference/api/).
The chapter-4 lines run on this machine too, for real, as ``rlm-lab parallel --nnodes 2`` (torchrun agents on
loopback, :mod:`rlm_lab.parallel.nodes`), and the chapter-5 lines as ``rlm-lab place --nodes 2`` (a local Ray
cluster of a head and 2 worker nodes, :mod:`rlm_lab.placement.session`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import click
import yaml

from .cli import build_parser
from .compat import installed
from .errors import RlmLabError
from .parallel.cli import layout_from_args
from .placement.session import ray_env

ENTRY = "rlm_lab.cli"  # the module every launch runs (`-m rlm_lab.cli COMMAND ...`)

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
    return ["torchrun", "--standalone", f"--nproc-per-node={n}", "-m", ENTRY, "parallel", *layout,
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
    """``name`` exists and runs under ``python -m``: the package's one entry point, :data:`ENTRY` (no other
    module of it has a ``__main__`` block; tests/test_structure.py)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise RlmLabError(f"module {name} does not exist")
    if name != ENTRY:
        raise RlmLabError(f"module {name} does nothing under `python -m` (no __main__ block; the entry point is "
                          f"{ENTRY}: -m {ENTRY} COMMAND ...)")


def _script_args(module: str, args: list[str], gpus: int) -> None:
    """The launched program's own parser accepts ``args`` (and a parallel layout fills the GPUs)."""
    argv = args
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
        layout = layout_from_args(parsed)
        if layout.world != gpus:
            raise RlmLabError(f"layout {layout.name} uses {layout.world} processes, not the {gpus} GPUs")


def _parse_launcher(name: str, argv: list[str]):
    """``(parsed launcher args, total processes, module, module args)`` from the launcher's own parser."""
    if argv[0] == "torchrun":
        from torch.distributed.run import get_args_parser

        a = get_args_parser().parse_args(argv[1:])
        nnodes = int(str(a.nnodes).split(":")[-1])
        nproc, module, rest = int(a.nproc_per_node) * nnodes, a.training_script, a.training_script_args
    elif argv[:2] == ["accelerate", "launch"]:
        from accelerate.commands.launch import launch_command_parser

        a = launch_command_parser().parse_args(argv[2:])
        nproc, module, rest = int(a.num_processes), a.training_script, a.training_script_args
    else:
        raise RlmLabError(f"{name}: unknown launcher {argv[0]}")
    if not a.module:
        raise RlmLabError(f"{name}: {argv[0]} runs a script, not a module")
    return a, nproc, module, list(rest)


def _accelerate_config(name: str, a) -> None:
    """The accelerate config exists, is a multi-GPU one, and its DeepSpeed stage is the one the name says."""
    from accelerate.commands.config.config_args import load_config_from_file

    cfg_path = REPO / a.config_file
    if not cfg_path.exists():
        raise RlmLabError(f"{name}: config {a.config_file} does not exist")
    cfg = load_config_from_file(str(cfg_path))
    if cfg.use_cpu or str(cfg.distributed_type).split(".")[-1] == "NO":
        raise RlmLabError(f"{name}: {a.config_file} is not a multi-GPU config")
    ds = (cfg.deepspeed_config or {}).get("deepspeed_config_file")
    if ds:
        stage = json.loads((REPO / ds).read_text())["zero_optimization"]["stage"]
        if f"zero{stage}" not in name:
            raise RlmLabError(f"{name}: {ds} is ZeRO stage {stage}")


def check(launch: Launch, gpus: int) -> list[str]:
    """Validate ``launch`` for ``gpus`` GPUs by a dry run of its command line; returns the argv."""
    argv = launch.argv(gpus)
    a, nproc, module, rest = _parse_launcher(launch.name, argv)
    if argv[0] == "accelerate":
        _accelerate_config(launch.name, a)
    if nproc != gpus:
        raise RlmLabError(f"{launch.name}: {nproc} processes for {gpus} GPUs")
    _runnable_module(module)
    _script_args(module, rest, gpus)
    return argv


# ---- several machines ---------------------------------------------------------------------------------------
RDZV_PORT, MAIN_PORT, RAY_PORT = 29400, 29500, 6379  # torchrun's c10d default, accelerate's, Ray's GCS default
EXAMPLE_HEAD = "10.0.0.1"  # what the check puts for $HEAD_ADDR (a documentation-style private address)


@dataclass(frozen=True)
class ClusterLaunch:
    name: str
    chapter: int
    what: str
    text: Callable[[int, int], str]  # (nodes, gpus per node) -> what the reader runs
    check: Callable[["ClusterLaunch", int, int], None]


def _shell(argv: list[str]) -> str:
    """``argv`` as one shell line; a word holding a ``$VARIABLE`` is left for the shell to expand (unquoted)."""
    return " ".join(a if "$" in a else shlex.quote(a) for a in argv)


def _torchrun_nodes(n: int, g: int, *layout: str, rank: str = "$NODE_RANK", head: str = "$HEAD_ADDR",
                    rdzv_id: str = "rlm-lab") -> str:
    return _shell(_torchrun_argv(n, g, *layout, rank=rank, head=head, rdzv_id=rdzv_id))


def _torchrun_argv(n: int, g: int, *layout: str, rank: str, head: str, rdzv_id: str) -> list[str]:
    return ["torchrun", f"--nnodes={n}", f"--node-rank={rank}", f"--nproc-per-node={g}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={head}:{RDZV_PORT}", f"--rdzv-id={rdzv_id}",
            "-m", ENTRY, "parallel", *layout, "--size", "gpu", "--model", "small"]


def _each_machine(n: int, g: int, line: str) -> str:
    """``line`` with the comment that says where it runs: on each of the ``n`` machines."""
    return (f"# {n} machines of {g} GPUs: run this on each of them ($NODE_RANK 0 to {n - 1}; machine 0 is "
            f"$HEAD_ADDR); {n * g} processes in all\n{line}")


def _machine_lines(text: str, rank: int, **more) -> list[list[str]]:
    """The command lines of ``text`` as machine ``rank`` runs them: variables filled in, one argv per line."""
    values = {"NODE_RANK": str(rank), "HEAD_ADDR": EXAMPLE_HEAD, **more}
    for k, v in values.items():
        text = text.replace("$" + k, v).replace("${" + k + "}", v)
    return [shlex.split(ln) for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _check_torchrun_line(name: str, argv: list[str], n: int, g: int, rank: int) -> None:
    a, nproc, module, rest = _parse_launcher(name, argv)
    if (int(a.nnodes), int(a.node_rank), int(a.nproc_per_node)) != (n, rank, g):
        raise RlmLabError(f"{name}: --nnodes {a.nnodes} --node-rank {a.node_rank} --nproc-per-node "
                          f"{a.nproc_per_node}, not {n} nodes, rank {rank}, {g} GPUs each")
    if a.rdzv_backend != "c10d" or not a.rdzv_endpoint.startswith(EXAMPLE_HEAD + ":"):
        raise RlmLabError(f"{name}: not a c10d rendezvous at the head ({a.rdzv_backend} {a.rdzv_endpoint})")
    _runnable_module(module)
    _script_args(module, rest, n * g)


def _check_torchrun(launch: ClusterLaunch, n: int, g: int) -> None:
    for rank in range(n):
        (argv,) = _machine_lines(launch.text(n, g), rank)
        _check_torchrun_line(launch.name, argv, n, g, rank)


def _accelerate_nodes(n: int, g: int) -> str:
    return _each_machine(n, g, _shell(["accelerate", "launch", "--config_file", "configs/accelerate/fsdp2.yaml",
                       "--num_machines", str(n), "--machine_rank", "$NODE_RANK", "--main_process_ip", "$HEAD_ADDR",
                       "--main_process_port", str(MAIN_PORT), "--num_processes", str(n * g),
                       "-m", "rlm_lab.cli", "train", "--algo", "grpo", "--size", "gpu"]))


def _check_accelerate(launch: ClusterLaunch, n: int, g: int) -> None:
    for rank in range(n):
        (argv,) = _machine_lines(launch.text(n, g), rank)
        a, nproc, module, rest = _parse_launcher(launch.name, argv)
        _accelerate_config(launch.name, a)
        if (int(a.num_machines), int(a.machine_rank), nproc) != (n, rank, n * g):
            raise RlmLabError(f"{launch.name}: --num_machines {a.num_machines} --machine_rank {a.machine_rank} "
                              f"--num_processes {nproc}, not {n} machines, rank {rank}, {n * g} processes in all")
        if a.main_process_ip != EXAMPLE_HEAD:
            raise RlmLabError(f"{launch.name}: --main_process_ip is not the head's address")
        _runnable_module(module)
        _script_args(module, rest, n * g)


SLURM_JOB = "4242"  # what the check puts for $SLURM_JOB_ID


def _slurm(n: int, g: int) -> str:
    """A Slurm batch script: one task per machine, each a torchrun agent of G processes (c10d on the first).

    The torchrun line is quoted for ``bash -c`` so that each task expands ``$SLURM_PROCID`` itself (0 .. N-1;
    the batch shell would expand it once, for all); the rendezvous id is the job's, so two jobs never share one."""
    inner = shlex.join(_torchrun_argv(n, g, "--dp", str(n * g), "--zero", "3", rank="RANK_", head="HEAD_",
                                      rdzv_id="JOB_")).replace("RANK_", "$SLURM_PROCID").replace(
        "HEAD_", "$HEAD_ADDR").replace("JOB_", "$SLURM_JOB_ID")
    return "\n".join([
        "#!/bin/bash",
        f"# {n} machines of {g} GPUs (sbatch this script): one task per machine, each a torchrun agent of {g} "
        f"processes; {n * g} in all",
        "#SBATCH --job-name=rlm-lab-ch04",
        f"#SBATCH --nodes={n}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={g}",
        'export HEAD_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "srun bash -c " + shlex.quote("exec " + inner),
    ]) + "\n"


def _slurm_tasks(text: str, n: int) -> list[list[str]]:
    """What each of Slurm's ``n`` tasks would execute: the script run by bash with stand-ins for ``scontrol``
    (the node list), ``srun`` (each task its own ``SLURM_PROCID``, as Slurm sets it,
    https://slurm.schedmd.com/srun.html#OPT_SLURM_PROCID) and ``torchrun`` (prints its arguments, one per line)."""
    with tempfile.TemporaryDirectory(prefix="rlm_slurm_") as d:
        stand_ins = {
            "scontrol": 'for i in $(seq 0 $((SLURM_NNODES - 1))); do echo node$i; done',
            "srun": 'for i in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_PROCID=$i SLURM_NODEID=$i "$@" || exit 1; '
                    'echo "-- task end"; done',
            "torchrun": 'printf "%s\\n" torchrun "$@"',
        }
        for name, body in stand_ins.items():
            path = Path(d) / name
            path.write_text(f"#!/bin/bash\n{body}\n")
            path.chmod(0o755)
        env = {"PATH": f"{d}:{os.environ.get('PATH', '/usr/bin:/bin')}", "SLURM_NNODES": str(n),
               "SLURM_JOB_ID": SLURM_JOB, "SLURM_JOB_NODELIST": f"node[0-{n - 1}]",
               "SLURM_NODEID": "0", "SLURM_PROCID": "0"}  # the batch shell is task 0 on the first node
        run = subprocess.run(["bash", "-s"], input=text, text=True, capture_output=True, env=env, timeout=60)
    if run.returncode != 0:
        raise RlmLabError(f"the batch script failed under stand-in srun: {(run.stderr.strip().splitlines() or ['?'])[-1]}")
    tasks, cur = [], []
    for ln in run.stdout.splitlines():
        if ln == "-- task end":
            tasks.append(cur)
            cur = []
        else:
            cur.append(ln)
    return tasks


def _check_slurm(launch: ClusterLaunch, n: int, g: int) -> None:
    text = launch.text(n, g)
    syntax = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    if syntax.returncode != 0:
        raise RlmLabError(f"{launch.name}: bash -n: {syntax.stderr.strip().splitlines()[-1]}")
    directives = dict(ln[len("#SBATCH "):].split("=", 1) for ln in text.splitlines() if ln.startswith("#SBATCH "))
    want = {"--nodes": str(n), "--ntasks-per-node": "1", "--gpus-per-node": str(g)}
    if any(directives.get(k) != v for k, v in want.items()):
        raise RlmLabError(f"{launch.name}: #SBATCH {directives} is not {want}")
    if len([ln for ln in text.splitlines() if ln.startswith("srun ")]) != 1:
        raise RlmLabError(f"{launch.name}: no single srun line")
    try:
        tasks = _slurm_tasks(text, n)
    except RlmLabError as e:
        raise RlmLabError(f"{launch.name}: {e}") from None
    if len(tasks) != n:
        raise RlmLabError(f"{launch.name}: {len(tasks)} task(s) ran torchrun, not {n}")
    for rank, argv in enumerate(tasks):
        argv = [a.replace("node0", EXAMPLE_HEAD) for a in argv]
        _check_torchrun_line(launch.name, argv, n, g, rank)
        a, *_ = _parse_launcher(launch.name, argv)
        if a.rdzv_id != SLURM_JOB:
            raise RlmLabError(f"{launch.name}: rendezvous id {a.rdzv_id!r} is not the job's ($SLURM_JOB_ID): two "
                              f"jobs on one head would share a rendezvous")


def _place_entrypoint(n: int) -> list[str]:
    return ["python", "-m", "rlm_lab.cli", "place", "--nodes", str(n), "--size", "gpu"]


def _ray_job(n: int, g: int) -> str:
    """A Ray cluster of ``n`` machines started by hand (machine 0 the head: it holds GPUs too and runs the job's
    driver), token authentication on (https://docs.ray.io/en/latest/ray-security/token-auth.html), and chapter 5
    submitted as a Ray job to the head's job server (``ray[default]``, the ``cluster`` extra)."""
    auth = _shell(["export", "RAY_AUTH_MODE=token"])
    return "\n".join([
        f"# {n} machines of {g} GPUs; machine 0 is the head ($HEAD_ADDR): it holds {g} GPUs too and runs the job's driver",
        "# every machine: a clone of this repository at one commit, and in it (CUDA torch, Ray " + _ray_version()
        + " with its job server):",
        "#   pip install -c constraints.txt -r requirements.txt '.[cluster]'",
        "# every machine: Ray's ports (6379 and each node's) reachable from the other machines only (a firewall)",
        "# machine 0: make the cluster's token (written to ~/.ray/auth_token, not printed) and start the head",
        auth,
        _shell(["ray", "get-auth-token", "--generate"]) + " >/dev/null",
        _shell(["ray", "start", "--head", f"--port={RAY_PORT}", f"--num-gpus={g}"]),
        f"# {'machine 1' if n == 2 else f'machines 1 to {n - 1}'}: copy ~/.ray/auth_token from the head (scp: it is the cluster's password), then join",
        auth,
        _shell(["ray", "start", f"--address=$HEAD_ADDR:{RAY_PORT}", f"--num-gpus={g}"]),
        f"# machine 0, once `ray status` lists the {n} machines: submit chapter 5 (the job server answers on "
        "127.0.0.1 only; the job is given the token)",
        _shell(["ray", "job", "submit", "--address=http://127.0.0.1:8265", "--working-dir=.", "--",
                *_place_entrypoint(n)]),
    ])


def _ray_version() -> str:
    return installed("ray")


def _check_entrypoint(name: str, argv: list[str], n: int) -> None:
    if argv[:3] != ["python", "-m", "rlm_lab.cli"]:
        raise RlmLabError(f"{name}: the entrypoint is not python -m rlm_lab.cli: {shlex.join(argv)}")
    _runnable_module("rlm_lab.cli")
    _script_args("rlm_lab.cli", argv[3:], 0)
    if argv[3] == "place":
        nodes = int(argv[argv.index("--nodes") + 1]) if "--nodes" in argv else 1
        if nodes != n:
            raise RlmLabError(f"{name}: the entrypoint spreads over {nodes} node(s), the cluster has {n}")


def _check_ray_job(launch: ClusterLaunch, n: int, g: int) -> None:
    ray_env()  # before Ray is imported: a local Ray started later in this process needs its settings at import
    from ray.dashboard.modules.job.cli import submit
    from ray.scripts.scripts import get_auth_token, start

    text = launch.text(n, g)
    if f"# {n} machines" not in text:
        raise RlmLabError(f"{launch.name}: does not say how many machines it needs ({n})")
    lines = [[a for a in argv if not a.startswith(">")] for argv in _machine_lines(text, 1)]
    steps = []  # (kind, params) in order
    try:
        for argv in lines:
            if argv[:2] == ["ray", "start"]:
                steps.append(("start", start.make_context("start", argv[2:]).params))
            elif argv[:3] == ["ray", "job", "submit"]:
                steps.append(("submit", submit.make_context("submit", argv[3:]).params))
            elif argv[:2] == ["ray", "get-auth-token"]:
                steps.append(("token", get_auth_token.make_context("get-auth-token", argv[2:]).params))
            elif argv[:1] == ["export"]:
                steps.append(("export", dict(a.split("=", 1) for a in argv[1:])))
            else:
                raise RlmLabError(f"{launch.name}: an unknown line {shlex.join(argv)}")
    except click.ClickException as e:
        raise RlmLabError(f"{launch.name}: Ray's CLI refuses it: {e.format_message()}") from None
    starts = [p for k, p in steps if k == "start"]
    heads = [p for p in starts if p["head"]]
    workers = [p for p in starts if not p["head"]]
    jobs = [p for k, p in steps if k == "submit"]
    if len(heads) != 1 or len(workers) != 1 or len(jobs) != 1:
        raise RlmLabError(f"{launch.name}: needs one head line, one worker line and one job submission")
    if heads[0]["num_gpus"] != g or heads[0]["num_cpus"] == 0:
        raise RlmLabError(f"{launch.name}: the head is machine 0 of {n}: it must hold its {g} GPUs (and CPUs)")
    if workers[0]["num_gpus"] != g or workers[0]["address"] != f"{EXAMPLE_HEAD}:{heads[0]['port']}":
        raise RlmLabError(f"{launch.name}: a worker must join the head's port with {g} GPUs")
    if not heads[0]["dashboard_host"].startswith("127."):
        raise RlmLabError(f"{launch.name}: the head's job server listens on {heads[0]['dashboard_host']}")
    # token authentication: exported before each machine's `ray start`, the head's token made before the head starts
    mode = None
    for kind, p in steps:
        if kind == "export":
            mode = p.get("RAY_AUTH_MODE", mode)
        elif kind == "start":
            if mode != "token":
                raise RlmLabError(f"{launch.name}: a `ray start` without RAY_AUTH_MODE=token: anyone on the "
                                  f"network could join or run code")
            if p["head"] and not any(k == "token" and q["generate"] for k, q in steps[:steps.index((kind, p))]):
                raise RlmLabError(f"{launch.name}: the head starts before its token exists (ray get-auth-token --generate)")
            mode = None  # the next machine's lines export it again
        elif kind == "submit":
            mode = "token"  # on the head, where it was exported
    _check_entrypoint(launch.name, list(jobs[0]["entrypoint"]), n)


RAY_IMAGE = "rayproject/ray:{version}-py311-gpu"  # Ray's published images (https://hub.docker.com/r/rayproject/ray)
BOOK_IMAGE = "rlm-lab:ray{version}-gpu"  # that image with this repository installed (the text says how to build it)


def _rayjob(n: int, g: int) -> str:
    """A KubeRay ``RayJob``: a cluster of a head (no CPUs) and N GPU workers, made for the job and removed after."""
    image = BOOK_IMAGE.format(version=installed("ray"))
    manifest = {
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rlm-lab-ch05"},
        "spec": {
            "entrypoint": shlex.join(_place_entrypoint(n)),
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "rayVersion": installed("ray"),
                "authOptions": {"mode": "token"},  # KubeRay >= 1.5.1 makes the token, a Secret, and sets it everywhere
                "headGroupSpec": {"rayStartParams": {"num-cpus": "0"},
                                  "template": {"spec": {"containers": [{"name": "ray-head", "image": image}]}}},
                "workerGroupSpecs": [{
                    "groupName": "gpu", "replicas": n, "minReplicas": n, "maxReplicas": n, "rayStartParams": {},
                    "template": {"spec": {"containers": [{
                        "name": "ray-worker", "image": image,
                        "resources": {"limits": {"nvidia.com/gpu": g}, "requests": {"nvidia.com/gpu": g}}}]}}}],
            }}}
    build = (f"# {n} GPU machines in the Kubernetes cluster: {n} worker pods of {g} GPUs (one per machine) and a head pod "
             "without GPUs or CPU tasks (it may share a machine); KubeRay >= 1.5.1 (authOptions: the token)\n"
             f"# image {image}: FROM {RAY_IMAGE.format(version=installed('ray'))}, then COPY this repository "
             "and pip install -r requirements.txt -e . (CUDA torch)\n")
    return build + yaml.safe_dump(manifest, sort_keys=False)


def _check_rayjob(launch: ClusterLaunch, n: int, g: int) -> None:
    m = yaml.safe_load(launch.text(n, g))
    try:
        spec, cluster = m["spec"], m["spec"]["rayClusterSpec"]
        workers = cluster["workerGroupSpecs"]
        head = cluster["headGroupSpec"]
        gpus = [c["resources"]["limits"]["nvidia.com/gpu"] for w in workers for c in w["template"]["spec"]["containers"]]
        ok = (m["apiVersion"] == "ray.io/v1" and m["kind"] == "RayJob" and len(workers) == 1
              and workers[0]["replicas"] == workers[0]["minReplicas"] == workers[0]["maxReplicas"] == n
              and gpus == [g] and head["rayStartParams"].get("num-cpus") == "0" and head["template"]["spec"]["containers"])
        auth = (cluster.get("authOptions") or {}).get("mode")
    except (KeyError, TypeError, IndexError) as e:
        raise RlmLabError(f"{launch.name}: the RayJob lacks {e}") from None
    if not ok:
        raise RlmLabError(f"{launch.name}: not a RayJob of a head without CPUs and {n} workers of {g} GPUs")
    if auth != "token":
        raise RlmLabError(f"{launch.name}: no token authentication (rayClusterSpec.authOptions.mode: token)")
    if cluster["rayVersion"] != installed("ray"):
        raise RlmLabError(f"{launch.name}: rayVersion {cluster['rayVersion']} is not the Ray this book pins ({installed('ray')})")
    _check_entrypoint(launch.name, shlex.split(spec["entrypoint"]), n)


CLUSTER_LAUNCHES: tuple[ClusterLaunch, ...] = (
    ClusterLaunch("ch04-torchrun-dp-nodes", 4, "DDP over every GPU of every machine (run on each machine)",
                  lambda n, g: _each_machine(n, g, _torchrun_nodes(n, g, "--dp", str(n * g))), _check_torchrun),
    ClusterLaunch("ch04-torchrun-fsdp2-nodes", 4, "FSDP2 = ZeRO-3 over every GPU (run on each machine)",
                  lambda n, g: _each_machine(n, g, _torchrun_nodes(n, g, "--dp", str(n * g), "--zero", "3")), _check_torchrun),
    ClusterLaunch("ch04-torchrun-tp-nodes", 4, "tensor parallel over 2 GPUs x data parallel over the rest (each machine)",
                  lambda n, g: _each_machine(n, g, _torchrun_nodes(n, g, "--dp", str(n * g // 2), "--tp", "2")), _check_torchrun),
    ClusterLaunch("ch04-accelerate-fsdp2-nodes", 4, "GRPO through TRL, FSDP2 over every machine (run on each machine)",
                  _accelerate_nodes, _check_accelerate),
    ClusterLaunch("ch04-slurm-fsdp2", 4, "a Slurm batch script: one torchrun agent per machine (sbatch it)",
                  _slurm, _check_slurm),
    ClusterLaunch("ch05-ray-job", 5, "a Ray cluster by hand (machine 0 the head), then chapter 5's placements as a "
                  "Ray job, one set per machine",
                  _ray_job, _check_ray_job),
    ClusterLaunch("ch05-kuberay-rayjob", 5, "the same on Kubernetes: a KubeRay RayJob (kubectl apply -f it)",
                  _rayjob, _check_rayjob),
)


def check_cluster(launch: ClusterLaunch, nodes: int, gpus_per_node: int) -> str:
    """Validate ``launch`` for ``nodes`` machines of ``gpus_per_node`` GPUs; returns its text."""
    launch.check(launch, nodes, gpus_per_node)
    return launch.text(nodes, gpus_per_node)


def register(subparsers) -> None:
    p = subparsers.add_parser("launches", help="the book's multi-GPU command lines, checked by a dry run",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, help=f"GPUs on the machine (an even number, 2 to {MAX_GPUS})")
    p.add_argument("--nodes", type=int, help="machines of a cluster (2 or more; with --gpus-per-node)")
    p.add_argument("--gpus-per-node", type=int, help=f"GPUs on each machine of the cluster (an even number, 2 to {MAX_GPUS})")
    p.add_argument("--only", help="one launch: " + ", ".join(x.name for x in (*LAUNCHES, *CLUSTER_LAUNCHES)))
    p.set_defaults(func=_run)


MAX_NODES = 4096  # a bound on what is printed, far above any cluster the book's models need


def _check_gpus(flag: str, gpus: int) -> None:
    if gpus < 2 or gpus % 2:
        raise RlmLabError(f"{flag} must be an even number >= 2, got {gpus}")
    if gpus > MAX_GPUS:
        raise RlmLabError(f"{flag} {gpus}: these are one machine's launches and a machine holds at most "
                          f"{MAX_GPUS} GPUs; give the GPUs of one machine (several machines: --nodes N "
                          f"--gpus-per-node G)")


def _chosen(pool, only: str | None) -> list:
    """The launches of ``pool`` that ``--only`` names (all without it); an unknown name is one error line."""
    chosen = [x for x in pool if only in (None, x.name)]
    if not chosen:
        raise RlmLabError(f"unknown launch {only!r}; known: {', '.join(x.name for x in pool)}")
    return chosen


def _run(args) -> int:
    if args.nodes is None and args.gpus_per_node is None:
        if args.gpus is None:
            raise RlmLabError("give --gpus N (one machine) or --nodes N --gpus-per-node G (a cluster)")
        _check_gpus("--gpus", args.gpus)
        for launch in _chosen(LAUNCHES, args.only):
            print(f"# {launch.name}: {launch.what} (chapter {launch.chapter}) - checked\n"
                  f"{shlex.join(check(launch, args.gpus))}")
        return 0
    if args.gpus is not None:
        raise RlmLabError("--gpus is one machine's count; with --nodes give --gpus-per-node instead")
    if args.nodes is None or args.gpus_per_node is None:
        raise RlmLabError("a cluster needs both --nodes N and --gpus-per-node G")
    if not 2 <= args.nodes <= MAX_NODES:
        raise RlmLabError(f"--nodes must be 2 to {MAX_NODES} (one machine: --gpus), got {args.nodes}")
    _check_gpus("--gpus-per-node", args.gpus_per_node)
    for launch in _chosen(CLUSTER_LAUNCHES, args.only):
        print(f"# {launch.name}: {launch.what} (chapter {launch.chapter}) - checked for {args.nodes} machines "
              f"x {args.gpus_per_node} GPUs\n{check_cluster(launch, args.nodes, args.gpus_per_node).rstrip()}")
    return 0
