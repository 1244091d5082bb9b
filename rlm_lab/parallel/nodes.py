"""Several torchrun agents on one machine: a multi-node launch (``--nnodes N``, one agent per node rank, a c10d
rendezvous) run for real on loopback, for ``rlm-lab parallel --nnodes N``.

    rlm-lab parallel --nnodes 2 --dp 2 --size smoke       # 2 agents (node ranks 0 and 1), 1 rank each

What each agent runs is the multi-node line a reader runs on every machine of a cluster (``rlm-lab launches
--nodes N``), with the rendezvous endpoint on 127.0.0.1::

    torchrun --nnodes 2 --node-rank R --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:P \\
             --rdzv-id ID -m rlm_lab.cli parallel --dp 2 ...

(https://pytorch.org/docs/stable/elastic/run.html): node rank 0 hosts the rendezvous store (``--rdzv-conf
is_host=1``, the others ``is_host=0``, which torch otherwise infers from the host name: on one machine every
agent would match), the agents agree on the world and torch's worker ranks, and the workers' process group
rendezvouses on the store that agent 0 shares with them. Nothing listens beyond loopback: ``--local-addr
127.0.0.1`` and ``GLOO_SOCKET_IFNAME=lo`` keep the agents' and the workers' addresses there, and the agents
run through :func:`main` (``python -m rlm_lab.cli _torchrun-agent <torchrun arguments>``, which is
``torch.distributed.run.main``) with their two stores bound to the address they are given: torch's own
``TCPStore`` server binds every interface (:func:`rlm_lab.parallel.launch.bound_store`).

The launching process owns the run record (opened before any agent starts) and supervises the agents: rank 0
writes its results as a record of its own in a scratch folder (the same code path as under a reader's
torchrun), from which the launcher completes the run's record. A failure is one line naming the node:
an agent killed by a signal ("node 1 (torchrun agent, node rank 1) was killed by SIGKILL"), or the first error a
node's ranks reported; the other agents are stopped and no process is left (every worker dies with its
agent, :func:`rlm_lab.host.die_with_parent`, and the launcher kills what it saw of each agent's
tree). Ctrl-C / SIGTERM stop the agents the same way and leave the record ``interrupted``.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from ..compat.torch import torchrun_store_sites
from ..errors import RlmLabError
from ..host import alive, descendants, die_with_parent, free_port, still_alive
from ..record import RunRecord
from .launch import bound_store

GRACE_S = 5.0  # after the first node fails, how long the others get to report before they are killed


def check_nnodes(nnodes, world: int) -> int:
    """``nnodes`` agents can share a layout of ``world`` ranks: at least one each, the same number each."""
    if isinstance(nnodes, bool) or not isinstance(nnodes, int) or nnodes < 1:
        raise RlmLabError(f"--nnodes must be >= 1, got {nnodes}")
    if nnodes == 1:  # one agent runs any layout (a bad degree is the layout's own check to name)
        return nnodes
    if nnodes > world:
        raise RlmLabError(f"--nnodes {nnodes}: the layout has {world} rank(s), and every node runs at least one; "
                          f"give a layout of {nnodes} ranks or more (e.g. --dp {nnodes})")
    if world % nnodes:
        raise RlmLabError(f"--nnodes {nnodes}: the layout's {world} ranks do not split evenly over {nnodes} nodes "
                          f"(torchrun runs the same --nproc-per-node on every node)")
    return nnodes


def agent_argv(nnodes: int, rank: int, nproc: int, port: int, run_id: str, module_args: list[str]) -> list[str]:
    """The torchrun arguments of node ``rank`` of a c10d rendezvous on 127.0.0.1:``port``."""
    return ["--nnodes", str(nnodes), "--node-rank", str(rank), "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
            "--rdzv-conf", f"is_host={int(rank == 0)}", "--local-addr", "127.0.0.1", "--max-restarts", "0",
            "-m", "rlm_lab.cli", "parallel", *module_args]


SCRATCH_ENV, DRIVER_ENV = "RLM_NODES_SCRATCH", "RLM_NODES_DRIVER"


class Agents:
    """``nnodes`` torchrun agents as child processes, each in its own process group, each logging to a file."""

    def __init__(self, nnodes: int, nproc: int, module_args: list[str], scratch: Path):
        self.port, self.run_id, self.scratch = free_port(), uuid.uuid4().hex[:12], scratch
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join([package_root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
        self.procs, self.logs, self.seen, self.stopped = [], [], set(), set()
        driver = os.getpid()
        # a SIGKILLed driver cannot remove its scratch folder: its agents (SIGTERMed by the kernel when it dies) do
        env[SCRATCH_ENV], env[DRIVER_ENV] = str(scratch), str(driver)
        for rank in range(nnodes):
            log = (scratch / f"node{rank}.log").open("wb")
            argv = [sys.executable, "-m", "rlm_lab.cli", "_torchrun-agent",
                    *agent_argv(nnodes, rank, nproc, self.port, self.run_id, module_args)]
            self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               env=env, process_group=0, preexec_fn=lambda: _die_with(driver)))
            self.logs.append(scratch / f"node{rank}.log")

    def watch(self) -> None:
        """Remember every process below each agent (its workers leave its tree when it dies), and which nodes have
        an agent or a worker stopped (SIGSTOP, state T): the other nodes then time out, and their error names the
        node they waited for from their own side, not the stopped one."""
        for rank, p in enumerate(self.procs):
            tree = {p.pid, *descendants(p.pid)}
            self.seen |= tree
            if p.poll() is None and any(_state(pid) in ("T", "t") for pid in tree):
                self.stopped.add(rank)

    def wait(self, deadline_s: float) -> list[int | None]:
        """Wait until every agent exited, or one failed and the others had :data:`GRACE_S` to follow;
        returns each agent's exit status (None: still running, killed after)."""
        failed_at, deadline = None, time.monotonic() + deadline_s
        while True:
            self.watch()
            codes = [p.poll() for p in self.procs]
            if all(c is not None for c in codes):
                return codes
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = time.monotonic()
            now = time.monotonic()
            if (failed_at is not None and now - failed_at > GRACE_S) or now > deadline:
                return codes
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGKILL every agent's process group and every process seen below an agent; reap the agents."""
        self.watch()
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
        for pid in sorted(self.seen):
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def leftover(self, wait_s: float = 5.0) -> list[int]:
        return still_alive(self.seen, wait_s)

    def cause(self, codes: list[int | None]) -> str:
        """One line: which node failed, and how (a stopped node first, then a killed agent: the others' errors
        follow from it)."""
        if self.stopped:
            rank = min(self.stopped)
            return (f"node {rank} (torchrun agent, node rank {rank}) was stopped (SIGSTOP: its agent or a worker in "
                    f"state T) and never answered; the other nodes timed out waiting for it and were stopped")
        for rank, code in enumerate(codes):
            if code is not None and code < 0:
                try:
                    name = signal.Signals(-code).name
                except ValueError:
                    name = f"signal {-code}"
                return f"node {rank} (torchrun agent, node rank {rank}) was killed by {name}; the other nodes were stopped"
        for rank, code in enumerate(codes):
            said = _error_line(self.logs[rank])
            if code not in (None, 0) and said:
                return f"node {rank}: {said}; the other nodes were stopped"
        for rank, code in enumerate(codes):
            if code not in (None, 0):
                return (f"node {rank} (torchrun agent) exited with status {code}: {_last_line(self.logs[rank])}; "
                        f"the other nodes were stopped")
        stuck = [r for r, c in enumerate(codes) if c is None]
        return f"node(s) {', '.join(map(str, stuck))} did not finish in time; the nodes were stopped"


