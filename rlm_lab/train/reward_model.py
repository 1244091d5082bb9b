"""A small reward model trained on verifier labels, for PPO's classic four-model footprint.

RLHF-style PPO scores completions with a learned reward model (InstructGPT, arXiv 2203.02155, Sec. 3.5).
Our tasks have an exact verifier, so a reward model is not needed to learn; it exists so a run can
hold (and the book can measure) the same four networks as InstructGPT-style PPO: actor, critic,
reference and reward model (InstructGPT, arXiv 2203.02155).

Pairs (Bradley-Terry, trained with TRL's ``RewardTrainer``): for each training prompt, *chosen* is the
reference answer (correct by construction, checked by the verifier) and *rejected* is a completion the
base model sampled that the verifier marks wrong; when the sample happens to be right, a corrupted
answer (last character changed, then the empty string) that the verifier rejects stands in.
The model is ``AutoModelForSequenceClassification`` (num_labels=1) initialised from the base model's
weights, as InstructGPT initialises its RM from the SFT model.

A learned reward is a proxy: optimising it hard raises the reward model's score while true accuracy
can fall (reward over-optimisation, Gao et al., arXiv 2210.10760). PPO with ``reward_source=
"reward_model"`` therefore still runs the verifier and logs ``rewards/correctness/mean`` beside
``rewards/reward_model/mean`` (weight 0), so the gap is visible in every run record.

Token convention: pairs are tokenised here as ``prompt + completion`` *without* EOS, exactly the text
TRL scores during PPO (completions are decoded with special tokens skipped); left to itself
``RewardTrainer`` would append EOS to every pair and the reward model would be judged on a token it
never sees at scoring time.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from ..errors import RlmLabError
from ..record import atomic_write_text
from ..tasks import ensure_data


def _wrong_completion(task, row: dict, sample: str, rng: random.Random) -> str:
    """``sample`` if the verifier rejects it, else a corrupted answer that the verifier rejects."""
    if not task.is_correct(sample, row):
        return sample
    answer = row["answer"]
    digits = "0123456789"
    candidates = [answer[:-1] + rng.choice([d for d in digits if d != answer[-1:]])] if answer else []
    candidates += [answer + rng.choice(digits), ""]
    return next(c for c in candidates if not task.is_correct(c, row))


def sample_completions(model, tokenizer, prompts: list[str], max_new_tokens: int, seed: int = 0,
                       batch_size: int = 256) -> list[str]:
    """One sampled completion (temperature 1) per prompt from a causal LM, special tokens stripped."""
    import torch

    torch.manual_seed(seed)
    model.eval()
    out = []
    for start in range(0, len(prompts), batch_size):
        batch = tokenizer(prompts[start:start + batch_size], return_tensors="pt", padding=True,
                          add_special_tokens=False)
        with torch.no_grad():
            ids = model.generate(**batch, do_sample=True, temperature=1.0, top_k=0, max_new_tokens=max_new_tokens,
                                 pad_token_id=tokenizer.pad_token_id)
        out += tokenizer.batch_decode(ids[:, batch["input_ids"].size(1):], skip_special_tokens=True)
    return out


def preference_pairs(task, rows: list[dict], model, tokenizer, max_new_tokens: int, seed: int = 0) -> list[dict]:
    """``{"prompt", "chosen", "rejected"}`` per row: reference answer vs a verifier-rejected completion."""
    rng = random.Random(seed)
    samples = sample_completions(model, tokenizer, [r["prompt"] for r in rows], max_new_tokens, seed)
    pairs = []
    for row, sample in zip(rows, samples):
        if not task.is_correct(row["answer"], row):
            raise RlmLabError(f"the verifier rejects the reference answer of {row['prompt']!r}; "
                              "regenerate the task data with `rlm-lab tasks generate`")
        pairs.append({"prompt": row["prompt"], "chosen": row["answer"],
                      "rejected": _wrong_completion(task, row, sample, rng)})
    return pairs


def _tokenized(pairs: list[dict], tokenizer):
    from datasets import Dataset

    enc = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    return Dataset.from_dict({
        "chosen_ids": [enc(p["prompt"] + p["chosen"]) for p in pairs],
        "rejected_ids": [enc(p["prompt"] + p["rejected"]) for p in pairs],
    })


def pairwise_accuracy(reward_model, tokenizer, pairs: list[dict], batch_size: int = 256) -> float:
    """Fraction of pairs where the reward model scores chosen above rejected."""
    import torch

    reward_model.eval()

    def scores(texts):
        out = []
        for s in range(0, len(texts), batch_size):
            batch = tokenizer(texts[s:s + batch_size], return_tensors="pt", padding=True, padding_side="right",
                              add_special_tokens=False)
            with torch.no_grad():
                out.append(reward_model(**batch).logits[:, 0])
        return torch.cat(out)

    chosen = scores([p["prompt"] + p["chosen"] for p in pairs])
    rejected = scores([p["prompt"] + p["rejected"] for p in pairs])
    return (chosen > rejected).float().mean().item()


def train_reward_model(task, base_model_path: str | Path, steps: int, out_dir: str | Path, *,
                       n_pairs: int = 2048, n_eval: int = 256, batch_size: int = 64, learning_rate: float = 1e-4,
                       max_new_tokens: int = 8, seed: int = 0) -> dict:
    """Train a reward model on verifier-labelled pairs with TRL's RewardTrainer and save it to ``out_dir``.

    Returns ``{"path", "steps", "pairs", "train_s", "pairwise_accuracy"}`` (held-out pairs from the test
    split); the same dict is written to ``out_dir/reward_model.json``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    base_model_path, out_dir = Path(base_model_path), Path(out_dir)
    if not (base_model_path / "config.json").exists():
        raise RlmLabError(f"{base_model_path} is not a saved model folder; pass the folder of the SFT/base model")
    if steps < 1:
        raise RlmLabError(f"reward model steps must be >= 1, got {steps}")
    data = ensure_data(task)
    tokenizer = AutoTokenizer.from_pretrained(base_model_path)
    policy = AutoModelForCausalLM.from_pretrained(base_model_path, dtype=torch.float32)
    train_pairs = preference_pairs(task, data["train"][:n_pairs], policy, tokenizer, max_new_tokens, seed)
    eval_pairs = preference_pairs(task, data["test"][:n_eval], policy, tokenizer, max_new_tokens, seed + 1)
    del policy

    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(base_model_path, num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = tokenizer.pad_token_id
    args = RewardConfig(
        output_dir=str(out_dir / "trainer"), max_steps=steps, per_device_train_batch_size=batch_size,
        learning_rate=learning_rate, lr_scheduler_type="constant", use_cpu=True, bf16=False,
        activation_checkpointing=False, logging_steps=max(1, steps // 10), save_strategy="no", report_to="none",
        seed=seed, data_seed=seed, disable_tqdm=True, dataloader_num_workers=0,
    )
    trainer = RewardTrainer(model=model, args=args, train_dataset=_tokenized(train_pairs, tokenizer),
                            processing_class=tokenizer)
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    trainer.save_model(str(out_dir))
    tokenizer.save_pretrained(out_dir)
    info = {"path": str(out_dir), "steps": steps, "pairs": len(train_pairs), "train_s": round(train_s, 3),
            "pairwise_accuracy": pairwise_accuracy(trainer.model, tokenizer, eval_pairs)}
    atomic_write_text(out_dir / "reward_model.json", json.dumps(info, indent=1) + "\n")
    return info
