"""A dead rank fails the run at once; a stalled rank fails it within ~1.2x the collective timeout. Either
way the error is one line naming the rank and the cause. No hangs."""

import json
import os
import signal
import time

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.parallel.launch import spawn

pytestmark = [pytest.mark.dist, pytest.mark.slow]


def _train_then_die(rank, world, mark):
    """Both ranks train nano under DDP; after 2 steps rank 1 is SIGKILLed (no Python cleanup at all)."""
    from rlm_lab.parallel.bench.measure import fixed_batch
    from rlm_lab.parallel.mesh import Layout, build_mesh
    from rlm_lab.parallel.parallelize import parallelize
    from rlm_lab.models import build_model

    layout = Layout(dp=2)
    par = parallelize(build_model("nano")[0], layout, build_mesh(layout))
    x, y = fixed_batch(8, 16, 52)
    for step in range(1000):
        if rank == 1 and step == 2:
            with open(mark, "w") as f:
                json.dump({"killed_at": time.time()}, f)
            os.kill(os.getpid(), signal.SIGKILL)
        par.step(x, y)


def _stall(rank, world, mark):
    """Rank 1 is alive but never joins the all-reduce rank 0 waits in."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    if rank == 1:
        with open(mark, "w") as f:
            json.dump({"stalled_at": time.time()}, f)
        time.sleep(120)
    dist.all_reduce(torch.ones(4))


def test_killed_rank_fails_the_run_at_once(tmp_path):
    mark = tmp_path / "mark.json"
    with pytest.raises(RlmLabError) as e:
        spawn(_train_then_die, 2, args=(str(mark),), timeout_s=60)
    latency = time.time() - json.loads(mark.read_text())["killed_at"]
    print(f"killed rank detected after {latency:.2f} s: {e.value}")
    # one line naming the rank and the cause (not rank 0's "connection closed by peer")
    assert str(e.value) == "a worker failed (rank 1 was killed by SIGKILL); the other ranks were stopped"
    assert latency < 10, latency  # far below the 60 s timeout: the closed connection is seen at once


def test_stalled_rank_fails_within_the_timeout_and_is_named(tmp_path):
    mark, timeout = tmp_path / "mark.json", 5.0
    with pytest.raises(RlmLabError) as e:
        spawn(_stall, 2, args=(str(mark),), timeout_s=timeout)
    waited = time.time() - json.loads(mark.read_text())["stalled_at"]
    print(f"stalled rank: run failed {waited:.2f} s after the stall began (timeout {timeout} s): {e.value}")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("a worker failed (rank 1 stalled: no response within the 5 s"), msg
    # the collective timeout, a grace of 0.25 s for the peers to report, and 1 s for 2 busy cores
    assert timeout - 0.5 <= waited < 1.2 * timeout + 1, waited
