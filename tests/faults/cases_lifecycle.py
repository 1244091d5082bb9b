"""Stops and orphans (issue 18 items 2 and 3), the mechanisms under every long run: SIGTERM and SIGINT end an
open record ``interrupted`` within 10 s, also when the run inherited SIGINT ignored (a job started with ``&``
by a non-interactive shell), and a child that must die with its parent does when the parent is SIGKILLed.

The same promises for whole commands with a local Ray (``rlm-lab place``, the asynchrony campaign, ``rlm-lab
longtail``; SIGKILL of the driver; the sockets the head listens on; the head started beside four busy loops)
are checked in ``tests/placement/test_ray_lifecycle.py``, each with its own Ray head."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fault_matrix import REPO, Case

# a run with an open record that waits to be stopped; argv[1]: its folder, argv[2]: ignore SIGINT first
RUN = """
import signal, sys, time
if sys.argv[2] == "1":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a non-interactive shell inherits it
from rlm_lab.records.lifecycle import RunRecord, Terminated, interruptible
rec = RunRecord(sys.argv[1], {"what": "fault row"}, command="fault row", seed=0)
interruptible()
try:  # as the commands do: the signal's exception ends the run, one line, exit 130
    print("ready", flush=True)
    while True:
        time.sleep(0.1)
except (Terminated, KeyboardInterrupt):
    print("interrupted", file=sys.stderr)
    sys.exit(130)
"""


def _stopped(tmp: Path, sig: int, ignore_sigint: bool) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", RUN, str(tmp / "run"), "1" if ignore_sigint else "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()[-2000:]
        t0 = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=10)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    status = json.loads((tmp / "run" / "record.json").read_text())["status"]
    assert status == "interrupted", status
    err = proc.stderr.read()
    assert "Traceback" not in err and proc.returncode == 130, (proc.returncode, err[-2000:])
    print(f"record {status} {took:.1f} s after {signal.Signals(sig).name}, exit {proc.returncode}")


def sigterm(tmp):
    """SIGTERM to a run with an open record"""
    _stopped(tmp, signal.SIGTERM, False)


def sigint(tmp):
    """SIGINT to a run with an open record"""
    _stopped(tmp, signal.SIGINT, False)


def sigint_inherited_ignored(tmp):
    """SIGINT to a run started with SIGINT ignored"""
    _stopped(tmp, signal.SIGINT, True)


# a parent that starts a child which must die with it (as the Ray head and the torch.distributed ranks do)
PARENT = """
import os, subprocess, sys, time
from rlm_lab.host import die_with_parent
me = os.getpid()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         preexec_fn=lambda: die_with_parent(15, me))
print(child.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def parent_killed(tmp):
    """SIGKILL to a parent whose child was started with die_with_parent"""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp)
    child = int(parent.stdout.readline())
    try:
        assert _alive(child)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the child outlived its SIGKILLed parent by 10 s"
        print("child ended with its parent")
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


CASES = [
    Case("sigterm-open-record", "SIGTERM to a long run (the record must say interrupted, within 10 s)",
         cls="correct-result", call=sigterm, message=r"record interrupted .* after SIGTERM"),
    Case("sigint-open-record", "SIGINT (Ctrl-C) to a long run", cls="correct-result", call=sigint,
         message=r"record interrupted .* after SIGINT"),
    Case("sigint-inherited-ignored", "SIGINT to a run started in the background by a script, which inherits SIGINT "
         "ignored (the place driver went on to the end and said completed)", cls="correct-result",
         call=sigint_inherited_ignored, message=r"record interrupted .* after SIGINT"),
    Case("parent-sigkilled", "SIGKILL of a driver whose child must end with it (the local Ray head, a rank): no "
         "orphan 10 s later", cls="correct-result", call=parent_killed, message=r"child ended with its parent"),
]
