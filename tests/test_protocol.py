"""The measurement protocol on fake commands: a tiny Python script that sleeps (or counts) a known amount, so
every test is fast and each assert fails for a plausible bug (swapped arms, mis-pairing, ABAB order, a gate that
does not wait, a child left behind)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlm_lab import protocol as P
from rlm_lab.errors import RlmLabError
from rlm_lab.record import RunRecord

QUIET = lambda: (0.0, 0.0, 0.0)  # noqa: E731 - the machine's real load must not decide a unit test
FAKE = textwrap.dedent("""
    import json, os, sys, time
    mode, arg = sys.argv[1], float(sys.argv[2])
    out = {"window": os.environ.get("RLM_WINDOW"), "pair": int(os.environ["RLM_PROTOCOL_PAIR"])}
    if mode == "sleep":
        t = time.perf_counter(); time.sleep(arg); out["seconds"] = time.perf_counter() - t
    elif mode == "paired":      # value grows with the pair: only a correct pairing gives constant ratios
        out["seconds"] = arg * (1 + out["pair"])
    elif mode == "seeded":      # the pair index given as an argument ({pair})
        out["seconds"] = arg * (1 + int(sys.argv[3]))
    elif mode == "counter":     # value = how many runs came before (a drifting machine)
        f = sys.argv[3]
        n = int(open(f).read()) + 1 if os.path.exists(f) else 1
        open(f, "w").write(str(n)); out["seconds"] = float(n)
    elif mode == "hang":
        open(sys.argv[3], "w").write(str(os.getpid())); time.sleep(arg)
    elif mode == "fail":
        print("something broke in the child"); sys.exit(3)
    elif mode == "silent":
        sys.exit(0)
    from rlm_lab.protocol import report
    report(**out)
