"""PPO with a critic and per-token GAE, built on TRL 1.16's GRPOTrainer.

TRL removed its PPOTrainer in 1.13 (huggingface/trl PR #7020). Here PPO is a *subclass* of
``trl.GRPOTrainer``: generation, reward functions, the reference model, logging, accelerate/DDP and
the ``num_iterations`` / ``steps_per_generation`` reuse machinery all stay TRL's. What PPO has and
GRPO lacks is added by overriding three methods (all private to TRL 1.16, hence the ``trl<1.17`` pin):

- ``_calculate_rewards``: calls TRL's, and keeps the (gathered) per-function scores, which TRL otherwise
  only turns into group z-scores.
- ``_generate_and_score_completions``: calls TRL's (generate, score, reference log-probs), then adds the
  critic forward (stage ``values``), per-token rewards r_t = -beta * KL_t plus the score on the last
  token (InstructGPT, arXiv 2203.02155, eq. 2) and per-token GAE (stage ``advantage``; arXiv 1506.02438).
  The group advantages TRL computed are replaced by these.
- ``_compute_loss``: the clipped surrogate on per-token advantages (arXiv 1707.06347, eq. 7), and the
  clipped value loss with a critic step (stage ``critic_update``) on every micro-batch; the critic's
  optimizer steps when the actor's does (accelerate's gradient-sync flag).

The critic (:mod:`rlm_lab.train.critic`) is a stock ``AutoModelForTokenClassification`` with its own AdamW and
LR schedule, trained through the actor's accelerator (``accelerator.backward``, ``no_sync``, the shared fp16
``GradScaler``) and saved/resumed with the actor in ``<checkpoint>/critic/``. A completion that no reward
function could score (every function returned None, TRL's NaN) is treated as TRL treats it in GRPO
(``GRPOTrainer._generate_and_score_completions``, "unscorable"): no learning signal, i.e. advantage 0 on its
tokens, no value target, and left out of the whitening statistics and the logged score. The reward source is the verifier (TRL reward functions, the default) or
a reward model (``AutoModelForSequenceClassification``, trained by :mod:`rlm_lab.train.reward_model`)
passed to TRL as a model reward function; the verifier functions are then still run and logged, with
weight 0, so the log shows how well the reward model's reward tracks true correctness. With beta > 0 the
trainer then holds the classic four models (actor, critic, reference, reward model): ``models_held``.

Group size: TRL requires ``num_generations >= 2``, so PPO here samples G completions per prompt like
GRPO, but uses no group statistics: the baseline is the critic, advantages are per token.

``critic="shared"`` (:mod:`rlm_lab.train.shared_critic`): no critic model; a value head on the policy's backbone
whose values ride on the old-log-prob pass (stage ``values`` is then the head alone, or one no-grad backbone
forward when no such pass runs) and whose clipped value loss is added to the policy loss, so one backward runs
through one backbone and the actor's optimizer steps the head (no ``critic_update`` stage).

Ignored (compared with InstructGPT/OpenRLHF PPO): no adaptive KL controller (beta is fixed), no
entropy bonus, no critic warm-up phase; DeepSpeed cannot prepare
the second trainable model through the Trainer and is refused. GRPOConfig options that this PPO would
silently ignore are refused when the config is built (:mod:`rlm_lab.train.ppo_config`). Stage names follow
``rlm_lab.stages.Stage`` and are emitted through TRL's own ``profiling_context`` (nested in TRL's
``_prepare_inputs`` / ``compute_loss`` spans, as TRL's reward-function spans are nested in
``_calculate_rewards``).
"""

from __future__ import annotations

import contextlib
import os

import torch
from torch import nn
from trl import GRPOTrainer
from trl.extras.profiling import profiling_context

from ..compat.trl import check_overrides
from ..errors import RlmLabError
from ..tasks import checked
from . import shared_critic as SC
from .advantages import (
    clipped_policy_loss,
    clipped_value_loss,
    explained_variance,
    gae,
    masked_mean,
    masked_whiten,
    token_rewards,
)
from .critic import CriticTrainer, build_critic
from .ppo_config import IGNORED_OPTIONS, LOSS_TYPES, REWARD_SOURCES, PPOConfig  # noqa: F401 - this module's API

_CHECKED_CODE = checked(lambda completions, **kw: []).__code__  # every checked() wrapper shares this code


class PPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` with a critic, per-token KL rewards, GAE and the clipped value loss (see module doc)."""

    _tag_names = ["trl", "ppo", "rlm_lab"]
    # TRL's private methods this class overrides or calls (rlm_lab.compat checks them once per process)
    TRL_PRIVATES = ("_calculate_rewards", "_generate_and_score_completions", "_compute_loss", "_save_checkpoint",
                    "_load_optimizer_and_scheduler", "_get_per_token_logps_and_entropies")

    def __init__(self, model, reward_funcs, args: PPOConfig | None = None, train_dataset=None, eval_dataset=None,
                 processing_class=None, reward_processing_classes=None, callbacks=None,
                 optimizers=(None, None), peft_config=None, value_model=None, reward_model=None):
        if args is None or not isinstance(args, PPOConfig):
            raise RlmLabError("PPOTrainer needs args=PPOConfig(...) (rlm_lab.train.ppo.PPOConfig)")
        check_overrides(GRPOTrainer, self.TRL_PRIVATES)
        funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        # A user reward that raises must stop the run with one clear line (rlm_lab.tasks.checked).
        funcs = [f if isinstance(f, (nn.Module, str)) or getattr(f, "__code__", None) is _CHECKED_CODE
                 else checked(f) for f in funcs]
        n_verifier = len(funcs)
        if args.reward_source == "reward_model":
            if reward_model is None:
                from transformers import AutoModelForSequenceClassification  # noqa: PLC0415  heavy: transformers (this module loads only torch, trl at import)

                reward_model = AutoModelForSequenceClassification.from_pretrained(args.reward_model_path, num_labels=1)
            funcs.append(reward_model)
            # The verifier still runs (its scores are logged) but only the reward model trains the policy.
            args.reward_weights = [0.0] * n_verifier + [1.0]
            if reward_processing_classes is not None and not isinstance(reward_processing_classes, list):
                reward_processing_classes = [reward_processing_classes]
            if reward_processing_classes is not None and len(reward_processing_classes) == n_verifier:
                reward_processing_classes = list(reward_processing_classes) + [None]
        super().__init__(model=model, reward_funcs=funcs, args=args, train_dataset=train_dataset,
                         eval_dataset=eval_dataset, processing_class=processing_class,
                         reward_processing_classes=reward_processing_classes, callbacks=callbacks,
                         optimizers=optimizers, peft_config=peft_config)
        if args.reward_source == "reward_model":
            # TRL names a model reward after its folder; one fixed name makes the stage join with Stage.REWARD.
            self.reward_func_names[n_verifier] = "reward_model"

        from accelerate.utils import DistributedType  # noqa: PLC0415  heavy: accelerate (this module loads only torch, trl at import)

        if self.accelerator.distributed_type == DistributedType.DEEPSPEED:
            raise RlmLabError("PPO's critic is a second trainable model, which the Trainer's DeepSpeed path cannot "
                              "prepare; run PPO without DeepSpeed (single process or DDP via torchrun)")
        self.shared_critic = args.critic == "shared"
        if self.shared_critic:
            if peft_config is not None or value_model is not None:
                raise RlmLabError("critic='shared': the value head sits on the policy's own backbone; it takes no "
                                  "value_model and no PEFT adapter (the reference would run through that backbone)")
            self.value_head, self.critic_trainer = SC.attach_value_head(self.accelerator.unwrap_model(self.model)), None
        else:
            if value_model is None:
                value_model = build_critic(self.accelerator.unwrap_model(self.model), args.value_model_path)
            self.critic_trainer = CriticTrainer(self.accelerator, value_model, args.critic_learning_rate,
                                                args.adam_epsilon)
        self._ppo_rewards_per_func = None

    @property
    def critic(self) -> nn.Module | None:
        """The separate value model; None with ``critic="shared"`` (the head is ``self.value_head``)."""
        return None if self.critic_trainer is None else self.critic_trainer.model

    @property
    def critic_optimizer(self) -> torch.optim.Optimizer | None:
        return None if self.critic_trainer is None else self.critic_trainer.optimizer

    @property
    def critic_scheduler(self):
        return None if self.critic_trainer is None else self.critic_trainer.scheduler

    def _capture(self):
        """The backbone's hidden states of the passes inside the block (shared critic), else nothing."""
        if not self.shared_critic:
            return contextlib.nullcontext()
        return SC.HiddenCapture(self.accelerator.unwrap_model(self.model))

    # ---- what the run holds --------------------------------------------------------------------------
    @property
    def models_held(self) -> dict[str, nn.Module]:
        """The networks this run keeps in memory, keyed like ``rlm_lab.stages.MODELS_HELD['ppo']``."""
        held = {"actor": self.model}
        if self.critic is not None:
            held["critic"] = self.critic
        if self.ref_model is not None:
            held["reference"] = self.ref_model
        reward_models = [f for f in self.reward_funcs if isinstance(f, nn.Module)]
        if reward_models:
            held["reward"] = reward_models[0]
        return held

    # ---- rollout side: scores, values, advantages ---------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._ppo_rewards_per_func = out  # gathered over processes: (world * local_batch, n_funcs)
        return out

    def _local_scores(self, n_local: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores, scored)`` of this process's completions: the weighted sum of the reward functions, and
        False where every function returned None (TRL's NaN; the score is then 0 and must not be used).

        TRL gathers the per-function rewards of all processes, rank-major, into ``(world * n_local, n_funcs)``;
        this process's rows are the slice TRL itself keeps for its advantages (``process_slice`` in
        ``GRPOTrainer._generate_and_score_completions``).
        """
        rank = self.accelerator.process_index
        per_func = self._ppo_rewards_per_func[rank * n_local:(rank + 1) * n_local]
        scored = ~torch.isnan(per_func).all(1)
        return (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(1), scored

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size

        scores, scored = self._local_scores(len(inputs))

        prompt_ids, completion_ids = out["prompt_ids"], out["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], 1)
        attention_mask = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
        logits_to_keep = completion_ids.size(1)
        mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
        # Tokens of completions with a score: the only ones that carry advantages and value targets.
        mask = mask * scored.unsqueeze(1).to(mask.dtype)

        with torch.no_grad():
            old_logps = out.get("old_per_token_logps")
            ref_logps = out.get("ref_per_token_logps")
            cap = None
            if old_logps is None and ref_logps is not None:
                # The KL reward needs log pi_old of the sampled tokens; TRL skips this pass when on-policy.
                with self._capture() as cap:  # shared critic: the values ride on this pass
                    old_logps, _, _ = self._get_per_token_logps_and_entropies(
                        self.model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size)
                out["old_per_token_logps"] = old_logps
            with profiling_context(self, "values"):
                if self.shared_critic:
                    values = self._shared_values(cap, input_ids, attention_mask, logits_to_keep, batch_size)
                else:
                    values = self.critic_trainer.values(input_ids, attention_mask, logits_to_keep, batch_size)
            with profiling_context(self, "advantage"):
                logps = old_logps if old_logps is not None else torch.zeros_like(values)
                rewards, kl = token_rewards(scores, logps, ref_logps, mask, self.beta)
                advantages, returns = gae(rewards, values, mask, self.args.gamma, self.args.lam)
                if self.args.whiten_advantages:
                    advantages = masked_whiten(advantages, mask)

        out.update(advantages=advantages, values=values * mask, returns=returns, value_mask=mask)
        m = self._metrics[mode]
        gather = self.accelerator.gather
        fmask = mask.float()
        m["ppo/score"].append(gather(torch.where(scored, scores, torch.nan)).nanmean().item())
        if ref_logps is not None:  # per token, like GRPO's "kl" (here the sampled k1 estimator)
            m["kl"].append(gather(masked_mean(kl, fmask)).mean().item())
        m["ppo/non_score_reward"].append(gather(-self.beta * (kl * fmask).sum(1)).mean().item())
        m["ppo/values_mean"].append(gather(masked_mean(values, fmask)).mean().item())
        m["ppo/returns_mean"].append(gather(masked_mean(returns, fmask)).mean().item())
        m["ppo/advantages_mean"].append(gather(masked_mean(advantages, fmask)).mean().item())
        m["ppo/explained_variance"].append(gather(explained_variance(values, returns, fmask)).mean().item())
        return out

    # ---- update side: actor loss and the critic step ------------------------------------------------
    def _compute_loss(self, model, inputs):
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], 1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        logits_to_keep = completion_ids.size(1)
        mask = inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]
        fmask = mask.float()

        with self._capture() as cap:  # shared critic: the values' hidden states of this same forward
            logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, compute_entropy=True,
                compute_aux_loss=self.aux_loss_enabled)
        old_logps = inputs.get("old_per_token_logps")
        old_logps = logps.detach() if old_logps is None else old_logps
        pg_loss, pg_clipfrac, approx_kl = clipped_policy_loss(
            logps, old_logps, inputs["advantages"], fmask, self.epsilon_low, self.epsilon_high)

        mode = "train" if self.model.training else "eval"
        normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        loss = pg_loss / normalizer
        if self.loss_type == "dapo":  # TRL's dapo normaliser: tokens of the accumulated batch, all processes
            tokens = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":
                tokens = tokens * self.current_gradient_accumulation_steps / self.args.steps_per_generation
            loss = pg_loss * fmask.sum() / tokens
        if self.aux_loss_enabled:
            loss = loss + self.router_aux_loss_coef * aux_loss / normalizer

        if mode == "train" and self.shared_critic:  # one loss, one backward through one backbone
            loss = loss + self._shared_value_loss(cap.hidden(), logits_to_keep, inputs, normalizer)
        elif mode == "train":
            self._critic_step(input_ids, attention_mask, logits_to_keep, inputs, normalizer)

        m, reduce = self._metrics[mode], self.accelerator.gather
        m["policy_loss"].append(reduce(pg_loss.detach()).mean().item())
        m["clip_ratio/region_mean"].append(reduce(pg_clipfrac).mean().item())
        m["ppo/approx_kl"].append(reduce(approx_kl).mean().item())
        m["entropy"].append(reduce(masked_mean(entropies.detach(), fmask)).mean().item())
        return loss

    def _shared_values(self, cap, input_ids, attention_mask, logits_to_keep: int, batch_size: int) -> torch.Tensor:
        """The value head on the hidden states the old-log-prob pass left in ``cap``, else on one no-grad backbone
        forward of its own (in the log-prob pass's row chunks)."""
        hidden = cap.hidden() if cap is not None else None
        if hidden is None:
            body = SC.backbone(self.accelerator.unwrap_model(self.model))
            hidden = torch.cat([body(input_ids=input_ids[i:i + batch_size],
                                     attention_mask=attention_mask[i:i + batch_size])[0]
                                for i in range(0, input_ids.size(0), batch_size)], 0)
        return SC.values(self.value_head, hidden, logits_to_keep)

    def _shared_value_loss(self, hidden, logits_to_keep: int, inputs, normalizer) -> torch.Tensor:
        """vf_coef x the clipped value loss of the head on the training forward's hidden states (to be added to the
        policy loss: the one backward of the step trains backbone and head together)."""
        values = SC.values(self.value_head, hidden, logits_to_keep)
        vf_loss, vf_clipfrac = clipped_value_loss(values, inputs["values"], inputs["returns"],
                                                  inputs["value_mask"].float(), self.args.cliprange_value)
        m, reduce = self._metrics["train"], self.accelerator.gather
        m["value_loss"].append(reduce(vf_loss.detach()).mean().item())
        m["ppo/value_clipfrac"].append(reduce(vf_clipfrac).mean().item())
        return self.args.vf_coef * vf_loss / normalizer

    def _critic_step(self, input_ids, attention_mask, logits_to_keep, inputs, normalizer):
        """One critic forward + backward (+ its optimizer step when the actor steps): the clipped value loss."""
        vmask = inputs["value_mask"].float()
        ct = self.critic_trainer
        with profiling_context(self, "critic_update"):
            with ct.accumulating():
                values = ct.train_values(input_ids, attention_mask, logits_to_keep)
                vf_loss, vf_clipfrac = clipped_value_loss(values, inputs["values"], inputs["returns"], vmask,
                                                          self.args.cliprange_value)
                ct.backward(self.args.vf_coef * vf_loss / normalizer)
            if self.accelerator.sync_gradients:
                ct.step(self.args.max_grad_norm)
        m, reduce = self._metrics["train"], self.accelerator.gather
        m["value_loss"].append(reduce(vf_loss.detach()).mean().item())
        m["ppo/value_clipfrac"].append(reduce(vf_clipfrac).mean().item())

    # ---- the critic's schedule and checkpoints, beside the actor's -----------------------------------
    def create_scheduler(self, num_training_steps: int, optimizer=None):
        scheduler = super().create_scheduler(num_training_steps, optimizer)
        if self.critic_trainer is not None:
            self.critic_trainer.make_scheduler(self.args, num_training_steps)
        return scheduler

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save and self.critic_trainer is not None:  # a shared head is saved with the policy
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR  # noqa: PLC0415  heavy: transformers (this module loads only torch, trl at import)

            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            self.critic_trainer.save(folder, with_optimizer=not self.args.save_only_model)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None and self.critic_trainer is not None:
            self.critic_trainer.load(checkpoint)
