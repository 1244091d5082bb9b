"""``make cluster-rehearsal``: the README's Ray-job recipe on 3 "machines" of this box that do not share the
driver's files, and the job's result checked equal to the same run on one node (issue 40).

    rlm-lab cluster-rehearsal [--steps 2] [--keep DIR]

Each machine is a mount namespace of its own (``unshare --mount``, util-linux; https://man7.org/linux/man-pages/man1/unshare.1.html):

- its own ``/tmp`` (a folder of the rehearsal bound there: Ray's session folder, the unpacked job, its HOME);
- the driver's checkout covered by an empty tmpfs (its ``_build/cache``, where the SFT warm start is made, and its
  records are unseen), the virtual environment bound back where it was ("the requirements installed on every
  machine");
- its own copy of the repository's tracked files (the head's is the one the job is submitted from, ``--working-dir=.``).

The network is the box's own: every node listens on 127.0.0.1 (``--node-ip-address``; Ray's local-only mode, as
:mod:`rlm_lab.placement.session`), so nothing leaves the machine. The lines run are the recipe's own
(:func:`rlm_lab.launches._ray_job` for 3 machines), with the GPU counts made one CPU each, the free ports of this box
instead of 6379 / 8265, and the loopback and agent-port options of :func:`rlm_lab.placement.session._start_node`;
``ray start`` goes through :mod:`rlm_lab.placement.ray_head` (the same CLI, patient on a busy machine). The token
step is the recipe's: ``ray get-auth-token --generate`` on the head (in its HOME), the file copied to the others.

The job is ``rlm-lab place --nodes 3 --placement disaggregated --size smoke`` (two sets, each on a node of its own,
at least one of them on a machine that is not the driver's); its record must end ``complete`` with the weights'
SHA-256 and the rewards of the same placement run on one node in this process's Ray. Before the warm start
travelled through Ray (:mod:`rlm_lab.placement.shipping`) the job failed here: the workers were handed a folder
under the head's ``/tmp`` that their machines do not have.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .chapters.ch05_placement.cases import configs
from .chapters.ch05_placement.run import predict
from .compat import installed
from .errors import RlmLabError
from .host import bound_sockets, descendants, free_port, loopback, still_alive
from .launches import _machine_lines, _ray_job
from .placement.runtime import run_placement
from .placement.session import _die_with_driver
from .record import REPO_ROOT

MACHINES = 3
STEPS = 2
JOB_TIMEOUT_S = 900.0


def check_unshare() -> list[str]:
    """The ``unshare`` prefix that gives a process a mount namespace here (root, or a user namespace); one line if none."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        raise RlmLabError("the cluster rehearsal needs Linux and util-linux's unshare (mount namespaces)")
    for prefix in (["unshare", "--mount", "--propagation", "private"],
                   ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]):
        if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    raise RlmLabError("the cluster rehearsal needs mount namespaces: `unshare --mount` (root) or "
                      "`unshare --user --map-root-user --mount` failed here")


def check_job_server() -> None:
    """Ray's job server (``ray[default]``: aiohttp and the dashboard's modules) is installed; one line if not."""
    missing = [p for p in ("aiohttp", "aiohttp_cors", "opencensus", "grpcio", "smart_open", "virtualenv")
               if installed(p) == "not installed"]
    if missing:
        raise RlmLabError(f"`ray job submit` needs Ray's job server: pip install -c constraints.txt '.[cluster]' "
                          f"(missing: {', '.join(missing)})")


def tracked_files(repo: Path) -> list[str]:
    """The repository's tracked files (what a clone at this commit holds), without the committed run records."""
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and not f.startswith("data/runs/")]


def clone(repo: Path, into: Path, files: list[str]) -> Path:
    for rel in files:
        src = repo / rel
        if src.is_file() and not src.is_symlink():
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, into / rel)
    return into


