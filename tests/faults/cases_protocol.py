"""The measurement protocol (rlm_lab.protocol) and the runs it drives (the runtime-overhead and throughput-goal
arms of chapter 6) given input they cannot use: one RlmLabError line each, before any repeat or run starts. The
stops (Ctrl-C, SIGTERM: a marked record and no child left) are in tests/test_protocol.py."""

import sys

from fault_matrix import call_case

CASES = []


def row(id, what, fn, doc, message):
    CASES.append(call_case(id, what, fn, doc, message))


def _arm(name, *cmd):
    from rlm_lab.protocol import Arm

    return Arm(name, cmd or (sys.executable, "-c", "pass"))


def _compare(tmp, **kw):
    from rlm_lab.protocol import compare

    args = dict(a=_arm("a"), b=_arm("b"), metric="seconds", out=tmp / "never", repeats=2) | kw
    compare(args.pop("a"), args.pop("b"), args.pop("metric"), args.pop("out"), loadavg=lambda: (0.0, 0.0, 0.0),
            **args)


row("protocol-one-repeat", "a comparison of one pair (no interval can come of it)",
    lambda tmp: _compare(tmp, repeats=1), "protocol.compare(..., repeats=1)",
    r"protocol: 1 repeats; an interval needs at least 2 pairs")
row("protocol-same-arms", "both arms under one name", lambda tmp: _compare(tmp, b=_arm("a")),
    "protocol.compare(Arm('a', ...), Arm('a', ...))", r"protocol: both arms are named 'a'; the ratio needs two")
row("protocol-no-executable", "an arm whose command is not an executable",
    lambda tmp: _compare(tmp, a=_arm("a", "/no/such/python")), "protocol.compare(Arm('a', ('/no/such/python',)), ...)",
    r"protocol: arm 'a': '/no/such/python' is not an executable")
row("protocol-gate-zero", "a load gate of 0 per core (it would never open)", lambda tmp: _compare(tmp, gate_load=0),
    "protocol.compare(..., gate_load=0)", r"protocol: the gate load per core must be a positive number, not 0")
row("protocol-no-size", "neither a size (whose repeat count is fixed) nor a repeat count",
    lambda tmp: _compare(tmp, repeats=None), "protocol.compare(..., repeats=None, size=None)",
    r"protocol: give the size \(its repeat count is fixed in rlm_lab.sizes\) or repeats")
row("overhead-arm-unknown", "an arm the runtime-overhead comparison does not know",
    lambda tmp: __import__("rlm_lab.chapters.ch06_async.overhead", fromlist=["x"]).run_arm("fast", "smoke", tmp),
    "chapters.ch06_async.overhead.run_arm('fast', 'smoke')", r"unknown arm 'fast'")
row("overhead-too-few-steps", "a runtime-overhead run too short for its throughput window",
    lambda tmp: __import__("rlm_lab.chapters.ch06_async.overhead", fromlist=["x"]).run_arm("plain", "smoke", tmp, steps=2),
    "chapters.ch06_async.overhead.run_arm('plain', 'smoke', steps=2)",
    r"2 steps: the throughput window needs at least 3 \(the first is left out\)")
row("throughput-arm-unknown", "an arm the throughput goal does not know",
    lambda tmp: __import__("rlm_lab.chapters.ch06_async.throughput", fromlist=["x"]).run_arm("fastest", "smoke", 0, tmp),
    "chapters.ch06_async.throughput.run_arm('fastest', 'smoke', 0)", r"unknown arm 'fastest'")


def _role_threads(tmp):
    from rlm_lab.chapters.ch06_async.cases import campaign_config
    from rlm_lab.cost.placement_spec import get_placement
    from rlm_lab.chapters.ch05_placement.cases import cluster
    from rlm_lab.placement.runtime import algo_roles, run_placement

    cfg = campaign_config("smoke", 0)
    run_placement(get_placement("colocated", cluster(), algo_roles(cfg)), cfg, tmp / "never",
                  role_threads={"critic": 2})


row("placement-role-threads", "torch threads asked for a role the runtime does not pin that way", _role_threads,
    "placement.runtime.run_placement(..., role_threads={'critic': 2})",
    r"role_threads: give actor and/or rollout, each 1..2 threads; got \{'critic': 2\}")
