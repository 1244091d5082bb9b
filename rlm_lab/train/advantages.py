"""Advantages and losses of PPO and GRPO as small pure functions on tensors.

Shapes: ``(B, T)`` for per-token tensors (B sequences, T completion positions, padding on the right),
``mask`` is 1 on real completion tokens and 0 on padding. Nothing here knows about models or TRL,
so every formula is unit-tested against hand-computed numbers (tests/train/test_advantages.py).

Sources:
- GAE: Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage
  Estimation", arXiv 1506.02438, eq. 16: A_t = sum_l (gamma*lam)^l delta_{t+l},
  delta_t = r_t + gamma V(s_{t+1}) - V(s_t).
- Clipped surrogate: Schulman et al., "Proximal Policy Optimization Algorithms", arXiv 1707.06347, eq. 7.
- Per-token KL penalty in the reward and the score on the last token: Ouyang et al. (InstructGPT),
  arXiv 2203.02155, eq. 2; Ziegler et al. arXiv 1909.08593.
- Clipped value loss: the PPO2 baselines implementation (also used by OpenRLHF/TRL's old PPO).
- Group z-score: Shao et al. (DeepSeekMath, GRPO), arXiv 2402.03300, Sec. 4.1.2.

What they ignore: GAE assumes the mask is a prefix (right padding): the first masked position ends the
episode, so interleaved masks (tool outputs) would be treated as ends. Whitening uses the statistics of
the tensor it is given (one process's batch), not a global all-reduce.
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1 (a 0/1 tensor of the same shape)."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Population variance of ``x`` over the masked positions."""
    mean = masked_mean(x, mask)
    return masked_mean((x - mean) ** 2, mask)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked positions; padding is set to 0.

    ``shift_mean=False`` only rescales (keeps the sign of a batch whose advantages are all positive).
    """
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * mask.to(x.dtype)


def token_rewards(scores: torch.Tensor, logps: torch.Tensor, ref_logps: torch.Tensor | None,
                  mask: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards r_t = -beta * KL_t, plus the sequence score on the last real token.

    KL_t = log pi_old(a_t|s_t) - log pi_ref(a_t|s_t) (the sampled, "k1" estimator, InstructGPT eq. 2).
    ``scores`` is (B,): the verifier or reward-model score of each completion. Returns ``(rewards, kl)``,
    both (B, T) and zero on padding. A completion with no real token (empty) gets no reward.
    """
    mask = mask.to(logps.dtype)
    kl = (logps - ref_logps) * mask if ref_logps is not None else torch.zeros_like(logps)
    rewards = -beta * kl
    lengths = mask.sum(1).long()
    last = (lengths - 1).clamp(min=0)
    has_token = (lengths > 0).to(rewards.dtype)
    rows = torch.arange(rewards.size(0), device=rewards.device)
    rewards[rows, last] += scores.to(rewards.dtype) * has_token
    return rewards, kl


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
        gamma: float = 1.0, lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over the completion tokens; returns ``(advantages, returns)``.

    delta_t = r_t + gamma * V_{t+1} * m_{t+1} - V_t,  A_t = delta_t + gamma * lam * m_{t+1} * A_{t+1},
    with V and m beyond the last position taken as 0 (the episode ends at the last real token).
    returns = A + V (the critic's regression target). Both are zero on padding.
    """
    mask = mask.to(values.dtype)
    values = values * mask
    T = rewards.size(1)
    advantages = torch.zeros_like(rewards)
    next_adv = torch.zeros_like(rewards[:, 0])
    next_value = torch.zeros_like(rewards[:, 0])
    next_mask = torch.zeros_like(rewards[:, 0])
    # A backward-in-time loop: T is the completion length (a few to a few thousand tokens), and each
    # step is one vectorised op over the batch, so the loop is not the cost.
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * next_value * next_mask - values[:, t]
        next_adv = (delta + gamma * lam * next_mask * next_adv) * mask[:, t]
        advantages[:, t] = next_adv
        next_value, next_mask = values[:, t], mask[:, t]
    returns = (advantages + values) * mask
    return advantages, returns


def group_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """GRPO's advantage: each reward minus its group's mean, divided by the group's std (+eps).

    ``rewards`` is (B,) with the G completions of a prompt adjacent; std is the sample (n-1) std,
    as in TRL's GRPOTrainer. Used by GRPO only; PPO uses :func:`gae` with the critic as baseline.
    """
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(1, keepdim=True)
    adv = grouped - mean
    if scale:
        adv = adv / (grouped.std(1, keepdim=True) + eps)
    return adv.reshape(-1)


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       mask: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """0.5 * mean(max((V - R)^2, (V_clip - R)^2)), V_clip = V_old + clamp(V - V_old, -clip, clip).

    Returns ``(loss, clipfrac)``; clipfrac is the fraction of tokens where the clipped term is larger
    (i.e. where clipping stopped the value from moving further).
    """
    v_clipped = old_values + (values - old_values).clamp(-clip, clip)
    loss_unclipped = (values - returns) ** 2
    loss_clipped = (v_clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(loss_unclipped, loss_clipped), mask)
    clipfrac = masked_mean((loss_clipped > loss_unclipped).to(values.dtype), mask)
    return loss, clipfrac


def clipped_policy_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, clip_low: float, clip_high: float | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, averaged over all real tokens of the batch.

    loss = mean(max(-A * rho, -A * clip(rho, 1 - clip_low, 1 + clip_high))), rho = exp(logp - logp_old).
    Returns ``(loss, clipfrac, approx_kl)``; approx_kl = mean(0.5 * (logp - logp_old)^2).
    """
    clip_high = clip_low if clip_high is None else clip_high
    log_ratio = logps - old_logps
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = masked_mean(torch.max(pg1, pg2), mask)
    clipfrac = masked_mean((pg2 > pg1).to(logps.dtype), mask)
    approx_kl = masked_mean(0.5 * log_ratio.detach() ** 2, mask)
    return loss, clipfrac, approx_kl


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1 - Var(R - V) / Var(R) over real tokens: 1 = perfect critic, 0 = no better than a constant."""
    var_r = masked_var(returns, mask)
    return 1.0 - masked_var(returns - values, mask) / var_r.clamp(min=1e-8)
