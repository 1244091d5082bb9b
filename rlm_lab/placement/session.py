"""A Ray connection for the placement runtime: a local Ray started as child processes (one node, or a
cluster of several nodes on this machine), or a cluster joined at an address, and the /proc scans that check
no process of it is left after a run.

A local cluster of ``nodes`` > 1 is what a real one is, on loopback: a head node started with ``ray start
--head --num-cpus 0`` (the driver's node; it holds the GCS and runs no task, as Ray advises for a cluster's
head, https://docs.ray.io/en/latest/cluster/vms/user-guides/large-cluster-best-practices.html) and ``nodes``
worker nodes, each ``ray start --address <head>`` with its own share of the CPUs and its own name
(``rlm-node-1`` ...), each a raylet with its own object store. Placements then spread their resource sets over
the nodes (``STRICT_SPREAD``, :mod:`rlm_lab.placement.runtime`), so actors talk across nodes exactly as they
would across machines: through the head's GCS, the nodes' object managers and a collective group over TCP.

    rlm-lab place --nodes 2 --size smoke      # a local head + 2 worker nodes of 1 CPU each
    RAY_ADDRESS=10.0.0.1:6379 rlm-lab place --nodes 2    # a real cluster: each resource set on its own node

Ray: arXiv 1712.05889; ``ray start`` / ``ray.init``: https://docs.ray.io/en/latest/ray-core/api/doc/ray.init.html;
several nodes: https://docs.ray.io/en/latest/cluster/cli.html#ray-start.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..compat.ray import close_cluster_gate
from ..errors import RlmLabError
from ..host import alive as _alive  # noqa: F401 - part of this module's API (tests use them)
from ..host import descendants, die_with_parent, free_port, still_alive
from ..records.lifecycle import interruptible, restore_handlers
from .ray_head import DRIVER_GONE, NODE_OF_DRIVER_ENV

STOP_WAIT_S = 6.0  # how long `ray start --block` gets to stop its processes on SIGTERM before the SIGKILLs
HEAD_NAME = "rlm-head"  # node names of a local cluster (``ray start --node-name``), as errors and records show them
# raylet settings for a busy machine (see _start_node): Ray reads RAY_<config name> from the environment
RAYLET_ENV = {"RAY_prestart_worker_first_driver": "0", "RAY_worker_register_timeout_seconds": "600"}
RAY_PROCESS_MARKERS = ("ray::", "raylet", "gcs_server", "ray/_private", "ray/dashboard", "ray/autoscaler")


def ray_processes() -> list[int]:
    """PIDs of this user's Ray processes (workers, raylet, GCS, log monitor...), from /proc."""
    out, uid = [], os.getuid()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if d.stat().st_uid != uid:
                continue
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(m in cmd for m in RAY_PROCESS_MARKERS):
            out.append(int(d.name))
    return sorted(out)


def local_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def node_name(i: int) -> str:
    """The name of worker node ``i`` (1, 2, ...) of a local cluster."""
    return f"rlm-node-{i}"


