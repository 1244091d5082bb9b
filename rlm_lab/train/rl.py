"""RL on verifiable rewards through TRL: GRPO (``trl.GRPOTrainer``), RLOO (``trl.RLOOTrainer``),
and PPO (``rlm_lab.train.ppo.PPOTrainer``, a GRPOTrainer subclass with a critic and GAE).

All three take the same dataset (``prompt`` plus the verifier's columns, e.g. ``answer``), the same
reward functions (``rlm_lab.tasks.reward_funcs``: correctness 1.0 + format 0.1, each wrapped in
``checked`` so a crashing reward stops the run with one line naming it) and one ``RunConfig``:
RLOO is literally one config field away from GRPO.

Advantages (GRPO: arXiv 2402.03300 Sec. 4.1.2; RLOO: arXiv 2402.14740): GRPO z-scores each reward inside its group of G completions of one
prompt, A_i = (r_i - mean(r)) / std(r) (Shao et al. 2024, https://arxiv.org/abs/2402.03300);
RLOO uses the leave-one-out baseline A_i = r_i - mean_{j != i} r_j (Ahmadian et al. 2024,
https://arxiv.org/abs/2402.14740); PPO learns a value function and uses GAE per token.

The model is passed as a *path* on disk: with beta > 0 TRL builds the reference model from
``model.config._name_or_path`` and an in-memory model has none (TRL resolves the model by name for it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..errors import RlmLabError
from ..models import load
from ..tasks import checked
from ..tasks import reward_funcs as default_rewards
from .sft import trainer_switches


def trainer_classes(algo: str):
    """``(TrainerClass, ConfigClass)`` for an RL algorithm name."""
    if algo == "grpo":
        from trl import GRPOConfig, GRPOTrainer

        return GRPOTrainer, GRPOConfig
    if algo == "rloo":
        from trl import RLOOConfig, RLOOTrainer

        return RLOOTrainer, RLOOConfig
    if algo == "ppo":
        try:
            from .ppo import PPOConfig, PPOTrainer  # noqa: PLC0415  heavy: rlm_lab.train.ppo imports torch at its top
        except ImportError as e:
            raise RlmLabError(f"PPO is not available in this build ({e}); use --algo grpo or rloo") from None
        return PPOTrainer, PPOConfig
    raise RlmLabError(f"algorithm {algo!r} is not an RL algorithm; use grpo, rloo or ppo")


def rl_dataset(rows: list[dict]):
    """Rows -> ``datasets.Dataset``: ``prompt`` plus every other column the reward functions read."""
    from datasets import Dataset

    keys = [k for k in rows[0] if k != "completion"]
    return Dataset.from_dict({k: [r[k] for r in rows] for k in keys})


def rl_args(cfg, config_cls, output_dir: str | Path, on_cuda: bool = False):
    """The TRL config for ``cfg``: CPU-safe switches plus the RL knobs; fields the config class lacks
    (e.g. ``loss_type`` for RLOO) are dropped, unknown ``extra`` fields are an error."""
    accepted = {f.name for f in dataclasses.fields(config_cls)}
    kwargs = dict(
        output_dir=str(output_dir),
        max_steps=cfg.rl_steps,
        learning_rate=cfg.rl_lr,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_ratio=cfg.warmup_ratio,
        per_device_train_batch_size=cfg.batch_size,
        num_generations=cfg.num_generations,
        num_iterations=cfg.num_iterations,
        max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature,
        beta=cfg.beta,
        epsilon=cfg.epsilon,
        loss_type=cfg.loss_type,
        scale_rewards=cfg.scale_rewards,
        max_grad_norm=cfg.max_grad_norm,
        logging_steps=1,
        **trainer_switches(cfg, on_cuda),
    )
    if cfg.cpu_bf16 and not on_cuda:  # TRL's default kept on CPU: accelerate wraps forward in bf16 autocast
        kwargs["bf16"] = True
    if cfg.activation_checkpointing:  # TRL's default kept: every decoder layer recomputed in backward
        kwargs["activation_checkpointing"] = True
    kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    bad = [k for k in cfg.extra if k not in accepted]
    if bad:
        raise RlmLabError(f"extra field(s) {', '.join(bad)} are not options of {config_cls.__name__}; "
                          "check the spelling against TRL's config")
    kwargs.update(cfg.extra)
    return config_cls(**kwargs)


def task_rewards(task, format_weight: float, reward_funcs=None) -> list:
    """The task's verifier rewards (or the caller's), each wrapped so a crash is one clear error."""
    funcs = list(reward_funcs) if reward_funcs is not None else default_rewards(task, format_weight)
    return [checked(f) for f in funcs]


def make_trainer(cfg, model_path: str | Path, rows: list[dict], task, output_dir: str | Path,
                 callbacks=(), reward_funcs=None, rollout_func=None, peft_config=None, *, trainer_cls=None):
    """Build the TRL (or rlm_lab PPO) trainer for ``cfg.algo``, starting from the model saved at ``model_path``:
    the one trainer builder (``rlm-lab train``, the placement workers on Ray, the hybrid engine's ranks, the
    calibration and the traced case all call it).

    ``rollout_func``: GRPOTrainer's own generation hook, passed through (GRPO only). ``peft_config``: TRL's own
    ``peft_config=`` (a PEFT ``LoraConfig``: TRL wraps the model and trains the adapters only), passed through.
    ``trainer_cls``: a subclass of the algorithm's trainer to build instead (chapter 5's PPO with its critic in
    another actor, :func:`rlm_lab.placement.critic_role.split_trainer_class`)."""
    import torch

    default_cls, config_cls = trainer_classes(cfg.algo)
    trainer_cls = trainer_cls or default_cls
    if not issubclass(trainer_cls, default_cls):
        raise RlmLabError(f"{trainer_cls.__name__} is not a {default_cls.__name__} (the trainer of {cfg.algo})")
    model, tokenizer = load(str(model_path))
    args = rl_args(cfg, config_cls, output_dir, on_cuda=torch.cuda.is_available())
    kw = {} if rollout_func is None else {"rollout_func": rollout_func}
    if peft_config is not None:
        kw["peft_config"] = peft_config
    return trainer_cls(
        model=model,
        reward_funcs=task_rewards(task, cfg.format_weight, reward_funcs),
        args=args,
        train_dataset=rl_dataset(rows),
        processing_class=tokenizer,
        callbacks=list(callbacks),
        **kw,
    )
