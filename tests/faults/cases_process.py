"""Process faults of issue 42, as API rows that start at most two small processes: two runs publishing one cache key
at once (chapter 10's SFT cache, the SFT cache of rlm_lab.train), a full disk under a library's writer of a cache
folder, a stopped torchrun agent, and the scratch folder of a SIGKILLed `parallel --nnodes` driver. The end-to-end
versions (real torchrun agents) are tests/parallel/test_nodes.py's, in the slow phase."""

import errno
import os
import signal
import subprocess
import sys
import threading
import time

from fault_matrix import Case

CASES = []


def _publish_race(tmp):
    """train.run.publish(one cache folder) from two threads, 20 times each"""
    from rlm_lab.train.run import publish

    folder, failures = tmp / "cache" / "sft_key", []

    def writer(who):
        def write(t):
            (t / "config.json").write_text(who)
            (t / "model.safetensors").write_text(who * 100)
        try:
            for _ in range(20):
                publish(folder, write)
        except Exception as e:  # noqa: BLE001 - what the old remove-then-rename raised (ENOTEMPTY, missing folder)
            failures.append(repr(e))

    threads = [threading.Thread(target=writer, args=(w,)) for w in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    who = (folder / "config.json").read_text()
    assert not failures and (folder / "model.safetensors").read_text() == who * 100, failures
    assert [p.name for p in folder.parent.iterdir()] == ["sft_key"]
    print(f"one whole copy ({who}), no temporary left")


CASES.append(Case("cache-two-writers", "two runs (different --out) publishing chapter 10's SFT cache at once: it was "
                  "replaced by remove-then-rename", cls="correct-result", call=_publish_race,
                  message=r"one whole copy \([AB]\), no temporary left"))


def _publish_full(tmp):
    """train.run.publish(folder, a writer raising ENOSPC without a file name, as safetensors does)"""
    from rlm_lab.train.run import publish

    def full(t):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    try:
        publish(tmp / "ch10" / "sft_par_key", full)
    except OSError as e:
        assert e.filename and e.filename.endswith("sft_par_key") and not any((tmp / "ch10").iterdir()), e
        print(f"OSError names {os.path.basename(e.filename)}: {e.strerror}")   # the CLI prints it as one line
    else:
        raise AssertionError("the write did not fail")


CASES.append(Case("cache-disk-full", "a full disk while open-directions saves a model to its cache (said 'No space "
                  "left on device' without naming the file)", cls="correct-result", call=_publish_full,
                  message=r"OSError names sft_par_key: No space left on device"))


def _stopped_agent(tmp):
    """Agents.watch + Agents.cause with node 1's agent SIGSTOPped (two sleeping processes stand for the agents)"""
    from rlm_lab.parallel.nodes import Agents

    agents = Agents.__new__(Agents)
    agents.procs = [subprocess.Popen(["sleep", "30"]) for _ in range(2)]
    agents.seen, agents.stopped, agents.logs = set(), set(), []
    try:
        os.kill(agents.procs[1].pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not agents.stopped and time.monotonic() < deadline:
            agents.watch()
            time.sleep(0.05)
        print(agents.cause([1, None]))
    finally:
        for p in agents.procs:
            p.kill()
            p.wait()


CASES.append(Case("stopped-agent-named", "a SIGSTOPped torchrun agent (the run's line named the other node)",
                  cls="correct-result", call=_stopped_agent,
                  message=r"node 1 \(torchrun agent, node rank 1\) was stopped \(SIGSTOP"))

ORPHAN = """
import os, sys
from rlm_lab.parallel import nodes
os.environ[nodes.SCRATCH_ENV], os.environ[nodes.DRIVER_ENV] = sys.argv[1], sys.argv[2]
nodes._remove_orphaned_scratch()
"""


def _orphaned_scratch(tmp):
    """an agent's exit with its driver gone (RLM_NODES_DRIVER not its parent) and a .scratch-nodes-* folder"""
    scratch = tmp / "run" / ".scratch-nodes-abc"
    (scratch / "rank0").mkdir(parents=True)
    (scratch / "node0.log").write_text("log")
    keep = tmp / "run" / ".scratch-other"
    keep.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    env = dict(os.environ, PYTHONPATH=str(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    for folder, driver in ((scratch, dead.pid), (keep, dead.pid)):
        subprocess.run([sys.executable, "-c", ORPHAN, str(folder), str(driver)], check=True, env=env, timeout=60)
    assert not scratch.exists() and keep.exists()
    live = tmp / "run" / ".scratch-nodes-live"
    live.mkdir()
    subprocess.run([sys.executable, "-c", ORPHAN, str(live), str(os.getpid())], check=True, env=env, timeout=60)
    assert live.exists()   # its driver (this process, the agent's parent) is alive: it removes its own
    print("the dead driver's .scratch-nodes-* removed; other folders and a live driver's kept")


CASES.append(Case("nodes-scratch-after-driver-killed", "a SIGKILLed `parallel --nnodes` driver's .scratch-nodes-* "
                  "folder in --out", cls="correct-result", call=_orphaned_scratch,
                  message=r"the dead driver's \.scratch-nodes-\* removed"))
