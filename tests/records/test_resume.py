"""Checkpoint + resume on the nano model: a run interrupted after a checkpoint and resumed with
``run(cfg, resume=True)`` ends with the same rewards and the same weights as an uninterrupted run with the
same seed (the independent computation the resume is checked against). Also: the SFT cache key changes with
the task file's contents, and a killed SFT cache writer's temp folder is cleaned by the next run.
(A rerun into a finished folder is a row of the fault matrix: tests/faults/cases_records.py.)"""

import json
import subprocess
import sys

import pytest

from rlm_lab.record import RecordError, load_record
from rlm_lab.train.config import make_config


def length_reward(completions, **_):
    return [float(len(c)) / 6 for c in completions]


def step_counter():
    """A TrainerCallback that lists the optimizer steps this process actually ran."""
    from transformers import TrainerCallback

    class Steps(TrainerCallback):
        ran: list = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ran.append(state.global_step)

    return Steps()


class StopAfterSave:
    """A TrainerCallback that raises KeyboardInterrupt (what Ctrl-C does) right after checkpoint ``step``."""

    def __init__(self, step):
        from transformers import TrainerCallback

        outer = self

        class CB(TrainerCallback):
            def on_save(self, args, state, control, **kwargs):
                if state.global_step == outer.step:
                    raise KeyboardInterrupt

        self.step, self.cb = step, CB()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    mp = pytest.MonkeyPatch()
    mp.setenv("RLM_CACHE_DIR", str(root / "cache"))
    mp.setenv("RLM_RUNS_DIR", str(root / "runs"))

    def make(name, **changes):
        base = dict(model="nano", sft_steps=4, sft_batch_size=16, rl_steps=4, batch_size=8, num_generations=4,
                    max_completion_length=4, eval_problems=8, eval_every=0, eval_batch_size=8, eval_max_new_tokens=4,
                    disable_tqdm=True, trace=False, extra={"save_steps": 2}, out=str(root / "runs" / name))
        return make_config("grpo", "smoke", **{**base, **changes})

    yield make
    mp.undo()


def rewards(rec):
    return [r["reward"] for r in rec.metrics() if r.get("phase") == "grpo" and "reward" in r]


def test_interrupted_then_resumed_equals_uninterrupted(tiny):
    import torch

    from rlm_lab.train.run import run

    full = run(tiny("full"), reward_funcs=[length_reward])
    cfg = tiny("cut")
    with pytest.raises(KeyboardInterrupt):
        run(cfg, callbacks=[StopAfterSave(2).cb], reward_funcs=[length_reward])
    cut = json.loads((cfg.run_dir / "record.json").read_text())
    assert cut["status"] == "interrupted" and (cfg.run_dir / "checkpoints" / "checkpoint-2").is_dir()
    with pytest.raises(RecordError, match="interrupted"):
        load_record(cfg.run_dir)
    assert len(rewards(load_record(full.dir))) == 4

    steps = step_counter()
    resumed = run(cfg, callbacks=[steps], reward_funcs=[length_reward], resume=True)
    assert steps.ran == [3, 4]  # continued from the checkpoint, not started over
    back = load_record(cfg.run_dir)
    assert back.data["status"] == "completed" and back.results["resumed_from_step"] == 2
    assert back.data["resumed"][0]["from_status"] == "interrupted"
    assert rewards(back) == rewards(load_record(full.dir))  # no step lost or logged twice, same samples
    assert [r["step"] for r in back.metrics() if r.get("phase") == "grpo" and "reward" in r] == [1, 2, 3, 4]
    a, b = full.trainer.model.state_dict(), resumed.trainer.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ"
    assert not (cfg.run_dir / "checkpoints").exists()  # a completed run keeps no checkpoints
    with pytest.raises(RecordError, match="already completed"):
        run(cfg, reward_funcs=[length_reward], resume=True)


def test_sft_cache_key_changes_with_the_task_file(tiny, tmp_path):
    from rlm_lab.train.sft import sft_cache_key

    cfg = tiny("key")
    f = tmp_path / "train.jsonl"
    f.write_text('{"prompt": "1+1=", "answer": "2"}\n')
    k1 = sft_cache_key(cfg, f)
    assert sft_cache_key(cfg, f) == k1
    f.write_text('{"prompt": "1+1=", "answer": "3"}\n')
    assert sft_cache_key(cfg, f) != k1
    assert sft_cache_key(cfg.replace(sft_steps=5), f) != sft_cache_key(cfg, f)


def test_a_killed_sft_cache_writer_leaves_a_temp_folder_the_next_run_removes(tmp_path):
    import os

    from rlm_lab.train.run import _clean_stale_cache_temps

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".abc123.{int(dead.stdout)}.tmp"  # a writer that is gone (SIGKILL before the rename)
    live = tmp_path / f".def456.{os.getpid()}.tmp"  # a writer still at work: not touched
    done = tmp_path / "abc123"
    for d in (stale, live, done):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"x")
    _clean_stale_cache_temps(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, done.name])
