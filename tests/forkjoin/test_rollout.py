"""GRPOTrainer's rollout_func: the trie row as the completion, TRL's env_mask on the decoded tokens only, the
trace text for the reward, which on_trace hands to the task's reward."""

from types import SimpleNamespace

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.forkjoin import ForkJoinRollout, Limits, on_trace
from rlm_lab.forkjoin.layout import completion, loss_mask
from rlm_lab.forkjoin.sft import segments_of
from rlm_lab.tasks import parallelism_aware_reward, parse_task
from scripted import TOK, Scripted


def test_rollout_returns_trie_rows_and_traces(monkeypatch):
    import rlm_lab.forkjoin.rollout as R

    monkeypatch.setattr(R, "install", lambda model, tok: model)  # the scripted model has no backbone to hook
    trainer = SimpleNamespace(processing_class=TOK, model=Scripted(), args=SimpleNamespace(temperature=1.0))
    roll = ForkJoinRollout(Limits(8, 8, 14))
    out = roll(["3*1+2*2=", "3*1+2*2="], trainer)
    seg = segments_of("<ab>a:3*1=3;b:2*2=4;3+4=7", TOK)
    assert out["completion_ids"][0] == completion(seg) and out["env_mask"][0] == loss_mask(seg)
    assert out["trace"] == ["<ab>a:3*1=3;b:2*2=4;3+4=7"] * 2
    assert out["prompt_ids"][0] == TOK("3*1+2*2=", add_special_tokens=False)["input_ids"]
    assert roll.work == [[seg.work] * 2] and roll.depth == [[seg.depth] * 2]
    reward = on_trace(parallelism_aware_reward(parse_task("psum:trace=par")))
    decoded = TOK.batch_decode(out["completion_ids"], skip_special_tokens=True)  # what TRL hands the reward
    assert reward(decoded, trace=out["trace"], answer=["<ab>a:3*1=3;b:2*2=4;3+4=7"] * 2) == [pytest.approx(1.1)] * 2
    assert reward.__name__ == "parallelism_aware"


def test_a_trace_reward_without_traces_is_a_clear_error():
    reward = on_trace(parallelism_aware_reward(parse_task("psum:trace=par")))
    with pytest.raises(RlmLabError, match="needs the traces of ForkJoinRollout"):
        reward(["x"], answer=["y"])
