"""PPO recomputed: one real PPO step's rollout, recomputed in plain Python from the formulas, against what the
trainer's loss actually consumed.

Captured: the rows ``PPOTrainer._compute_loss`` receives (prompt and completion ids, completion mask, and the
``advantages``, ``returns``, ``values`` it trains on), taken by wrapping that method, before the critic moves.
Recomputed here without any trainer helper, row by row on the *unpadded* sequence:

* the score: the reward function called on the decoded completion;
* log pi_old and log pi_ref of each sampled token, and V(s_t): one forward of the actor, the reference and the critic
  on prompt + completion; the output at position ``len(prompt) + t - 1`` is the one that predicts token t (the
  state before it, Schulman et al. arXiv 1506.02438 Sec. 2);
* r_t = -beta * (log pi_old - log pi_ref) and the score added on the last real token (Ouyang et al. arXiv 2203.02155
  eq. 2; TRL's former PPOTrainer docs, https://huggingface.co/docs/trl/v0.11.0/en/ppo_trainer);
* GAE, delta_t = r_t + gamma V_{t+1} - V_t and A_t = delta_t + gamma lam A_{t+1} with V = A = 0 after the last token
  (arXiv 1506.02438 eq. 16), returns = A + V, then advantages whitened over the batch's real tokens.

Two processes are simulated (this process is rank 1 of 2): TRL's gathered rewards then hold rank 0's rows first,
filled with decoys, so a trainer that takes the wrong slice trains on the decoys. The parametrised mutants replace
one piece of the trainer with a deliberately broken variant and show that the comparison catches each bug.
"""

import math

import pytest
import torch

pytest.importorskip("trl")

from accelerate import Accelerator  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from rlm_lab.models import load  # noqa: E402
from rlm_lab.tasks import ensure_data, get_task  # noqa: E402
from rlm_lab.train import ppo  # noqa: E402
from rlm_lab.train.critic import CriticTrainer  # noqa: E402
from rlm_lab.train.ppo import PPOConfig, PPOTrainer  # noqa: E402

BETA, GAMMA, LAM = 0.2, 0.9, 0.8
TOL = 1e-4


@pytest.fixture(scope="module")
def dataset():
    from datasets import Dataset

    return Dataset.from_list(ensure_data(get_task("arithmetic", digits=2))["train"][:8])


def digits(completions, **_):
    """A dense toy reward a random model can earn: the share of digit characters."""
    return [sum(ch.isdigit() for ch in c) / 6 for c in completions]


def reference(inputs, actor, ref_model, critic, tokenizer):
    """advantages, returns, values for the rows of ``inputs``, from the formulas (see module doc)."""
    rows = []
    for b in range(inputs["prompt_ids"].size(0)):
        prompt = inputs["prompt_ids"][b][inputs["prompt_mask"][b].bool()].tolist()
        n = int(inputs["completion_mask"][b].sum())
        completion = inputs["completion_ids"][b][:n].tolist()
        seq = torch.tensor([prompt + completion])
        with torch.no_grad():
            actor_logits, ref_logits = actor(input_ids=seq).logits[0], ref_model(input_ids=seq).logits[0]
            critic_out = critic(input_ids=seq).logits[0, :, 0]
        score = digits([tokenizer.decode(completion, skip_special_tokens=True)])[0]
        old, refl, values = [], [], []
        for t, token in enumerate(completion):
            pos = len(prompt) + t - 1  # the output that predicts token t
            old.append(torch.log_softmax(actor_logits[pos], -1)[token].item())
            refl.append(torch.log_softmax(ref_logits[pos], -1)[token].item())
            values.append(critic_out[pos].item())
        rewards = [-BETA * (o - r) for o, r in zip(old, refl)]
        if n:
            rewards[-1] += score
        adv, next_adv, next_value = [0.0] * n, 0.0, 0.0
        for t in reversed(range(n)):
            delta = rewards[t] + GAMMA * next_value - values[t]
            next_adv = delta + GAMMA * LAM * next_adv
            adv[t], next_value = next_adv, values[t]
        rows.append((adv, [a + v for a, v in zip(adv, values)], values))
    flat = [a for adv, _, _ in rows for a in adv]
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((a - mean) ** 2 for a in flat) / len(flat) + 1e-8)
    T = inputs["completion_ids"].size(1)
    pad = lambda xs: xs + [0.0] * (T - len(xs))  # noqa: E731
    return {"advantages": torch.tensor([pad([(a - mean) / std for a in adv]) for adv, _, _ in rows]),
            "returns": torch.tensor([pad(ret) for _, ret, _ in rows]),
            "values": torch.tensor([pad(v) for _, _, v in rows])}


