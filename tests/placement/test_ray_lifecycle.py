"""The local Ray's lifecycle (issue 18): nothing of it listens beyond loopback, it ends with its driver, and
SIGINT / SIGTERM stop a run within 10 s with the record ``interrupted`` and no Ray process left.

- listening sockets: every TCP/UDP socket bound by the driver and by every process of the head it started
  (GCS, raylet, agents, monitor, workers, an actor), read with psutil, is on 127.0.0.0/8 or ::1;
- orphans: a driver holding a RaySession (one node, or a head and 2 worker nodes) is SIGKILLed; 10 s later no
  process of its nodes is alive;
- interrupts: ``rlm-lab place`` (also over 2 nodes), the asynchrony campaign and ``rlm-lab longtail``, each sent SIGINT or SIGTERM
  (to the driver alone, or to its process group) mid-run, exit within 10 s, their record says
  ``interrupted``, and none of their processes (the head, its workers) is left;
- the suite's shared Ray session (tests/conftest.py) was started while four busy loops ran.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
STOP_S = 10.0  # a signalled run must be gone within this (issue 18)


def test_loopback_check_itself(sockets):
    lo = sockets.loopback
    assert lo("127.0.0.1") and lo("::1") and lo("::ffff:127.0.0.1") and lo("127.3.2.1")
    assert not any(lo(ip) for ip in ("0.0.0.0", "::", "192.0.2.2", "::ffff:10.0.0.1", "fd00::2"))


def test_shared_ray_session_started_beside_busy_loops(ray_session, ray_start_info):
    """The conftest's session starts while 4 busy loops spin (each burnt CPU during the start)."""
    info = ray_start_info
    assert len(info["busy_cpu_s"]) == info["busy_loops"] == 4
    assert min(info["busy_cpu_s"]) > 0.5, info  # they really ran while Ray started
    assert ray_session.cpus() == 2


def test_nothing_listens_beyond_loopback(ray_session, sockets):
    ray = ray_session.ray

    @ray.remote(num_cpus=0)
    class Probe:
        def pid(self):
            return os.getpid()

    actor = Probe.remote()
    try:
        actor_pid = ray.get(actor.pid.remote(), timeout=120)
        head = ray_session.head.proc.pid
        pids = {os.getpid(), head, *ray_session.processes(), *_tree(head)}
        assert actor_pid in pids
        bound = sockets.bound(pids)
        names = {name for _, name, _, _ in bound}
        assert {"gcs_server", "raylet"} <= names, bound  # the scan sees the head's servers
        assert any(pid == actor_pid for pid, *_ in bound), bound  # and the actor's worker
        exposed = [b for b in bound if not sockets.loopback(b[2])]
        assert exposed == [], f"listening beyond loopback: {exposed}"
    finally:
        ray.kill(actor)


def _tree(pid):
    from rlm_lab.placement.session import descendants

    return descendants(pid)


def _alive(pids):
    from rlm_lab.placement.session import _alive as alive

    return [p for p in pids if alive(p)]


def _wait_gone(pids, wait_s):
    deadline = time.monotonic() + wait_s
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _alive(pids)


