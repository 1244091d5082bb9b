"""PPO's critic as a component of its own: the value model, its AdamW, its LR schedule, trained through the
actor's ``accelerate.Accelerator``, saved and resumed with the actor.

The critic is a stock ``AutoModelForTokenClassification`` (num_labels=1) initialised from the policy's weights
(or loaded from ``value_model_path``). ``accelerator.prepare_model`` wraps it like the actor (DDP, autocast).

How it trains, and why each piece is what it is (accelerate 1.15, torch 2.13):

* backward through ``accelerator.backward``: under fp16 the loss is scaled by the accelerator's ``GradScaler``
  (the same scaler, hence the same scale, as the actor's loss);
* inside ``accelerator.no_sync(critic)`` on the gradient-accumulation micro-batches that do not step (DDP then
  all-reduces the critic's gradients once per optimizer step, as the Trainer does for the actor);
* the step, on the micro-batch where the actor steps, follows torch AMP's recipe for several optimizers
  (https://pytorch.org/docs/stable/notes/amp_examples.html#working-with-multiple-models-losses-and-optimizers):
  ``accelerator.unscale_gradients(optimizer=critic optimizer)``, clip, ``scaler.step(critic optimizer)``; the one ``scaler.update()``
  of the iteration is the actor's (accelerate's ``AcceleratedOptimizer.step``). The critic's optimizer is
  therefore *not* passed to ``accelerator.prepare``: accelerate would then (a) unscale it inside the actor's
  ``accelerator.clip_grad_norm_`` (``unscale_gradients()`` without an optimizer unscales every prepared
  optimizer), and (b) call ``scaler.update()`` a second time per step, between the actor's accumulation
  micro-batches, where a changed scale would mix two scales in the actor's gradients. For the same reason the
  clip is ``torch.nn.utils.clip_grad_norm_`` after unscaling the critic's optimizer alone, not
  ``accelerator.clip_grad_norm_`` (which would unscale the actor's optimizer mid-accumulation);
* its LR scheduler is built by ``transformers.get_scheduler`` with the actor's schedule type, warm-up and
  length, and steps when the critic's optimizer did (not on a step skipped for inf/NaN gradients);
* checkpoints: ``<checkpoint>/critic/`` holds the weights (``save_pretrained``) and, unless the Trainer saves
  the model only, ``optimizer.pt`` and ``scheduler.pt``.

Ignored: DeepSpeed (the Trainer's DeepSpeed path cannot prepare a second trainable model; PPOTrainer refuses it);
FSDP is not tested. Gradient clipping and the LR schedule follow the actor's settings (``max_grad_norm``,
``lr_scheduler_type``); the learning rate is ``critic_learning_rate``. Checked in tests/train/test_ppo_critic.py
(fp16 scaling with torch's CPU GradScaler, schedule, no_sync, save/resume) and by hand in a 2-process gloo run
(GA 2: one all-reduce of the critic's gradients per optimizer step with no_sync, two without).
"""

from __future__ import annotations

import contextlib
import copy
import os

import torch
from safetensors.torch import load_file
from torch import nn

from ..compat.torch import track_step_override
from ..errors import RlmLabError

CRITIC_DIR = "critic"
OPTIMIZER_FILE, SCHEDULER_FILE = "optimizer.pt", "scheduler.pt"


def build_critic(policy, value_model_path: str | None = None):
    """A value model: ``AutoModelForTokenClassification`` (num_labels=1) with the policy's backbone weights.

    The score head starts at zero, so every first value is 0 and the first advantages are the rewards.
    Dropout is off (values must be deterministic for the clipped value loss).
    """
    from transformers import AutoModelForTokenClassification  # noqa: PLC0415  heavy: transformers (this module loads only torch at import)
    from trl.trainer.utils import disable_dropout_in_model  # noqa: PLC0415  heavy: trl (this module loads only torch at import)

    if value_model_path:
        critic = AutoModelForTokenClassification.from_pretrained(value_model_path, num_labels=1, classifier_dropout=0.0)
    else:
        base = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
        config = copy.deepcopy(base.config)
        config.num_labels, config.classifier_dropout = 1, 0.0
        critic = AutoModelForTokenClassification.from_config(config)
        critic.to(dtype=next(base.parameters()).dtype)
        prefix = critic.base_model_prefix
        try:
            getattr(critic, prefix).load_state_dict(getattr(base, prefix).state_dict())
        except (RuntimeError, AttributeError) as e:
            raise RlmLabError(f"cannot copy the policy's weights into a critic ({type(e).__name__}); "
                              "pass value_model_path=<folder of a causal LM> in the PPO config") from None
        nn.init.zeros_(critic.score.weight)
        if critic.score.bias is not None:
            nn.init.zeros_(critic.score.bias)
    disable_dropout_in_model(critic)
    return critic