def machine_prefix(unshare: list[str], machine: Path, checkout: Path, venv: Path) -> list[str]:
    """The argv prefix that runs a command on ``machine``: its own /tmp and HOME, the driver's checkout hidden."""
    keep_venv = venv.is_relative_to(checkout)
    script = "\n".join([
        "set -e",
        *([f"mkdir -p {shlex.quote(str(machine / '.venv'))}",
           f"mount --bind {shlex.quote(str(venv))} {shlex.quote(str(machine / '.venv'))}"] if keep_venv else []),
        f"mount --rbind {shlex.quote(str(machine))} /tmp",  # --rbind: the venv bound inside it comes along
        f"mount -t tmpfs -o size=1m,mode=0755 rlm-hidden {shlex.quote(str(checkout))}",
        *([f"mkdir -p {shlex.quote(str(venv))}", f"mount --bind /tmp/.venv {shlex.quote(str(venv))}"]
          if keep_venv else []),
        "export HOME=/tmp/home TMPDIR=/tmp",
        "cd /tmp/repo",
        'exec "$@"',
    ])
    return [*unshare, "bash", "-c", script, "machine"]


def recipe_lines(n: int, ports: dict) -> list[list[str]]:
    """The README's Ray-job lines for ``n`` machines as each runs them here: ``(machine, argv)``."""
    text = _ray_job(n, 1).replace("--num-gpus=1", "--num-cpus=1").replace("--size gpu", "--size smoke")
    text = text.replace("--port=6379", f"--port={ports['gcs']}").replace(":6379", f":{ports['gcs']}")
    text = text.replace("127.0.0.1:8265", f"127.0.0.1:{ports['dashboard']}")
    return _machine_lines(text, 1, HEAD_ADDR="127.0.0.1")


def node_args(machine: int, ports: dict) -> list[str]:
    """What ``_start_node`` adds to a recipe's ``ray start``: loopback, fixed agent ports, a name, --block."""
    extra = ["--dashboard-port", str(ports["dashboard"])] if machine == 0 else []
    return ["--block", "--node-ip-address", "127.0.0.1", "--node-name", f"machine-{machine}",
            "--dashboard-agent-grpc-port", str(free_port()), "--dashboard-agent-listen-port", str(free_port()),
            "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port()),
            "--disable-usage-stats", *extra]


