"""A local Ray node's process: ``ray start`` (Ray's own CLI, ``ray.scripts.scripts.main``) with a longer wait
for the raylet to register, for :class:`rlm_lab.placement.session.RaySession`.

    python -m rlm_lab.cli _ray-start start --head --block ...             # the head; not a user command
    python -m rlm_lab.cli _ray-start start --address 127.0.0.1:P ...      # a worker node of a local cluster

Why: ``ray start`` (Ray 2.60, ``ray._private.node.Node.__init__``) waits a fixed 30 s for the raylet to
register with the GCS, polling ``ray._private.services.get_node`` in a loop with no pause, and then fails
with "The current node timed out during startup". On a 2-core machine under load (four busy loops, or
another test suite) the raylet and its agents, Python processes importing Ray, can take longer than that.
That message is the last of a chain: the raylet itself waits a fixed ~15 s for the runtime-env agent (a
Python process it starts) and the dashboard agent to write their ports to ``<session>/<name>_<node id>``
(``WaitForPersistedPort`` in Ray's node_manager.cc; the wait became 30 s and ``RAY_agent_register_timeout_ms``
only in a later Ray), even when the port was given with ``--runtime-env-agent-port``. Beside four busy loops
that agent took 37 s to bind; the raylet aborted ("Check failed: ...has_value()" in raylet.out), never
registered, and ``ray start`` timed out. Two changes here:

- the ports the agents will bind are known (RaySession fixes them), so they are written to those files
  before the raylet starts, with Ray's own ``ray._raylet.persist_port`` (each agent writes the same value
  again once it binds); the raylet goes on, and its clients of the agents retry until they answer;
- ``get_node`` waits up to ``RLM_RAY_REGISTER_WAIT_S`` seconds (default 120), polling every 0.5 s, before
  Ray's 30 s count goes on (that loop no longer spins a core the raylet needs).

A worker node (``--address``): the local-only mode that keeps every address on loopback
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, see :func:`rlm_lab.placement.session._start_node`) also makes
``ray start --address`` abort ("Multi-node Ray clusters are not supported on Windows and OSX"). That gate is
lifted for the CLI alone (:class:`WorkerNodeGate`: the CLI module reads ``ENABLE_RAY_CLUSTER`` as true); Ray's
own ``ray_constants`` keep it false, so ``services.get_node_ip_address`` and every bind stay on 127.0.0.1.
Nodes on one machine share the session's sockets folder, and Ray names a node's raylet and object-store
sockets by the first free ``raylet[.n]`` / ``plasma_store[.n]``: two worker nodes starting at the same moment
took the same name and the second raylet aborted ("bind: Address already in use" in ``raylet.2.out``). A
worker node's sockets carry its node name instead (:func:`named_sockets`).

A node started by a driver (:class:`~rlm_lab.placement.session.RaySession`, which sets ``RLM_RAY_NODE_OF_DRIVER``
to its pid) goes, with every process it started, when that driver dies: the kernel sends it :data:`DRIVER_GONE`
then (``PR_SET_PDEATHSIG``), and its handler here (or, when the main thread is stuck in a C call, a thread that
watches the parent pid) SIGKILLs the node's process group (``ray start`` is the group's leader;
its GCS, raylet, agents and workers stay in the group). Not SIGTERM: that is Ray's graceful stop, which on a
worker node whose GCS died with the head waited ~30 s for it, and left the node's dashboard and runtime-env
agents running for 80 s more (measured here, 2026-12-06, load 2.3).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from ..compat.ray import persist_agent_ports, ray_start_privates, ray_worker_node_privates

REGISTER_WAIT_ENV = "RLM_RAY_REGISTER_WAIT_S"
DEFAULT_REGISTER_WAIT_S = 120.0


def patient(get_node, wait_s: float, pause_s: float = 0.5):
    """``get_node`` that retries its RuntimeError ("node not found yet") for up to ``wait_s`` seconds."""

    def wrapped(*args, **kwargs):
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return get_node(*args, **kwargs)
            except RuntimeError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(pause_s)

    wrapped.__wrapped__ = get_node
    return wrapped


AGENT_PORTS = (("RUNTIME_ENV_AGENT_PORT_NAME", "runtime_env_agent_port"),
               ("METRICS_AGENT_PORT_NAME", "metrics_agent_port"),
               ("METRICS_EXPORT_PORT_NAME", "metrics_export_port"),
               ("DASHBOARD_AGENT_LISTEN_PORT_NAME", "dashboard_agent_listen_port"))


def port_first(start_raylet):
    """``Node.start_raylet`` that first writes the agents' fixed ports where the raylet waits for them."""

    def wrapped(node, *args, **kwargs):
        persist_agent_ports(node, AGENT_PORTS)
        return start_raylet(node, *args, **kwargs)

    wrapped.__wrapped__ = start_raylet
    return wrapped