DRIVER = """
import json, os, sys, time
from rlm_lab.placement.session import RaySession, descendants
s = RaySession(num_cpus={cpus}, nodes={nodes})
print(json.dumps(descendants(os.getpid())), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("nodes", [1, 2],
                         ids=["one-node", "head+2-worker-nodes"])
def test_sigkill_of_the_driver_leaves_no_ray_process(nodes):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", DRIVER.format(cpus=nodes, nodes=nodes)], stdout=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        line = proc.stdout.readline()  # the head (and its worker nodes) are up
        assert line, f"the driver exited before Ray was up (status {proc.wait()})"
        head = json.loads(line)
        names = [Path(open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[0].decode()).name for p in _alive(head)]
        assert "gcs_server" in names and names.count("raylet") == (1 if nodes == 1 else 1 + nodes), names
        proc.kill()
        proc.wait(10)
        # the bar, 10 s, for the worker nodes too: each SIGKILLs its own process group when the driver dies
        # (placement.ray_head). Before, a worker node went by Ray's graceful SIGTERM path: one still starting sat
        # ~30 s in a gRPC call to the dead GCS, and its agents lived 80 s more (load 2.3, 2026-12-06)
        left = _wait_gone(head, 10.0)
        assert left == [], [_cmdline(p) for p in left]
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in _alive(_tree(proc.pid)):
            os.kill(p, signal.SIGKILL)


def _cmdline(pid) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")[:160]
    except OSError:
        return f"{pid} (gone)"


def _records(root):
    return [json.loads(p.read_text()) for p in Path(root).glob("**/record.json")]


def _started(root, kind) -> bool:
    """The run is under way: a training step logged (place, campaign) or a technique's record running."""
    if kind == "longtail":
        return any(r.get("status") == "running" for r in _records(root))
    return any(p.stat().st_size > 0 for p in Path(root).glob("*/*/metrics.jsonl"))


COMMANDS = {
    "place": ["-m", "rlm_lab.cli", "place", "--size", "smoke", "--placement", "colocated", "--steps", "400"],
    "place-nodes": ["-m", "rlm_lab.cli", "place", "--size", "smoke", "--nodes", "2", "--placement", "disaggregated",
                    "--steps", "400"],
    "campaign": ["-m", "rlm_lab.cli", "chapter", "6", "campaign", "--size", "smoke", "--mode", "sync", "--steps", "400"],
    "longtail": ["-m", "rlm_lab.cli", "longtail", "--size", "smoke"],
}


# Each command once or twice, every signal and every target at least once (a Ray run is ~1 min of CI here):
# SIGINT to the group is Ctrl-C at a terminal; the handler is one (records.lifecycle.interruptible) for all.
@pytest.mark.parametrize("kind, sig, target", [
    ("place", signal.SIGTERM, "group"), pytest.param("place-nodes", signal.SIGINT, "driver", marks=pytest.mark.extended),
    pytest.param("campaign", signal.SIGINT, "group", marks=pytest.mark.extended),
    ("longtail", signal.SIGINT, "driver"), pytest.param("longtail", signal.SIGTERM, "group", marks=pytest.mark.extended),
], ids=lambda v: getattr(v, "name", v))
def test_a_signal_stops_the_run_and_marks_it_interrupted(kind, sig, target, tmp_path):
    out = tmp_path / "runs"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    # a fresh session (its own process group, as a shell job), SIGINT not ignored, as at a terminal
    log = tmp_path / "stderr.txt"  # a file, not a pipe: a chatty run must not block on a full pipe
    proc = subprocess.Popen([sys.executable, *COMMANDS[kind], "--out", str(out)], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=log.open("w"), start_new_session=True)
    try:
        deadline = time.monotonic() + 400
        while not _started(out, kind):
            assert proc.poll() is None, f"{kind} exited before the signal: {log.read_text()[-1000:]}"
            assert time.monotonic() < deadline, f"{kind} did not start within 400 s"
            time.sleep(0.1)
        tree = _tree(proc.pid)
        assert kind == "longtail" or tree, "the run's Ray processes are not below its driver"
        t0 = time.monotonic()
        (os.killpg if target == "group" else os.kill)(proc.pid, sig)
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{kind} still running {STOP_S:g} s after {sig.name} to the {target}")
        took = time.monotonic() - t0
        err = log.read_text()
        assert proc.returncode == 130, (proc.returncode, err[-1000:])
        assert "interrupted" in err and "Traceback" not in err, err[-1000:]
        statuses = [r["status"] for r in _records(out)]
        assert "interrupted" in statuses and not any(s == "running" for s in statuses), statuses
        assert _wait_gone(tree, max(0.0, STOP_S - took)) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in _alive(_tree(proc.pid)):
            os.kill(p, signal.SIGKILL)