def node_shares(cpus: int, nodes: int) -> list[int]:
    """The CPUs of each of ``nodes`` worker nodes sharing ``cpus``: as even as can be, the first ones one more."""
    return [cpus // nodes + (i < cpus % nodes) for i in range(nodes)]


def check_nodes(nodes, cpus: int) -> int:
    """``nodes`` as a count of nodes that can each hold a CPU of ``cpus``; one error line otherwise."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise RlmLabError(f"--nodes must be >= 1, got {nodes}")
    if nodes > cpus:
        raise RlmLabError(f"--nodes {nodes}: each node holds at least one CPU, and {cpus} CPU(s) were asked for "
                          f"(this machine has {local_cpus()}); give --nodes <= {min(cpus, local_cpus())}")
    return nodes


class RaySession:
    """A Ray connection: a local Ray of ``num_cpus`` (started, and shut down by :meth:`close`) or a cluster
    at ``address`` / ``$RAY_ADDRESS`` (joined; only the connection is closed).

    ``nodes`` > 1: locally, a cluster of a head (no CPUs) and ``nodes`` worker nodes sharing ``num_cpus``;
    joined, a cluster that must have at least ``nodes`` alive nodes with CPUs. Either way :attr:`nodes` tells
    the runtime to put each resource set of a placement on its own node."""

    def __init__(self, num_cpus: int | None = None, address: str | None = None, nodes: int = 1):
        address = address or os.environ.get("RAY_ADDRESS") or None
        n = num_cpus or local_cpus()
        self.nodes = check_nodes(nodes, n if not address else nodes)
        if not address:
            ray_env()  # before Ray is imported: it reads its authentication settings at import
        try:
            import ray
        except ImportError as e:
            raise RlmLabError(f"Ray is not installed ({e}); pip install -c constraints.txt ray==2.60.0") from None
        self.ray, self.address = ray, address
        self.pids: set[int] = set()
        self._signals = None
        self.head, self.workers = None, []
        if ray.is_initialized():
            self.owned = False
            return
        if address:
            try:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            except Exception as e:  # noqa: BLE001 - Ray raises many types; one line for all
                ray.shutdown()
                raise RlmLabError(f"Ray could not start at {address}: {_first_line(e)}") from None
            have = len(self.node_devices("cpu"))
            if have < self.nodes:
                ray.shutdown()
                raise RlmLabError(f"--nodes {self.nodes}: the Ray cluster at {address} has {have} alive node(s) "
                                  f"with CPUs")
        else:
            if n > local_cpus():
                raise RlmLabError(f"a local Ray of {n} CPUs was asked for, this machine has {local_cpus()}")
            for attempt in (1, 2):  # a cluster that dies starting (a busy machine) gets one more try
                try:
                    self.head = _start_node(n if self.nodes == 1 else 0)
                    if self.nodes > 1:  # the worker nodes join the head's GCS (they wait for its port themselves)
                        self.workers = [_start_node(c, head_port=self.head.port, name=node_name(i + 1))
                                        for i, c in enumerate(node_shares(n, self.nodes))]
                    _connect(ray, [self.head, *self.workers], n)
                    break
                except _HeadExited as e:
                    self._stop_head()
                    if attempt == 2:
                        raise RlmLabError(f"Ray could not start: `ray start` exited twice ({e})") from None
                except BaseException:
                    self._stop_head()
                    raise
        # ray.init installs a SIGTERM handler that calls sys.exit (a run would end `failed`, not `interrupted`)
        self._signals = interruptible()
        self.owned = True
        self.pids = set(self.processes())

    def node_devices(self, kind: str = "cpu") -> dict[str, int]:
        """Alive nodes that hold devices of ``kind`` ("cpu" or "gpu"): node name (or id) -> how many."""
        out = {}
        for nd in self.ray.nodes():
            count = int(nd.get("Resources", {}).get(kind.upper(), 0))
            if nd.get("Alive") and count > 0:
                out[nd.get("NodeName") or nd["NodeID"]] = count
        return out

    def kill_node(self, name: str) -> list[int]:
        """Fault injection: SIGKILL every process of local worker node ``name`` at once, as a machine that
        loses power (its ``ray start``, raylet, agents and the workers of its actors); returns their pids."""
        node = next((w for w in self.workers if w.name == name), None)
        if node is None:
            raise RlmLabError(f"no local worker node {name!r}; this session has "
                              f"{', '.join(w.name for w in self.workers) or 'none'}")
        pids = [node.proc.pid, *descendants(node.proc.pid)]
        self.pids |= set(pids)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return pids

    def _stop_head(self) -> None:
        """Stop the local nodes, worker nodes first, then the head (each may be gone already)."""
        nodes = [*self.workers, *([self.head] if self.head is not None else [])]
        for node in nodes:
            self.pids |= set(descendants(node.proc.pid)) | {node.proc.pid}
            node.proc.terminate()  # `ray start --block` stops its processes on SIGTERM (seconds)
        deadline = time.monotonic() + STOP_WAIT_S
        for node in nodes:
            try:  # a node slower than STOP_WAIT_S to stop is killed (the interpreters' exits come on top: under
                # load 6-16 on 2 cores an interrupted `place` took 19-23 s from SIGINT to exit, issue 42)
                node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - it did not stop: kill what is left of the nodes, by pid
                for pid in sorted(self.pids):
                    try:
                        os.kill(pid, 9)
                    except OSError:
                        pass
                break
        self.head, self.workers = None, []

    def processes(self) -> list[int]:
        """Ray processes this session started (descendants of this process: GCS, raylet, workers)."""
        mine = set(descendants(os.getpid()))
        return [p for p in ray_processes() if p in mine]

    def cpus(self) -> int:
        return int(self.ray.cluster_resources().get("CPU", 0))

    def close(self) -> None:
        if self.owned:
            self.pids |= set(self.processes())
            if self.ray.is_initialized():
                self.ray.shutdown()
            self._stop_head()
            restore_handlers(self._signals)
            self._signals = None
        self.owned = False

    def leftover(self, wait_s: float = 10.0) -> list[int]:
        """Processes of this (closed) session still alive after ``wait_s``: should be none."""
        return still_alive(self.pids, wait_s, poll_s=0.3)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _HeadExited(RlmLabError):
    """A ``ray start`` exited before its node was up (the node's name and last log line are the message)."""


class _Node:
    """A local node: its ``ray start --block`` process, the GCS port (the head's) and its log."""

    def __init__(self, proc, port, log, name):
        self.proc, self.port, self.log, self.name = proc, port, log, name


def _first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def ray_env() -> None:
    """One token for the local head, this driver and every worker (children inherit the environment), Ray's
    local-only mode, and workers at the driver's niceness. Ray reads its authentication mode once, when ``ray._raylet`` is imported, so a process that
    imports Ray before it starts a session (``rlm-lab launches`` parses Ray's own CLI) calls this first; a
    session started later in that process then finds the same settings (else its driver, imported without a
    token, is refused by its own head: InvalidAuthToken)."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    # Ray starts its workers at niceness 15 so that they yield to its GCS and raylet (ray-project/ray PR 24928;
    # RAY_worker_niceness). Here the workers ARE the workload (the trainer and rollout actors): at 15 they get
    # almost nothing beside ordinary processes, and on a machine shared with four busy loops a placement's actors
    # did not even start within 300 s (issue 18). They run at the driver's niceness, as ``torchrun``'s ranks do.
    os.environ.setdefault("RAY_worker_niceness", "0")
    # local only: Ray keeps a loopback node address (see _start_node); Ray reads this at import, so set it
    # in the module too when Ray was imported first
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    close_cluster_gate()


def _start_node(num_cpus: int, head_port: int | None = None, name: str = HEAD_NAME) -> _Node:
    """A local Ray node as a child process: the head, ``ray start --head --block`` (``head_port`` None), or a
    worker node joining the head at ``127.0.0.1:head_port`` (``ray start --address``) (through :mod:`.ray_head`, which waits
    longer for the raylet on a busy machine) with every port fixed up front, bound to loopback, and ended
    with its driver.

    Why not plain ``ray.init()``: it lets the raylet pick its metrics-agent port and then wait a fixed ~30 s
    for the agent (a Python process) to write it to a file; on this 2-core machine at load average 12-16 that
    wait ran out three times in a row ("Timed out waiting for file .../metrics_agent_port_..."). With the
    ports given, nothing waits on the agent. A token authenticates the driver and workers
    (``RAY_AUTH_MODE=token``; https://docs.ray.io/en/latest/ray-security/token-auth.html).

    Nothing listens beyond the machine: ``--node-ip-address 127.0.0.1`` alone is not enough in Ray 2.60,
    which maps a loopback address to the routable one (``services.resolve_ip_for_localhost``) unless
    multi-node clusters are off (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, the local-only mode Ray uses on
    macOS and Windows, set by :func:`ray_env`); with both, the GCS, the raylet, the runtime-env agent, every
    worker and the driver bind 127.0.0.1 (Ray's servers bind the node address since ray-project/ray PRs
    55298, 55484, 55732 and 59852; without a loopback node address 2.60's GCS, raylet and workers bind ``::``).

    A worker node is started the same way, with its own fixed agent ports and ``--node-name``; its raylet,
    object manager and agents bind 127.0.0.1 too. The same local-only mode makes Ray's CLI refuse
    ``--address``; :mod:`.ray_head` lifts that one gate for a worker node (and nothing else).

    Lifecycle: every node runs in its own process group (a Ctrl-C at the terminal reaches the driver, which
    stops the head in order) and, when the driver dies, even by SIGKILL, gets :data:`.ray_head.DRIVER_GONE`
    (``PR_SET_PDEATHSIG``, :func:`rlm_lab.host.die_with_parent`), on which it SIGKILLs its own process group: every
    process the node started (:mod:`.ray_head`). An orderly stop (:meth:`RaySession.close`) goes through
    ``ray start --block``'s SIGTERM, which stops its processes; its drain-before-shutdown wait
    (``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S``, 30 s, for Ray Serve) is switched off, so a stop takes seconds.
    """
    ray_env()
    ports = [free_port() for _ in range(5)]
    where = ["--head", "--port", str(ports[0]), "--include-dashboard=false"] if head_port is None else \
        ["--address", f"127.0.0.1:{head_port}"]
    cmd = [sys.executable, "-m", "rlm_lab.cli", "_ray-start", "start", *where, "--block",
           "--node-ip-address", "127.0.0.1", "--node-name", name,
           "--dashboard-agent-grpc-port", str(ports[1]),
           "--dashboard-agent-listen-port", str(ports[2]), "--runtime-env-agent-port", str(ports[3]),
           "--metrics-export-port", str(ports[4]), "--num-cpus", str(num_cpus), "--disable-usage-stats"]
    # GLOO_SOCKET_IFNAME: the actors' gloo groups (weight sync) bind loopback too, whatever the host name
    # resolves to (https://pytorch.org/docs/stable/distributed.html#common-environment-variables)
    env = dict(os.environ, RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0", GLOO_SOCKET_IFNAME="lo", **RAYLET_ENV,
               **{NODE_OF_DRIVER_ENV: str(os.getpid())})
    package_root = str(Path(__file__).resolve().parents[2])  # the head imports rlm_lab.placement.ray_head
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    log = tempfile.TemporaryFile(prefix=f"rlm_ray_{name}_")
    driver = os.getpid()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            process_group=0, preexec_fn=lambda: _die_with_driver(driver))
    return _Node(proc, ports[0] if head_port is None else head_port, log, name)


def _die_with_driver(driver: int) -> None:
    die_with_parent(DRIVER_GONE, parent=driver)


def _connect(ray, nodes: list[_Node], num_cpus: int, timeout_s: float = 300.0) -> None:
    """Connect this driver to the head (``nodes[0]``) and return once the GCS counts every node alive and
    their ``num_cpus`` CPUs.

    The GCS port opens, and ``ray.init`` can return, before the raylets' resources reach the GCS's view; on a
    busy machine ``cluster_resources()`` then said 0 CPUs for a moment and a placement was refused.
    """
    head = nodes[0]
    deadline = time.time() + timeout_s
    while True:
        for node in nodes:
            if node.proc.poll() is not None:
                node.log.seek(0)
                lines = [ln for ln in node.log.read().decode(errors="replace").splitlines() if ln.strip()]
                raise _HeadExited(f"{node.name}: {lines[-1][:200]}" if lines else
                                  f"{node.name}: exit status {node.proc.returncode}")
        try:
            if not ray.is_initialized():
                with socket.create_connection(("127.0.0.1", head.port), timeout=2):
                    pass
                ray.init(address=f"127.0.0.1:{head.port}", log_to_driver=False, configure_logging=False)
            alive = sum(1 for nd in ray.nodes() if nd.get("Alive"))
            if ray.cluster_resources().get("CPU", 0) >= num_cpus and alive >= len(nodes):
                return
            if time.time() > deadline:
                raise RlmLabError(f"Ray started, but its {num_cpus} CPUs on {len(nodes)} node(s) did not register "
                                  f"within {timeout_s:g} s")
        except RlmLabError:
            ray.shutdown()
            raise
        except Exception as e:  # noqa: BLE001 - not up yet
            if ray.is_initialized():
                ray.shutdown()
            if time.time() > deadline:
                raise RlmLabError(f"Ray could not start within {timeout_s:g} s: {_first_line(e)}") from None
        time.sleep(0.5)
