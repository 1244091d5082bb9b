"""PPO's shared actor-critic: a value head on the policy's own backbone (the survey arXiv 2608.27046 Sec. 4.1 and
App. B.4.3, "AC sharing"; the value-head-on-the-policy layout of InstructGPT-era PPO code such as TRL's former
``AutoModelForCausalLMWithValueHead``), used by :class:`rlm_lab.train.ppo.PPOTrainer` with ``critic="shared"``.

* The head is one ``nn.Linear(hidden, 1)`` attached to the policy as its ``v_head`` submodule, so the Trainer's one
  optimizer steps it with the backbone (no second model, optimizer or schedule), zero-initialised like the separate
  critic's score head (every first value is 0).
* Values come from the backbone's last hidden states, caught by a forward hook on the backbone
  (:class:`HiddenCapture`) during a pass the trainer makes anyway: the no-grad old-log-prob pass at rollout time (else
  one no-grad backbone forward), and the training forward, where the value loss joins the policy loss and one
  backward runs through one backbone.

No library offers this on TRL 1.16's trainers (TRL's value-head wrapper left with its PPOTrainer, PR #7020), hence
these few lines. Ignored: PEFT (the reference would run through the same backbone) and a value model path; both are
refused by the config.
"""

from __future__ import annotations

import torch
from torch import nn

HEAD = "v_head"


def backbone(policy: nn.Module) -> nn.Module:
    """The transformer under the LM head (``policy.<base_model_prefix>``)."""
    return getattr(policy, policy.base_model_prefix)


def attach_value_head(policy: nn.Module) -> nn.Linear:
    """Put a zero-initialised ``Linear(hidden, 1)`` on ``policy`` as ``policy.v_head`` (its dtype and device) and
    return it; an existing head is kept (resuming)."""
    head = getattr(policy, HEAD, None)
    if head is None:
        ref = next(policy.parameters())
        head = nn.Linear(policy.config.hidden_size, 1).to(dtype=ref.dtype, device=ref.device)
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)
        setattr(policy, HEAD, head)
    return head


class HiddenCapture:
    """``with HiddenCapture(policy) as cap: model(...)``: ``cap.hidden()`` is the backbone's last hidden state of
    every forward run inside the block, concatenated over rows (the log-prob passes run in row chunks)."""

    def __init__(self, policy: nn.Module):
        self.module, self.chunks, self._handle = backbone(policy), [], None

    def __enter__(self) -> HiddenCapture:
        self._handle = self.module.register_forward_hook(self._keep)
        return self

    def __exit__(self, *exc) -> bool:
        self._handle.remove()
        return False

    def _keep(self, module, args, output) -> None:
        self.chunks.append(output[0] if isinstance(output, tuple) else output.last_hidden_state)

    def hidden(self) -> torch.Tensor | None:
        return torch.cat(self.chunks, 0) if self.chunks else None


def values(head: nn.Module, hidden: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
    """V(s_t) for every completion position t: the head on the hidden state of the token *before* t (the separate
    critic's convention, :meth:`rlm_lab.train.critic.CriticTrainer.values`)."""
    return head(hidden[:, -logits_to_keep - 1:-1]).squeeze(-1).float()
