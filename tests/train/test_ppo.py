"""PPO end to end on CPU with a nano model: the actor and the critic both learn, the PPO stages are
emitted through TRL's profiling points, the reward-model run holds four models, bad input is one error."""

import pytest
import torch

pytest.importorskip("trl")

from trl.extras import profiling  # noqa: E402

from rlm_lab.errors import RlmLabError  # noqa: E402
from rlm_lab.models import load  # noqa: E402
from rlm_lab.tasks import ensure_data, get_task  # noqa: E402
from rlm_lab.train.ppo import PPOConfig, PPOTrainer  # noqa: E402

TASK = get_task("arithmetic", digits=2)


@pytest.fixture(scope="module")
def dataset():
    from datasets import Dataset

    return Dataset.from_list(ensure_data(TASK)["train"][:32])


def digits(completions, **_):
    """A dense toy reward a random model can earn: the share of digit characters."""
    return [sum(ch.isdigit() for ch in c) / 6 for c in completions]


def config(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path / "out"), max_steps=2, learning_rate=1e-3, critic_learning_rate=1e-3,
                per_device_train_batch_size=8, num_generations=4, max_completion_length=6, beta=0.05,
                use_cpu=True, bf16=False, activation_checkpointing=False, logging_steps=1, save_strategy="no",
                report_to="none", seed=0, disable_tqdm=True)
    return PPOConfig(**{**base, **kw})


def trainer(path, tmp_path, ds, reward_funcs=(digits,), **kw):
    model, tok = load(str(path))
    return PPOTrainer(model=model, reward_funcs=list(reward_funcs), args=config(tmp_path, **kw),
                      train_dataset=ds, processing_class=tok)


@pytest.fixture
def stage_names(monkeypatch):
    """Names passed to TRL's profiling points (what the stage tracer records)."""
    names = []
    original = profiling.ProfilingContext.__exit__

    def record(self, *exc):
        names.append(self.name.rsplit(".", 1)[-1])  # "PPOTrainer.values" -> "values"
        return original(self, *exc)

    monkeypatch.setattr(profiling.ProfilingContext, "__exit__", record)
    return names


def snapshot(module):
    return [p.detach().clone() for p in module.parameters()]


def changed(before, module):
    return any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_ppo_updates_actor_and_critic(nano_path, dataset, tmp_path, stage_names):
    tr = trainer(nano_path, tmp_path, dataset)
    assert set(tr.models_held) == {"actor", "critic", "reference"}
    assert type(tr.models_held["critic"]).__name__.endswith("ForTokenClassification")
    actor0, critic0 = snapshot(tr.model), snapshot(tr.critic)
    rollouts = []
    score = tr._generate_and_score_completions
    tr._generate_and_score_completions = lambda inputs: rollouts.append(score(inputs)) or rollouts[-1]
    tr.train()
    assert changed(actor0, tr.model), "policy parameters did not move"
    assert changed(critic0, tr.critic), "critic parameters did not move"
    logs = [h for h in tr.state.log_history if "value_loss" in h]
    assert len(logs) == 2
    for key in ("value_loss", "ppo/explained_variance", "ppo/value_clipfrac", "ppo/advantages_mean", "kl",
                "policy_loss", "ppo/score"):
        assert all(key in h and h[key] == h[key] for h in logs), key  # present and not NaN
    assert logs[0]["value_loss"] > 0  # the zero-initialised critic is wrong at first
    assert {"values", "advantage", "critic_update"} <= set(stage_names)
    # Advantages are per token (not one number per completion) and zero on padding.
    out = rollouts[0]
    adv, mask = out["advantages"], out["completion_mask"]
    assert adv.shape == mask.shape == out["values"].shape == out["returns"].shape
    assert torch.all(adv[mask == 0] == 0) and not torch.all(adv == adv[:, :1])
    assert out["old_per_token_logps"].shape == mask.shape  # needed for the KL reward with beta > 0


def test_reward_model_run_holds_four_models(nano_path, dataset, tmp_path, stage_names):
    from rlm_lab.train.reward_model import train_reward_model

    info = train_reward_model(TASK, nano_path, steps=2, out_dir=tmp_path / "rm", n_pairs=32, n_eval=16,
                              batch_size=8, max_new_tokens=4)
    assert (tmp_path / "rm" / "reward_model.json").exists() and 0.0 <= info["pairwise_accuracy"] <= 1.0
    tr = trainer(nano_path, tmp_path, dataset, max_steps=1, reward_source="reward_model",
                 reward_model_path=str(tmp_path / "rm"))
    held = tr.models_held
    assert list(held) == ["actor", "critic", "reference", "reward"]
    assert len({id(m) for m in held.values()}) == 4
    assert type(held["reward"]).__name__.endswith("ForSequenceClassification")
    tr.train()
    log = tr.state.log_history[0]
    assert "rewards/reward_model/mean" in log and "rewards/digits/mean" in log
    assert "reward_model" in stage_names


def test_raising_reward_is_one_clear_error(nano_path, dataset, tmp_path):
    def broken(completions, **_):
        raise ValueError("cannot parse")

    tr = trainer(nano_path, tmp_path, dataset, reward_funcs=(broken,), max_steps=1)
    with pytest.raises(RlmLabError, match="broken.*ValueError"):
        tr.train()


@pytest.mark.parametrize("kw, match", [
    (dict(reward_source="oracle"), "reward_source"),
    (dict(reward_source="reward_model"), "reward_model_path"),
    (dict(gamma=1.5), "gamma"),
])
def test_bad_config_is_one_clear_error(tmp_path, kw, match):
    with pytest.raises(RlmLabError, match=match):
        config(tmp_path, **kw)
