"""Chapter 4's layouts under 2 torchrun agents (issue 25): ``rlm-lab parallel --nnodes 2``, node ranks 0 and 1 of a
c10d rendezvous on 127.0.0.1, each agent running one rank (rlm_lab.parallel.nodes).

- DP, FSDP2 (ZeRO-3) and TP over the two agents pass today's checks (every rank against one process, the
  counted collectives against the formula: exit 0) and equal the same layouts run by one process per rank on
  one node (tests/parallel/conftest.py): the same losses, bit for bit, and the same collectives (calls and
  bytes). Exactly: the same ranks run the same operations with the same data and one thread each; only the
  way the processes were started and met differs;
- nothing the agents or their ranks open listens beyond loopback (the rendezvous store, the store the workers
  share, gloo's pairs);
- an agent SIGKILLed mid-run ends the run with one line naming its node, a failed record, and no process of
  either agent or of their ranks left; SIGINT to the launcher stops everything the same way, record
  ``interrupted``; a SIGKILLed launcher leaves no agent or rank behind.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.dist]

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, flags", [("dp2", ["--dp", "2"]), ("dp2-zero3", ["--dp", "2", "--zero", "3"]),
                                          ("tp2", ["--tp", "2"])])
def test_two_agents_match_one_node(name, flags, two_rank_results, tmp_path, capsys):
    from rlm_lab.cli import main

    out = tmp_path / "run"
    assert main(["parallel", "--nnodes", "2", *flags, "--steps", "3", "--out", str(out)]) == 0, capsys.readouterr().err
    rec = json.loads((out / "record.json").read_text())
    res, one = rec["results"], two_rank_results[name]
    assert rec["status"] == "completed"
    assert res["nodes"]["nnodes"] == 2 and res["nodes"]["nproc_per_node"] == 1 and res["nodes"]["agent_exit_codes"] == [0, 0]
    assert res["world"] == 2 and len(res["per_rank"]) == 2 and all(pr["check"] for pr in res["per_rank"])
    assert res["losses"] == one["losses"]  # bit for bit
    assert {k: (v["calls"], v["bytes"]) for k, v in res["comm"].items()} == \
        {k: (v["calls"], v["bytes"]) for k, v in one["comm"].items()}
    assert res["comm"], "no collective counted: the equality above would say little"


def _cli(args, out, log):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-m", "rlm_lab.cli", "parallel", "--nnodes", "2", "--dp", "2",
                             "--steps", "100000", "--no-check", "--out", str(out), *args], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=log.open("w"), start_new_session=True)


def _ranks_running(pid, n=2, wait_s=300):
    """The launcher's process tree once ``n`` ranks (``-m rlm_lab.cli parallel`` under torchrun) run."""
    from rlm_lab.host import descendants

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        tree = descendants(pid)
        ranks = []
        for p in tree:
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"rlm_lab.cli" in cmd and b"parallel" in cmd and b"_torchrun-agent" not in cmd and b"--nnodes" not in cmd:
                ranks.append(p)
        if len(ranks) >= n:
            return tree
        time.sleep(0.3)
    pytest.fail(f"{n} ranks did not start within {wait_s} s")


def _agent(tree, rank):
    for p in tree:
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"_torchrun-agent" in cmd and cmd[cmd.index(b"--node-rank") + 1] == str(rank).encode():
            return p
    raise AssertionError(f"no agent of node rank {rank} in {tree}")


def _gone(pids, wait_s):
    from rlm_lab.host import alive

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def test_killed_agent_is_one_line_naming_its_node_and_nothing_listens_beyond_loopback(tmp_path, sockets):
    from rlm_lab.host import descendants

    out, log = tmp_path / "run", tmp_path / "stderr.txt"
    proc = _cli([], out, log)
    try:
        tree = _ranks_running(proc.pid)
        deadline = time.monotonic() + 120
        while True:  # until the ranks' group is up: the agent serving both stores, and each rank's gloo listener
            tree = sorted({proc.pid, *tree, *descendants(proc.pid)})
            bound = sockets.bound(tree)
            if len({pid for pid, *_ in bound}) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len({pid for pid, *_ in bound}) >= 3, bound
        exposed = [b for b in bound if not sockets.loopback(b[2])]
        assert exposed == [], f"listening beyond loopback: {exposed}"
        os.kill(_agent(tree, 1), signal.SIGKILL)
        assert proc.wait(60) == 2
        err = [ln for ln in log.read_text().splitlines() if ln.strip()]
        assert err == ["rlm-lab: error: node 1 (torchrun agent, node rank 1) was killed by SIGKILL; "
                       "the other nodes were stopped"], err
        rec = json.loads((out / "record.json").read_text())
        assert rec["status"].startswith("failed") and "node 1" in rec["status"]
        assert _gone(set(tree), 10) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_ctrl_c_stops_every_agent_and_marks_the_record_interrupted(tmp_path):
    out, log = tmp_path / "run", tmp_path / "stderr.txt"
    proc = _cli([], out, log)
    try:
        tree = _ranks_running(proc.pid)
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(20) == 130, log.read_text()[-800:]
        assert "Traceback" not in log.read_text()
        assert json.loads((out / "record.json").read_text())["status"] == "interrupted"
        assert _gone(set(tree), 10) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_sigkilled_launcher_leaves_no_agent_or_rank(tmp_path):
    """The launcher cannot clean up after a SIGKILL: its agents get SIGTERM from the kernel (they die with it)
    and stop their ranks, which also die with their agent."""
    out, log, tree = tmp_path / "run", tmp_path / "stderr.txt", []
    proc = _cli([], out, log)
    try:
        tree = _ranks_running(proc.pid)
        proc.kill()
        proc.wait(10)
        assert _gone(set(tree), 15) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        from rlm_lab.host import alive

        for p in tree:
            if alive(p):
                os.kill(p, signal.SIGKILL)


def test_a_sigkilled_driver_leaves_no_scratch_folder(tmp_path):
    """issue 42: a SIGKILLed `parallel --nnodes` driver left .scratch-nodes-* in --out. Its agents, SIGTERMed by the
    kernel when it dies, remove it as they end."""
    out, log = tmp_path / "run", tmp_path / "stderr.txt"
    proc = _cli([], out, log)
    try:
        tree = _ranks_running(proc.pid)
        assert list(out.glob(".scratch-nodes-*")), "no scratch folder while the run runs: the test would say nothing"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert _gone(set(tree), 30) == []
        deadline = time.monotonic() + 10
        while list(out.glob(".scratch-nodes-*")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(out.glob(".scratch-nodes-*")) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_stopped_agent_is_the_node_the_error_names():
    """issue 42: a SIGSTOPped agent ended the run after the store's timeout with a line naming the *other* node. The
    launcher's watch sees the stopped process (state T) and its cause names that node, whatever the others said.
    (Two sleeping processes stand for the agents: the watch and the cause are what is checked.)"""
    from rlm_lab.parallel.nodes import Agents

    agents = Agents.__new__(Agents)
    agents.procs = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    agents.seen, agents.stopped, agents.logs = set(), set(), []
    try:
        agents.watch()
        assert agents.stopped == set()
        os.kill(agents.procs[1].pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not agents.stopped and time.monotonic() < deadline:
            agents.watch()
            time.sleep(0.05)
        assert agents.stopped == {1}
        assert agents.cause([1, None]).startswith("node 1 (torchrun agent, node rank 1) was stopped (SIGSTOP")
    finally:
        for p in agents.procs:
            p.kill()
            p.wait()