def _state(pid: int) -> str:
    """A process's state letter from /proc (R, S, T, Z, ...; '' when it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _die_with(driver: int) -> None:
    die_with_parent(signal.SIGTERM, parent=driver)  # torchrun stops its workers on SIGTERM


def _error_line(log: Path) -> str | None:
    """The first ``rlm-lab: error:`` line a node's ranks printed (rank 0 of the world prints the run's)."""
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("rlm-lab: error:"):
            return line[len("rlm-lab: error:"):].strip()[:300]
    return None


def _last_line(log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def run_nodes(nnodes: int, nproc: int, module_args: list[str], scratch: Path, timeout_s: float) -> dict:
    """Run ``python -m rlm_lab.cli parallel <module_args>`` under ``nnodes`` torchrun agents of ``nproc`` ranks
    each; return rank 0's results (its record, written under ``scratch/rank0``) with where the ranks ran."""
    inner = scratch / "rank0"
    agents = Agents(nnodes, nproc, [*module_args, "--out", str(inner)], scratch)
    try:
        codes = agents.wait(timeout_s)
    except BaseException:  # Ctrl-C or SIGTERM in the launcher: no agent or worker outlives it
        agents.stop()
        raise
    agents.stop()
    left = agents.leftover()
    if left:
        raise RlmLabError(f"processes {left} of the torchrun agents are still alive after the run")
    try:
        rec = RunRecord.load(inner)  # rank 0 completed it: the run ran (its checks may still have failed)
    except RlmLabError:
        raise RlmLabError(agents.cause(codes)) from None
    # the run's own results, without what write_record adds (the launcher's record adds them again)
    added = ("predicted_comm", "comm_mismatches", "comm_not_predicted", "oversubscribed", "load_average")
    res = {k: v for k, v in rec.results.items() if k not in added}
    res["nodes"] = {"nnodes": nnodes, "nproc_per_node": nproc, "rendezvous": f"c10d 127.0.0.1:{agents.port}",
                    "agent_exit_codes": codes}
    return res