""")


@pytest.fixture()
def fake(tmp_path):
    path = tmp_path / "fake.py"
    path.write_text(FAKE)
    return lambda *args: P.Arm(args[0], (sys.executable, str(path), *map(str, args[1:])))


def test_abba_order():
    assert P.order(4) == [(0, "A"), (0, "B"), (1, "B"), (1, "A"), (2, "A"), (2, "B"), (3, "B"), (3, "A")]


@pytest.mark.slow  # two full protocol comparisons of fresh processes: about 10 s on 2 cores
def test_faster_arm_found_and_swapped_arms_say_the_opposite(fake, tmp_path):
    fast, slow = fake("fast", "sleep", 0.02), fake("slow", "sleep", 0.12)
    res = P.compare(fast, slow, "seconds", tmp_path / "r1", repeats=3, loadavg=QUIET, say=lambda *_: None)
    s = res["summary"]
    assert s["word"] == "faster" and s["ratio"]["hi"] < 1 and 0.05 < s["ratio"]["estimate"] < 0.6
    assert [r["arm"] for r in res["repeats"]] == ["A", "B", "B", "A", "A", "B"]
    rec = RunRecord.load(tmp_path / "r1")
    assert rec.data["status"] == "completed"
    window = rec.config["window"]
    # the window reached every child, every row carries it and the loads around the run
    assert all(r["report"]["window"] == window == r["window"] for r in rec.results["repeats"])
    assert all("per_core" in r["load_before"] and "per_core" in r["load_after"] for r in rec.results["repeats"])
    assert rec.config["machine_key"]["cores"] == os.cpu_count()
    assert rec.data["provenance"]["machine_key"]["cores"] == os.cpu_count()
    back = P.compare(slow, fast, "seconds", tmp_path / "r2", repeats=3, loadavg=QUIET, say=lambda *_: None)
    assert back["summary"]["word"] == "slower"
    # a rate: higher is better, so the same ratio below 1 reads the other way
    rate = P.summarize([1.0, 1.1, 1.05], [2.0, 2.1, 2.05], higher_is_better=True)
    assert rate["word"] == "slower"
    assert P.summarize([1.0, 1.1], [2.0, 2.1])["word"] == "undecided"   # two pairs decide nothing


def test_pairs_are_paired(fake, tmp_path):
    res = P.compare(fake("a", "paired", 1.0), fake("b", "paired", 4.0), "seconds", tmp_path / "r", repeats=4,
                    loadavg=QUIET, say=lambda *_: None)
    assert res["summary"]["ratios"] == pytest.approx([0.25] * 4)  # A_i with B_i of the same pair, never another
    assert res["summary"]["values"]["a"] == pytest.approx([1, 2, 3, 4])
    # {pair} in an argument: both members of a pair get the same index (e.g. the same seed)
    res = P.compare(fake("a", "seeded", 1.0, "{pair}"), fake("b", "seeded", 2.0, "{pair}"), "seconds",
                    tmp_path / "r2", repeats=2, loadavg=QUIET, say=lambda *_: None)
    assert res["summary"]["values"] == {"a": [1, 2], "b": [2, 4]}


def test_abba_cancels_a_drift_that_abab_would_call_a_speed_up(fake, tmp_path):
    counter = tmp_path / "count"
    res = P.compare(fake("a", "counter", 0, counter), fake("b", "counter", 0, counter), "seconds",
                    tmp_path / "r", repeats=4, loadavg=QUIET, say=lambda *_: None)
    # runs 1..8 in order A B B A A B B A: A = 1, 4, 5, 8 and B = 2, 3, 6, 7
    assert res["summary"]["values"] == {"a": [1, 4, 5, 8], "b": [2, 3, 6, 7]}
    assert res["summary"]["word"] == "undecided"  # two arms doing the same work
    # the same drift measured A B A B (five pairs): every ratio < 1, a false "faster"
    assert P.summarize([1, 3, 5, 7, 9], [2, 4, 6, 8, 10])["word"] == "faster"


def test_the_gate_waits_for_the_load_and_marks_a_timeout():
    cores = os.cpu_count()
    seq = iter([(4.0 * cores, 0, 0), (3.0 * cores, 0, 0), (0.5 * cores, 0, 0)])
    slept = []
    g = P.gate(0.75, 60, 2.0, loadavg=lambda: next(seq), sleep=slept.append, clock=lambda: 2.0 * len(slept))
    assert g["passed"] and slept == [2.0, 2.0] and g["load"]["per_core"] == pytest.approx(0.5)
    slept.clear()
    g = P.gate(0.75, 5, 2.0, loadavg=lambda: (9.0 * cores, 0, 0), sleep=slept.append,
               clock=lambda: 2.0 * len(slept))
    assert not g["passed"] and g["waited_s"] >= 5 and len(slept) == 3


def test_a_run_over_the_gate_is_marked(fake, tmp_path):
    busy = lambda: (9.0 * os.cpu_count(), 0, 0)  # noqa: E731
    res = P.compare(fake("a", "sleep", 0), fake("b", "sleep", 0), "seconds", tmp_path / "r", repeats=2,
                    gate_timeout_s=0.01, loadavg=busy, sleep=lambda s: None, say=lambda *_: None)
    assert res["gate_timeouts"] == 4 and {r["gate"] for r in res["repeats"]} == {"timeout"}


def test_bad_input_is_one_line_before_any_run(fake, tmp_path):
    a, b = fake("a", "sleep", 0), fake("b", "sleep", 0)
    cases = [(dict(a=a, b=a), "both arms are named 'a'"), (dict(repeats=1), "at least 2 pairs"),
             (dict(a=P.Arm("x", ("/no/such/python",))), "is not an executable"),
             (dict(gate_load=0), "gate load per core must be a positive"), (dict(metric=""), "name the metric"),
             (dict(repeats=None, size=None), "give the size")]
    for kw, msg in cases:
        args = dict(a=a, b=b, metric="seconds", out=tmp_path / "never", repeats=2) | kw
        with pytest.raises(RlmLabError, match=msg):
            P.compare(args.pop("a"), args.pop("b"), args.pop("metric"), args.pop("out"), loadavg=QUIET, **args)
        assert not (tmp_path / "never").exists()  # refused before any work


def test_a_failing_child_fails_the_record_with_its_line(fake, tmp_path):
    with pytest.raises(RlmLabError, match=r"arm 'bad' \(pair00-B\) exited 3: something broke in the child"):
        P.compare(fake("ok", "sleep", 0), fake("bad", "fail", 0), "seconds", tmp_path / "r", repeats=2,
                  loadavg=QUIET, say=lambda *_: None)
    rec = json.loads((tmp_path / "r" / "record.json").read_text())
    assert rec["status"].startswith("failed") and len(rec["results"]["repeats"]) == 1
    with pytest.raises(RlmLabError, match=r"reported no positive 'seconds'"):
        P.compare(fake("ok", "sleep", 0), fake("mute", "silent", 0), "seconds", tmp_path / "r2", repeats=2,
                  loadavg=QUIET, say=lambda *_: None)


RUNNER = textwrap.dedent("""
    import sys
    from rlm_lab import protocol as P
    fake, pidfile, out = sys.argv[1:4]
    arm = P.Arm("hang", (sys.executable, fake, "hang", "60", pidfile))
    P.compare(arm, P.Arm("other", (sys.executable, fake, "sleep", "0")), "seconds", out, repeats=2,
              loadavg=lambda: (0.0, 0.0, 0.0))
""")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_marks_the_record_and_leaves_no_child(fake, tmp_path, sig):
    (tmp_path / "runner.py").write_text(RUNNER)
    pidfile, out = tmp_path / "child.pid", tmp_path / "r"
    fake("x")  # writes fake.py
    proc = subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "fake.py"), str(pidfile),
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while not (pidfile.exists() and pidfile.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert proc.returncode != 0
    assert json.loads((out / "record.json").read_text())["status"] == "interrupted"
    gone = time.time() + 5
    while Path(f"/proc/{child}").exists() and time.time() < gone:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or \
        Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
