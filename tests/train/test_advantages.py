"""GAE, the PPO losses and GRPO's group advantage against numbers computed by hand."""

import math

import pytest
import torch

from rlm_lab.train.advantages import (clipped_policy_loss, clipped_value_loss, explained_variance, gae,
                                      group_advantages, masked_whiten, token_rewards)

GAMMA, LAM = 0.9, 0.8  # gamma * lam = 0.72


def t(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_gae_three_tokens_by_hand():
    # r = (0, 0, 1), V = (0.5, 0.4, 0.6); the episode ends after the third token (V beyond = 0).
    # t=2: delta = 1 - 0.6 = 0.4                      A2 = 0.4
    # t=1: delta = 0 + 0.9*0.6 - 0.4 = 0.14           A1 = 0.14 + 0.72*0.4   = 0.428
    # t=0: delta = 0 + 0.9*0.4 - 0.5 = -0.14          A0 = -0.14 + 0.72*0.428 = 0.16816
    adv, ret = gae(t([0.0, 0.0, 1.0]), t([0.5, 0.4, 0.6]), t([1, 1, 1]), GAMMA, LAM)
    assert adv.tolist()[0] == pytest.approx([0.16816, 0.428, 0.4], abs=1e-6)
    assert ret.tolist()[0] == pytest.approx([0.66816, 0.828, 1.0], abs=1e-6)


def test_gae_ignores_padding():
    # Second row is two real tokens then padding (reward 0, garbage value 9.9 at the pad).
    # t=1: delta = 1 - 0.4 = 0.6 -> A1 = 0.6;  t=0: delta = 0.9*0.4 - 0.5 = -0.14 -> A0 = -0.14 + 0.72*0.6 = 0.292
    rewards = t([0.0, 0.0, 1.0], [0.0, 1.0, 0.0])
    values = t([0.5, 0.4, 0.6], [0.5, 0.4, 9.9])
    mask = t([1, 1, 1], [1, 1, 0])
    adv, ret = gae(rewards, values, mask, GAMMA, LAM)
    assert adv.tolist()[1] == pytest.approx([0.292, 0.6, 0.0], abs=1e-6)
    assert ret.tolist()[1] == pytest.approx([0.792, 1.0, 0.0], abs=1e-6)
    # Padding changes nothing for the real tokens: same as the unpadded two-token sequence.
    adv2, _ = gae(t([0.0, 1.0]), t([0.5, 0.4]), t([1, 1]), GAMMA, LAM)
    assert adv[1, :2].tolist() == pytest.approx(adv2[0].tolist(), abs=1e-7)


def test_gae_gamma_lam_one_is_reward_to_go_minus_value():
    rewards, values = t([0.1, -0.2, 1.0]), t([0.3, 0.2, 0.1])
    adv, ret = gae(rewards, values, t([1, 1, 1]), 1.0, 1.0)
    assert ret.tolist()[0] == pytest.approx([0.9, 0.8, 1.0], abs=1e-6)  # Monte-Carlo returns
    assert adv.tolist()[0] == pytest.approx([0.6, 0.6, 0.9], abs=1e-6)


def test_token_rewards_kl_and_score_on_last_real_token():
    # beta 0.1, KL = logp - ref = (0.5, -1.0, pad); score 1.0 lands on token 2 (the last real one).
    rewards, kl = token_rewards(torch.tensor([1.0]), t([-1.0, -2.0, -3.0]), t([-1.5, -1.0, -0.5]),
                                t([1, 1, 0]), beta=0.1)
    assert kl.tolist()[0] == pytest.approx([0.5, -1.0, 0.0])
    assert rewards.tolist()[0] == pytest.approx([-0.05, 1.1, 0.0])
    # Without a reference (beta = 0 runs) the reward is the score alone.
    rewards, _ = token_rewards(torch.tensor([0.3]), t([-1.0, -2.0]), None, t([1, 1]), beta=0.0)
    assert rewards.tolist()[0] == pytest.approx([0.0, 0.3])


def test_clipped_value_loss_by_hand():
    # V = (1.0, 0.0), V_old = (0.5, 0.5), R = (2.0, 0.4), clip 0.2 -> V_clip = (0.7, 0.3)
    # unclipped (V-R)^2 = (1.0, 0.16); clipped (V_clip-R)^2 = (1.69, 0.01); max = (1.69, 0.16)
    # loss = 0.5 * mean = 0.4625; the clipped term wins on token 1 only -> clipfrac 0.5
    values = t([1.0, 0.0, 5.0]).requires_grad_()
    loss, clipfrac = clipped_value_loss(values, t([0.5, 0.5, 0.0]), t([2.0, 0.4, 0.0]), t([1, 1, 0]), 0.2)
    assert loss.item() == pytest.approx(0.4625)
    assert clipfrac.item() == pytest.approx(0.5)
    loss.backward()
    # Token 1: the clipped branch is flat in V (V moved past the clip) -> no gradient; token 2: 0.5 * 2 * (V-R) / 2 = -0.2
    assert values.grad.tolist()[0] == pytest.approx([0.0, -0.2, 0.0])


def test_clipped_policy_loss_by_hand():
    # log-ratios (0.5, -0.5, -0.5, pad), A = (1, 1, -2), eps = 0.2:
    #   token 1: rho = e^0.5 = 1.6487 > 1.2 with A > 0 -> clipped: -1.2
    #   token 2: rho = e^-0.5 = 0.6065, A > 0 -> unclipped: -0.6065
    #   token 3: rho = 0.6065 < 0.8 with A < 0 -> clipped: -(-2)*0.8 = 1.6
    # loss = (-1.2 - 0.6065 + 1.6) / 3
    old = t([-1.0, -1.0, -1.0, -1.0])
    logps = (old + t([0.5, -0.5, -0.5, 3.0])).requires_grad_()
    loss, clipfrac, approx_kl = clipped_policy_loss(logps, old, t([1.0, 1.0, -2.0, 7.0]), t([1, 1, 1, 0]), 0.2)
    rho = math.exp(-0.5)
    assert loss.item() == pytest.approx((-1.2 - rho + 1.6) / 3, abs=1e-6)
    assert clipfrac.item() == pytest.approx(2 / 3)
    assert approx_kl.item() == pytest.approx(0.125)  # mean of 0.5 * 0.25
    loss.backward()
    assert logps.grad.tolist()[0] == pytest.approx([0.0, -rho / 3, 0.0, 0.0], abs=1e-6)


def test_group_advantage_is_a_z_score_per_group():
    # Group 1: (1, 0, 0, 1): mean 0.5, sample std sqrt(1/3); group 2 all equal -> 0.
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5]), group_size=4)
    z = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    assert adv.tolist() == pytest.approx([z, -z, -z, z, 0, 0, 0, 0], abs=1e-6)
    assert group_advantages(torch.tensor([2.0, 0.0]), 2, scale=False).tolist() == [1.0, -1.0]


def test_whiten_and_explained_variance():
    w = masked_whiten(t([1.0, 2.0, 3.0, 100.0]), t([1, 1, 1, 0]))
    s = math.sqrt(1.5)  # 1 / sqrt(var) with var = 2/3
    assert w.tolist()[0] == pytest.approx([-s, 0.0, s, 0.0], abs=1e-5)
    returns, mask = t([1.0, 2.0, 3.0]), t([1, 1, 1])
    assert explained_variance(returns, returns, mask).item() == pytest.approx(1.0)
    assert explained_variance(t([2.0, 2.0, 2.0]), returns, mask).item() == pytest.approx(0.0)
