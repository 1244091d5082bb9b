"""A Ray connection for the placement runtime: a local Ray started as a child process (or a cluster
joined at an address), and the /proc scans that check no process of it is left after a run.

Ray: arXiv 1712.05889; ``ray start`` / ``ray.init``: https://docs.ray.io/en/latest/ray-core/api/doc/ray.init.html.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

from ..errors import RlmLabError
from ..records.lifecycle import interruptible, restore_handlers

STOP_WAIT_S = 6.0  # how long `ray start --block` gets to stop its processes on SIGTERM before the SIGKILLs
# raylet settings for a busy machine (see _start_head): Ray reads RAY_<config name> from the environment
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


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, grandchildren, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def local_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class RaySession:
    """A Ray connection: a local Ray of ``num_cpus`` (started, and shut down by :meth:`close`) or a cluster
    at ``address`` / ``$RAY_ADDRESS`` (joined; only the connection is closed)."""

    def __init__(self, num_cpus: int | None = None, address: str | None = None):
        address = address or os.environ.get("RAY_ADDRESS") or None
        if not address:
            _auth_env()  # before Ray is imported: it reads its authentication settings at import
        try:
            import ray
        except ImportError as e:
            raise RlmLabError(f"Ray is not installed ({e}); pip install -c constraints.txt ray==2.60.0") from None
        self.ray, self.address = ray, address
        self.pids: set[int] = set()
        self._signals = None
        if ray.is_initialized():
            self.owned = False
            return
        self.head = None
        if address:
            try:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            except Exception as e:  # noqa: BLE001 - Ray raises many types; one line for all
                ray.shutdown()
                raise RlmLabError(f"Ray could not start at {address}: {_first_line(e)}") from None
        else:
            n = num_cpus or local_cpus()
            if n > local_cpus():
                raise RlmLabError(f"a local Ray of {n} CPUs was asked for, this machine has {local_cpus()}")
            for attempt in (1, 2):  # a head that dies starting (a busy machine) gets one more try
                self.head = _start_head(n)
                try:
                    _connect(ray, self.head, n)
                    break
                except _HeadExited as e:
                    self._stop_head()
                    if attempt == 2:
                        raise RlmLabError(f"Ray could not start: `ray start --head` exited twice ({e})") from None
                except BaseException:
                    self._stop_head()
                    raise
        # ray.init installs a SIGTERM handler that calls sys.exit (a run would end `failed`, not `interrupted`)
        self._signals = interruptible()
        self.owned = True
        self.pids = set(self.processes())

    def _stop_head(self) -> None:
        if self.head is not None:
            self.pids |= set(descendants(self.head.proc.pid)) | {self.head.proc.pid}
            self.head.proc.terminate()  # `ray start --block` stops its processes on SIGTERM (seconds)
            try:  # an interrupted run must be gone within 10 s: a head that is slower to stop is killed
                self.head.proc.wait(timeout=STOP_WAIT_S)
            except Exception:  # noqa: BLE001 - it did not stop: kill what is left of it, by pid
                for pid in sorted(self.pids):
                    try:
                        os.kill(pid, 9)
                    except OSError:
                        pass
            self.head = None

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
        deadline = time.time() + wait_s
        while True:
            alive = sorted(p for p in self.pids if _alive(p))
            if not alive or time.time() > deadline:
                return alive
            time.sleep(0.3)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _HeadExited(RlmLabError):
    """``ray start --head`` exited before it was up (its last log line is the message)."""


class _Head:
    def __init__(self, proc, port, log):
        self.proc, self.port, self.log = proc, port, log


def _first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def _auth_env() -> None:
    """One token for the local head, this driver and every worker (children inherit the environment)."""
    import secrets
    import sys

    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    # local only: Ray keeps a loopback node address (see _start_head); Ray reads this at import, so set it
    # in the module too when Ray was imported first
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants = sys.modules.get("ray._private.ray_constants")
    if ray_constants is not None:
        ray_constants.ENABLE_RAY_CLUSTER = False


def _start_head(num_cpus: int) -> _Head:
    """A local Ray head as a child process: ``ray start --head --block`` (through :mod:`.ray_head`, which waits
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
    macOS and Windows, set by :func:`_auth_env`); with both, the GCS, the raylet, the runtime-env agent, every
    worker and the driver bind 127.0.0.1 (Ray's servers bind the node address since ray-project/ray PRs
    55298, 55484, 55732 and 59852; without a loopback node address 2.60's GCS, raylet and workers bind ``::``).

    Lifecycle: the head runs in its own process group (a Ctrl-C at the terminal reaches the driver, which
    stops the head in order) and gets SIGTERM when the driver dies, even by SIGKILL (``PR_SET_PDEATHSIG``,
    :func:`rlm_lab.host.die_with_parent`). ``ray start --block`` stops its processes on SIGTERM
    (its GCS, raylet, monitor and log monitor also die with it by Ray's own PDEATHSIG, and the workers with
    their raylet); its drain-before-shutdown wait (``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S``, 30 s, for
    Ray Serve) is switched off, so a stop takes seconds.
    """
    import subprocess
    import sys
    import tempfile

    from ..host import free_port

    _auth_env()
    ports = [free_port() for _ in range(5)]
    cmd = [sys.executable, "-m", "rlm_lab.placement.ray_head", "start", "--head", "--block",
           "--node-ip-address", "127.0.0.1",
           "--port", str(ports[0]), "--dashboard-agent-grpc-port", str(ports[1]),
           "--dashboard-agent-listen-port", str(ports[2]), "--runtime-env-agent-port", str(ports[3]),
           "--metrics-export-port", str(ports[4]), "--num-cpus", str(num_cpus), "--include-dashboard=false",
           "--disable-usage-stats"]
    env = dict(os.environ, RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0", **RAYLET_ENV)
    package_root = str(Path(__file__).resolve().parents[2])  # the head imports rlm_lab.placement.ray_head
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    log = tempfile.TemporaryFile(prefix="rlm_ray_head_")
    driver = os.getpid()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            process_group=0, preexec_fn=lambda: _die_with_driver(driver))
    return _Head(proc, ports[0], log)


def _die_with_driver(driver: int) -> None:
    from ..host import die_with_parent

    die_with_parent(signal.SIGTERM, parent=driver)


def _connect(ray, head: _Head, num_cpus: int, timeout_s: float = 300.0) -> None:
    """Connect this driver to ``head`` and return once the GCS counts the head's ``num_cpus`` CPUs.

    The GCS port opens, and ``ray.init`` can return, before the raylet's resources reach the GCS's view; on a
    busy machine ``cluster_resources()`` then said 0 CPUs for a moment and a placement was refused.
    """
    deadline = time.time() + timeout_s
    while True:
        if head.proc.poll() is not None:
            head.log.seek(0)
            lines = [ln for ln in head.log.read().decode(errors="replace").splitlines() if ln.strip()]
            raise _HeadExited(lines[-1][:200] if lines else f"exit status {head.proc.returncode}")
        try:
            if not ray.is_initialized():
                with socket.create_connection(("127.0.0.1", head.port), timeout=2):
                    pass
                ray.init(address=f"127.0.0.1:{head.port}", log_to_driver=False, configure_logging=False)
            if ray.cluster_resources().get("CPU", 0) >= num_cpus:
                return
            if time.time() > deadline:
                raise RlmLabError(f"Ray started, but its {num_cpus} CPUs did not register within {timeout_s:g} s")
        except RlmLabError:
            ray.shutdown()
            raise
        except Exception as e:  # noqa: BLE001 - not up yet
            if ray.is_initialized():
                ray.shutdown()
            if time.time() > deadline:
                raise RlmLabError(f"Ray could not start within {timeout_s:g} s: {_first_line(e)}") from None
        time.sleep(0.5)