class CriticTrainer:
    """The critic's model, optimizer and LR schedule, trained through the actor's accelerator (module doc)."""

    def __init__(self, accelerator, model: nn.Module, learning_rate: float, adam_epsilon: float = 1e-8):
        self.accelerator = accelerator
        self.model = accelerator.prepare_model(model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=learning_rate, weight_decay=0.0,
                                           eps=adam_epsilon)
        self.scheduler = None

    def make_scheduler(self, args, num_training_steps: int):
        """The actor's schedule (type, warm-up, length) on the critic's optimizer."""
        from transformers import get_scheduler  # noqa: PLC0415  heavy: transformers (this module loads only torch at import)

        # torch's LRScheduler tracks optimizer.step() by wrapping the *class's* step (lr_scheduler.py,
        # patch_track_step_called) and fails on an instance-level override, such as a memory probe's wrapper
        # installed before train(); build the scheduler under the class's step, then keep the override, tracked.
        override = self.optimizer.__dict__.pop("step", None)
        self.scheduler = get_scheduler(args.lr_scheduler_type, optimizer=self.optimizer,
                                       num_warmup_steps=args.get_warmup_steps(num_training_steps),
                                       num_training_steps=num_training_steps,
                                       scheduler_specific_kwargs=args.lr_scheduler_kwargs)
        if override is not None:
            track_step_override(self.optimizer, override)
        return self.scheduler

    # ---- forward ----------------------------------------------------------------------------------
    def values(self, input_ids, attention_mask, logits_to_keep: int, batch_size: int) -> torch.Tensor:
        """V(s_t) for every completion position t: the critic's output at the token *before* t (no grad)."""
        self.model.eval()
        chunks = []
        with torch.no_grad():
            for start in range(0, input_ids.size(0), batch_size):
                out = self.model(input_ids=input_ids[start:start + batch_size],
                                 attention_mask=attention_mask[start:start + batch_size])
                chunks.append(out.logits[:, -logits_to_keep - 1:-1, 0].float())
        return torch.cat(chunks, 0)

    def train_values(self, input_ids, attention_mask, logits_to_keep: int) -> torch.Tensor:
        """Like :meth:`values`, with grad, for the value loss."""
        self.model.train()
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return out.logits[:, -logits_to_keep - 1:-1, 0].float()

    # ---- update -------------------------------------------------------------------------------------
    def accumulating(self):
        """``no_sync`` on micro-batches that do not step: wrap the critic's forward *and* backward in it
        (DDP decides in the forward whether the backward all-reduces)."""
        if self.accelerator.sync_gradients:
            return contextlib.nullcontext()
        return self.accelerator.no_sync(self.model)

    def backward(self, loss: torch.Tensor) -> None:
        self.accelerator.backward(loss)

    def step(self, max_grad_norm: float | None) -> torch.Tensor:
        """Unscale (critic only), clip, step, schedule, zero the gradients; returns the pre-clip grad norm."""
        scaler = self.accelerator.scaler
        params = [p for p in self.model.parameters() if p.grad is not None]
        self.accelerator.unscale_gradients(optimizer=self.optimizer)  # this optimizer only; a no-op without fp16
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm else float("inf"))
        if scaler is not None:
            scaler.step(self.optimizer)  # skipped on inf/NaN; the actor's step calls scaler.update() once
        else:
            self.optimizer.step()
        if self.scheduler is not None and (scaler is None or torch.isfinite(norm)):
            self.scheduler.step()  # like the Trainer: not after a step the scaler skipped
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    # ---- checkpoints --------------------------------------------------------------------------------
    def save(self, checkpoint_dir: str, with_optimizer: bool = True) -> None:
        folder = os.path.join(checkpoint_dir, CRITIC_DIR)
        self.accelerator.unwrap_model(self.model).save_pretrained(folder)
        if with_optimizer:
            torch.save(self.optimizer.state_dict(), os.path.join(folder, OPTIMIZER_FILE))
            if self.scheduler is not None:
                torch.save(self.scheduler.state_dict(), os.path.join(folder, SCHEDULER_FILE))

    def load(self, checkpoint_dir: str) -> None:
        """Weights, optimizer and schedule from ``<checkpoint_dir>/critic/`` (what :meth:`save` wrote)."""
        from transformers.utils import SAFE_WEIGHTS_NAME  # noqa: PLC0415  heavy: transformers (this module loads only torch at import)

        folder = os.path.join(checkpoint_dir, CRITIC_DIR)
        weights = os.path.join(folder, SAFE_WEIGHTS_NAME)
        if not os.path.isfile(weights):
            raise RlmLabError(f"checkpoint {checkpoint_dir} has no {CRITIC_DIR}/{SAFE_WEIGHTS_NAME}: it was not "
                              "written by rlm_lab's PPOTrainer; resume from a PPO checkpoint or start afresh")
        self.accelerator.unwrap_model(self.model).load_state_dict(load_file(weights, device="cpu"))
        for name, obj in ((OPTIMIZER_FILE, self.optimizer), (SCHEDULER_FILE, self.scheduler)):
            path = os.path.join(folder, name)
            if obj is not None and os.path.isfile(path):
                obj.load_state_dict(torch.load(path, map_location=self.accelerator.device, weights_only=True))