class Rehearsal:
    """The 3 machines, their nodes and the job; :meth:`close` stops every process it started."""

    def __init__(self, steps: int = STEPS, root: Path | None = None, log=print):
        self.unshare = check_unshare()
        check_job_server()
        self.steps, self.log = steps, log
        self.checkout = Path(REPO_ROOT).resolve()
        self.venv = Path(sys.prefix).resolve()  # the venv's python by the venv's own path, not the checkout's link
        self.python = str(self.venv / "bin" / "python")
        self.root = Path(root or tempfile.mkdtemp(prefix="rlm_rehearsal_"))
        self.ports = {"gcs": free_port(), "dashboard": free_port()}
        self.procs: list[subprocess.Popen] = []
        files = tracked_files(self.checkout)
        self.machines = []
        for i in range(MACHINES):
            m = self.root / f"m{i}"
            (m / "home").mkdir(parents=True)
            # the head submits the job from its clone (--working-dir=.); the others only run `ray start`
            clone(self.checkout, m / "repo", files if i == 0 else [f for f in files if f.startswith("rlm_lab/")])
            self.machines.append(m)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RLM_CACHE"))}
        self.env.update(RAY_AUTH_MODE="token", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", GLOO_SOCKET_IFNAME="lo",
                        RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0", RAY_worker_niceness="0",
                        RAY_prestart_worker_first_driver="0", RAY_worker_register_timeout_seconds="600",
                        PYTHONPATH=os.pathsep.join(["/tmp/repo", *self.outer_paths()]), PYTHONUNBUFFERED="1",
                        PATH=f"{self.venv / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}")

    def outer_paths(self) -> list[str]:
        """This process's PYTHONPATH entries that every machine has too (not under the checkout or /tmp)."""
        keep = []
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
            path = Path(p).resolve() if p else None
            if path and not path.is_relative_to(self.checkout) and not path.is_relative_to("/tmp"):
                keep.append(str(path))
        return keep

    def on(self, i: int, argv: list[str], **kw) -> list[str]:
        return [*machine_prefix(self.unshare, self.machines[i], self.checkout, self.venv), *argv]

    def run(self, i: int, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess:
        return subprocess.run(self.on(i, argv), env=self.env, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)

    def start(self, i: int, argv: list[str]) -> subprocess.Popen:
        log = open(self.machines[i] / f"node-{i}.log", "wb")
        driver = os.getpid()
        proc = subprocess.Popen(self.on(i, argv), env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, process_group=0, preexec_fn=lambda: _die_with_driver(driver))
        self.procs.append(proc)
        return proc

    def ray(self, argv: list[str]) -> list[str]:
        """``ray ...`` as this venv's Ray CLI; ``ray start`` through the patient wrapper."""
        if argv[:2] == ["ray", "start"]:
            return [self.python, "-m", "rlm_lab.cli", "_ray-start", *argv[1:]]
        return [self.python, "-m", "ray.scripts.scripts", *argv[1:]]

    def cluster_up(self) -> list[str]:
        """Run the recipe's lines up to the job: the token on the head, copied; the head; the workers joining."""
        lines = recipe_lines(MACHINES, self.ports)
        job = None
        for argv in lines:
            if argv[:1] == ["export"]:
                continue  # RAY_AUTH_MODE=token is in every machine's environment
            if argv[:2] == ["ray", "get-auth-token"]:
                out = self.run(0, self.ray([a for a in argv if not a.startswith(">")]), 120)
                if out.returncode != 0:
                    raise RlmLabError(f"ray get-auth-token failed: {out.stderr.strip()[-300:]}")
                token = self.machines[0] / "home" / ".ray" / "auth_token"
                for m in self.machines[1:]:  # the recipe's copy (scp) to every other machine
                    (m / "home" / ".ray").mkdir(parents=True, exist_ok=True)
                    shutil.copy2(token, m / "home" / ".ray" / "auth_token")
            elif argv[:2] == ["ray", "start"] and "--head" in argv:
                self.start(0, self.ray(argv) + node_args(0, self.ports))
                self.wait_port(self.ports["gcs"], 0)
            elif argv[:2] == ["ray", "start"]:
                for i in range(1, MACHINES):
                    self.start(i, self.ray(argv) + node_args(i, self.ports))
                self.wait_nodes()
            elif argv[:3] == ["ray", "job", "submit"]:
                job = argv
        return job

    def wait_nodes(self, timeout_s: float = 300.0) -> None:
        """Until the head's GCS counts every machine alive (what `ray status` shows a reader before submitting)."""
        code = ("import sys, time, ray\n"
                f"ray.init(address='127.0.0.1:{self.ports['gcs']}', log_to_driver=False, configure_logging=False)\n"
                f"deadline = time.monotonic() + {timeout_s}\n"
                "while time.monotonic() < deadline:\n"
                "    alive = sum(1 for n in ray.nodes() if n['Alive'])\n"
                f"    if alive >= {MACHINES}: sys.exit(0)\n"
                "    time.sleep(1)\n"
                "print(f'{alive} of the machines joined'); sys.exit(1)\n")
        probe = subprocess.Popen(self.on(0, [self.python, "-c", code]), env=self.env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        try:
            while probe.poll() is None:
                dead = [i for i, p in enumerate(self.procs) if p.poll() is not None]
                if dead:
                    raise RlmLabError("the cluster did not come up: " +
                                      "; ".join(f"machine-{i}: {self.tail(i)}" for i in dead))
                time.sleep(1)
        finally:
            if probe.poll() is None:
                probe.kill()
            text = probe.communicate()[0] or ""
        if probe.returncode != 0:
            raise RlmLabError(f"the cluster did not come up: {text.strip()[-200:]}")

    def wait_port(self, port: int, machine: int, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.procs[machine].poll() is not None:
                raise RlmLabError(f"machine-{machine}'s `ray start` exited: {self.tail(machine)}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2):
                    return
            except OSError:
                time.sleep(0.5)
        raise RlmLabError(f"machine-{machine}: port {port} did not open within {timeout_s:g} s")

    def tail(self, machine: int) -> str:
        lines = (self.machines[machine] / f"node-{machine}.log").read_text(errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else "(no output)"

    def submit(self, job: list[str]) -> tuple[int, str]:
        """Submit the job as the recipe says (on the head, from its clone), into the head's /tmp/out."""
        argv = [*job, "--placement", "disaggregated", "--steps", str(self.steps), "--out", "/tmp/out"]
        self.wait_port(self.ports["dashboard"], 0)
        out = self.run(0, self.ray(argv), JOB_TIMEOUT_S)
        return out.returncode, out.stdout + out.stderr

    def record(self) -> dict:
        found = sorted((self.machines[0] / "out").glob("ch05_disaggregated/*/record.json"))
        if not found:
            raise RlmLabError("the job wrote no record under the head's /tmp/out")
        return json.loads(found[-1].read_text())

    def exposed(self) -> list[tuple]:
        """Sockets of the machines' processes listening beyond loopback (``(pid, name, ip, port)``): should be none."""
        pids = {pid for p in self.procs for pid in (p.pid, *descendants(p.pid))}
        bound = bound_sockets(pids)
        if not {self.ports["gcs"], self.ports["dashboard"]} <= {port for *_, port in bound}:
            raise RlmLabError("the socket scan did not see the head's GCS and job server listening")
        return [b for b in bound if not loopback(b[2])]

    def close(self) -> None:
        pids = set()
        for p in self.procs:
            pids |= {p.pid, *descendants(p.pid)}
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
        left = still_alive(pids, 10.0)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.leftover = still_alive(pids, 5.0)


def one_node(steps: int, out: Path) -> dict:
    """The same placement, config and steps on one node (a local Ray in this process)."""
    cfgs, chosen = configs("smoke", ("disaggregated",), rl_steps=steps)
    p, cfg = chosen["disaggregated"], cfgs["disaggregated"]
    return run_placement(p, cfg, out, prediction=predict(p, cfg))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rlm-lab cluster-rehearsal", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--keep", default=None, help="the machines' folders go here (default: a temporary folder, removed)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        r = Rehearsal(args.steps, Path(args.keep) if args.keep else None)
    except RlmLabError as e:
        print(f"cluster-rehearsal: {e}", file=sys.stderr)
        return 2
    try:
        job = r.cluster_up()
        print(f"cluster-rehearsal: 3 machines up ({time.monotonic() - t0:.0f} s); submitting: {shlex.join(job)}", flush=True)
        rc, text = r.submit(job)
        tail = "\n".join(text.strip().splitlines()[-15:])
        if rc != 0:
            print(f"cluster-rehearsal: FAILED: the job failed (exit {rc}):\n{tail}", file=sys.stderr)
            return 1
        rec = r.record()
        exposed = r.exposed()  # the cluster is still up: every node's and agent's listening sockets
    except RlmLabError as e:
        print(f"cluster-rehearsal: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        r.close()
    res = rec["results"]
    with tempfile.TemporaryDirectory(prefix="rlm_rehearsal_one_") as d:
        one = one_node(args.steps, Path(d) / "run")
    same = res.get("weights_sha256") == one["weights_sha256"] and res.get("rewards") == one["rewards"]
    print(f"cluster-rehearsal: job {rec['status']} on {res['nodes']['sets']}; weights "
          f"{res.get('weights_sha256', '')[:16]} vs one node {one['weights_sha256'][:16]}; rewards {res.get('rewards')} "
          f"vs {one['rewards']}; listening beyond loopback {exposed}; leftover processes {r.leftover}; "
          f"{time.monotonic() - t0:.0f} s")
    if not args.keep:
        shutil.rmtree(r.root, ignore_errors=True)
    ok = same and rec["status"] == "completed" and not r.leftover and not exposed
    print(f"cluster-rehearsal: {'passed' if ok else 'FAILED'}: the job on 3 machines {'equals' if same else 'differs from'} one node")
    return 0 if ok else 1
