"""One path from a run's config to the predictor's input.

A run of this repository is described by :class:`rlm_lab.train.config.RunConfig` (what ``rlm-lab train``, the
placement workers, the asynchrony campaign and the validation suite train). :func:`from_run` turns that config
(as the mapping ``RunConfig.to_dict()`` gives, so this module needs nothing above ``cost``) into the predictor's
two inputs, the :class:`~rlm_lab.cost.workload.Algorithm` and the :class:`~rlm_lab.cost.workload.Workload`, the
way our trainers run it:

* the batch: ``batch_size`` completions per optimizer step = ``batch_size / num_generations`` prompts times
  ``num_generations`` (TRL's ``GRPOConfig`` semantics:
  https://huggingface.co/docs/trl/main/en/grpo_trainer), one micro-batch and one ``generate`` call per step;
  ``num_iterations`` > 1 reuses the batch that many optimizer steps (``epochs``);
* lengths: the prediction is made before the run, so the response length is not known: it is taken as
  ``max_completion_length`` (transformers' static ``generate`` runs until the longest row of the batch ends, and
  at temperature 1 some row of a batch usually runs to the limit; the validation suite forces it with
  ``min_new_tokens``); the prompt length is the caller's (the longest prompt of the task's batch: TRL left-pads);
* PPO as :mod:`rlm_lab.train.ppo` runs it: the rule-based verifier scores, so no reward model is held;
  ``beta == 0`` drops the reference model (:func:`rlm_lab.cost.workload.algorithm`);
* the critic's structure: ``extra["critic"] == "shared"`` (PPOConfig's shared value head) is the shared actor-critic
  (:func:`rlm_lab.cost.workload.with_critic`); any other run holds a separate critic;
* precision: fp32 weights; ``cpu_bf16`` is TRL's default ``bf16=True`` kept on CPU (bf16 autocast through
  accelerate); ``activation_checkpointing`` is TRL's default gradient checkpointing kept.

Every caller that predicts one of our runs (chapter 5's placements, the validation suite and so ``insitu``,
chapter 6's campaign cells through chapter 5) goes through :func:`from_run`; a framework's config goes through
:mod:`rlm_lab.frameworks.importers` and a predict config through :func:`rlm_lab.cost.workload.workload_from_dict`,
both into the same :func:`rlm_lab.cost.predict.predict`.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ..errors import RlmLabError
from .workload import SHARED, Algorithm, ResponseLengths, Workload, algorithm, with_critic

REQUIRED = ("algo", "batch_size", "num_generations", "max_completion_length")


def run_algorithm(algo: str, beta: float | None) -> Algorithm:
    """The algorithm as our trainers run it: PPO holds a verifier in place of a reward model (as the other
    algorithms of :data:`rlm_lab.stages.MODELS_HELD` do)."""
    alg = algorithm(algo, beta)
    if alg.name == "ppo":
        alg = dataclasses.replace(alg, models=tuple(m for m in alg.models if m != "reward") + ("verifier",))
    return alg


def from_run(cfg: Mapping, prompt_len: int, *, reward_s_per_sample: float = 0.0) -> tuple[Algorithm, Workload]:
    """``(algorithm, workload)`` for the run ``cfg`` (a ``RunConfig.to_dict()`` mapping, or the object itself)."""
    d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise RlmLabError(f"a run config needs {', '.join(missing)} to be predicted")
    b, g = int(d["batch_size"]), int(d["num_generations"])
    if g < 1 or b % g:
        raise RlmLabError(f"batch_size {b} is not a multiple of num_generations {g}")
    alg = run_algorithm(d["algo"], d.get("beta"))
    if (d.get("extra") or {}).get("critic") == SHARED:
        alg, _ = with_critic(alg, SHARED)
    wl = Workload(prompts=b // g, group_size=g, prompt_len=int(prompt_len),
                  response=ResponseLengths("fixed", length=int(d["max_completion_length"])),
                  epochs=max(1, int(d.get("num_iterations", 1) or 1)), micro_batch=b, gen_batch=b,
                  precision="fp32", padding="batch", engine="static", logits="completion",
                  reward_s_per_sample=reward_s_per_sample, weight_sync="none",
                  autocast=bool(d.get("cpu_bf16", False)),
                  gradient_checkpointing=bool(d.get("activation_checkpointing", False)))
    return alg, wl