def _tcp_store(host_name, port, world_size=None, is_master=False, timeout=_dt.timedelta(seconds=300), **kwargs):
    """torch's ``TCPStore(...)`` as the c10d rendezvous calls it, its server bound to ``host_name`` alone."""
    return bound_store(host_name, port, world_size, is_master, timeout.total_seconds(), **kwargs)


def _store_server(handler, master_addr, master_port):
    """``DynamicRendezvousHandler._create_tcp_store_server``: the store agent 0 shares with the workers, bound
    to this agent's ``--local-addr``."""
    return bound_store(master_addr, master_port, None, True, 300.0, multi_tenant=True)


def main(argv: list[str] | None = None) -> None:
    """``torchrun`` (``torch.distributed.run.main``) with its rendezvous stores bound to the address they are
    given (checked adapters: :func:`rlm_lab.compat.torch.torchrun_store_sites`)."""
    from torch.distributed.run import main as torchrun

    c10d, handler = torchrun_store_sites()
    c10d.TCPStore = _tcp_store
    handler._create_tcp_store_server = _store_server
    try:
        torchrun(sys.argv[1:] if argv is None else argv)
    finally:
        _remove_orphaned_scratch()


def _remove_orphaned_scratch() -> None:
    """The finalizer of a SIGKILLed driver: when this agent ends and the driver that started it is gone (this
    process was handed to another parent), remove the driver's scratch folder (``.scratch-nodes-*`` in --out),
    which nothing else would. A driver that is alive removes its own when its record ends."""
    scratch, driver = os.environ.get(SCRATCH_ENV), os.environ.get(DRIVER_ENV)
    if not scratch or not driver or os.getppid() == int(driver):
        return
    if Path(scratch).name.startswith(".scratch-nodes-"):   # only ever the folder the driver made for its nodes
        shutil.rmtree(scratch, ignore_errors=True)