def run_one_step(path, tmp_path, ds, monkeypatch):
    """One PPO step as rank 1 of 2; returns (what _compute_loss consumed, the recomputation)."""
    model, tok = load(str(path))
    args = PPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, learning_rate=1e-3, per_device_train_batch_size=8,
                     num_generations=4, max_completion_length=6, temperature=1.0, beta=BETA, gamma=GAMMA, lam=LAM,
                     use_cpu=True, bf16=False, activation_checkpointing=False, save_strategy="no", report_to="none",
                     seed=0, disable_tqdm=True, logging_steps=1)
    tr = PPOTrainer(model=model, reward_funcs=[digits], args=args, train_dataset=ds, processing_class=tok)
    torch.manual_seed(1)
    with torch.no_grad():  # actor != reference (else KL = 0 and its sign is invisible); critic head != 0
        for p in tr.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
        torch.nn.init.normal_(tr.critic.score.weight, std=1.0)

    # Rank 1 of 2: TRL's gathered rewards are rank 0's rows (decoys) then ours.
    monkeypatch.setattr(Accelerator, "process_index", property(lambda self: 1))
    parent = GRPOTrainer._calculate_rewards

    def gathered_over_two(self, *a, **kw):
        mine = parent(self, *a, **kw)
        return torch.cat([-mine - 1.0, mine])

    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", gathered_over_two)
    seen = []
    consume = tr._compute_loss

    def spy(model, inputs):
        if not seen:  # the first micro-batch, before the critic's update moves V
            used = {k: inputs[k].detach().clone() for k in ("advantages", "returns", "values")}
            seen.append((used, reference(inputs, tr.model, tr.ref_model, tr.critic, tok)))
        return consume(model, inputs)

    tr._compute_loss = spy
    tr.train()
    return seen[0]


def worst(used, expected):
    return {k: (used[k] - expected[k]).abs().max().item() for k in expected}


def broken_values(self, input_ids, attention_mask, logits_to_keep, batch_size):
    """Off by one: V(s_t) read at token t's own position instead of the one before it."""
    with torch.no_grad():
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
    return out.logits[:, -logits_to_keep:, 0].float()


def broken_slice(self, n_local):
    """Always rank 0's rows."""
    per_func = self._ppo_rewards_per_func[:n_local]
    return (per_func * self.reward_weights.unsqueeze(0)).nansum(1), ~torch.isnan(per_func).all(1)


def flipped_kl(scores, logps, ref_logps, mask, beta):
    """KL sign flipped: log pi_ref - log pi_old."""
    return REAL_TOKEN_REWARDS(scores, ref_logps, logps, mask, beta)


REAL_TOKEN_REWARDS = ppo.token_rewards
MUTANTS = {
    "none": None,
    "value_off_by_one": (CriticTrainer, "values", broken_values),
    "rank_0_slice": (PPOTrainer, "_local_scores", broken_slice),
    "kl_sign": (ppo, "token_rewards", flipped_kl),
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_trainer_uses_the_recomputed_advantages(nano_path, dataset, tmp_path, monkeypatch, mutant):
    if MUTANTS[mutant] is not None:
        monkeypatch.setattr(*MUTANTS[mutant])
    used, expected = run_one_step(nano_path, tmp_path, dataset, monkeypatch)
    err = worst(used, expected)
    if mutant == "none":
        assert all(e < TOL for e in err.values()), err
        assert expected["values"].abs().max() > 0.1  # the values matter (a zero critic hides an alignment bug)
    elif mutant == "value_off_by_one":
        assert err["values"] > 100 * TOL and err["advantages"] > 100 * TOL, err
    else:  # a wrong score or KL changes the returns (values are untouched)
        assert err["values"] < TOL and err["returns"] > 100 * TOL, err