class WorkerNodeGate:
    """Ray's ``ray_constants`` as the CLI module sees them for a worker node: ``ENABLE_RAY_CLUSTER`` true (the
    CLI's multi-node gate open), every other name Ray's own."""

    ENABLE_RAY_CLUSTER = True

    def __init__(self, constants):
        self._constants = constants

    def __getattr__(self, name):
        return getattr(self._constants, name)


def named_sockets(prepare, node_name: str):
    """``Node._prepare_socket_file`` that names an unnamed socket ``<prefix>_<node_name>``."""

    def wrapped(node, socket_path, default_prefix):
        return prepare(node, socket_path, f"{default_prefix}_{node_name}")

    wrapped.__wrapped__ = prepare
    return wrapped


def option(argv: list[str], name: str) -> str | None:
    """The value of ``name`` in ``argv`` as click reads it (``--x v`` or ``--x=v``; "" for a flag), else None."""
    for i, a in enumerate(argv):
        if a == name:
            return argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


DRIVER_GONE = signal.SIGUSR2   # what the kernel sends a driver's node when the driver dies (no other use in Ray)
NODE_OF_DRIVER_ENV = "RLM_RAY_NODE_OF_DRIVER"


def _kill_own_group(signum=None, frame=None) -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)   # this process included: nothing of the node is left


def _watch_driver(driver: int, every_s: float = 0.25) -> None:
    """The same, from a thread: a Python signal handler runs only when the main thread is back in Python, and a
    worker node still in ``Node.__init__`` sat ~30 s inside a gRPC call to the dead head's GCS (py-spy, here)."""
    while os.getppid() == driver:
        time.sleep(every_s)
    _kill_own_group()


def main(argv: list[str] | None = None) -> None:
    from ray.scripts.scripts import main as ray_main

    argv = sys.argv[1:] if argv is None else argv
    driver = os.environ.get(NODE_OF_DRIVER_ENV, "")
    if driver.isdigit() and os.getpgrp() == os.getpid():  # a driver's node, leader of its own process group
        signal.signal(DRIVER_GONE, _kill_own_group)
        threading.Thread(target=_watch_driver, args=(int(driver),), name="rlm-driver-watch", daemon=True).start()
    services, Node, _ = ray_start_privates()
    wait_s = float(os.environ.get(REGISTER_WAIT_ENV, DEFAULT_REGISTER_WAIT_S))
    services.get_node = patient(services.get_node, wait_s)
    Node.start_raylet = port_first(Node.start_raylet)
    if option(argv, "--address") is not None and option(argv, "--head") is None:
        scripts, _ = ray_worker_node_privates()
        scripts.ray_constants = WorkerNodeGate(scripts.ray_constants)
        name = option(argv, "--node-name")
        if name:
            Node._prepare_socket_file = named_sockets(Node._prepare_socket_file, name)
    sys.argv = [sys.argv[0], *argv]  # Ray's click CLI reads its arguments from sys.argv (here: behind `_ray-start`)
    ray_main()
