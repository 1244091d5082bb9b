"""A Ray connection for the placement runtime: a local Ray started as a child process (or a cluster
joined at an address), and the /proc scans that check no process of it is left after a run.

Ray: arXiv 1712.05889; ``ray start`` / ``ray.init``: https://docs.ray.io/en/latest/ray-core/api/doc/ray.init.html.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from ..errors import RlmLabError

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
            self.head = _start_head(n)
            try:
                _connect(ray, self.head)
            except BaseException:
                self._stop_head()
                raise
        self.owned = True
        self.pids = set(self.processes())

    def _stop_head(self) -> None:
        if self.head is not None:
            self.pids |= set(descendants(self.head.proc.pid)) | {self.head.proc.pid}
            self.head.proc.terminate()  # `ray start --block` stops its processes on SIGTERM
            try:
                self.head.proc.wait(timeout=60)
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


class _Head:
    def __init__(self, proc, port, log):
        self.proc, self.port, self.log = proc, port, log


def _first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def _auth_env() -> None:
    """One token for the local head, this driver and every worker (children inherit the environment)."""
    import secrets

    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))


def _start_head(num_cpus: int) -> _Head:
    """A local Ray head as a child process: ``ray start --head --block`` with every port fixed up front.

    Why not plain ``ray.init()``: it lets the raylet pick its metrics-agent port and then wait a fixed ~30 s
    for the agent (a Python process) to write it to a file; on this 2-core machine at load average 12-16 that
    wait ran out three times in a row ("Timed out waiting for file .../metrics_agent_port_..."). With the
    ports given, nothing waits on the agent. A token authenticates the driver and workers
    (``RAY_AUTH_MODE=token``; https://docs.ray.io/en/latest/ray-security/token-auth.html); SIGTERM to the
    ``--block`` process stops the whole local cluster. Ray binds its node address as it chooses (2.60 maps a
    loopback address to the routable one); the weight-sync rendezvous binds 127.0.0.1.
    """
    import subprocess
    import sys
    import tempfile

    from ..host import free_port

    _auth_env()
    ports = [free_port() for _ in range(5)]
    cmd = [sys.executable, "-c", "from ray.scripts.scripts import main; main()", "start", "--head", "--block",
           "--port", str(ports[0]), "--dashboard-agent-grpc-port", str(ports[1]),
           "--dashboard-agent-listen-port", str(ports[2]), "--runtime-env-agent-port", str(ports[3]),
           "--metrics-export-port", str(ports[4]), "--num-cpus", str(num_cpus), "--include-dashboard=false",
           "--disable-usage-stats"]
    log = tempfile.TemporaryFile(prefix="rlm_ray_head_")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return _Head(proc, ports[0], log)


def _connect(ray, head: _Head, timeout_s: float = 300.0) -> None:
    deadline = time.time() + timeout_s
    while True:
        if head.proc.poll() is not None:
            head.log.seek(0)
            lines = [ln for ln in head.log.read().decode(errors="replace").splitlines() if ln.strip()]
            raise RlmLabError(f"Ray could not start: `ray start --head` exited ({lines[-1][:200] if lines else head.proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", head.port), timeout=2):
                pass
            ray.init(address=f"127.0.0.1:{head.port}", log_to_driver=False, configure_logging=False)
            return
        except Exception as e:  # noqa: BLE001 - not up yet
            if ray.is_initialized():
                ray.shutdown()
            if time.time() > deadline:
                raise RlmLabError(f"Ray could not start within {timeout_s:g} s: {_first_line(e)}") from None
            time.sleep(1.0)
