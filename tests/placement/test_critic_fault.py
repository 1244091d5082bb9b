"""A killed critic worker (PPO's ``split`` placement, ``rlm_lab.placement.critic_role``): the trainer fails
within its timeout with one line naming the critic, the record says failed and why, the metrics already written
are intact, and no role's process is left (the session's raylet/GCS stay until it closes)."""

import time

import pytest

pytestmark = pytest.mark.slow


def _is_role(pid):
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return False
    return any(n in cmd for n in (b"TrainerWorker", b"CriticWorker", b"RolloutWorker"))


def test_killed_critic_worker_fails_the_run_cleanly(ray_session, tmp_path):
    from rlm_lab.errors import RlmLabError
    from rlm_lab.chapters.ch05_placement.cases import ppo_placements, run_config
    from rlm_lab.placement.runtime import run_placement
    from rlm_lab.record import RunRecord, read_jsonl

    cfg = run_config("smoke", "ppo", rl_steps=50, seed=3)
    p = ppo_placements(cfg)["ppo_split"]
    with pytest.raises(RlmLabError, match="critic worker failed during") as err:
        run_placement(p, cfg, tmp_path / "run", session=ray_session, timeout_s=20, kill_critic_after_step=1)
    assert "\n" not in str(err.value)
    rec = RunRecord.load(tmp_path / "run", strict=False)
    res = rec.data["results"]
    assert res["seconds_to_failure"] - res["fault_injected_at_s"] < 20 + 5  # within the call timeout
    assert rec.data["status"].startswith("failed") and "critic worker failed" in rec.data["status"]
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")  # strict: every line intact
    assert 1 <= sum(1 for r in rows if "reward" in r) < 50
    time.sleep(1.0)
    assert not [pid for pid in ray_session.processes() if _is_role(pid)]
