"""PPO with a shared actor-critic (critic="shared"): a value head on the policy's backbone. The hidden states the
hook catches equal the backbone's own output; the rollout values equal the head on a separate backbone forward;
a run holds no critic model, steps the head with the actor's one optimizer through one backward per micro-batch
(the separate critic's run makes two), emits no critic_update; bad configs are one error."""

import pytest
import torch

pytest.importorskip("trl")

from rlm_lab.errors import RlmLabError  # noqa: E402
from rlm_lab.models import build_model  # noqa: E402
from rlm_lab.train import shared_critic as SC  # noqa: E402

from .test_ppo import changed, config, dataset, snapshot, stage_names, trainer  # noqa: E402,F401


def test_capture_and_values_match_the_backbone():
    model, _ = build_model("nano", seed=0)
    head = SC.attach_value_head(model)
    assert SC.attach_value_head(model) is head and torch.count_nonzero(head.weight) == 0   # kept; starts at 0
    torch.nn.init.normal_(head.weight)
    ids = torch.randint(3, 20, (4, 9))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        with SC.HiddenCapture(model) as cap:
            model(input_ids=ids[:2], attention_mask=mask[:2])
            model(input_ids=ids[2:], attention_mask=mask[2:])
        direct = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        assert torch.allclose(cap.hidden(), direct)
        v = SC.values(head, direct, 3)                    # positions 5, 6, 7 predict tokens 6, 7, 8
        assert v.shape == (4, 3) and torch.allclose(v, (direct[:, 5:8] @ head.weight.T + head.bias).squeeze(-1))
    with SC.HiddenCapture(model) as cap:
        pass
    assert cap.hidden() is None and not model.model._forward_hooks               # the hook is removed


def test_config_refusals(tmp_path):
    with pytest.raises(RlmLabError, match="unknown critic"):
        config(tmp_path, critic="twin")
    with pytest.raises(RlmLabError, match="no value_model_path"):
        config(tmp_path, critic="shared", value_model_path="somewhere")


def _count_backwards(tr):
    calls = []
    orig = tr.accelerator.backward
    tr.accelerator.backward = lambda *a, **k: calls.append(1) or orig(*a, **k)
    return calls


def test_shared_run(nano_path, dataset, tmp_path, stage_names):  # noqa: F811
    tr = trainer(nano_path, tmp_path / "shared", dataset, critic="shared")
    assert tr.critic is None and set(tr.models_held) == {"actor", "reference"}
    head0, body0 = snapshot(tr.value_head), snapshot(tr.model.model)
    rollouts = []
    score = tr._generate_and_score_completions
    tr._generate_and_score_completions = lambda inputs: rollouts.append(score(inputs)) or rollouts[-1]
    backwards = _count_backwards(tr)
    tr.train()
    opt_params = {id(p) for g in tr.optimizer.param_groups for p in g["params"]}
    assert all(id(p) in opt_params for p in tr.value_head.parameters())   # the actor's optimizer steps the head
    assert changed(head0, tr.value_head) and changed(body0, tr.model.model)
    assert "critic_update" not in stage_names and "values" in stage_names
    assert len(backwards) == tr.state.global_step                        # one backward per step (GA 1)
    # the rollout's values are the head on the policy's backbone (as it was then: compare the first rollout's
    # zero head: every first value is 0)
    assert torch.count_nonzero(rollouts[0]["values"]) == 0
    assert [h for h in tr.state.log_history if "value_loss" in h]


def test_separate_run_makes_two_backwards(nano_path, dataset, tmp_path):  # noqa: F811
    tr = trainer(nano_path, tmp_path / "sep", dataset, max_steps=1)
    backwards = _count_backwards(tr)
    tr.train()
    assert len(backwards) == 2 * tr.state.global_step
