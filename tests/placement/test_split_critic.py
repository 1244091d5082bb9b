"""The split placement's PPO (critic in its own actor, ``rlm_lab.placement.critic_role``) learns exactly what
PPO with its critic in-process learns, from the same seed: rewards, value losses, actor and critic weights.

No Ray here (fast): the critic worker is a plain object behind a stand-in handle whose ``.remote`` calls run at
once, so what is checked is the protocol (values, the deferred update, the scheduler, the metrics) against
the independent in-process implementation (``rlm_lab.train.ppo``). The Ray wiring itself is measured by
``rlm-lab place --placement ppo_split`` (chapter 5's record) and checked there against ``ppo_colocated``.
"""

import types

import pytest
import torch

STEPS = 2


class Handle:
    """A stand-in for a Ray actor handle: ``h.method.remote(*a)`` runs ``obj.method(*a)`` now."""

    def __init__(self, obj):
        self.obj, self.calls = obj, []

    def __getattr__(self, name):
        fn = getattr(self.obj, name)

        def remote(*args):
            self.calls.append(name)
            return fn(*args)

        return types.SimpleNamespace(remote=remote)


def _train(cfg, split: bool, tmp_path):
    from rlm_lab.placement.critic_role import CriticWorker, RemoteCritic
    from rlm_lab.placement.runtime import _sft_checkpoint
    from rlm_lab.placement.critic_role import split_trainer_class
    from rlm_lab.train.rl import make_trainer
    from rlm_lab.tasks import ensure_data, parse_task
    from transformers import set_seed

    path = _sft_checkpoint(cfg)
    task = parse_task(cfg.task)
    handle = None
    if split:
        with torch.random.fork_rng():  # the worker lives in another process in a real run
            handle = Handle(CriticWorker(torch.get_num_threads(), str(path), cfg.rl_lr))
    set_seed(cfg.seed)
    trainer = make_trainer(cfg, path, ensure_data(task)["train"], task, tmp_path / ("s" if split else "c"),
                           trainer_cls=split_trainer_class() if split else None)
    if split:
        trainer.use_remote_critic(RemoteCritic(handle, lambda ref, timeout=None: ref, 60))
    trainer.train()
    actor = {n: p.detach().clone() for n, p in trainer.accelerator.unwrap_model(trainer.model).named_parameters()}
    critic = handle.obj.state_dict() if split else {
        k: v.detach().clone() for k, v in trainer.accelerator.unwrap_model(trainer.critic_trainer.model).state_dict().items()}
    logs = [r for r in trainer.state.log_history if "reward" in r]
    return {"actor": actor, "critic": critic, "logs": logs, "calls": handle.calls if split else [],
            "held": set(trainer.models_held)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from rlm_lab.chapters.ch05_placement.cases import run_config

    cfg = run_config("smoke", "ppo", rl_steps=STEPS, seed=5)
    tmp = tmp_path_factory.mktemp("split")
    return _train(cfg, False, tmp), _train(cfg, True, tmp)


def test_split_critic_learns_what_the_inprocess_critic_learns(runs):
    local, split = runs
    assert len(local["logs"]) == STEPS
    assert [r["reward"] for r in split["logs"]] == [r["reward"] for r in local["logs"]]
    assert [r["value_loss"] for r in split["logs"]] == pytest.approx([r["value_loss"] for r in local["logs"]],
                                                                     rel=1e-6, abs=1e-9)
    for key in ("actor", "critic"):
        a, b = local[key], split[key]
        assert set(a) == set(b)
        assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6, key
    # the critic did learn: its score head starts at zero (build_critic) and is not zero now
    assert split["critic"]["score.weight"].abs().max().item() > 0


def test_split_trainer_holds_no_critic_and_calls_the_worker(runs):
    local, split = runs
    assert "critic" in local["held"] and "critic" not in split["held"]
    calls = split["calls"]
    assert calls[0] == "make_scheduler"
    assert calls.count("values") == STEPS  # one critic forward per generation batch
    assert calls.count("update") >= STEPS  # at least one value-loss micro-batch per step
